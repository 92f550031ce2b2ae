/** Small statistics helpers shared by the benchmarks. */
import { readFileSync } from 'node:fs';

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

export interface Summary {
  n: number;
  p50: number;
  p95: number;
  p99: number;
  mean: number;
}

export function summarize(samples: number[]): Summary {
  const s = [...samples].sort((a, b) => a - b);
  return {
    n: s.length,
    p50: percentile(s, 50),
    p95: percentile(s, 95),
    p99: percentile(s, 99),
    mean: s.reduce((a, b) => a + b, 0) / (s.length || 1),
  };
}

/** Milliseconds taken by `fn`. */
export async function timeMs(fn: () => Promise<unknown>): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

/** Prints rows as an aligned table, then one JSON line `BENCH <name> {...}`. */
export function report(name: string, rows: Record<string, string | number>[], json: unknown): void {
  const cols = Object.keys(rows[0] ?? {});
  const fmt = (v: string | number) => (typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(2)) : v);
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => fmt(r[c]).length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padEnd(width[i])).join('  ');
  console.log(`\n## ${name}`);
  console.log(line(cols));
  console.log(line(width.map((w) => '-'.repeat(w))));
  for (const r of rows) console.log(line(cols.map((c) => fmt(r[c]))));
  console.log(`BENCH ${name} ${JSON.stringify(json)}`);
}

/** /proc/meminfo as bytes by field (MemAvailable, SUnreclaim, ...). */
export function meminfo(): Record<string, number> {
  return Object.fromEntries(
    readFileSync('/proc/meminfo', 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => {
        const [k, v] = l.split(/:\s+/);
        return [k, Number.parseInt(v, 10) * 1024];
      }),
  );
}

/** CPU time of the whole host so far, in ticks (USER_HZ) summed over every CPU: busy and in all. */
export function hostTicks(): { busy: number; total: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - f[3] - (f[4] ?? 0), total };
}

/**
 * Waits until the host is quiet: at most `maxBusy` of its CPU time busy over two windows of
 * `windowMs` in a row, so that a timed run does not pay for what an earlier one left running
 * (a server's deletes settling, a warm pool refilling). Bounded by `timeoutMs`; resolves with
 * whether it got quiet.
 */
export async function quietHost({ windowMs = 150, maxBusy = 0.15, timeoutMs = 20_000 } = {}): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  let calm = 0;
  let last = hostTicks();
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, windowMs));
    const now = hostTicks();
    const busy = (now.busy - last.busy) / Math.max(1, now.total - last.total);
    last = now;
    calm = busy <= maxBusy ? calm + 1 : 0;
    if (calm >= 2) return true;
  }
  return false;
}
