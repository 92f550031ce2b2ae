import type { PtyProcess } from '../driver.js';
import { runFakeCommand, type FakeShellContext } from './shell.js';

/**
 * A fake shell on a fake PTY: echoes typed input, runs each line with the fake shell when
 * Enter arrives, answers `stty size` from the current size, and exits on `exit N`.
 */
export class FakePty implements PtyProcess {
  private readonly dataListeners: Array<(chunk: Buffer) => void> = [];
  private readonly exitListeners: Array<(e: { exitCode: number; signal: string | null }) => void> = [];
  private line = '';
  private exited = false;
  private queue: Promise<void> = Promise.resolve();

  constructor(
    readonly pid: number,
    private readonly ctx: FakeShellContext & { tty: { cols: number; rows: number } },
  ) {
    setImmediate(() => this.emit('$ '));
  }

  /** Never queues: the fake shell takes input at once. */
  onDrain(): void {}

  write(data: string | Uint8Array): boolean {
    if (this.exited) return true;
    for (const c of typeof data === 'string' ? data : Buffer.from(data).toString()) {
      if (c === '\r' || c === '\n') {
        const cmd = this.line;
        this.line = '';
        this.emit('\r\n');
        this.queue = this.queue.then(() => this.run(cmd));
      } else {
        this.line += c;
        this.emit(c);
      }
    }
    return true;
  }

  private async run(cmd: string): Promise<void> {
    if (this.exited) return;
    const r = await runFakeCommand(cmd, { ...this.ctx, timeoutMs: 60_000 });
    this.emit((r.stdout + r.stderr).replace(/\n/g, '\r\n'));
    const last = cmd.split(';').at(-1) ?? '';
    if (/^\s*kill -9\b/.test(last)) return this.finish(r.exitCode, 'SIGKILL');
    if (/^\s*exit\b/.test(last)) return this.finish(r.exitCode, null);
    this.emit('$ ');
  }

  resize(cols: number, rows: number): void {
    this.ctx.tty.cols = cols;
    this.ctx.tty.rows = rows;
  }
  onData(listener: (chunk: Buffer) => void): void {
    this.dataListeners.push(listener);
  }
  onExit(listener: (e: { exitCode: number; signal: string | null }) => void): void {
    this.exitListeners.push(listener);
  }
  pause(): void {}
  resume(): void {}
  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    this.finish(128 + (signal === 'SIGKILL' ? 9 : 15), signal);
  }

  private emit(s: string): void {
    if (!s) return;
    const b = Buffer.from(s);
    for (const l of this.dataListeners) l(b);
  }
  private finish(exitCode: number, signal: string | null): void {
    if (this.exited) return;
    this.exited = true;
    setImmediate(() => {
      for (const l of this.exitListeners) l({ exitCode, signal });
    });
  }
}
