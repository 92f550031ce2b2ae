/**
 * Builds `local/debian:bookworm` offline (only Debian's apt mirror is needed) with
 * `mmdebstrap --variant=minbase` plus the tools a sandbox needs, docs/man/locales left out,
 * apt lists and caches removed. mmdebstrap runs in `unshare` mode: as root that still makes
 * real uid-0 files but keeps its /dev, /proc and /sys mounts in a private mount namespace,
 * so a killed build leaves no mounts behind.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { runTool, toolEnv } from './run.js';
import { writeOciImage, type WrittenImage } from './oci-write.js';
import { SETUID_LABEL } from '../setuid.js';

/** Packages on top of minbase. */
export const DEBIAN_PACKAGES = [
  'bash',
  'coreutils',
  'procps',
  'ca-certificates',
  'curl',
  'iproute2',
  'python3',
  'sudo',
];

/**
 * Revision of what the build puts in the image, written to `/etc/sandboxd-image-revision`;
 * set-up rebuilds a cached image whose revision is older. 2: the `user` account. 3: `sudo`,
 * passwordless for `user`, and the label that lets it work (org.sandboxd.setuid).
 */
export const DEBIAN_REVISION = 3;

/** Image config of local/debian. WorkingDir `/root`: the shell starts in root's home. */
export const DEBIAN_CONFIG = {
  env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'LANG=C.UTF-8'],
  workingDir: '/root',
  user: 'root',
  cmd: ['/bin/bash'],
  labels: {
    'org.opencontainers.image.title': 'sandboxd local debian',
    // Setuid programs work in its sandboxes (no no_new_privs): `sudo` for `user` (../setuid.ts).
    [SETUID_LABEL]: 'allow',
  },
};

export interface DebianBuildOptions {
  suite: string;
  timeoutMs: number;
  /**
   * apt sources, each a full `deb ...` line or a mirror URL. Default: mmdebstrap's own
   * (deb.debian.org plus the suite's -updates and -security).
   */
  mirrors?: string[];
  /** mmdebstrap's stderr lines (it reports its steps there). */
  onLog?: (line: string) => void;
}

/** Host identity that mmdebstrap copied in is replaced by neutral files (the runtime mounts its own). */
export const NEUTRAL_ETC = [
  ': > "$1"/etc/hostname',
  ': > "$1"/etc/resolv.conf',
  'printf "127.0.0.1\\tlocalhost\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n" > "$1"/etc/hosts',
  'chmod 0644 "$1"/etc/hostname "$1"/etc/resolv.conf "$1"/etc/hosts',
].join('; ');

/**
 * An unprivileged `user` (uid/gid 1000, home /home/user, bash), as E2B's base template has:
 * E2B's SDKs run commands and write files as `user` unless told otherwise. `useradd` is in
 * minbase (package passwd); the hook runs inside mmdebstrap's user namespace.
 */
const USER = [
  'chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash user',
  // Passwordless sudo for `user`, as E2B's base template gives it (0440, as visudo wants it).
  `printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\\n' > "$1"/etc/sudoers.d/user`,
  'chmod 0440 "$1"/etc/sudoers.d/user',
  `echo ${DEBIAN_REVISION} > "$1"/etc/sandboxd-image-revision`,
].join(' && ');

/** apt lists and caches, logs, the machine id: removed from every image built with mmdebstrap. */
export const CLEAN = [
  'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/apt/*',
  '"$1"/var/log/dpkg.log "$1"/var/log/alternatives.log "$1"/var/cache/debconf/*-old',
  '"$1"/var/lib/dpkg/*-old "$1"/etc/machine-id "$1"/var/cache/ldconfig/aux-cache',
].join(' ');

/**
 * mmdebstrap's options for a minbase bootstrap of `packages` (docs, man pages and locales
 * left out) with `hooks` run in order on the result; the suite, output and mirrors follow.
 */
export function minbaseArgs(packages: readonly string[], hooks: readonly string[]): string[] {
  return [
    '--mode=unshare',
    '--variant=minbase',
    '--format=tar',
    '--skip=output/dev',
    `--include=${packages.join(',')}`,
    '--aptopt=Acquire::Languages "none"',
    '--dpkgopt=path-exclude=/usr/share/man/*',
    '--dpkgopt=path-exclude=/usr/share/info/*',
    '--dpkgopt=path-exclude=/usr/share/doc/*',
    '--dpkgopt=path-include=/usr/share/doc/*/copyright',
    '--dpkgopt=path-exclude=/usr/share/locale/*',
    '--dpkgopt=path-include=/usr/share/locale/locale.alias',
    ...hooks.map((h) => `--customize-hook=${h}`),
  ];
}

/**
 * Writes the Debian image into OCI layout `layout` under `tag`, using `work` (an empty
 * dir, removed by the caller) for the bootstrap. Throws ToolError when mmdebstrap fails.
 */
export async function buildDebianLayout(
  layout: string,
  tag: string,
  work: string,
  opts: DebianBuildOptions,
): Promise<WrittenImage> {
  const tar = join(work, 'rootfs.tar');
  const args = [...minbaseArgs(DEBIAN_PACKAGES, [USER, CLEAN, NEUTRAL_ETC]), opts.suite, tar, ...(opts.mirrors ?? [])];
  let buf = '';
  await runTool('mmdebstrap', args, {
    timeoutMs: opts.timeoutMs,
    env: toolEnv({ TMPDIR: work }),
    onStderr: (d) => {
      buf += d;
      const lines = buf.split('\n');
      buf = lines.pop() ?? '';
      for (const l of lines) if (l.trim()) opts.onLog?.(l);
    },
  });
  // --skip=output/dev leaves out device nodes (the runtime mounts its own /dev) and /dev
  // itself; add the empty mount point back.
  const extra = join(work, 'extra');
  await mkdir(join(extra, 'dev'), { recursive: true, mode: 0o755 });
  await runTool(
    'tar',
    ['--append', '--file', tar, '--numeric-owner', '--owner=0', '--group=0', '--mode=0755', '-C', extra, './dev'],
    { timeoutMs: 60_000 },
  );
  return writeOciImage(layout, { tag, layers: [tar], config: DEBIAN_CONFIG });
}
