/** Keep-alive events of a stream: one after every `intervalMs` without another event. */
export interface KeepAlive<T> {
  intervalMs: number;
  event(): T;
}

/**
 * The events of one server stream, between a producer that pushes them (a process's
 * follower, a terminal's client) and the Connect writer that pulls them with
 * {@link events} (it pulls the next only once the last was handed to the socket, so the
 * queue grows while the client does not read). It counts the bytes it holds: `push`
 * returns false at `highWater` or above (the producer should pause), and `onDrained`
 * runs whenever an event is taken, with the bytes left (the producer resumes).
 */
export class EventQueue<T> {
  private readonly items: Array<{ ev: T; bytes: number }> = [];
  private held = 0;
  private ended = false;
  private failure: { error: unknown } | null = null;
  private wake: (() => void) | null = null;

  constructor(
    private readonly o: { highWater: number; onDrained?: (buffered: number) => void } = { highWater: Infinity },
  ) {}

  /** Bytes held (the producer's side of backpressure). */
  get buffered(): number {
    return this.held;
  }

  /** Queues an event of `bytes` bytes; false when the queue is at its high-water mark. Ignored once ended. */
  push(ev: T, bytes = 0): boolean {
    if (this.ended) return true;
    this.items.push({ ev, bytes });
    this.held += bytes;
    this.poke();
    return this.held < this.o.highWater;
  }

  /** No more events: the stream ends after those queued. */
  end(): void {
    this.ended = true;
    this.poke();
  }

  /** The stream fails with `error` after the events queued. */
  fail(error: unknown): void {
    if (this.ended) return;
    this.failure = { error };
    this.end();
  }

  /**
   * The queued events, as they come, until the queue ends (or fails: the error is thrown
   * after the events before it). Throws `signal.reason` as soon as `signal` aborts (the
   * client went, or the call's deadline passed).
   */
  async *events(signal: AbortSignal, keepalive?: KeepAlive<T>): AsyncGenerator<T> {
    for (;;) {
      const item = this.items.shift();
      if (item) {
        this.held -= item.bytes;
        if (item.bytes > 0) this.o.onDrained?.(this.held);
        yield item.ev;
        continue;
      }
      if (this.failure) throw this.failure.error;
      if (this.ended) return;
      if (!(await this.next(signal, keepalive?.intervalMs)) && keepalive) yield keepalive.event();
    }
  }

  /** Waits for an event or the end (true), or `timeoutMs` (false); throws when `signal` aborts. */
  private next(signal: AbortSignal, timeoutMs?: number): Promise<boolean> {
    signal.throwIfAborted();
    return new Promise<boolean>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (r: () => void) => {
        this.wake = null;
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        r();
      };
      const onAbort = () => done(() => reject(signal.reason));
      this.wake = () => done(() => resolve(true));
      if (timeoutMs !== undefined) timer = setTimeout(() => done(() => resolve(false)), timeoutMs);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  private poke(): void {
    this.wake?.();
  }
}
