/**
 * Builds `local/code-interpreter:latest` offline: Debian bookworm (mmdebstrap, as
 * local/debian) with Jupyter kernels for Python and R, Node.js, TypeScript, sudo and the
 * usual data-science packages, plus `images/code-interpreter/` of this repository copied to
 * `/opt/sandboxd-ci/` (the in-sandbox code server and its kernels).
 *
 * Two layers: the Debian base (slow: minutes of downloads) and the repository's files
 * (a second). A rebuild whose base definition did not change reuses the base layer of the
 * previous build (its label {@link CI_BASE_LABEL} names the base revision), so editing the
 * server costs seconds, not a bootstrap.
 *
 * The image declares the code server as its in-sandbox service (labels
 * `org.sandboxd.service.{cmd,port,health}`): the runtime starts it when the sandbox starts.
 */
import { createHash } from 'node:crypto';
import { chmod, cp, mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import { SETUID_LABEL } from '../setuid.js';
import { CLEAN as APT_CLEAN, DEBIAN_PACKAGES, minbaseArgs, NEUTRAL_ETC } from './build-debian.js';
import { blobPath, selectImage } from './oci-read.js';
import { runTool, toolEnv } from './run.js';
import { writeOciImage, type ExistingLayer, type WrittenImage } from './oci-write.js';

/** `images/code-interpreter/` of this repository: copied to {@link CI_INSTALL_DIR}. */
export const CI_SOURCE_DIR = resolve(import.meta.dirname, '../../../../../../images/code-interpreter');
/** Where the image holds the code server and kernels. */
export const CI_INSTALL_DIR = '/opt/sandboxd-ci';
/** The port the code server listens on (E2B's code interpreter's). */
export const CI_PORT = 49999;

/** Packages on top of minbase: local/debian's plus what code runs with. */
export const CI_PACKAGES = [
  ...new Set([
    ...DEBIAN_PACKAGES,
    'sudo',
    'git',
    'unzip',
    'fonts-dejavu-core',
    'python3-ipykernel',
    'python3-jupyter-client',
    'python3-numpy',
    'python3-pandas',
    'python3-matplotlib',
    'python3-scipy',
    'python3-pil',
    'python3-requests',
    'python3-bs4',
    'python3-openpyxl',
    'python3-seaborn',
    'python3-sklearn',
    'nodejs',
    'node-typescript',
    'r-base-core',
    'r-cran-irkernel',
  ]),
];

/** Config label holding the revision of the base layer (reused when it matches). */
export const CI_BASE_LABEL = 'org.sandboxd.image.base-revision';

/**
 * Setuid programs work in its sandboxes (no no_new_privs): `sudo` for `user`, as in
 * local/debian (runtime/local/setuid.ts reads it).
 */
export const CI_SETUID_LABEL = { [SETUID_LABEL]: 'allow' };

/** The service labels the runtime reads (see docs/code-interpreter.md). */
export const CI_SERVICE_LABELS = {
  'org.sandboxd.service.cmd': JSON.stringify(['/usr/bin/python3', `${CI_INSTALL_DIR}/server/supervise.py`]),
  'org.sandboxd.service.port': String(CI_PORT),
  'org.sandboxd.service.health': '/health',
};

/**
 * `user` as in local/debian, with passwordless sudo as E2B's templates have; the Python
 * kernel spec (ipykernel's) and the R one (IRkernel's) registered system-wide. Runs inside
 * mmdebstrap's user namespace (`$1` is the rootfs).
 */
const SETUP = [
  'chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash user',
  'printf "user ALL=(ALL:ALL) NOPASSWD: ALL\\n" > "$1"/etc/sudoers.d/user',
  'chmod 0440 "$1"/etc/sudoers.d/user',
  'chroot "$1" env PYDEVD_DISABLE_FILE_VALIDATION=1 python3 -Xfrozen_modules=off -m ipykernel install --prefix /usr/local --name python3 --display-name "Python 3"',
  // IRkernel::installspec() would copy this dir with `jupyter kernelspec install`, a command
  // Debian's jupyter-client package does not ship: the same copy through jupyter_client.
  `chroot "$1" python3 -c "from jupyter_client.kernelspec import KernelSpecManager as K; K().install_kernel_spec('/usr/lib/R/site-library/IRkernel/kernelspec', 'ir', prefix='/usr/local')"`,
  'rm -rf "$1"/root/.local "$1"/root/.cache "$1"/tmp/*',
].join(' && ');

/** What local/debian's build removes (apt lists and caches, logs, machine id), plus Python test suites. */
const CLEAN = [
  // The Python packages' own test suites (pandas, scipy, sympy, sklearn...: ~170 MB), never
  // imported at run time (test helpers live elsewhere, e.g. numpy.testing). Removed after
  // install, not excluded from it: the packages' postinst byte-compiles them.
  'find "$1"/usr/lib/python3/dist-packages -mindepth 2 -type d -name tests -prune -exec rm -rf {} + &&',
  APT_CLEAN,
].join(' ');

/** mmdebstrap's arguments but the output and mirrors: all of the base layer's definition. */
function baseArgs(suite: string): string[] {
  return [...minbaseArgs(CI_PACKAGES, [SETUP, CLEAN, NEUTRAL_ETC]), suite];
}

/** Image config. The service runs as root; the code it runs, as `user`. */
export function ciConfig(baseRevision: string) {
  return {
    env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'LANG=C.UTF-8'],
    workingDir: '/root',
    user: 'root',
    cmd: ['/bin/bash'],
    labels: {
      'org.opencontainers.image.title': 'sandboxd local code-interpreter',
      ...CI_SERVICE_LABELS,
      ...CI_SETUID_LABEL,
      [CI_BASE_LABEL]: baseRevision,
    },
  };
}

const sha256 = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');

/** Revision of the base layer: a hash of its packages and build steps. */
export function ciBaseRevision(suite = 'bookworm'): string {
  return sha256(JSON.stringify({ args: baseArgs(suite) })).slice(0, 16);
}

/** Files of `dir` (relative, sorted), skipping caches; directories are not listed. */
async function listFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string) => {
    for (const e of (await readdir(d, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (e.name === '__pycache__' || e.name.endsWith('.pyc') || e.name === 'node_modules') continue;
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else if (e.isFile()) out.push(relative(dir, p));
    }
  };
  await walk(dir);
  return out;
}

/**
 * Revision of the whole image: base revision + every file of `srcDir` (path, executable
 * bit, content) + the config. Written to `/etc/sandboxd-image-revision`; set-up rebuilds the
 * image when it differs. Not a hand-bumped number: any edit of the definition changes it.
 */
export async function ciRevision(srcDir = CI_SOURCE_DIR, suite = 'bookworm'): Promise<string> {
  const base = ciBaseRevision(suite);
  const h = createHash('sha256').update(`${base}\n${JSON.stringify(ciConfig(base))}\n`);
  for (const f of await listFiles(srcDir)) {
    const st = await stat(join(srcDir, f));
    h.update(`${f}\0${st.mode & 0o111 ? 'x' : '-'}\0`);
    h.update(sha256(await readFile(join(srcDir, f))));
    h.update('\n');
  }
  return h.digest('hex').slice(0, 16);
}

export interface CiBuildOptions {
  suite: string;
  timeoutMs: number;
  /** apt sources (see DebianBuildOptions.mirrors). */
  mirrors?: string[];
  /** The previous build's OCI layout, whose base layer is reused when its revision matches. */
  previousLayout?: string | null;
  /** Default {@link CI_SOURCE_DIR}. */
  sourceDir?: string;
  onLog?: (line: string) => void;
}

/**
 * The base layer of `layout`'s image `tag` (as stored: compressed), if that image was built
 * with base revision `rev`; else null.
 */
async function reusableBase(layout: string, tag: string, rev: string): Promise<ExistingLayer | null> {
  try {
    const img = await selectImage(layout, tag);
    const labels = (img.config.config as { Labels?: Record<string, string> } | undefined)?.Labels;
    const first = img.manifest.layers[0];
    const diffId = img.config.rootfs?.diff_ids?.[0];
    if (labels?.[CI_BASE_LABEL] !== rev || !first || !diffId || img.manifest.layers.length !== 2) return null;
    const path = blobPath(layout, first.digest);
    if ((await stat(path)).size !== first.size) return null;
    return { path, desc: first, diffId };
  } catch {
    return null;
  }
}

/** Runs mmdebstrap for the base layer into `tar`. Throws ToolError when it fails. */
async function bootstrap(tar: string, work: string, opts: CiBuildOptions): Promise<void> {
  let buf = '';
  await runTool('mmdebstrap', [...baseArgs(opts.suite), tar, ...(opts.mirrors ?? [])], {
    timeoutMs: opts.timeoutMs,
    env: toolEnv({ TMPDIR: work }),
    onStderr: (d) => {
      buf += d;
      const lines = buf.split('\n');
      buf = lines.pop() ?? '';
      for (const l of lines) if (l.trim()) opts.onLog?.(l);
    },
  });
}

/**
 * The second layer: `/dev` (an empty mount point: mmdebstrap's output skips it),
 * `/opt/sandboxd-ci` (root-owned, files 0644 or 0755 when executable in the repository) and
 * `/etc/sandboxd-image-revision`.
 */
async function filesLayer(tar: string, work: string, srcDir: string, revision: string): Promise<void> {
  const root = join(work, 'files');
  const opt = join(root, CI_INSTALL_DIR);
  await mkdir(join(root, 'dev'), { recursive: true });
  await mkdir(join(root, 'etc'), { recursive: true });
  await mkdir(opt, { recursive: true });
  for (const f of await listFiles(srcDir)) {
    const dst = join(opt, f);
    await mkdir(join(dst, '..'), { recursive: true });
    await cp(join(srcDir, f), dst);
    await chmod(dst, (await stat(join(srcDir, f))).mode & 0o111 ? 0o755 : 0o644);
  }
  await writeFile(join(root, 'etc/sandboxd-image-revision'), `${revision}\n`);
  await runTool(
    'tar',
    [
      '--create',
      '--file',
      tar,
      '--format=gnu',
      '--numeric-owner',
      '--owner=0',
      '--group=0',
      '--sort=name',
      '--mode=u+rwX,go+rX,go-w',
      '-C',
      root,
      '.',
    ],
    { timeoutMs: 120_000 },
  );
}

/**
 * Writes the code-interpreter image into OCI layout `layout` under `tag`, using `work` (an
 * empty dir, removed by the caller). Throws ToolError when mmdebstrap or tar fails.
 */
export async function buildCodeInterpreterLayout(
  layout: string,
  tag: string,
  work: string,
  opts: CiBuildOptions,
): Promise<WrittenImage> {
  const srcDir = opts.sourceDir ?? CI_SOURCE_DIR;
  const baseRev = ciBaseRevision(opts.suite);
  let base: string | ExistingLayer | null = opts.previousLayout
    ? await reusableBase(opts.previousLayout, tag, baseRev)
    : null;
  if (base) {
    opts.onLog?.(`base layer ${baseRev} reused from the previous build`);
  } else {
    base = join(work, 'base.tar');
    await bootstrap(base, work, opts);
  }
  const files = join(work, 'files.tar');
  await filesLayer(files, work, srcDir, await ciRevision(srcDir, opts.suite));
  return writeOciImage(layout, { tag, layers: [base, files], config: ciConfig(baseRev) });
}
