import { constants } from 'node:os';
import type { ProcessExit, StreamedProcess } from '../../driver.js';

/** What an {@link AgentProcess} sends to its agent (the agent's channel). */
export interface AgentLink {
  ack(id: number, bytes: number): void;
  stdin(id: number, data: Buffer): void;
  closeStdin(id: number): void;
  signal(id: number, signo: number): void;
}

/** Most stdin bytes handed to the agent and not yet written into the process's pipe. */
export const STDIN_WINDOW = 512 * 1024;
/** Largest STDIN frame. */
const STDIN_CHUNK = 64 * 1024;

type Output = { stream: 'stdout' | 'stderr'; chunk: Buffer };

/**
 * A streamed command run by an exec agent: its output as it comes, flow-controlled both
 * ways. Output is acknowledged to the agent once delivered to the listener, unless paused:
 * the agent then stops reading the process's pipes after a window, and the process waits
 * (a producer faster than its reader is slowed, not buffered). Stdin is sent in frames;
 * `write` returns false once a window of it is in flight, like a stream's write.
 */
export class AgentProcess implements StreamedProcess {
  private dataListener: ((stream: 'stdout' | 'stderr', chunk: Buffer) => void) | null = null;
  private readonly exitListeners: ((e: ProcessExit) => void)[] = [];
  private readonly drainListeners: (() => void)[] = [];
  /** Output that came before a listener, or while paused (not yet acknowledged). */
  private queued: Output[] = [];
  private paused = false;
  private exit: ProcessExit | null = null;
  private exitDelivered = false;
  private stdinInFlight = 0;
  private stdinState: 'open' | 'closed';

  constructor(
    private readonly link: AgentLink,
    private readonly id: number,
    readonly pid: number,
    stdin: boolean,
  ) {
    this.stdinState = stdin ? 'open' : 'closed';
  }

  get stdinOpen(): boolean {
    return this.stdinState === 'open';
  }

  onData(listener: (stream: 'stdout' | 'stderr', chunk: Buffer) => void): void {
    this.dataListener = listener;
    this.flush();
  }

  onExit(listener: (e: ProcessExit) => void): void {
    if (this.exitDelivered && this.exit) {
      listener(this.exit);
      return;
    }
    this.exitListeners.push(listener);
    this.flush();
  }

  onDrain(listener: () => void): void {
    this.drainListeners.push(listener);
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.flush();
  }

  write(data: Uint8Array): boolean {
    if (this.stdinState !== 'open') return false;
    const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    for (let off = 0; off < buf.length; off += STDIN_CHUNK) {
      const part = buf.subarray(off, off + STDIN_CHUNK);
      this.link.stdin(this.id, part);
      this.stdinInFlight += part.length;
    }
    return this.stdinInFlight < STDIN_WINDOW;
  }

  closeStdin(): void {
    if (this.stdinState !== 'open') return;
    this.stdinState = 'closed';
    this.link.closeStdin(this.id);
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    if (this.exit) return;
    const n = constants.signals[signal];
    if (n) this.link.signal(this.id, n);
  }

  // ---- from the agent's channel ----

  /** Output frame; `payload` is a view of the channel's buffer, so it is copied. */
  output(stream: 'stdout' | 'stderr', payload: Buffer): void {
    this.queued.push({ stream, chunk: Buffer.from(payload) });
    this.flush();
  }

  stdinAcked(bytes: number): void {
    const wasFull = this.stdinInFlight >= STDIN_WINDOW;
    this.stdinInFlight = Math.max(0, this.stdinInFlight - bytes);
    if (wasFull && this.stdinInFlight < STDIN_WINDOW) this.emitDrain();
  }

  /** The process closed its stdin or exited: later writes go nowhere. */
  stdinGone(): void {
    this.stdinState = 'closed';
    this.stdinInFlight = 0;
    this.emitDrain();
  }

  exited(e: ProcessExit): void {
    if (this.exit) return;
    this.exit = e;
    this.stdinState = 'closed';
    this.emitDrain();
    this.flush();
  }

  private emitDrain(): void {
    for (const l of this.drainListeners.splice(0)) l();
  }

  private flush(): void {
    if (!this.dataListener) return;
    while (!this.paused && this.queued.length > 0) {
      const o = this.queued.shift() as Output;
      this.dataListener(o.stream, o.chunk);
      if (!this.exit) this.link.ack(this.id, o.chunk.length);
    }
    if (this.exit && this.queued.length === 0 && !this.exitDelivered && this.exitListeners.length > 0) {
      this.exitDelivered = true;
      for (const l of this.exitListeners) l(this.exit);
    }
  }
}

/** The name of signal number `n` (`SIGKILL`), or null. */
export function signalName(n: number): string | null {
  for (const [name, v] of Object.entries(constants.signals)) if (v === n) return name;
  return null;
}
