import { PROCESS_REPLAY_BYTES } from '@sandboxd/protocol';
import type { ProcessExit, StreamedProcess } from '../spawn.js';
import { OutputRing } from './ring.js';
import {
  type FollowEvent,
  type FollowOptions,
  HOLD_MAX_MS,
  type OutputChunk,
  type ProcessFollower,
  type ProcessFollowing,
  type ProcessState,
  type StartEvent,
} from './types.js';

/** Immutable facts of a tracked process, as listed (the part of its state that never changes). */
export type TrackedInfo = Pick<ProcessState, 'pid' | 'command' | 'argv' | 'env' | 'tag' | 'cwd' | 'startedAt'>;

/**
 * One process started through the API: its last 1 MiB of output and its live readers.
 * While a reader is not keeping up the process is paused (its output stops being
 * acknowledged, so it is slowed inside the sandbox); with no reader it runs freely and
 * only the ring keeps its output. Single-threaded; a reader that throws is its own problem
 * (its `send` is not retried).
 */
export class TrackedProcess {
  readonly ring = new OutputRing(PROCESS_REPLAY_BYTES);
  private readonly followers = new Set<ProcessFollower>();
  private readonly blocked = new Set<ProcessFollower>();
  exit: ProcessExit | null = null;
  /** Paused until its first reader attaches (or {@link release}, or {@link HOLD_MAX_MS}): a streamed exec's client misses nothing. */
  private held: boolean;
  private holdTimer: NodeJS.Timeout | null = null;

  constructor(
    readonly info: TrackedInfo,
    readonly proc: StreamedProcess,
    private readonly onExited: (p: TrackedProcess) => void,
    o: { held: boolean; holdMaxMs?: number },
  ) {
    this.held = o.held;
    if (this.held) {
      proc.pause();
      this.holdTimer = setTimeout(() => this.release(), o.holdMaxMs ?? HOLD_MAX_MS);
      this.holdTimer.unref();
    }
    proc.onData((stream, chunk) => this.output({ stream, chunk }));
    proc.onExit((e) => this.exited(e));
  }

  get pid(): number {
    return this.info.pid;
  }

  get running(): boolean {
    return this.exit === null;
  }

  /** Live readers now (those that follow until exit). */
  get followerCount(): number {
    return this.followers.size;
  }

  /** The process now, as plain data. */
  state(): ProcessState {
    return { ...this.info, exit: this.exit, stdinOpen: this.running && this.proc.stdinOpen };
  }

  /**
   * Adds a reader (see `DriverProcesses.follow`). The reader gets `start` and the replay
   * synchronously, before this returns. A reader is never silently short: `start` carries
   * `replayFrom` for a reconnect, and for any reader whose replay does not begin at the
   * process's first byte (a streamed exec whose hold ran out before its reader came; not
   * for `replay: false`, which asked for what comes next only).
   */
  attach(f: ProcessFollower, o: FollowOptions): ProcessFollowing {
    const start: StartEvent = { type: 'start', pid: this.pid };
    const { dropped } = this.ring;
    const gap = o.replay !== false && (dropped.stdout > 0 || dropped.stderr > 0);
    if (o.reconnect || gap) start.replayFrom = { ...dropped };
    let ok = f.send(start);
    // The first reader too gets what is kept: the process may have printed before it attached.
    if (o.replay !== false) for (const c of this.ring.snapshot()) ok = f.send({ type: 'output', ...c }) && ok;
    if (this.exit || !o.follow) {
      if (this.exit) f.send({ type: 'exit', exit: this.exit });
      f.end();
      return { drained: () => undefined, detach: () => undefined };
    }
    this.followers.add(f);
    if (!ok) this.block(f);
    this.release();
    return { drained: () => this.drained(f), detach: () => this.detach(f) };
  }

  /** Lets a held process run (once); it stays paused while a reader is blocked. */
  release(): void {
    if (this.holdTimer) clearTimeout(this.holdTimer);
    this.holdTimer = null;
    if (!this.held) return;
    this.held = false;
    if (this.blocked.size === 0) this.proc.resume();
  }

  /** A reader that returned false from `send` keeps up again. */
  private drained(f: ProcessFollower): void {
    if (this.blocked.delete(f) && this.blocked.size === 0 && !this.held) this.proc.resume();
  }

  private block(f: ProcessFollower): void {
    this.blocked.add(f);
    this.proc.pause();
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
    if (this.holdTimer) clearTimeout(this.holdTimer);
    this.holdTimer = null;
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
