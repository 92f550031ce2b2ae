/**
 * `npm run image`: the release image of sandboxd as an OCI archive,
 * `artifacts/sandboxd-<version>.oci.tar` (tag = the version), built with the project's own
 * offline tools (mmdebstrap, GNU tar, the OCI writer of the local runtime); no Docker.
 *
 * Two layers:
 * - base: Debian 12 (mmdebstrap minbase) with what the runtime runs on a host (crun, runc,
 *   catatonit, iproute2, nftables, e2fsprogs, util-linux, skopeo, umoci, mmdebstrap and
 *   busybox-static for the default images' builds, ca-certificates). Cached in
 *   `artifacts/cache/` by its package list: a later build reuses it.
 * - app: Node.js (the binary scripts/node-env.sh provides) as /usr/local/bin/node, the project
 *   at /opt/sandboxd (packages/* without tests, the built SDK and console, the production
 *   node_modules, the native helpers of build/bin, tsconfig.json, images/, examples/) and
 *   /usr/local/bin/sandboxd (packages/server/bin/sandboxd.js).
 *
 * Reproducible: every mtime is SOURCE_DATE_EPOCH (default: the commit time of HEAD), entries
 * sorted, owners 0:0 by number, permission bits normalised, config `created` = that time, so
 * two builds of one commit give one digest (the base layer as long as its cached tar is kept,
 * or Debian's mirror serves the same packages). When nothing that goes into the image changed
 * (a hash of every input), the archive already there is reused.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
// By path, not the workspace package: the SDK of this tree (a linked node_modules may name another).
import { ensureSdkDist } from '../../../sdk/scripts/dist.js';
import { buildConsole } from '../../../console/src/build.js';
import { CLEAN, minbaseArgs, NEUTRAL_ETC } from '../runtime/local/images/build-debian.js';
import { writeOciImage } from '../runtime/local/images/oci-write.js';
import { writeLayerTar } from './layer-tar.js';

/** The repository this file is in. */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');

/** Debian packages of the base layer (scripts/setup.sh's serving list, runtime part). */
export const BASE_PACKAGES = [
  'busybox-static',
  'ca-certificates',
  'catatonit',
  'crun',
  'e2fsprogs',
  'golang-github-containers-common',
  'iproute2',
  'libseccomp2',
  'mmdebstrap',
  'mount',
  'nftables',
  'postgresql-client',
  'runc',
  'skopeo',
  'umoci',
  'util-linux',
];
/** Bumped when the base layer's recipe changes (not its package list, which is hashed). */
const BASE_REVISION = 1;
/** The base layer's own fixed time (mmdebstrap's SOURCE_DATE_EPOCH): its cache outlives commits. */
const BASE_EPOCH = 1_700_000_000;
const SUITE = 'bookworm';

/** Where the project lives in the image. */
export const IMAGE_APP_DIR = '/opt/sandboxd';

export interface ReleaseImage {
  /** The OCI archive. */
  archive: string;
  version: string;
  /** The image manifest's digest (what a registry reports after a push). */
  digest: string;
  /** The git commit (with `-dirty` when the tree had changes). */
  revision: string;
  /** True when the archive of an earlier build with the same inputs was reused. */
  reused: boolean;
}

export interface BuildOptions {
  root?: string;
  /** Default `<root>/artifacts`. */
  outDir?: string;
  /** Rebuild even when the inputs did not change. */
  force?: boolean;
  log?: (line: string) => void;
}

const git = (root: string, args: string[]): string =>
  execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();

/** Project paths copied to the image (from git's list: tracked and new files, not ignored ones). */
const PROJECT_PATHS = ['packages', 'images', 'examples', 'tsconfig.json', 'package.json', 'package-lock.json'];

/** Whether a project file stays out of the image: tests and test kits. */
function leftOut(rel: string): boolean {
  return /\.test\.ts$/.test(rel) || /^packages\/[^/]+\/test\//.test(rel) || /(^|\/)__pycache__\//.test(rel);
}

/** Every file and symlink under `dir` (relative to `base`), sorted; `skip` names are not entered. */
function walk(base: string, dir: string, skip: (name: string) => boolean = () => false): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (skip(e.name)) continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(base, p, skip));
    else out.push(relative(base, p));
  }
  return out.sort();
}

/**
 * The production dependencies' folders under node_modules: the lock file's packages not
 * marked `dev` (what `npm ci --omit=dev` installs), those present here (optional packages of
 * other platforms are not).
 */
function prodPackages(root: string): string[] {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { dev?: boolean }>;
  };
  return Object.entries(lock.packages)
    .filter(([p, e]) => p.startsWith('node_modules/') && !e.dev && existsSync(join(root, p)))
    .map(([p]) => p)
    .sort();
}

/** Files of the app layer: image path (under /, no leading slash) -> source path on this host. */
function appFiles(root: string): Map<string, string> {
  const files = new Map<string, string>();
  const app = IMAGE_APP_DIR.slice(1);
  // Tracked files only: an untracked file of a working checkout (a key, a local config) never ships.
  const listed = git(root, ['ls-files', '-z', '--cached', '--', ...PROJECT_PATHS])
    .split('\0')
    .filter((p) => p && !leftOut(p) && existsSync(join(root, p)));
  for (const p of listed) files.set(`${app}/${p}`, join(root, p));
  // Built, git-ignored: the SDK package and the console bundle (built before this runs).
  for (const d of ['packages/sdk/dist', 'packages/console/dist'])
    if (existsSync(join(root, d)))
      for (const p of walk(root, join(root, d), (n) => n.startsWith('.tmp-'))) files.set(`${app}/${p}`, join(root, p));
  // Production node_modules: each package's own files; its nested node_modules are listed on their own.
  for (const pkg of prodPackages(root)) {
    const abs = join(root, pkg);
    if (lstatSync(abs).isSymbolicLink()) {
      files.set(`${app}/${pkg}`, abs); // a workspace package: the link itself
      continue;
    }
    for (const p of walk(root, abs, (n) => n === 'node_modules')) files.set(`${app}/${p}`, join(root, p));
  }
  // Native helpers, compiled at set-up.
  const bin = join(root, 'build', 'bin');
  for (const n of readdirSync(bin).filter((n) => !n.includes('.tmp'))) files.set(`${app}/build/bin/${n}`, join(bin, n));
  files.set('usr/local/bin/node', process.execPath);
  return files;
}

/** A hash of every input: image paths, modes, contents and link targets, plus what else shapes the image. */
function inputsHash(files: Map<string, string>, extra: unknown): string {
  const h = createHash('sha256').update(JSON.stringify(extra));
  for (const [dst, src] of [...files].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    const st = lstatSync(src);
    h.update(`${dst}\0${st.mode & 0o100}\0`);
    if (st.isSymbolicLink()) h.update(`-> ${readlinkSync(src)}`);
    else h.update(readFileSync(src));
    h.update('\0');
  }
  return h.digest('hex');
}

/** The cached base layer tar, bootstrapped with mmdebstrap when missing. */
function baseLayer(cacheDir: string, log: (l: string) => void): string {
  const key = createHash('sha256')
    .update(JSON.stringify({ BASE_PACKAGES, BASE_REVISION, BASE_EPOCH, SUITE, arch: process.arch }))
    .digest('hex')
    .slice(0, 16);
  const tar = join(cacheDir, `base-${key}.tar`);
  if (existsSync(tar)) return tar;
  log(`bootstrapping the Debian ${SUITE} base layer (mmdebstrap: ${BASE_PACKAGES.join(' ')})`);
  mkdirSync(cacheDir, { recursive: true });
  const work = mkdtempSync(join(cacheDir, '.base-'));
  try {
    const out = join(work, 'rootfs.tar');
    // /var/lib/sandboxd and /run/sandboxd: the default data and run dirs, mount points in a pod.
    const dirs = 'mkdir -p "$1"/var/lib/sandboxd "$1"/run/sandboxd "$1"/etc/sandboxd';
    execFileSync('mmdebstrap', [...minbaseArgs(BASE_PACKAGES, [CLEAN, NEUTRAL_ETC, dirs]), SUITE, out], {
      env: { ...process.env, SOURCE_DATE_EPOCH: String(BASE_EPOCH), TMPDIR: work },
      stdio: ['ignore', 'ignore', 'inherit'],
      timeout: 30 * 60_000,
    });
    renameSync(out, tar);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return tar;
}

/** Places `src` at `dst` (a hard link where the file system allows, else a copy; symlinks as links). */
function place(src: string, dst: string): void {
  mkdirSync(dirname(dst), { recursive: true });
  if (lstatSync(src).isSymbolicLink()) {
    symlinkSync(readlinkSync(src), dst);
    return;
  }
  try {
    linkSync(src, dst);
  } catch {
    copyFileSync(src, dst);
  }
}

/** Builds (or reuses) the release image; see the file's comment. */
export async function buildReleaseImage(o: BuildOptions = {}): Promise<ReleaseImage> {
  const root = resolve(o.root ?? REPO_ROOT);
  const log = o.log ?? (() => {});
  const outDir = resolve(o.outDir ?? join(root, 'artifacts'));
  const cacheDir = join(outDir, 'cache');
  const version = JSON.parse(readFileSync(join(root, 'packages/server/package.json'), 'utf8')).version as string;
  if (!/^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/.test(version)) throw new Error(`version ${version} is not a valid tag`);
  const [major] = process.versions.node.split('.').map(Number);
  if (major < 24)
    throw new Error(`the image's Node.js is this one (${process.execPath}, ${process.version}): run with Node 24+`);
  const dirty = git(root, ['status', '--porcelain', '--', ...PROJECT_PATHS]) !== '';
  const revision = `${git(root, ['rev-parse', 'HEAD'])}${dirty ? '-dirty' : ''}`;
  const epoch = Number(process.env.SOURCE_DATE_EPOCH ?? git(root, ['log', '-1', '--format=%ct']));
  if (!Number.isInteger(epoch) || epoch < 0) throw new Error(`SOURCE_DATE_EPOCH is not a number of seconds: ${epoch}`);
  let source = process.env.SANDBOXD_IMAGE_SOURCE;
  if (source === undefined)
    try {
      source = git(root, ['config', '--get', 'remote.origin.url']);
    } catch {
      source = undefined;
    }

  // What the server would otherwise build at its first start, into its (read-only) tree.
  await ensureSdkDist();
  await buildConsole();

  const files = appFiles(root);
  const base = baseLayer(cacheDir, log);
  const archive = join(outDir, `sandboxd-${version}.oci.tar`);
  const stampFile = `${archive}.inputs`;
  const builder = ['image.ts', 'layer-tar.ts'].map((f) =>
    readFileSync(join(dirname(fileURLToPath(import.meta.url)), f), 'utf8'),
  );
  const inputs = inputsHash(files, { version, revision, epoch, source, base, builder, arch: process.arch });
  if (!o.force && existsSync(archive) && existsSync(stampFile)) {
    const s = JSON.parse(readFileSync(stampFile, 'utf8')) as { inputs: string; digest: string };
    if (s.inputs === inputs) return { archive, version, digest: s.digest, revision, reused: true };
  }

  const work = mkdtempSync(join(cacheDir, '.build-'));
  try {
    log(`staging ${files.size} files of the app layer`);
    const stage = join(work, 'stage');
    for (const [dst, src] of files) place(src, join(stage, dst));
    mkdirSync(join(stage, 'dev'), { mode: 0o755 }); // mmdebstrap's tar leaves /dev out; a mount point
    symlinkSync(`${IMAGE_APP_DIR}/packages/server/bin/sandboxd.js`, join(stage, 'usr/local/bin/sandboxd'));
    const appTar = join(work, 'app.tar');
    writeLayerTar(stage, ['dev', 'opt', 'usr'], appTar, epoch);
    log('writing the OCI image');
    const layout = join(work, 'layout');
    const labels: Record<string, string> = {
      'org.opencontainers.image.title': 'sandboxd',
      'org.opencontainers.image.version': version,
      'org.opencontainers.image.revision': revision,
      'org.opencontainers.image.created': new Date(epoch * 1000).toISOString(),
    };
    if (source) labels['org.opencontainers.image.source'] = source;
    const written = await writeOciImage(layout, {
      tag: version,
      layers: [base, appTar],
      created: new Date(epoch * 1000).toISOString(),
      config: {
        env: [
          'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
          'LANG=C.UTF-8',
          'SANDBOXD_DATA_DIR=/var/lib/sandboxd',
          'SANDBOXD_HOST=0.0.0.0',
        ],
        entrypoint: ['sandboxd'],
        cmd: ['serve'],
        workingDir: '/',
        exposedPorts: ['8080/tcp'],
        labels,
      },
    });
    const tmpArchive = join(work, 'image.oci.tar');
    writeLayerTar(layout, readdirSync(layout), tmpArchive, epoch);
    renameSync(tmpArchive, archive);
    writeFileSync(stampFile, `${JSON.stringify({ inputs, digest: written.manifestDigest })}\n`);
    return { archive, version, digest: written.manifestDigest, revision, reused: false };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
