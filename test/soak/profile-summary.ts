/**
 * Summarises a V8 .cpuprofile (from `load.ts --cpu-profile DIR`): self time by function and by
 * module (npm package, node internals, this repo's files), and inclusive time of the frames
 * named on the command line. Run: node --import tsx test/soak/profile-summary.ts FILE [name...]
 */
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: Node[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export function summarise(p: Profile, names: string[] = [], top = 40): string {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++)
    self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const where = (n: Node) => {
    const u = n.callFrame.url;
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(u);
    if (m) return m[1];
    if (u.startsWith('node:')) return u.split('/').slice(0, 2).join('/');
    if (u.includes('/packages/') || u.includes('/test/')) return u.replace(/^.*\/(packages|test)\//, '$1/');
    return u || `(${n.callFrame.functionName || 'native'})`;
  };
  const fn = new Map<string, number>();
  const mod = new Map<string, number>();
  for (const [id, ms] of self) {
    const n = byId.get(id)!;
    const k = `${n.callFrame.functionName || '(anonymous)'} ${where(n)}:${n.callFrame.lineNumber + 1}`;
    fn.set(k, (fn.get(k) ?? 0) + ms);
    const mk = where(n).replace(/^(packages\/[^/]+\/src\/[^/]+).*/, '$1');
    mod.set(mk, (mod.get(mk) ?? 0) + ms);
  }
  const pct = (ms: number) => `${((ms / total) * 100).toFixed(1).padStart(5)}%  ${ms.toFixed(0).padStart(7)} ms`;
  const out: string[] = [
    `profile: ${(total / 1000).toFixed(1)} s of samples over ${((p.endTime - p.startTime) / 1e6).toFixed(1)} s wall`,
  ];
  out.push('\nself time by module:');
  for (const [k, v] of [...mod].sort((a, b) => b[1] - a[1]).slice(0, 25)) out.push(`  ${pct(v)}  ${k}`);
  out.push('\nself time by function:');
  for (const [k, v] of [...fn].sort((a, b) => b[1] - a[1]).slice(0, top)) out.push(`  ${pct(v)}  ${k}`);
  for (const name of names) {
    let incl = 0;
    for (const [id, ms] of self) {
      for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
        const f = byId.get(cur)!.callFrame;
        if (`${f.functionName} ${f.url}`.includes(name)) {
          incl += ms;
          break;
        }
      }
    }
    out.push(`inclusive "${name}": ${pct(incl)}`);
  }
  return out.join('\n');
}

if (process.argv[1]?.endsWith('profile-summary.ts')) {
  const [file, ...names] = process.argv.slice(2);
  if (!file) {
    console.log('Usage: node --import tsx test/soak/profile-summary.ts FILE.cpuprofile [frame-name...]');
    process.exit(2);
  }
  console.log(summarise(JSON.parse(readFileSync(file, 'utf8')) as Profile, names));
}
