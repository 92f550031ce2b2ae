/**
 * Progress of long work on stderr: a spinner line with sizes on a TTY, one line per phase
 * otherwise (so logs and pipes stay readable).
 */
import { formatBytes, type Palette, palette } from './ui.js';

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

/** The part of a stream the build display writes to (stderr; a fake in tests). */
export interface DisplayStream {
  write(s: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

/** `Step 3/7 : RUN apt-get update`: the builder's line that starts a step. */
const STEP_LINE = /^Step (\d+)\/(\d+) : (.*)$/;

/**
 * What `sbx build` shows while a build runs: its log lines as they come and, on a TTY, a
 * status line under them (`⠋ [3/7] RUN apt-get update  12s`) that each new line pushes
 * down. Without a TTY, the log lines only (the builder's own `Step n/m : ...` lines say
 * where it is).
 */
export class BuildDisplay {
  private readonly tty: boolean;
  private readonly p: Palette;
  private status = 'sending the context';
  private frame = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly t0 = Date.now();
  private drawn = false;
  /** Steps of the build, once known. */
  private total = 0;
  /** Steps the log said were cached. */
  cached = 0;

  constructor(
    private readonly out: DisplayStream = process.stderr,
    private readonly quiet = false,
  ) {
    this.tty = Boolean(out.isTTY);
    this.p = palette(out as NodeJS.WriteStream);
    if (this.tty) {
      this.timer = setInterval(() => this.render(), 100);
      this.timer.unref();
    }
  }

  /** Bytes of context sent so far (shown at the next tick: chunks come faster than a terminal wants them). */
  uploaded(bytes: number): void {
    this.status = `sending the context ${formatBytes(bytes)}`;
  }

  /** The server accepted the build. */
  started(id: string, image: string, steps: number): void {
    this.write(this.p.dim(`build ${id} of ${image}, ${steps} step${steps === 1 ? '' : 's'}`));
    this.total = steps;
    this.setStatus(`[0/${steps}] queued`);
  }

  /** A log line: printed (unless quiet), and the status follows the builder's step lines. */
  log(text: string, stream: 'stdout' | 'stderr' | 'system', step?: number): void {
    const t = text.replace(/\r?\n$/, '');
    const m = stream === 'system' ? STEP_LINE.exec(t) : null;
    if (m) {
      this.total = Number(m[2]);
      this.setStatus(`[${m[1]}/${m[2]}] ${m[3]}`);
    } else if (stream === 'system' && /\bCACHED\b/.test(t)) this.cached++;
    else if (step !== undefined && this.total && !this.status.startsWith(`[${step}/`))
      this.setStatus(`[${step}/${this.total}] step ${step}`);
    if (this.quiet) return;
    this.write(stream === 'system' ? (m ? this.p.bold(t) : this.p.dim(t)) : stream === 'stderr' ? this.p.yellow(t) : t);
  }

  /** Ends the display, leaving `message` (if any) as the final line. */
  stop(message?: string, ok = true): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.clear();
    if (message) this.out.write(`${ok ? this.p.green('✔') : this.p.red('✖')} ${message}\n`);
  }

  /** Time since the display began, as `12s`. */
  elapsed(): string {
    return formatSeconds(Date.now() - this.t0);
  }

  private setStatus(s: string): void {
    this.status = s;
    if (this.tty) this.render();
  }

  private write(line: string): void {
    this.clear();
    this.out.write(`${line}\n`);
    if (this.tty) this.render();
  }

  private clear(): void {
    if (this.tty && this.drawn) this.out.write('\r\x1b[2K');
    this.drawn = false;
  }

  private render(): void {
    if (!this.timer) return;
    const cols = this.out.columns || 80;
    const secs = ` ${this.elapsed()}`;
    let text = this.status;
    if (text.length + secs.length + 2 > cols) text = `${text.slice(0, Math.max(0, cols - secs.length - 3))}…`;
    this.out.write(`\r\x1b[2K${this.p.cyan(FRAMES[this.frame++ % FRAMES.length])} ${text}${this.p.dim(secs)}`);
    this.drawn = true;
  }
}

/** `12s`, `3m04s`. */
function formatSeconds(ms: number): string {
  const s = Math.floor(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}
