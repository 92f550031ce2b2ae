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
