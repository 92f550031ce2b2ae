import { SandboxdError } from '@sandboxd/protocol';
import type { RuntimeDriver } from '../driver.js';
import type { SpawnOptions, StreamedProcess } from '../spawn.js';
import { StartsInFlight } from '../starts-in-flight.js';
import { TrackedProcess } from './tracked.js';
import {
  type DriverProcesses,
  type FollowOptions,
  MAX_EXITED_PROCESSES,
  MAX_FOLLOWERS_PER_PROCESS,
  MAX_FOLLOWERS_PER_SANDBOX,
  MAX_RUNNING_PROCESSES,
  type ProcessFollower,
  type ProcessFollowing,
  type ProcessShares,
  type ProcessSpec,
  type ProcessState,
} from './types.js';

/** What a {@link ProcessHost} needs of the runtime. */
export interface ProcessHostOptions {
  /** Starts a process with its output streamed (the runtime's `spawn`). */
  spawn(sandboxId: string, argv: string[], o: SpawnOptions): Promise<StreamedProcess>;
  /** The working directory a process runs in when it names none (the image's). */
  workingDir(sandboxId: string): Promise<string>;
  /** How long a held process waits for its first reader, ms (tests shorten it). */
  holdMaxMs?: number;
  /** Per-sandbox shares; absent: the defaults (64 running, 16 exited, 16 readers a process, 128 a sandbox). */
  shares?: ProcessShares;
}

/**
 * The processes started through the API of the sandboxes this process runs
 * ({@link DriverProcesses}): in the server with `SANDBOXD_ROLE=all`, in the runner with
 * `runner` (API replicas reach it over the runner protocol). In memory: a restart of this
 * process forgets them (they go on running in their sandboxes).
 */
export class ProcessHost implements DriverProcesses {
  /** Tracked processes by sandbox, then by pid (insertion order: oldest first). */
  private readonly bySandbox = new Map<string, Map<number, TrackedProcess>>();
  /** Starts in flight, counted against the running limit; killed at once when their sandbox closes meanwhile. */
  private readonly starting = new StartsInFlight();

  private readonly shares: ProcessShares;

  constructor(private readonly o: ProcessHostOptions) {
    this.shares = o.shares ?? {
      runningProcessesPerSandbox: MAX_RUNNING_PROCESSES,
      exitedProcessesPerSandbox: MAX_EXITED_PROCESSES,
      followersPerProcess: MAX_FOLLOWERS_PER_PROCESS,
      followersPerSandbox: MAX_FOLLOWERS_PER_SANDBOX,
    };
  }

  /** The processes of `driver`'s sandboxes, spawned by it (a cwd left out is the image's). */
  static over(
    driver: Pick<RuntimeDriver, 'spawn' | 'inspect'>,
    o: { holdMaxMs?: number; shares?: ProcessShares } = {},
  ): ProcessHost {
    return new ProcessHost({
      spawn: (id, argv, opts) => driver.spawn(id, argv, opts),
      workingDir: async (id) => (await driver.inspect(id))?.workingDir ?? '/',
      holdMaxMs: o.holdMaxMs,
      shares: o.shares,
    });
  }

  async start(sandboxId: string, spec: ProcessSpec): Promise<ProcessState> {
    const running = this.runningCount(sandboxId) + this.starting.count(sandboxId);
    const max = this.shares.runningProcessesPerSandbox;
    if (running >= max)
      throw new SandboxdError('conflict', `The sandbox already runs ${max} processes started through the API`, {
        running,
        limit: 'runningProcessesPerSandbox',
        max,
      });
    // A held process (a streamed exec) waits for a reader: none could attach.
    if (spec.held) this.checkSandboxFollowers(sandboxId);
    const ticket = this.starting.begin(sandboxId);
    try {
      const cwd = spec.run.cwd ?? (await this.o.workingDir(sandboxId));
      const proc = await this.o.spawn(sandboxId, spec.argv, spec.run);
      if (this.starting.closedSince(sandboxId, ticket)) {
        // The sandbox stopped while the process started.
        proc.kill('SIGKILL');
        throw new SandboxdError('conflict', 'Sandbox is not running', { state: 'stopped' });
      }
      const tracked = new TrackedProcess(
        {
          pid: proc.pid,
          command: commandOf(spec.argv),
          argv: spec.argv,
          env: spec.env,
          tag: spec.tag,
          cwd,
          startedAt: spec.startedAt,
        },
        proc,
        () => this.evictExited(sandboxId),
        { held: spec.held, holdMaxMs: this.o.holdMaxMs },
      );
      const procs = this.bySandbox.get(sandboxId) ?? new Map<number, TrackedProcess>();
      this.bySandbox.set(sandboxId, procs);
      // A pid taken again inside the sandbox replaces the exited process that had it.
      procs.delete(proc.pid);
      procs.set(proc.pid, tracked);
      // A process that ended before it was tracked (its exit came with the start) was not
      // counted by the eviction its exit ran: count it now, or such records pile up.
      if (!tracked.running) this.evictExited(sandboxId);
      return tracked.state();
    } finally {
      this.starting.end(sandboxId);
    }
  }

  async list(sandboxId: string): Promise<ProcessState[]> {
    return [...(this.bySandbox.get(sandboxId)?.values() ?? [])].map((p) => p.state());
  }

  async get(sandboxId: string, pid: number): Promise<ProcessState | null> {
    return this.bySandbox.get(sandboxId)?.get(pid)?.state() ?? null;
  }

  async follow(sandboxId: string, pid: number, f: ProcessFollower, o: FollowOptions): Promise<ProcessFollowing> {
    this.admitReader(sandboxId, pid, o);
    return this.find(sandboxId, pid).attach(f, o);
  }

  /**
   * Throws what {@link follow} would for a reader with `o` now: `not_found`, or
   * `rate_limited` when the process or its sandbox has its share of live readers (a runner
   * answers it before the reader's socket is accepted).
   */
  admitReader(sandboxId: string, pid: number, o: Pick<FollowOptions, 'follow'>): void {
    const p = this.find(sandboxId, pid);
    // A reader of an exited process, or one without `follow`, gets what is kept and ends at once.
    if (!o.follow || !p.running) return;
    const max = this.shares.followersPerProcess;
    if (p.followerCount >= max)
      throw new SandboxdError('rate_limited', `Process ${pid} already has ${max} readers; close one first`, {
        limit: 'followersPerProcess',
        max,
      });
    this.checkSandboxFollowers(sandboxId);
  }

  /** `rate_limited` when the sandbox's processes have their share of live readers. */
  private checkSandboxFollowers(sandboxId: string): void {
    let n = 0;
    for (const p of this.bySandbox.get(sandboxId)?.values() ?? []) n += p.followerCount;
    const max = this.shares.followersPerSandbox;
    if (n >= max)
      throw new SandboxdError('rate_limited', `The sandbox's processes already have ${max} readers; close one first`, {
        limit: 'followersPerSandbox',
        max,
      });
  }

  async writeStdin(
    sandboxId: string,
    pid: number,
    body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  ): Promise<void> {
    const p = this.find(sandboxId, pid);
    const proc = p.proc;
    if (!proc.stdinOpen || !p.running) throw stdinClosed(p);
    for await (const chunk of body) {
      if (!proc.stdinOpen || !p.running) throw stdinClosed(p);
      if (!proc.write(chunk)) await new Promise<void>((r) => proc.onDrain(r));
    }
  }

  async closeStdin(sandboxId: string, pid: number): Promise<void> {
    const p = this.find(sandboxId, pid);
    if (!p.proc.stdinOpen || !p.running) throw stdinClosed(p);
    p.proc.closeStdin();
  }

  async signal(sandboxId: string, pid: number, signal: NodeJS.Signals): Promise<void> {
    const p = this.find(sandboxId, pid);
    if (!p.running)
      throw new SandboxdError('conflict', `Process ${pid} has exited`, { pid, exitCode: p.exit?.exitCode });
    p.proc.kill(signal);
  }

  async closeSandbox(sandboxId: string): Promise<void> {
    this.starting.close(sandboxId);
    const m = this.bySandbox.get(sandboxId);
    this.bySandbox.delete(sandboxId);
    for (const p of m?.values() ?? []) if (p.running) p.proc.kill('SIGKILL');
  }

  /** Processes tracked (running and exited), for tests. */
  get size(): number {
    let n = 0;
    for (const m of this.bySandbox.values()) n += m.size;
    return n;
  }

  private find(sandboxId: string, pid: number): TrackedProcess {
    const p = this.bySandbox.get(sandboxId)?.get(pid);
    if (!p) throw processNotFound(pid);
    return p;
  }

  private runningCount(sandboxId: string): number {
    let n = 0;
    for (const p of this.bySandbox.get(sandboxId)?.values() ?? []) if (p.running) n++;
    return n;
  }

  private evictExited(sandboxId: string): void {
    const m = this.bySandbox.get(sandboxId);
    if (!m) return;
    const exited = [...m.values()].filter((p) => !p.running);
    for (const p of exited.slice(0, Math.max(0, exited.length - this.shares.exitedProcessesPerSandbox)))
      m.delete(p.pid);
  }
}

/** The `not_found` of a pid not tracked in the sandbox. */
export function processNotFound(pid: number): SandboxdError {
  return new SandboxdError('not_found', `No process ${pid} started through the API in this sandbox`, { pid });
}

function stdinClosed(p: TrackedProcess): SandboxdError {
  const why = p.running ? 'its stdin is closed (or it was started without `stdin: true`)' : 'it has exited';
  return new SandboxdError('conflict', `Cannot write to process ${p.pid}: ${why}`, { pid: p.pid });
}

/**
 * How a process is listed: the command of `/bin/sh -c command`, else its argv as a shell
 * would read it (arguments with spaces or quotes single-quoted).
 */
export function commandOf(argv: string[]): string {
  if (argv.length === 3 && argv[0] === '/bin/sh' && argv[1] === '-c') return argv[2];
  return argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}
