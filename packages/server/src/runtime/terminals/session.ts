import type { ExitMessage, Shell } from '@sandboxd/protocol';
import type { Logger } from 'pino';
import type { PtyProcess } from '../pty.js';
import { RingBuffer } from './ring.js';
import { CLOSE, MAX_TERMINAL_SIZE, type TerminalAttachment, type TerminalClient, type TerminalState } from './types.js';

/** Output kept for `?replay=1` and for the first client, bytes. */
export const REPLAY_BYTES = 64 * 1024;
/** A client with this much output unsent is "behind"; the PTY pauses only while every client is. */
export const CLIENT_HIGH_WATER_BYTES = 1024 * 1024;
/** A paused PTY resumes once some client has less than this unsent. */
export const CLIENT_LOW_WATER_BYTES = 256 * 1024;
/** A client with more than this unsent is dropped (close 1013) instead of stalling the others. */
export const CLIENT_MAX_BUFFER_BYTES = 4 * 1024 * 1024;
/** After the hang-up (SIGHUP) of a terminated shell, how long before SIGKILL. */
export const HANGUP_GRACE_MS = 2000;

/** Immutable facts of a terminal. */
export interface TerminalInfo {
  id: string;
  sandboxId: string;
  shell: Shell;
  createdAt: number;
  /** What runs on the PTY, the environment it was asked to run with (on top of the sandbox's), where. */
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  /** A caller's label (E2B's process tag), or null. */
  tag: string | null;
  /** Not cleaned up while it runs without a client (it ends by itself, a kill or its deadline). */
  keepWhileIdle: boolean;
}

/**
 * One PTY and the clients watching it. Output goes to every client in order and into a
 * 64 KiB ring. Backpressure: the PTY is paused only while EVERY client is behind
 * (>= 1 MiB unsent); a client more than 4 MiB behind while another keeps up is dropped
 * with close 1013, so a slow client never stalls a fast one and memory per client stays
 * bounded. With no client the output flows into the ring only. Single-threaded; no
 * method throws.
 */
export class TerminalSession {
  status: 'active' | 'exited' = 'active';
  exit: { exitCode: number; signal: string | null } | null = null;
  private readonly clients = new Set<TerminalClient>();
  private readonly ring = new RingBuffer(REPLAY_BYTES);
  private everAttached = false;
  private paused = false;
  /** Set while the last output is flushed at exit: no more pausing. */
  private ending = false;
  private ptyExited = false;
  private killTimer: NodeJS.Timeout | null = null;
  /** Input is queued in front of the PTY (its program is not reading): every client is paused. */
  private inputBlocked = false;
  /** Writers of {@link write} waiting for queued input to be taken. */
  private inputWaiters: Array<() => void> = [];
  private deadline: NodeJS.Timeout | null = null;

  /**
   * `onClientsChanged` runs whenever the client count changes (idle timer bookkeeping).
   * With `timeoutMs` (> 0) the program is killed (SIGKILL) when it still runs after that long.
   */
  constructor(
    readonly info: TerminalInfo,
    private readonly pty: PtyProcess,
    private readonly log: Logger,
    private readonly onClientsChanged: (s: TerminalSession) => void,
    o: { timeoutMs?: number } = {},
  ) {
    pty.onData((chunk) => this.output(chunk));
    pty.onDrain(() => this.inputDrained());
    pty.onExit((e) => {
      this.ptyExited = true;
      if (this.killTimer) clearTimeout(this.killTimer);
      this.end(e, 'shell exited');
    });
    if (o.timeoutMs && o.timeoutMs > 0) {
      this.deadline = setTimeout(() => {
        this.log.info({ terminalId: info.id, timeoutMs: o.timeoutMs }, 'terminal deadline: killed');
        this.signal('SIGKILL');
      }, o.timeoutMs);
      this.deadline.unref();
    }
  }

  get pid(): number {
    return this.pty.pid;
  }

  get clientCount(): number {
    return this.clients.size;
  }

  /** The terminal now, as plain data. */
  state(): TerminalState {
    return {
      ...this.info,
      status: this.status,
      exit: this.exit,
      pid: this.pty.pid,
      clientCount: this.clients.size,
    };
  }

  /**
   * Adds a client: it gets `ready`, then the ring when `replay` is set or when it is the
   * first client ever (so the first prompt is not lost), then live output. A client of an
   * exited terminal gets `exit` and is closed with 1000.
   */
  attach(client: TerminalClient, opts: { replay?: boolean } = {}): TerminalAttachment {
    const noop: TerminalAttachment = { input() {}, resize() {}, written() {}, detach() {} };
    if (this.status === 'exited') {
      safe(() => client.sendControl(this.exitMessage()));
      safe(() => client.close(CLOSE.normal, 'shell exited'));
      return noop;
    }
    safe(() => client.sendControl({ type: 'ready', pid: this.pty.pid, shell: this.info.shell }));
    if ((opts.replay || !this.everAttached) && this.ring.length) safe(() => client.sendOutput(this.ring.snapshot()));
    this.everAttached = true;
    if (this.inputBlocked) safe(() => client.pauseInput?.());
    this.clients.add(client);
    this.onClientsChanged(this);
    this.flowControl();
    let attached = true;
    return {
      input: (data) => {
        if (attached) this.input(data);
      },
      resize: (cols, rows) => {
        if (!attached || this.status !== 'active' || !validSize(cols) || !validSize(rows)) return;
        safe(() => this.pty.resize(cols, rows), this.log);
      },
      written: () => this.rebalance(),
      detach: () => {
        if (!attached) return;
        attached = false;
        if (this.clients.delete(client)) {
          this.onClientsChanged(this);
          this.flowControl();
        }
      },
    };
  }

  /**
   * Input from a caller that is not a client (a request of its own). Resolves once the PTY
   * has taken it, so a caller that waits sends no more than the program reads.
   */
  write(data: Buffer | Uint8Array | string): Promise<void> {
    if (!this.input(data)) return Promise.resolve();
    return new Promise((resolve) => this.inputWaiters.push(resolve));
  }

  /** Resizes the PTY (the program gets SIGWINCH); ignores sizes outside 1..1000. */
  resize(cols: number, rows: number): void {
    if (this.status !== 'active' || !validSize(cols) || !validSize(rows)) return;
    safe(() => this.pty.resize(cols, rows), this.log);
  }

  /** Sends a signal to the program; its exit ends the terminal as usual. No-op once exited. */
  signal(sig: NodeJS.Signals): void {
    if (this.status === 'active' && !this.ptyExited) safe(() => this.pty.kill(sig), this.log);
  }

  /** Writes input; true when it is queued because the program is not reading (then every client is paused). */
  private input(data: Buffer | Uint8Array | string): boolean {
    if (this.status !== 'active') return false;
    let queued = false;
    safe(() => {
      if (this.pty.write(data)) return;
      queued = true;
      if (this.inputBlocked) return;
      // The program is not reading its input: stop reading every client until it has.
      this.inputBlocked = true;
      for (const c of this.clients) safe(() => c.pauseInput?.());
    }, this.log);
    return queued;
  }

  /**
   * Ends the terminal from outside (delete, idle cleanup, sandbox gone, shutdown) like a
   * hang-up: the shell gets SIGHUP (bash passes it on to its jobs), then SIGKILL after
   * {@link HANGUP_GRACE_MS} if it is still there. Every client gets `exit` (129, `SIGHUP`)
   * at once and is closed with `code`. Idempotent.
   */
  terminate(reason: string, code: number = CLOSE.normal): void {
    if (this.status === 'active' && !this.ptyExited) {
      safe(() => this.pty.kill('SIGHUP'), this.log);
      this.killTimer = setTimeout(() => {
        if (!this.ptyExited) safe(() => this.pty.kill('SIGKILL'), this.log);
      }, HANGUP_GRACE_MS);
      this.killTimer.unref();
    }
    this.end({ exitCode: 129, signal: 'SIGHUP' }, reason, code);
  }

  private inputDrained(): void {
    this.releaseWriters();
    if (!this.inputBlocked) return;
    this.inputBlocked = false;
    for (const c of this.clients) safe(() => c.resumeInput?.());
  }

  private releaseWriters(): void {
    const waiters = this.inputWaiters;
    this.inputWaiters = [];
    for (const w of waiters) w();
  }

  private output(chunk: Buffer): void {
    if (this.status !== 'active') return;
    this.ring.write(chunk);
    for (const c of this.clients) safe(() => c.sendOutput(chunk));
    this.rebalance();
  }

  /**
   * Drops clients more than 4 MiB behind, but only while another client keeps up (else
   * every client is behind and the PTY pauses instead), then pauses or resumes the PTY.
   */
  private rebalance(): void {
    if (this.status !== 'active') return;
    let keepingUp = false;
    for (const c of this.clients) if (c.bufferedBytes < CLIENT_HIGH_WATER_BYTES) keepingUp = true;
    if (keepingUp) for (const c of this.clients) if (c.bufferedBytes > CLIENT_MAX_BUFFER_BYTES) this.drop(c);
    this.flowControl();
  }

  private drop(c: TerminalClient): void {
    this.clients.delete(c);
    this.log.info({ terminalId: this.info.id, bufferedBytes: c.bufferedBytes }, 'terminal client dropped: too slow');
    safe(() =>
      c.close(
        CLOSE.tooSlow,
        `too slow: more than ${CLIENT_MAX_BUFFER_BYTES >> 20} MiB of output unread; reconnect with ?replay=1`,
      ),
    );
    this.onClientsChanged(this);
  }

  /** Pauses the PTY while every client is behind; resumes when one has caught up (or none is left). */
  private flowControl(): void {
    if (this.status !== 'active' || this.ending) return;
    let least = Infinity;
    for (const c of this.clients) least = Math.min(least, c.bufferedBytes);
    if (!this.paused && this.clients.size > 0 && least >= CLIENT_HIGH_WATER_BYTES) {
      this.paused = true;
      safe(() => this.pty.pause(), this.log);
    } else if (this.paused && (this.clients.size === 0 || least < CLIENT_LOW_WATER_BYTES)) {
      this.paused = false;
      safe(() => this.pty.resume(), this.log);
    }
  }

  private end(e: { exitCode: number; signal: string | null }, reason: string, code: number = CLOSE.normal): void {
    if (this.status === 'exited') return;
    // Output still queued in a paused PTY is delivered synchronously before `exit`.
    this.ending = true;
    if (this.paused) {
      this.paused = false;
      safe(() => this.pty.resume(), this.log);
    }
    this.status = 'exited';
    this.exit = { exitCode: e.exitCode, signal: e.signal };
    if (this.deadline) clearTimeout(this.deadline);
    this.releaseWriters();
    this.log.info({ terminalId: this.info.id, ...this.exit, reason }, 'terminal ended');
    const msg = this.exitMessage();
    for (const c of this.clients) {
      if (this.inputBlocked) safe(() => c.resumeInput?.()); // so the close handshake is read
      safe(() => c.sendControl(msg));
      safe(() => c.close(code, reason));
    }
    this.clients.clear();
    this.onClientsChanged(this);
  }

  private exitMessage(): ExitMessage {
    return { type: 'exit', exitCode: this.exit?.exitCode ?? 0, signal: this.exit?.signal ?? null };
  }
}

function validSize(n: unknown): n is number {
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= MAX_TERMINAL_SIZE;
}

/** Runs `fn`; a throw (a closed socket, a dead PTY) is logged, never propagated. */
function safe(fn: () => void, log?: Logger): void {
  try {
    fn();
  } catch (err) {
    log?.debug({ err }, 'terminal: ignored error');
  }
}
