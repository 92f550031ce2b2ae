/**
 * The shape of the server's source, checked: its import graph has no cycle, and the
 * composition root (app.ts) is the only place that constructs services, the terminal
 * gateway and the port proxy. Imports are read with TypeScript's own pre-processor.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';

const SRC = import.meta.dirname;

/** Every non-test .ts file under src, relative to it. */
function sources(): string[] {
  return (readdirSync(SRC, { recursive: true }) as string[])
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && !f.endsWith('.d.ts'))
    .sort();
}

/** The files of src that `file` imports (type-only imports included: they are coupling too). */
function importsOf(file: string, all: Set<string>): string[] {
  const text = readFileSync(join(SRC, file), 'utf8');
  const out: string[] = [];
  for (const ref of ts.preProcessFile(text, true, true).importedFiles) {
    if (!ref.fileName.startsWith('.')) continue;
    const target = relative(SRC, resolve(SRC, dirname(file), ref.fileName)).replace(/\.js$/, '.ts');
    if (all.has(target)) out.push(target);
  }
  return out;
}

/** Cycles of the graph, each as the list of files around it (Tarjan's strongly connected components). */
function cycles(graph: Map<string, string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) !== idx.get(v)) return;
    const scc: string[] = [];
    for (let w = stack.pop()!; ; w = stack.pop()!) {
      onStack.delete(w);
      scc.push(w);
      if (w === v) break;
    }
    if (scc.length > 1 || graph.get(v)?.includes(v)) found.push(scc.sort());
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return found;
}

describe('server source layout', () => {
  const files = sources();
  const all = new Set(files);

  it('the import graph of packages/server/src has no cycle', () => {
    const graph = new Map(files.map((f) => [f, importsOf(f, all)]));
    assert.ok(graph.get('app.ts')!.length > 10, 'the graph is read (app.ts imports the parts)');
    assert.deepEqual(cycles(graph), []);
  });

  it('finds a cycle when there is one (the checker itself)', () => {
    const g = new Map([
      ['a.ts', ['b.ts']],
      ['b.ts', ['c.ts']],
      ['c.ts', ['a.ts']],
      ['d.ts', ['a.ts']],
    ]);
    assert.deepEqual(cycles(g), [['a.ts', 'b.ts', 'c.ts']]);
  });

  it('app.ts is the only place that constructs services, stores, rate limits, the terminal gateway and the port proxy', () => {
    const built =
      /\bnew\s+(\w+Service|TerminalGateway|PortProxy|PortAccess|SandboxTargets|PortLinks|StorageGuard|Reaper|Metrics|RateLimits|MemoryCounters|SqliteStore|FrontDoor)\s*\(|\b(PostgresStore)\.open\s*\(/g;
    const offenders: string[] = [];
    let inApp = 0;
    for (const f of files) {
      for (const m of readFileSync(join(SRC, f), 'utf8').matchAll(built)) {
        if (f === 'app.ts') inApp++;
        else offenders.push(m[1] ? `${f}: new ${m[1]}(` : `${f}: ${m[2]}.open(`);
      }
    }
    assert.deepEqual(offenders, []);
    assert.ok(inApp >= 15, `app.ts constructs the parts (${inApp} found)`);
  });
});
