import { PROCESS_REPLAY_BYTES, type ProcessInfo, type ProcessSignal, SandboxdError } from '@sandboxd/protocol';
import type { ProcessExit, StreamedProcess } from '../runtime/driver.js';
import type { ServiceDeps } from './context.js';
import { type OutputChunk, OutputRing } from './process-output.js';
import type { SandboxService } from './sandboxes.js';

/** Processes one sandbox may run through the API at once. */
export const MAX_RUNNING_PROCESSES = 64;
/** Exited processes kept per sandbox (listed, output replayable); the oldest goes first. */
export const MAX_EXITED_PROCESSES = 16;

/** The `start` line of an output stream; `replayFrom` (reconnects only) counts the bytes per stream before the replay. */
export type StartEvent = { type: 'start'; pid: number; replayFrom?: { stdout: number; stderr: number } };

/** What a reader of a process gets: `start`, output chunks as the process wrote them, then `exit`. */
export type FollowEvent = StartEvent | ({ type: 'output' } & OutputChunk) | { type: 'exit'; exit: ProcessExit };

/** A client reading a process's output (an NDJSON response, an E2B stream). */
export interface ProcessFollower {
  /** One event; false when the client is not keeping up (then {@link TrackedProcess.drained} once it is). */
  send(event: FollowEvent): boolean;
  /** No more events (after `exit`, or without `follow` after the replay). */
  end(): void;
}

/** What the service keeps of a process started through the API. */
export interface StartedProcess {
  pid: number;
  /** What it runs, as listed: the command of `/bin/sh -c command`, else the argv joined. */
  command: string;
  argv: string[];
  /** The environment it was asked to run with, on top of the sandbox's (and of a login's variables). */
  env: Record<string, string>;
  tag: string | null;
  cwd: string;
  startedAt: Date;
  proc: StreamedProcess;
}

/**
 * One process started through the API: its last 1 MiB of output and its live readers.
 * While a reader is not keeping up the process is paused (its output stops being
 * acknowledged, so it is slowed inside the sandbox); with no reader it runs freely and
 * only the ring keeps its output.
 */
export class TrackedProcess {
  readonly ring = new OutputRing(PROCESS_REPLAY_BYTES);
  private readonly followers = new Set<ProcessFollower>();
  private readonly blocked = new Set<ProcessFollower>();
  exit: ProcessExit | null = null;

  /** Paused until its first reader attaches (or {@link release}): a streamed exec's client misses nothing. */
  private held: boolean;

  constructor(
    readonly info: StartedProcess,
    private readonly onExited: (p: TrackedProcess) => void,
    o: { held: boolean },
  ) {
    this.held = o.held;
    if (this.held) info.proc.pause();
    info.proc.onData((stream, chunk) => this.output({ stream, chunk }));
    info.proc.onExit((e) => this.exited(e));
  }

  get pid(): number {
    return this.info.pid;
  }

  get running(): boolean {
    return this.exit === null;
  }

  view(): ProcessInfo {
    const i = this.info;
    return {
      pid: i.pid,
      command: i.command,
      tag: i.tag,
      cwd: i.cwd,
      startedAt: i.startedAt.toISOString(),
      running: this.running,
      exitCode: this.exit?.exitCode ?? null,
    };
  }

  /**
   * Adds a reader: `start` (with `replayFrom` for a `reconnect`), the kept output (unless
   * `replay: false`), then with `follow` live output until exit, else the reader ends after
   * what is kept. Returns the function that removes the reader (call it when the client goes).
   */
  attach(f: ProcessFollower, o: { reconnect: boolean; follow: boolean; replay?: boolean }): () => void {
    const start: StartEvent = { type: 'start', pid: this.pid };
    if (o.reconnect) start.replayFrom = { ...this.ring.dropped };
    let ok = f.send(start);
    // The first reader too gets what is kept: the process may have printed before it attached.
    if (o.replay !== false) for (const c of this.ring.snapshot()) ok = f.send({ type: 'output', ...c }) && ok;
    if (this.exit || !o.follow) {
      if (this.exit) f.send({ type: 'exit', exit: this.exit });
      f.end();
      return () => undefined;
    }
    this.followers.add(f);
    if (!ok) this.block(f);
    this.release();
    return () => this.detach(f);
  }

  /** Lets a held process run (once); it stays paused while a reader is blocked. */
  release(): void {
    if (!this.held) return;
    this.held = false;
    if (this.blocked.size === 0) this.info.proc.resume();
  }

  /** A reader that returned false from `send` keeps up again. */
  drained(f: ProcessFollower): void {
    if (this.blocked.delete(f) && this.blocked.size === 0 && !this.held) this.info.proc.resume();
  }

  private block(f: ProcessFollower): void {
    this.blocked.add(f);
    this.info.proc.pause();
  }

  private detach(f: ProcessFollower): void {
    this.followers.delete(f);
    this.drained(f);
  }

  private output(c: OutputChunk): void {
    this.ring.push(c);
    if (this.followers.size === 0) return;
    const ev: FollowEvent = { type: 'output', ...c };
    for (const f of this.followers) if (!f.send(ev) && !this.blocked.has(f)) this.block(f);
  }

  private exited(e: ProcessExit): void {
    this.exit = e;
    const ev: FollowEvent = { type: 'exit', exit: e };
    for (const f of this.followers) {
      f.send(ev);
      f.end();
    }
    this.followers.clear();
    this.blocked.clear();
    this.onExited(this);
  }
}

/**
 * Processes started through the API (background and streamed execs), per sandbox, in
 * memory (they do not survive a server restart; the processes themselves go on). When the
 * sandbox stops or is deleted they are forgotten. Another account's sandbox is `not_found`.
 */
export class ProcessService {
  private readonly bySandbox = new Map<string, Map<number, TrackedProcess>>();

  constructor(
    private readonly d: Pick<ServiceDeps, 'driver' | 'clock' | 'log'>,
    private readonly sandboxes: Pick<SandboxService, 'get' | 'onGone'>,
  ) {
    sandboxes.onGone((id) => this.forget(id));
  }

  /**
   * Starts `argv` (`/bin/sh -c command` for a command) in sandbox `sandboxId` (already
   * checked started by the caller) and tracks it. Throws `conflict` when
   * {@link MAX_RUNNING_PROCESSES} run.
   */
  async start(
    sandboxId: string,
    argv: string[],
    o: {
      env?: Record<string, string>;
      /** Variables under `env` (a login's HOME, USER, LOGNAME), not listed as asked for. */
      baseEnv?: Record<string, string>;
      cwd?: string;
      user?: string;
      timeoutMs?: number;
      stdin?: boolean;
      tag?: string;
      /** Paused until its first reader attaches (a streamed exec); else it runs at once. */
      held?: boolean;
    },
  ): Promise<TrackedProcess> {
    const procs = this.procs(sandboxId);
    const running = [...procs.values()].filter((p) => p.running).length;
    if (running >= MAX_RUNNING_PROCESSES)
      throw new SandboxdError(
        'conflict',
        `The sandbox already runs ${MAX_RUNNING_PROCESSES} processes started through the API`,
        {
          running,
        },
      );
    const cwd = o.cwd ?? (await this.d.driver.inspect(sandboxId))?.workingDir ?? '/';
    const proc = await this.d.driver.spawn(sandboxId, argv, {
      env: o.baseEnv ? { ...o.baseEnv, ...o.env } : o.env,
      cwd: o.cwd,
      user: o.user,
      timeoutMs: o.timeoutMs,
      stdin: o.stdin,
    });
    const tracked = new TrackedProcess(
      {
        pid: proc.pid,
        command: commandOf(argv),
        argv,
        env: o.env ?? {},
        tag: o.tag ?? null,
        cwd,
        startedAt: new Date(this.d.clock.now()),
        proc,
      },
      () => this.evictExited(sandboxId),
      { held: o.held ?? false },
    );
    if (this.bySandbox.get(sandboxId) !== procs) {
      // The sandbox stopped while the process started (its onGone has passed us by).
      proc.kill('SIGKILL');
      throw new SandboxdError('conflict', 'Sandbox is not running', { state: 'stopped' });
    }
    procs.set(proc.pid, tracked);
    return tracked;
  }

  async list(accountId: string, sandboxId: string): Promise<ProcessInfo[]> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    return [...(this.bySandbox.get(sb.id)?.values() ?? [])].map((p) => p.view());
  }

  /** The running processes of a sandbox, oldest first. Throws `not_found` for an unknown sandbox. */
  async running(accountId: string, sandboxId: string): Promise<TrackedProcess[]> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    return [...(this.bySandbox.get(sb.id)?.values() ?? [])].filter((p) => p.running);
  }

  /** Throws `not_found` for an unknown sandbox or pid. */
  async get(accountId: string, sandboxId: string, pid: number): Promise<TrackedProcess> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    const p = this.bySandbox.get(sb.id)?.get(pid);
    if (!p) throw new SandboxdError('not_found', `No process ${pid} started through the API in this sandbox`, { pid });
    return p;
  }

  /**
   * Appends `body` to the process's stdin, as fast as the process reads it. Throws
   * `conflict` when its stdin is not open (exited, closed, or started without `stdin`).
   */
  async writeStdin(
    accountId: string,
    sandboxId: string,
    pid: number,
    body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  ): Promise<void> {
    const p = await this.get(accountId, sandboxId, pid);
    const proc = p.info.proc;
    if (!proc.stdinOpen) throw stdinClosed(p);
    for await (const chunk of body) {
      if (!proc.stdinOpen) throw stdinClosed(p);
      if (!proc.write(chunk)) await new Promise<void>((r) => proc.onDrain(r));
    }
  }

  async closeStdin(accountId: string, sandboxId: string, pid: number): Promise<void> {
    const p = await this.get(accountId, sandboxId, pid);
    if (!p.info.proc.stdinOpen) throw stdinClosed(p);
    p.info.proc.closeStdin();
  }

  async signal(accountId: string, sandboxId: string, pid: number, signal: ProcessSignal): Promise<void> {
    const p = await this.get(accountId, sandboxId, pid);
    if (!p.running)
      throw new SandboxdError('conflict', `Process ${pid} has exited`, { pid, exitCode: p.exit?.exitCode });
    p.info.proc.kill(signal);
  }

  private procs(sandboxId: string): Map<number, TrackedProcess> {
    let m = this.bySandbox.get(sandboxId);
    if (!m) {
      m = new Map();
      this.bySandbox.set(sandboxId, m);
    }
    return m;
  }

  private evictExited(sandboxId: string): void {
    const m = this.bySandbox.get(sandboxId);
    if (!m) return;
    const exited = [...m.values()].filter((p) => !p.running);
    for (const p of exited.slice(0, Math.max(0, exited.length - MAX_EXITED_PROCESSES))) m.delete(p.pid);
  }

  private forget(sandboxId: string): void {
    const m = this.bySandbox.get(sandboxId);
    this.bySandbox.delete(sandboxId);
    for (const p of m?.values() ?? []) if (p.running) p.info.proc.kill('SIGKILL');
  }
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
