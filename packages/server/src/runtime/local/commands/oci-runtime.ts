import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { constants as osConstants } from 'node:os';
import { CGROUP_ROOT, cgroupLayout } from '../bundle/cgroup-fs.js';
import { nativeBin } from '../native.js';
import { AGENT_PATH } from './exec-agent.js';
import { HostSpawner } from './spawner.js';

/** A runtime call that takes longer than this is killed (a hung runtime must not hang a create). */
const RUNTIME_TIMEOUT_MS = 120_000;

export interface CrunState {
  id: string;
  pid: number;
  status: 'created' | 'running' | 'stopped' | 'paused' | string;
  bundle: string;
  /** The config's annotations (`state` only; `list` prints none). */
  annotations?: Record<string, string>;
}

export interface RunExecOptions {
  /** Full environment (KEY=VALUE); `crun exec --env` replaces the config's, so pass all of it. */
  env: string[];
  cwd: string;
  user: string;
  timeoutMs: number;
  maxOutputBytes: number;
  /** Where crun writes the host pid of the process (used to kill its tree on timeout). */
  pidFile: string;
  /** Host pids in the sandbox's cgroup, for killing a process tree. */
  cgroupProcs: () => number[];
}

/**
 * Whether the host has the cgroup v1 layout (a tmpfs of v1 hierarchies at /sys/fs/cgroup,
 * maybe with a cgroup2 mount at /sys/fs/cgroup/unified: "hybrid", as this host). There
 * `crun run` goes through the mount helper's `cgroup-view` (see {@link OciRuntime.run}). On
 * v2 (unified only) crun runs directly: one group per sandbox, no hierarchy to hide.
 */
function isCgroupV1Layout(): boolean {
  return cgroupLayout() === 'v1';
}

/**
 * The v1 controllers a sandbox gets cgroups in: its limits (memory, CPU quota, pids), its
 * device rules, CPU accounting, and the freezer (`crun exec` reads its state). crun makes a
 * container a cgroup in every hierarchy it finds, so `crun run` sees only these (a private
 * mount namespace whose /sys/fs/cgroup holds just them): no cgroup per sandbox in blkio,
 * cpuset, hugetlb or name=systemd, which set no limit here (a sandbox's processes stay in the host's root group there) but cost kernel
 * memory and, for cpuset, walks of every sibling on each create and a rebuild of the
 * scheduler domains on each delete. Nor a cgroup2 group: on a hybrid host crun refuses a
 * cgroup2 mount that holds a controller (hugetlb here), and otherwise makes each container a
 * cgroup2 group, which every v1 cgroup mount (ten per container start) then walks: measured,
 * 1,000 sandboxes alive added ~6 ms to each. Moving hugetlb to a v1 hierarchy of its own was
 * tried for the refusal: crun then starts directly, but makes those cgroup2 groups.
 */
export const SANDBOX_CGROUP_CONTROLLERS = ['memory', 'cpu', 'cpuacct', 'pids', 'devices', 'freezer'];

/**
 * The v1 hierarchies of this host without a sandbox cgroup (see
 * {@link SANDBOX_CGROUP_CONTROLLERS}) as a sandbox's /sys/fs/cgroup shows them: crun still
 * mounts every hierarchy there, at the group its processes are in, which for these is the
 * host's root group. Their paths must be masked (the bundle does). Empty on other layouts.
 */
export function hostOnlyCgroupPaths(): string[] {
  if (!isCgroupV1Layout()) return [];
  const keep = new Set(SANDBOX_CGROUP_CONTROLLERS);
  return readdirSync(CGROUP_ROOT)
    .filter((n) => n !== 'unified' && !n.split(',').every((c) => keep.has(c)))
    .map((n) => `${CGROUP_ROOT}/${n}`);
}

/** Path of the mount helper (native/idmap-mount.c), compiled on first use. */
let mountHelper: string | undefined;
function mountHelperPath(): string {
  mountHelper ??= nativeBin('idmap-mount');
  return mountHelper;
}

export type OciRuntimeName = 'crun' | 'runc' | 'runsc';

/** crun when installed, else runc (slower to start, but runs where crun does not). */
export function defaultOciRuntime(): OciRuntimeName {
  return ['/usr/bin/crun', '/usr/local/bin/crun'].some((p) => existsSync(p)) ? 'crun' : 'runc';
}

/**
 * A thin wrapper over an OCI runtime binary with its own state root: crun, runc, or gVisor's
 * runsc, whose command lines agree on everything used here but the log flag and runsc's
 * global flags (its platform, seccomp inside the sandbox).
 */
export class OciRuntime {
  readonly root: string;
  readonly binary: OciRuntimeName;
  /** Global flags given before every subcommand (runsc's platform and the like). */
  readonly flags: string[];
  private readonly cgroupV1: boolean;

  constructor(opts: { root: string; binary?: OciRuntimeName; flags?: string[] }) {
    this.root = opts.root;
    this.binary = opts.binary ?? defaultOciRuntime();
    this.flags = opts.flags ?? [];
    this.cgroupV1 = this.binary === 'crun' && isCgroupV1Layout();
  }

  /** The global flag that sends the runtime's own error messages to `path`. */
  private logFlag(path: string): string[] {
    return this.binary === 'crun' ? [`--log=file:${path}`] : ['--log', path];
  }

  /** argv prefix `<runtime> --root <root> [flags]` (used by the PTY relay too). */
  get argv(): string[] {
    return [this.binary, '--root', this.root, ...this.flags];
  }

  /**
   * Creates and starts container `id` from `bundle`, detached; resolves to PID 1's host pid
   * once it runs. With `onChannel`, PID 1 gets a socket to this process on its stdin and
   * stdout (the exec agent's channel), handed to `onChannel` before the runtime starts.
   */
  async run(id: string, bundle: string, o: { onChannel?: (channel: Socket) => void } = {}): Promise<number> {
    return this.launch(['run'], id, bundle, o);
  }

  /**
   * `<runtime> <sub> --detach --pid-file --bundle <bundle> <id>` (`run`, or runsc's `restore`
   * with its image): resolves to the host pid it writes, rejects naming the runtime's log.
   */
  private async launch(
    sub: string[],
    id: string,
    bundle: string,
    o: { onChannel?: (channel: Socket) => void },
  ): Promise<number> {
    const log = join(bundle, 'crun.log');
    const pidFile = join(bundle, 'init.pid');
    const args = [
      ...this.argv,
      ...this.logFlag(log),
      ...sub,
      '--detach',
      '--pid-file',
      pidFile,
      '--bundle',
      bundle,
      id,
    ];
    // The mount helper unshares the mount namespace, sets up its cgroup view and execs crun:
    // one process, and a copy of the host's mount table (which holds no mount per sandbox).
    const [cmd, argv] = this.cgroupV1
      ? [mountHelperPath(), ['cgroup-view', SANDBOX_CGROUP_CONTROLLERS.join(','), '--', ...args]]
      : this.binary === 'runsc'
        ? runscLauncher(args)
        : [args[0], args.slice(1)];
    // The container's init inherits the runtime's stdio and holds it for its whole life:
    // a channel only when it is meant to live that long, else /dev/null. The runtime's own
    // errors go to the log file.
    const r = await HostSpawner.shared().run(cmd, argv, {
      quiet: !o.onChannel,
      channel: o.onChannel,
      timeoutMs: RUNTIME_TIMEOUT_MS,
    });
    if (r.code !== 0) {
      const why = await readFile(log, 'utf8').catch(() => '');
      throw new Error(
        `${this.binary} ${sub[0]} ${id} failed (${r.timedOut ? 'timed out' : r.code}): ${why.trim().split('\n').slice(-3).join('; ')}`,
      );
    }
    const pid = Number((await readFile(pidFile, 'utf8')).trim());
    await rm(pidFile, { force: true }); // read once: a page less in a tmpfs run dir
    return pid;
  }

  /**
   * runsc only: saves container `id` (every process, its memory, open files) into
   * `imageDir`; the container's processes end. Rejects naming runsc's words when it cannot
   * (the processes are gone then too: runsc kills the sandbox either way).
   */
  async checkpoint(id: string, imageDir: string): Promise<void> {
    await this.call(['checkpoint', '--image-path', imageDir, id]);
  }

  /**
   * runsc only: makes container `id` from `bundle` again with the processes and memory saved
   * in `imageDir`, detached; resolves to the sandbox's host pid. `onChannel` as for
   * {@link run}: restored PID 1 (the exec agent) gets the new channel as its stdio.
   */
  async restore(
    id: string,
    bundle: string,
    imageDir: string,
    o: { onChannel?: (channel: Socket) => void } = {},
  ): Promise<number> {
    return this.launch(['restore', '--image-path', imageDir], id, bundle, o);
  }

  /**
   * runsc only: sets the hostname of the user-space kernel of container `id` (a fork,
   * restored with its source's) with the image's `hostname` program, given CAP_SYS_ADMIN for
   * that one call (the sandbox's own root lacks it).
   */
  async setHostname(id: string, hostname: string): Promise<void> {
    await this.call(['exec', '--cap', 'CAP_SYS_ADMIN', '--user', '0:0', id, 'hostname', hostname]);
  }

  /**
   * runsc only, right before a checkpoint: ends every process of container `id` but its PID 1
   * that holds a file of the host (a terminal's PTY and stdio, a second agent's channel), which
   * runsc could save but not restore. The agent's `hostfds` does it, given CAP_SYS_PTRACE (to
   * read every process's fds) and CAP_KILL for that one call. Rejects when some still hold one.
   */
  async endHostFileHolders(id: string): Promise<void> {
    await this.call([
      'exec',
      '--cap',
      'CAP_SYS_PTRACE',
      '--cap',
      'CAP_KILL',
      '--user',
      '0:0',
      id,
      AGENT_PATH,
      'hostfds',
    ]);
  }

  /** Runs the runtime with `args` after `--root`; resolves with its stdout, rejects naming its stderr. */
  private async call(args: string[]): Promise<string> {
    const r = await HostSpawner.shared().run(this.binary, [...this.argv.slice(1), ...args], {
      timeoutMs: RUNTIME_TIMEOUT_MS,
      maxOutputBytes: 4 << 20,
    });
    if (r.code === 0 && !r.truncated) return r.stdout.toString();
    throw new Error(
      `${this.binary} ${args[0]} failed (${r.timedOut ? 'timed out' : r.code}): ${r.stderr.toString().trim().split('\n').slice(-2).join('; ')}`,
    );
  }

  async state(id: string): Promise<CrunState | null> {
    if (this.binary === 'runsc') return (await this.runscStates()).find((c) => c.id === id) ?? null;
    try {
      return JSON.parse(await this.call(['state', id])) as CrunState;
    } catch {
      return null;
    }
  }

  /**
   * runsc's containers, from its state files (`<root>/<id>_sandbox:<id>.state`), not from
   * `runsc list|state`: those ask each sandbox over its control socket, and a frozen (paused)
   * sandbox never answers, which hung a restarted server's recovery. `running` when the
   * file says so and its sandbox process lives, else `stopped`.
   */
  private async runscStates(): Promise<CrunState[]> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    const out: CrunState[] = [];
    for (const n of names.filter((x) => x.endsWith('.state'))) {
      try {
        const st = JSON.parse(await readFile(join(this.root, n), 'utf8')) as {
          id: string;
          status: string;
          bundleDir: string;
          sandbox?: { pid?: number };
          spec?: { annotations?: Record<string, string> };
        };
        const pid = st.sandbox?.pid ?? 0;
        const alive = pid > 0 && processStart(pid) !== null;
        out.push({
          id: st.id,
          pid: alive ? pid : 0,
          status: st.status === 'running' && !alive ? 'stopped' : st.status,
          bundle: st.bundleDir,
          annotations: st.spec?.annotations,
        });
      } catch {
        /* being written or removed */
      }
    }
    return out;
  }

  async list(): Promise<CrunState[]> {
    if (this.binary === 'runsc') return this.runscStates();
    if (!existsSync(this.root)) return [];
    const stdout = await this.call(['list', '--format', 'json']);
    const parsed = stdout.trim() ? (JSON.parse(stdout) as CrunState[] | null) : [];
    return parsed ?? [];
  }

  /** Sends `signal` to every process of the container. */
  async kill(id: string, signal = 'KILL'): Promise<void> {
    await this.call(['kill', '--all', id, signal]).catch(() => undefined);
  }

  /** Removes the container, killing it first if needed. Unknown id: no-op. */
  async delete(id: string): Promise<void> {
    await this.call(['delete', '--force', id]).catch(async (e: Error) => {
      if (!(await this.state(id))) return;
      throw e;
    });
  }

  /**
   * Runs argv in the container in the foreground with stdout and stderr kept apart, each
   * capped at `maxOutputBytes` (the rest is drained and dropped). On timeout the process
   * and all its descendants are killed and exitCode is 124.
   */
  exec(
    id: string,
    argv: string[],
    o: RunExecOptions,
  ): Promise<{ stdout: string; stderr: string; exitCode: number; truncated: boolean; timedOut: boolean }> {
    const args = [...this.argv.slice(1), 'exec', '--cwd', o.cwd, '--user', o.user, '--pid-file', o.pidFile];
    for (const e of o.env) args.push('--env', e);
    args.push(id, ...argv);
    return new Promise((resolve, reject) => {
      const child = spawn(this.binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let outLen = 0;
      let errLen = 0;
      let truncated = false;
      let timedOut = false;
      const take = (buf: Buffer[], len: number, d: Buffer): number => {
        const room = o.maxOutputBytes - len;
        if (room <= 0) {
          truncated = true;
          return len;
        }
        if (d.length > room) {
          truncated = true;
          buf.push(d.subarray(0, room));
          return len + room;
        }
        buf.push(d);
        return len + d.length;
      };
      child.stdout.on('data', (d: Buffer) => {
        outLen = take(out, outLen, d);
      });
      child.stderr.on('data', (d: Buffer) => {
        errLen = take(err, errLen, d);
      });
      const timer = setTimeout(() => {
        timedOut = true;
        void this.killTree(o.pidFile, o.cgroupProcs);
      }, o.timeoutMs);
      let done = false;
      let grace: NodeJS.Timeout | undefined;
      const finish = () => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        clearTimeout(grace);
        void rm(o.pidFile, { force: true });
        const signalled = child.signalCode ? 128 + (osConstants.signals[child.signalCode] ?? 9) : 1;
        const exitCode = timedOut ? 124 : (child.exitCode ?? signalled);
        resolve({
          stdout: Buffer.concat(out).toString('utf8'),
          stderr: Buffer.concat(err).toString('utf8'),
          exitCode,
          truncated,
          timedOut,
        });
      };
      child.on('error', (e) => {
        clearTimeout(timer);
        done = true;
        reject(e);
      });
      // A background child of the command may keep the pipes open; the command is done when
      // crun exec exits, so wait only briefly for the rest of its output after that.
      child.on('exit', () => {
        // Output already in the pipes is read in the poll phase that follows this timer
        // phase; stop only after it (the event loop may have been away longer than 200 ms).
        grace = setTimeout(
          () =>
            setImmediate(() => {
              child.stdout.destroy();
              child.stderr.destroy();
              finish();
            }),
          200,
        );
      });
      child.on('close', finish);
    });
  }

  /** Starts argv detached with stdio on /dev/null; returns the host pid. */
  async execDetached(
    id: string,
    argv: string[],
    o: Pick<RunExecOptions, 'env' | 'cwd' | 'user' | 'pidFile'>,
  ): Promise<number> {
    const args = [...this.argv.slice(1), 'exec', '--detach', '--cwd', o.cwd, '--user', o.user, '--pid-file', o.pidFile];
    for (const e of o.env) args.push('--env', e);
    args.push(id, ...argv);
    // No pipes: the detached process would inherit them and keep them open for its life.
    const log = `${o.pidFile}.log`;
    const { code } = await HostSpawner.shared().run(this.binary, [...this.logFlag(log), ...args], {
      quiet: true,
      timeoutMs: RUNTIME_TIMEOUT_MS,
    });
    const why = await readFile(log, 'utf8').catch(() => '');
    await rm(log, { force: true });
    if (code !== 0)
      throw new Error(`${this.binary} exec --detach failed (${code}): ${why.trim().split('\n').slice(-2).join('; ')}`);
    const pid = Number((await readFile(o.pidFile, 'utf8')).trim());
    await rm(o.pidFile, { force: true });
    return pid;
  }

  /** Kills the process in `pidFile` and every descendant of it found in the cgroup. */
  private async killTree(pidFile: string, cgroupProcs: () => number[]): Promise<void> {
    let root: number;
    try {
      root = Number((await readFile(pidFile, 'utf8')).trim());
    } catch {
      return;
    }
    const victims = new Set([root]);
    const procs = cgroupProcs();
    for (let grew = true; grew; ) {
      grew = false;
      for (const p of procs) {
        if (victims.has(p)) continue;
        if (victims.has(parentPid(p))) {
          victims.add(p);
          grew = true;
        }
      }
    }
    for (const p of victims) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  }
}

/**
 * The command line that starts `runsc run|restore` (`args`, runsc's argv) so that it can set
 * up a sandbox's network. runsc 2022-12 takes a network namespace for the host's own when
 * `/proc/sys/net/core/rmem_default` exists in it, which was true only of the root namespace
 * until Linux made net.core sysctls per namespace (6.x): it then refuses every namespace.
 * The call runs in a mount namespace of its own where /proc/sys shows only `kernel`, `vm`
 * and `fs` (no `net`), and a second, fully visible proc mount lets runsc's gofer (in the
 * sandbox's user namespace) mount a proc of its own. Nothing of this reaches the sandbox,
 * whose /proc is gVisor's.
 */
export function runscLauncher(args: string[]): [string, string[]] {
  const script = [
    'set -e',
    'mount -t tmpfs -o size=4k,mode=755 sysctl-view /proc/sys',
    'mkdir /proc/sys/.proc',
    'mount -t proc proc /proc/sys/.proc',
    'for d in kernel vm fs; do mkdir /proc/sys/$d; mount --bind /proc/sys/.proc/sys/$d /proc/sys/$d; done',
    'exec "$@"',
  ].join('\n');
  return ['unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script, 'sh', ...args]];
}

/** Parent pid of host process `pid`, or 0 when it is gone. */
export function parentPid(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return 0;
  }
}

/**
 * Start time of host process `pid` (clock ticks since boot), or null when it is gone or a
 * zombie. A pid plus its start time names one process for good, even after pid reuse.
 */
export function processStart(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] === 'Z' || fields[0] === 'X') return null;
    return Number(fields[19]);
  } catch {
    return null;
  }
}

/** The pid of host process `hostPid` as seen in its innermost pid namespace. */
export function nsPid(hostPid: number): number {
  const status = readFileSync(`/proc/${hostPid}/status`, 'utf8');
  const line = status.split('\n').find((l) => l.startsWith('NSpid:'));
  const fields = line?.split(/\s+/).filter(Boolean) ?? [];
  return Number(fields[fields.length - 1]);
}
