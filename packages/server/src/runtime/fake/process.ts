import type { ExecResult, ProcessExit, StreamedProcess } from '../driver.js';

/**
 * A {@link StreamedProcess} over a fake command: its whole output comes at once when it
 * ends. Enough for services' unit tests; streaming itself is proven on the real runtime.
 */
export class FakeStreamedProcess implements StreamedProcess {
  private dataListener: ((stream: 'stdout' | 'stderr', chunk: Buffer) => void) | null = null;
  private readonly exitListeners: ((e: ProcessExit) => void)[] = [];
  private result: ExecResult | null = null;
  private killed: NodeJS.Signals | null = null;
  private paused = false;
  private delivered = false;
  readonly stdinOpen = false;

  constructor(
    readonly pid: number,
    run: Promise<ExecResult>,
  ) {
    void run.then((r) => {
      this.result = r;
      this.deliver();
    });
  }

  onData(listener: (stream: 'stdout' | 'stderr', chunk: Buffer) => void): void {
    this.dataListener = listener;
    this.deliver();
  }
  onExit(listener: (e: ProcessExit) => void): void {
    this.exitListeners.push(listener);
    this.deliver();
  }
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
    this.deliver();
  }
  write(): boolean {
    return false;
  }
  onDrain(): void {}
  closeStdin(): void {}
  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    this.killed ??= signal;
  }

  private deliver(): void {
    const r = this.result;
    if (!r || this.delivered || this.paused || !this.dataListener || this.exitListeners.length === 0) return;
    this.delivered = true;
    if (r.stdout) this.dataListener('stdout', Buffer.from(r.stdout));
    if (r.stderr) this.dataListener('stderr', Buffer.from(r.stderr));
    const exit: ProcessExit = this.killed
      ? { exitCode: 137, signal: 'SIGKILL', timedOut: false }
      : { exitCode: r.exitCode, signal: null, timedOut: r.timedOut };
    for (const l of this.exitListeners) l(exit);
  }
}
