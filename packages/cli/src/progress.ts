/**
 * Progress of long work on stderr: a spinner line with sizes on a TTY, one line per phase
 * otherwise (so logs and pipes stay readable).
 */
import { formatBytes, palette } from './ui.js';

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/** What a progress report says: a phase and, when known, bytes so far and in total. */
export interface ProgressState {
  phase: string;
  bytes?: number;
  totalBytes?: number;
}

/** Renders a bar like `[#####-----] 50%` for `done` of `total`. */
function bar(done: number, total: number): string {
  const n = 20;
  const filled = Math.max(0, Math.min(n, Math.round((done / total) * n)));
  return `[${'#'.repeat(filled)}${'-'.repeat(n - filled)}] ${Math.floor((done / total) * 100)}%`;
}

/** A progress display for one job, titled e.g. `pull docker.io/library/alpine:3`. */
export class ProgressLine {
  private readonly tty = Boolean(process.stderr.isTTY);
  private readonly p = palette(process.stderr);
  private state: ProgressState = { phase: 'starting' };
  private lastPhase = '';
  private frame = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly t0 = Date.now();

  constructor(private readonly title: string) {
    if (this.tty) {
      this.timer = setInterval(() => this.render(), 100);
      this.timer.unref();
    }
  }

  /** Records a report; prints a new line on a phase change when not on a TTY. */
  update(s: ProgressState): void {
    this.state = s;
    if (this.tty) {
      this.render();
      return;
    }
    if (s.phase !== this.lastPhase) {
      this.lastPhase = s.phase;
      process.stderr.write(`${this.title}: ${s.phase}${this.sizes()}\n`);
    }
  }

  /** Ends the display, leaving `message` (if any) as the final line. */
  stop(message?: string, ok = true): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.tty) process.stderr.write('\r\x1b[2K');
    if (message) process.stderr.write(`${ok ? this.p.green('✔') : this.p.red('✖')} ${message}\n`);
  }

  private sizes(): string {
    const { bytes, totalBytes } = this.state;
    if (bytes === undefined) return '';
    if (totalBytes) return ` ${formatBytes(bytes)} / ${formatBytes(totalBytes)}`;
    return ` ${formatBytes(bytes)}`;
  }

  private render(): void {
    const { bytes, totalBytes } = this.state;
    const secs = ((Date.now() - this.t0) / 1000).toFixed(0);
    const meter = bytes !== undefined && totalBytes ? ` ${bar(bytes, totalBytes)}` : '';
    const line = `${this.p.cyan(FRAMES[this.frame++ % FRAMES.length])} ${this.title}: ${this.state.phase}${this.sizes()}${meter} ${this.p.dim(`${secs}s`)}`;
    const cols = process.stderr.columns || 80;
    process.stderr.write(`\r\x1b[2K${line.length > cols + 20 ? line.slice(0, cols + 20) : line}`);
  }
}
