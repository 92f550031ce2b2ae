/**
 * A live process of a sandbox: its output as it comes (callbacks), its stdin, signals and
 * its exit. Made by `sandbox.exec(cmd, { background: true })` (or `stdin: true`) and
 * `sandbox.processes.connect(pid)`. Output arrives as NDJSON (`start`, `stdout`/`stderr`
 * chunks, `exit`); when the connection drops before `exit`, the handle reconnects to
 * `GET .../processes/{pid}/output?follow=true` and skips what it already delivered
 * (replay.ts has the exact rule), so callbacks see each byte once and `wait()` still ends
 * with the exit code.
 */
import { ConnectionError, SandboxdApiError } from './errors.js';
import type { ExecResult, OutputStream, ProcessExit, ProcessSignal } from './types.js';
import { lineBytes, type OutputLine } from './ndjson.js';
import { OutputRecord, ReplayAligner, type OutputChunk } from './replay.js';
import type { OutputConnection, Processes } from './processes.js';

/** Callbacks for a process's output. */
export interface ProcessOutputHandlers {
  /** Each chunk of stdout as text (UTF-8; a character split between chunks is decoded whole). */
  onStdout?: (text: string) => void;
  /** Each chunk of stderr as text. */
  onStderr?: (text: string) => void;
  /** Each chunk as raw bytes, with its stream: for binary output. */
  onOutput?: (chunk: Uint8Array, stream: OutputStream) => void;
}

/** What `wait()` keeps of each stream, like a one-shot exec; callbacks get everything. */
export const MAX_RESULT_BYTES = 1 << 20;
/** Consecutive failed reconnections before `wait()` rejects with the last error. */
const MAX_RECONNECTS = 8;
/** How long the output may pause before a replay being aligned is taken as complete. */
const QUIET_MS = 200;

function retryable(e: unknown): boolean {
  return e instanceof ConnectionError || (e instanceof SandboxdApiError && [502, 503, 504].includes(e.status));
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A process started through the API. */
export class ProcessHandle {
  private exitInfo: ProcessExit | undefined;
  private stopped: unknown;
  private following = false;
  private conn: OutputConnection | undefined;
  private quiet: ReturnType<typeof setTimeout> | undefined;
  private truncated = false;
  private lost = false;
  private stdinChain: Promise<void> = Promise.resolve();
  private readonly record = new OutputRecord();
  private readonly kept = { stdout: [] as Uint8Array[], stderr: [] as Uint8Array[] };
  private readonly keptBytes = { stdout: 0, stderr: 0 };
  private readonly decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  private readonly text = { stdout: new Set<(t: string) => void>(), stderr: new Set<(t: string) => void>() };
  private readonly raw = new Set<(b: Uint8Array, s: OutputStream) => void>();
  private readonly result: Promise<ExecResult>;
  private settle!: { resolve: (r: ExecResult) => void; reject: (e: unknown) => void };

  /** @internal Made by {@link Processes}; `signal` stops following (the process keeps running). */
  constructor(
    private readonly api: Processes,
    /** The process id inside the sandbox. */
    readonly pid: number,
    handlers: ProcessOutputHandlers = {},
    signal?: AbortSignal,
  ) {
    this.result = new Promise((resolve, reject) => (this.settle = { resolve, reject }));
    this.result.catch(() => {}); // only wait() callers see a rejection
    if (handlers.onStdout) this.text.stdout.add(handlers.onStdout);
    if (handlers.onStderr) this.text.stderr.add(handlers.onStderr);
    if (handlers.onOutput) this.raw.add(handlers.onOutput);
    if (signal?.aborted) this.stop(signal.reason);
    signal?.addEventListener('abort', () => this.stop(signal.reason), { once: true });
  }

  /** @internal Goes on reading `conn` (its `start` line already read), then reconnects as needed. */
  follow(conn?: OutputConnection): void {
    if (this.following || this.exitInfo || this.stopped !== undefined) {
      conn?.abort();
      return;
    }
    this.following = true;
    void this.run(conn);
  }

  /**
   * Resolves when the process exits: `stdout`/`stderr` hold what this handle saw (the first
   * 1 MiB of each; `truncated` when cut, or when output was lost while disconnected),
   * `exitCode` (128 + n when killed by signal n, 124 on timeout) and `success`. Starts
   * following the output if nothing did yet. Rejects when the process is gone (NotFoundError),
   * the sandbox stopped (ConflictError), reconnecting failed (ConnectionError) or after
   * `disconnect()` or the exec's abort signal.
   */
  wait(): Promise<ExecResult> {
    this.follow();
    return this.result;
  }

  /** True when a reconnection found that output written while disconnected was lost (more than the server keeps). */
  get outputLost(): boolean {
    return this.lost;
  }

  /** How the process ended, once known. */
  get exit(): ProcessExit | undefined {
    return this.exitInfo;
  }

  /** Sends a signal to the process's group (default SIGKILL). Throws ConflictError once it has exited. */
  kill(signal: ProcessSignal = 'SIGKILL'): Promise<void> {
    return this.api.signal(this.pid, signal);
  }

  /**
   * Writes to the process's stdin (it must have been started with `stdin: true`); writes
   * of one handle are sent one after another, in call order. Throws ConflictError when
   * stdin is closed or the process has exited.
   */
  sendStdin(data: string | Uint8Array): Promise<void> {
    return this.queue(() => this.api.sendStdin(this.pid, data));
  }

  /** Closes stdin after the writes already queued: the process reads EOF. */
  closeStdin(): Promise<void> {
    return this.queue(() => this.api.closeStdin(this.pid));
  }

  /** Adds a stdout listener (text); starts following the output. Returns an unsubscribe function. */
  onStdout(fn: (text: string) => void): () => void {
    return this.listen(this.text.stdout, fn);
  }

  /** Adds a stderr listener (text); starts following the output. Returns an unsubscribe function. */
  onStderr(fn: (text: string) => void): () => void {
    return this.listen(this.text.stderr, fn);
  }

  /** Adds a raw output listener (bytes and stream); starts following the output. Returns an unsubscribe function. */
  onOutput(fn: (chunk: Uint8Array, stream: OutputStream) => void): () => void {
    return this.listen(this.raw, fn);
  }

  /** Stops reading the output; the process keeps running (`processes.connect(pid)` attaches again). */
  disconnect(): void {
    if (!this.exitInfo)
      this.stop(new ConnectionError(`Process ${this.pid} was disconnected`, { status: 0, kind: 'connection' }));
  }

  private listen<F>(set: Set<F>, fn: F): () => void {
    set.add(fn);
    this.follow();
    return () => set.delete(fn);
  }

  private queue(op: () => Promise<void>): Promise<void> {
    const p = this.stdinChain.then(op);
    this.stdinChain = p.catch(() => {});
    return p;
  }

  private stop(reason: unknown): void {
    if (this.exitInfo || this.stopped !== undefined) return;
    this.stopped = reason ?? new ConnectionError(`Process ${this.pid}: stopped`, { status: 0, kind: 'connection' });
    clearTimeout(this.quiet);
    this.conn?.abort();
    this.settle.reject(this.stopped);
  }

  private async run(first?: OutputConnection): Promise<void> {
    let conn = first;
    let failures = 0;
    while (this.stopped === undefined && !this.exitInfo) {
      if (!conn) {
        if (failures > 0) await sleep(Math.min(100 * 2 ** (failures - 1), 4000));
        if (this.stopped !== undefined) return;
        try {
          conn = await this.api.openOutput(this.pid);
        } catch (e) {
          if (this.stopped !== undefined) return;
          if (retryable(e) && ++failures <= MAX_RECONNECTS) continue;
          return this.stop(e);
        }
      }
      this.conn = conn;
      if (this.stopped !== undefined) return conn.abort();
      const aligner = new ReplayAligner(this.record);
      try {
        for await (const value of conn.lines) {
          const line = value as OutputLine;
          if (this.stopped !== undefined) return;
          if (line.type === 'start') failures = 0;
          else if (line.type === 'stdout' || line.type === 'stderr') {
            this.deliverAll(aligner, aligner.push({ stream: line.type, bytes: lineBytes(line) }));
            clearTimeout(this.quiet);
            if (!aligner.aligned)
              this.quiet = setTimeout(() => this.deliverAll(aligner, aligner.settle(false)), QUIET_MS);
          } else if (line.type === 'exit') {
            clearTimeout(this.quiet);
            this.deliverAll(aligner, aligner.settle(true));
            return this.exited({
              exitCode: Number(line.exitCode),
              signal: typeof line.signal === 'string' ? line.signal : null,
            });
          }
        }
      } catch (e) {
        if (this.stopped !== undefined) return;
        if (!retryable(e) && e instanceof SandboxdApiError) return this.stop(e); // a line that is not JSON
        // Anything else is the connection breaking: reconnect.
      } finally {
        clearTimeout(this.quiet);
        conn.abort();
      }
      conn = undefined;
      failures++;
      if (failures > MAX_RECONNECTS)
        return this.stop(
          new ConnectionError(`Lost the output of process ${this.pid}`, { status: 0, kind: 'connection' }),
        );
    }
  }

  private deliverAll(aligner: ReplayAligner, chunks: OutputChunk[] | null): void {
    if (aligner.lost) {
      this.lost = true;
      this.truncated = true;
    }
    for (const c of chunks ?? []) {
      if (this.stopped !== undefined) return;
      this.deliver(c);
    }
  }

  private deliver(c: OutputChunk): void {
    if (c.bytes.byteLength === 0) return;
    this.record.add(c);
    const room = MAX_RESULT_BYTES - this.keptBytes[c.stream];
    if (room > 0) {
      const part = c.bytes.byteLength <= room ? c.bytes : c.bytes.subarray(0, room);
      this.kept[c.stream].push(part);
      this.keptBytes[c.stream] += part.byteLength;
    }
    if (c.bytes.byteLength > room) this.truncated = true;
    this.call(() => {
      for (const fn of this.raw) fn(c.bytes, c.stream);
      const listeners = this.text[c.stream];
      if (listeners.size === 0) return;
      const text = this.decoders[c.stream].decode(c.bytes, { stream: true });
      if (text) for (const fn of listeners) fn(text);
    });
  }

  /** Runs listeners; one that throws stops the handle and `wait()` rejects with its error. */
  private call(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.stop(e);
    }
  }

  private exited(exit: ProcessExit): void {
    this.call(() => {
      for (const s of ['stdout', 'stderr'] as const) {
        const rest = this.decoders[s].decode();
        if (rest && this.text[s].size) for (const fn of this.text[s]) fn(rest);
      }
    });
    if (this.stopped !== undefined) return;
    this.exitInfo = exit;
    const text = (s: OutputStream) => {
      const all = new Uint8Array(this.keptBytes[s]);
      let at = 0;
      for (const b of this.kept[s]) {
        all.set(b, at);
        at += b.byteLength;
      }
      return new TextDecoder().decode(all);
    };
    const r: ExecResult = {
      stdout: text('stdout'),
      stderr: text('stderr'),
      exitCode: exit.exitCode,
      success: exit.exitCode === 0,
    };
    if (this.truncated) r.truncated = true;
    this.settle.resolve(r);
  }
}
