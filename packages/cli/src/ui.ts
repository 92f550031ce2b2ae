/**
 * Terminal output of `sbx`: colour (only on a TTY, never with NO_COLOR), tables, sizes,
 * relative times, the one-line error format and the hidden key prompt.
 */
import type { WriteStream } from 'node:tty';

/** An error meant for the user: printed as `error: <message>`, exit code `exitCode`. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/** True when `stream` is a TTY and neither NO_COLOR nor `--no-color` says otherwise. */
export function colorEnabled(stream: NodeJS.WriteStream): boolean {
  if (process.argv.includes('--no-color')) return false;
  if (process.env.NO_COLOR !== undefined && process.env.NO_COLOR !== '') return false;
  if (process.env.FORCE_COLOR !== undefined && process.env.FORCE_COLOR !== '0') return true;
  return Boolean((stream as WriteStream).isTTY);
}

type Paint = (s: string) => string;
/** ANSI styles that do nothing when colour is off. */
export interface Palette {
  bold: Paint;
  dim: Paint;
  red: Paint;
  green: Paint;
  yellow: Paint;
  cyan: Paint;
}

/** A palette for `stream`. */
export function palette(stream: NodeJS.WriteStream): Palette {
  const on = colorEnabled(stream);
  const sgr =
    (open: number, close: number): Paint =>
    (s) =>
      on ? `\x1b[${open}m${s}\x1b[${close}m` : s;
  return {
    bold: sgr(1, 22),
    dim: sgr(2, 22),
    red: sgr(31, 39),
    green: sgr(32, 39),
    yellow: sgr(33, 39),
    cyan: sgr(36, 39),
  };
}

// eslint-disable-next-line no-control-regex
// biome-ignore lint/suspicious/noControlCharactersInRegex: ESC starts the ANSI sequences this strips
const ANSI = /\x1b\[[0-9;]*m/g;
const width = (s: string) => s.replace(ANSI, '').length;

/** Rows under a bold header, columns padded to their widest cell (cells may carry colour). */
export function table(header: string[], rows: string[][], p: Palette): string {
  const widths = header.map((h, i) => Math.max(width(h), ...rows.map((r) => width(r[i] ?? ''))));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c + ' '.repeat(widths[i] - width(c))))
      .join('  ')
      .trimEnd();
  return `${[p.bold(line(header)), ...rows.map(line)].join('\n')}\n`;
}

/** `1536` -> `1.5 KiB`. */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

/** A duration as `45s`, `12m`, `3h`, `2d`. */
export function formatDuration(ms: number): string {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 90) return `${s}s`;
  if (s < 90 * 60) return `${Math.round(s / 60)}m`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}

/** `in 9m` or `3m ago`, relative to now. */
export function relative(iso: string, now = Date.now()): string {
  const d = Date.parse(iso) - now;
  return d >= 0 ? `in ${formatDuration(d)}` : `${formatDuration(d)} ago`;
}

/** Parses `600000`, `90s`, `10m`, `1h` into ms. Throws CliError. */
export function parseDuration(text: string, what = 'duration'): number {
  const m = /^(\d+)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new CliError(`${what} must be milliseconds or a number with s, m or h (got "${text}")`);
  const mult = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 'ms') as 'ms' | 's' | 'm' | 'h'];
  const v = Number(m[1]) * mult;
  if (!Number.isSafeInteger(v)) throw new CliError(`${what} is too large`);
  return v;
}

/** For repeatable options: collects values into an array. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** Parses `K=V` pairs (the value may hold `=`; a key given twice keeps the last); `flag` names the option in errors. Throws CliError. */
export function parsePairs(pairs: string[], flag: string): Record<string, string> | undefined {
  if (pairs.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const i = p.indexOf('=');
    if (i <= 0) throw new CliError(`${flag} must be KEY=VALUE (got "${p}")`);
    out[p.slice(0, i)] = p.slice(i + 1);
  }
  return out;
}

/** Parses `--env K=V` pairs. Throws CliError. */
export function parseEnv(pairs: string[]): Record<string, string> | undefined {
  return parsePairs(pairs, '--env');
}

/** Writes a JSON document to stdout. */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/**
 * Reads a secret from the terminal without echo (Ctrl-C aborts), or one line from piped stdin.
 * `trim: false` keeps spaces at the ends (secret values).
 */
export async function promptSecret(question: string, opts: { trim?: boolean } = {}): Promise<string> {
  const trim = (v: string) => (opts.trim === false ? v : v.trim());
  const stdin = process.stdin;
  if (!stdin.isTTY) {
    let data = '';
    for await (const chunk of stdin) data += chunk;
    return trim(data.split('\n')[0].replace(/\r$/, ''));
  }
  stdin.setRawMode(true); // before the prompt: keys typed right after it must not echo
  process.stderr.write(question);
  stdin.resume();
  stdin.setEncoding('utf8');
  try {
    return await new Promise<string>((resolve, reject) => {
      let value = '';
      const onData = (s: string) => {
        for (const ch of s) {
          if (ch === '\r' || ch === '\n') return done(() => resolve(trim(value)));
          if (ch === '\u0003') return done(() => reject(new CliError('cancelled', 130)));
          if (ch === '\u007f' || ch === '\b') value = value.slice(0, -1);
          else if (ch >= ' ') value += ch;
        }
      };
      const done = (fn: () => void) => {
        stdin.off('data', onData);
        fn();
      };
      stdin.on('data', onData);
    });
  } finally {
    stdin.setRawMode(false);
    stdin.pause();
    process.stderr.write('\n');
  }
}
