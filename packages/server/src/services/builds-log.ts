import { StringDecoder } from 'node:string_decoder';
import type { Logger } from 'pino';
import type { Clock } from '../domain/clock.js';
import type { BuildLogCap, BuildLogLine, Store } from '../store/store.js';

/** A build's log holds at most this many lines or bytes; one more line says the rest was cut. */
export const BUILD_LOG_CAP: BuildLogCap = {
  maxLines: 100_000,
  maxBytes: 16 * 2 ** 20,
  cutText: 'The log reached its limit (100000 lines or 16 MiB): later output of this build is not kept',
};

/** Output without a newline is cut into lines of at most this many bytes. */
const MAX_LINE_BYTES = 16 * 1024;
/** Lines are written in batches: this long after the first of a batch, or at once past {@link BATCH_LINES}. */
const BATCH_MS = 100;
const BATCH_LINES = 500;
/** What a failure keeps of a step's output: its last 4 KiB. */
export const OUTPUT_TAIL_BYTES = 4096;

type Line = Omit<BuildLogLine, 'seq'>;

/**
 * Wakes the readers that follow a build's log in this process when lines or its state are
 * written ({@link BuildLogWriter} and the builds service call `notify`); readers of builds
 * that run on another server poll the store instead.
 */
export class BuildLogNotifier {
  private readonly waiting = new Map<string, Set<() => void>>();

  notify(buildId: string): void {
    const set = this.waiting.get(buildId);
    if (!set) return;
    this.waiting.delete(buildId);
    for (const wake of set) wake();
  }

  /** Wakes every waiting reader (a shutdown). */
  wakeAll(): void {
    for (const id of [...this.waiting.keys()]) this.notify(id);
  }

  /** Resolves at the next `notify(buildId)`, after `ms`, or when `signal` aborts, whichever comes first. */
  wait(buildId: string, ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      let set = this.waiting.get(buildId);
      if (!set) {
        set = new Set();
        this.waiting.set(buildId, set);
      }
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        const s = this.waiting.get(buildId);
        s?.delete(done);
        if (s?.size === 0) this.waiting.delete(buildId);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener('abort', done, { once: true });
      set.add(done);
    });
  }
}

/**
 * The log of one running build: the builder's own lines (`system`) and the output of its
 * steps, split into lines (UTF-8 decoded across chunks; a line without a newline is cut at
 * 16 KiB), written to the store in batches in order. Also keeps the tail of the current
 * step's output for its failure. Store failures are logged and the lines dropped: a build
 * never fails for its log.
 */
export class BuildLogWriter {
  private pending: Line[] = [];
  private timer: NodeJS.Timeout | null = null;
  private chain: Promise<void> = Promise.resolve();
  private readonly decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  private readonly partial = { stdout: '', stderr: '' };
  private tail = '';

  constructor(
    private readonly d: {
      store: Pick<Store, 'appendBuildLogs'>;
      clock: Clock;
      log: Logger;
      notifier: BuildLogNotifier;
    },
    readonly buildId: string,
  ) {}

  /** A line of the builder's own (`Step 2/5 : RUN ...`, `CACHED`). */
  system(text: string, step?: number): void {
    this.push({ time: this.d.clock.now(), ...(step !== undefined ? { step } : {}), stream: 'system', text });
  }

  /** Output of step `step`'s process. */
  output(stream: 'stdout' | 'stderr', chunk: Buffer, step: number): void {
    const text = this.decoders[stream].write(chunk);
    this.keepTail(text);
    this.split(stream, this.partial[stream] + text, step);
  }

  /** The end of step `step`'s output: what is left without a newline becomes a line. */
  endOutput(step: number): void {
    for (const stream of ['stdout', 'stderr'] as const) {
      const end = this.decoders[stream].end();
      this.keepTail(end);
      const rest = this.partial[stream] + end;
      this.partial[stream] = '';
      if (rest) this.push({ time: this.d.clock.now(), step, stream, text: rest });
    }
  }

  /** The last 4 KiB of the output since {@link resetTail}. */
  outputTail(): string {
    return this.tail;
  }

  resetTail(): void {
    this.tail = '';
  }

  /** Resolves once every line pushed so far is written (or dropped for a store failure). */
  flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const lines = this.pending;
    this.pending = [];
    if (lines.length) {
      this.chain = this.chain.then(async () => {
        try {
          await this.d.store.appendBuildLogs(this.buildId, lines, BUILD_LOG_CAP);
        } catch (err) {
          this.d.log.warn({ err, buildId: this.buildId, lines: lines.length }, 'writing build log lines failed');
        }
        this.d.notifier.notify(this.buildId);
      });
    }
    return this.chain;
  }

  private split(stream: 'stdout' | 'stderr', text: string, step: number): void {
    let start = 0;
    for (;;) {
      const nl = text.indexOf('\n', start);
      if (nl < 0) break;
      this.push({ time: this.d.clock.now(), step, stream, text: text.slice(start, nl).replace(/\r$/, '') });
      start = nl + 1;
    }
    let rest = text.slice(start);
    while (Buffer.byteLength(rest) > MAX_LINE_BYTES) {
      // Cut at a character boundary at or below the byte limit.
      let cut = Math.min(rest.length, MAX_LINE_BYTES);
      while (Buffer.byteLength(rest.slice(0, cut)) > MAX_LINE_BYTES) cut = Math.floor(cut * 0.9);
      this.push({ time: this.d.clock.now(), step, stream, text: rest.slice(0, cut) });
      rest = rest.slice(cut);
    }
    this.partial[stream] = rest;
  }

  private keepTail(text: string): void {
    this.tail += text;
    if (this.tail.length > OUTPUT_TAIL_BYTES * 2) this.tail = this.tail.slice(-OUTPUT_TAIL_BYTES * 2);
  }

  private push(l: Line): void {
    this.pending.push(l);
    if (this.pending.length >= BATCH_LINES) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), BATCH_MS);
  }
}

/** The last `OUTPUT_TAIL_BYTES` bytes of `text` (whole characters). */
export function lastBytes(text: string, max = OUTPUT_TAIL_BYTES): string {
  const b = Buffer.from(text);
  if (b.length <= max) return text;
  return b
    .subarray(b.length - max)
    .toString('utf8')
    .replace(/^\uFFFD+/, '');
}
