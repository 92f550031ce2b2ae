/**
 * Runs the release image under crun, a real OCI runtime, the way a container runtime runs a
 * pod's container: the image unpacked once (umoci) into a read-only rootfs shared by every
 * container, each container a bundle of its own with the command, env, mounts and privileges
 * it is given. Host paths are bind mounts; `Bidirectional` ones are made shared mount points
 * first (as the kubelet requires of their source) so the mounts the container makes reach
 * this host's mount namespace, as on a node.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const missing = ['crun', 'umoci', 'mmdebstrap'].filter((t) => spawnSync(t, ['--version']).error);
/** Why the release image cannot be built and run here (for `describe`'s `skip`), or false. */
export const releaseImageSkip: string | false =
  process.getuid?.() !== 0
    ? 'needs root (mmdebstrap builds the image; crun runs it privileged)'
    : (process.env.SANDBOXD_E2E_RUNTIME ?? 'fake') !== 'local'
      ? 'needs SANDBOXD_E2E_RUNTIME=local (the image runs sandboxes on crun)'
      : missing.length
        ? `needs ${missing.join(', ')} (scripts/setup.sh)`
        : false;

/** The runtime part of the image config. */
export interface ImageConfig {
  Entrypoint?: string[];
  Cmd?: string[];
  Env?: string[];
  WorkingDir?: string;
  ExposedPorts?: Record<string, unknown>;
  Labels?: Record<string, string>;
}

export interface UnpackedImage {
  rootfs: string;
  config: ImageConfig;
  /** The image manifest's digest. */
  digest: string;
  remove(): void;
}

/** Unpacks the OCI archive's image `tag` (umoci) into a temporary dir. */
export function unpackImage(archive: string, tag: string): UnpackedImage {
  const dir = mkdtempSync(join(tmpdir(), 'sandboxd-release-image-'));
  try {
    const layout = join(dir, 'layout');
    mkdirSync(layout);
    execFileSync('tar', ['-xf', archive, '-C', layout]);
    const rootfs = join(dir, 'rootfs');
    execFileSync('umoci', ['raw', 'unpack', '--image', `${layout}:${tag}`, rootfs], { stdio: 'pipe' });
    const blob = (d: string) => JSON.parse(readFileSync(join(layout, 'blobs', ...d.split(':')), 'utf8'));
    const index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8'));
    const desc = index.manifests.find(
      (m: { annotations?: Record<string, string> }) => m.annotations?.['org.opencontainers.image.ref.name'] === tag,
    );
    if (!desc) throw new Error(`${archive} has no image tagged ${tag}`);
    const config = blob(blob(desc.digest).config.digest).config as ImageConfig;
    rmSync(layout, { recursive: true, force: true });
    return { rootfs, config, digest: desc.digest, remove: () => rmSync(dir, { recursive: true, force: true }) };
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

export interface HostMount {
  /** Path in the container. */
  path: string;
  /** Host path (bind), or `tmpfs`. */
  source: string | 'tmpfs';
  readOnly?: boolean;
  /** Kubernetes' mountPropagation (default None). */
  propagation?: 'None' | 'HostToContainer' | 'Bidirectional';
}

export interface ContainerSpec {
  name: string;
  /** argv, the image's entrypoint already resolved (see {@link resolveArgv}). */
  argv: string[];
  env: Record<string, string>;
  cwd?: string;
  /** All capabilities, no seccomp/masked paths (securityContext.privileged). */
  privileged?: boolean;
  uid?: number;
  gid?: number;
  readOnlyRoot?: boolean;
  /** No new privileges (allowPrivilegeEscalation: false). */
  noNewPrivileges?: boolean;
  hostNetwork?: boolean;
  hostPID?: boolean;
  mounts: HostMount[];
}

/** Kubernetes' rule: `command` replaces the entrypoint (and drops its cmd), `args` the cmd. */
export function resolveArgv(config: ImageConfig, command?: string[], args?: string[]): string[] {
  if (command) return [...command, ...(args ?? [])];
  return [...(config.Entrypoint ?? []), ...(args ?? config.Cmd ?? [])];
}

/** The image's env with `env` on top (a container's env overrides the image's). */
export function imageEnv(config: ImageConfig, env: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of config.Env ?? []) out[e.slice(0, e.indexOf('='))] = e.slice(e.indexOf('=') + 1);
  return { ...out, ...env };
}

const HOST_CAPS = BigInt(`0x${/^CapBnd:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0'}`);

const ALL_CAPS = [
  'CHOWN',
  'DAC_OVERRIDE',
  'DAC_READ_SEARCH',
  'FOWNER',
  'FSETID',
  'KILL',
  'SETGID',
  'SETUID',
  'SETPCAP',
  'LINUX_IMMUTABLE',
  'NET_BIND_SERVICE',
  'NET_BROADCAST',
  'NET_ADMIN',
  'NET_RAW',
  'IPC_LOCK',
  'IPC_OWNER',
  'SYS_MODULE',
  'SYS_RAWIO',
  'SYS_CHROOT',
  'SYS_PTRACE',
  'SYS_PACCT',
  'SYS_ADMIN',
  'SYS_BOOT',
  'SYS_NICE',
  'SYS_RESOURCE',
  'SYS_TIME',
  'SYS_TTY_CONFIG',
  'MKNOD',
  'LEASE',
  'AUDIT_WRITE',
  'AUDIT_CONTROL',
  'SETFCAP',
  'MAC_OVERRIDE',
  'MAC_ADMIN',
  'SYSLOG',
  'WAKE_ALARM',
  'BLOCK_SUSPEND',
  'AUDIT_READ',
  'PERFMON',
  'BPF',
  'CHECKPOINT_RESTORE',
]
  .map((c) => `CAP_${c}`)
  // Privileged is every capability this host's runtime holds (this process's bounding set).
  .filter((_, bit) => (HOST_CAPS >> BigInt(bit)) & 1n);

function ociConfig(rootfs: string, s: ContainerSpec): unknown {
  const caps = s.privileged ? ALL_CAPS : [];
  const mounts: unknown[] = [
    { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
  ];
  if (!s.mounts.some((m) => m.path === '/dev'))
    mounts.push({
      destination: '/dev',
      type: 'tmpfs',
      source: 'tmpfs',
      options: ['nosuid', 'strictatime', 'mode=755'],
    });
  if (!s.mounts.some((m) => m.path === '/sys' || m.path.startsWith('/sys/')))
    mounts.push({ destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] });
  else
    mounts.push({ destination: '/sys', type: 'bind', source: '/sys', options: ['rbind', 'nosuid', 'noexec', 'nodev'] });
  for (const m of [...s.mounts].sort((a, b) => a.path.split('/').length - b.path.split('/').length)) {
    if (m.source === 'tmpfs') {
      mounts.push({ destination: m.path, type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777'] });
      continue;
    }
    const prop =
      m.propagation === 'Bidirectional' ? 'rshared' : m.propagation === 'HostToContainer' ? 'rslave' : 'rprivate';
    mounts.push({
      destination: m.path,
      type: 'bind',
      source: m.source,
      options: ['rbind', prop, ...(m.readOnly ? ['ro'] : [])],
    });
  }
  const namespaces = [{ type: 'mount' }, { type: 'ipc' }, { type: 'uts' }];
  if (!s.hostNetwork) namespaces.push({ type: 'network' });
  if (!s.hostPID) namespaces.push({ type: 'pid' });
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: s.uid ?? 0, gid: s.gid ?? 0 },
      args: s.argv,
      env: Object.entries(s.env).map(([k, v]) => `${k}=${v}`),
      cwd: s.cwd ?? '/',
      capabilities: { bounding: caps, effective: caps, permitted: caps, inheritable: caps, ambient: s.uid ? [] : caps },
      noNewPrivileges: s.noNewPrivileges ?? false,
    },
    root: { path: rootfs, readonly: s.readOnlyRoot ?? false },
    hostname: s.name,
    mounts,
    linux: {
      namespaces,
      rootfsPropagation: s.mounts.some((m) => m.propagation === 'Bidirectional') ? 'rshared' : 'rslave',
      ...(s.privileged
        ? {}
        : {
            maskedPaths: ['/proc/kcore', '/proc/keys', '/proc/timer_list', '/sys/firmware'],
            readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
          }),
    },
  };
}

/** A container started by {@link startContainer}. */
export interface Container {
  name: string;
  proc: ChildProcess;
  /** What it wrote (stdout and stderr). */
  log(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; then `crun delete -f`. Safe to call twice. */
  stop(graceMs?: number): Promise<void>;
}

/** Bind mounts this process made shared (for Bidirectional sources), undone by {@link unshareAll}. */
const sharedBinds: string[] = [];

/** Makes `dir` a shared mount point (a bind on itself), as the kubelet asks of a Bidirectional source. */
export function makeShared(dir: string): void {
  if (sharedBinds.includes(dir)) return;
  execFileSync('mount', ['--bind', dir, dir]);
  sharedBinds.push(dir);
  execFileSync('mount', ['--make-shared', dir]);
}

/** Unmounts the binds of {@link makeShared} (whatever is mounted under them first). */
export function unshareAll(): void {
  for (const dir of sharedBinds.splice(0).reverse()) {
    try {
      execFileSync('umount', ['-R', dir], { stdio: 'ignore' });
    } catch {
      execFileSync('umount', ['-l', dir], { stdio: 'ignore' });
    }
  }
}

/**
 * crun's global options: its state under `root`, and no cgroup of the container's own (it
 * stays in this process's groups, as the pods' limits do not apply to the sandboxes anyway):
 * on a hybrid cgroup host crun refuses to make one while cgroup2 holds a controller, and the
 * runner inside moves the sandboxes into groups of their own.
 */
const crunGlobal = (root: string) => ['--root', root, '--cgroup-manager=disabled'];

/**
 * The argv that runs crun with `args`. On a hybrid cgroup host (v1 hierarchies plus a cgroup2
 * mount at /sys/fs/cgroup/unified holding a controller) crun refuses to start at all; there it
 * runs in a mount namespace of its own (other mounts' propagation unchanged, so Bidirectional
 * binds still reach this host) without that cgroup2 mount, as the local runtime's
 * `cgroup-view` does for its sandboxes.
 */
function crunArgv(args: string[]): string[] {
  if (!HYBRID) return ['crun', ...args];
  const hide = 'mount --make-rslave /sys/fs/cgroup && umount -l /sys/fs/cgroup/unified && exec "$@"';
  return ['unshare', '--mount', '--propagation', 'unchanged', '--', 'sh', '-c', hide, 'sh', 'crun', ...args];
}

const HYBRID = (() => {
  try {
    return execFileSync('stat', ['-fc', '%T', '/sys/fs/cgroup/unified'], { encoding: 'utf8' }).trim() === 'cgroup2fs';
  } catch {
    return false;
  }
})();

/** Where this process keeps crun's state and bundles. */
let stateDir: string | undefined;
const live = new Set<Container>();

/** Starts a container of the unpacked image's `rootfs` under crun. */
export function startContainer(rootfs: string, s: ContainerSpec): Container {
  stateDir ??= mkdtempSync(join(tmpdir(), 'sandboxd-crun-'));
  const bundle = join(stateDir, s.name);
  mkdirSync(bundle);
  writeFileSync(join(bundle, 'config.json'), JSON.stringify(ociConfig(rootfs, s)));
  for (const m of s.mounts) if (m.propagation === 'Bidirectional' && m.source !== 'tmpfs') makeShared(m.source);
  const logFile = join(bundle, 'log');
  const fd = openSync(logFile, 'w');
  const crunRoot = join(stateDir, 'crun');
  const argv = crunArgv([...crunGlobal(crunRoot), 'run', '--bundle', bundle, s.name]);
  const proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  let stopped = false;
  const c: Container = {
    name: s.name,
    proc,
    log: () => readFileSync(logFile, 'utf8'),
    async stop(graceMs = 20_000) {
      if (stopped) return;
      stopped = true;
      const crun = (args: string[]) => {
        try {
          const argv = crunArgv([...crunGlobal(crunRoot), ...args]);
          execFileSync(argv[0], argv.slice(1), { stdio: 'ignore', timeout: 30_000 });
        } catch {
          /* already gone */
        }
      };
      if (proc.exitCode === null && proc.signalCode === null) {
        crun(['kill', s.name, 'TERM']);
        const t = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), graceMs).unref());
        if ((await Promise.race([exited, t])) === 'timeout') {
          crun(['kill', s.name, 'KILL']);
          await exited;
        }
      }
      crun(['delete', '-f', s.name]);
      live.delete(c);
    },
  };
  live.add(c);
  return c;
}

/** Stops every container still running, undoes the shared binds and removes the state dir. */
export async function stopAllContainers(): Promise<void> {
  for (const c of [...live]) await c.stop(5_000);
  unshareAll();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  stateDir = undefined;
}
