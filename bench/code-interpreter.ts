/**
 * Code interpreter benchmark: sandboxd's SDK against the real server (own process, local
 * runtime), image `local/code-interpreter`, in one run:
 *
 *   create->first runCode     `Sandbox.create` then `runCode('1+1')`, timed from the create
 *                             call to the result: on a server whose warm pool holds a started
 *                             sandbox of the image (its kernel already started), and on one
 *                             without a pool (the create starts the sandbox and its server).
 *   create->first exec        the same with `exec("python3 -c 'print(1+1)'")` instead, beside it.
 *   round trip                one sandbox: `runCode('1+1')` (the relay to the in-sandbox
 *                             server, a kernel that is already running) against
 *                             `exec("python3 -c 'print(1+1)'")` (a new interpreter each time),
 *                             interleaved.
 *
 * Before each pooled create the pool holds a sandbox again (bounded wait). Env:
 * BENCH_CI_ROUNDS (creates per side, default 5, after 1 warm-up), BENCH_CI_RUNS (round
 * trips, default 30).
 */
import { Sandbox, SandboxdClient } from '../packages/sdk/src/index.js';
import { newAccount, RUNTIME, type Server, startServer } from '../test/e2e/harness.js';
import { report, summarize, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
const ROUNDS = Number(process.env.BENCH_CI_ROUNDS ?? 5);
const RUNS = Number(process.env.BENCH_CI_RUNS ?? 30);
const IMAGE = 'local/code-interpreter:latest';
const PY = "python3 -c 'print(1+1)'";

const serverEnv = (pool: string) => ({ SANDBOXD_LOG_LEVEL: 'error', SANDBOXD_WARM_POOL: pool });
const pooled = await startServer({ env: serverEnv(`${IMAGE}=1`) });
const cold = await startServer({ env: serverEnv('off') });

/** Started sandboxes of the image in `s`'s warm pool, from /metrics. */
const ready = async (s: Server) => {
  const text = await (await fetch(`${s.baseUrl}/metrics`)).text();
  const m = /sandboxd_warm_pool_ready\{image="([^"]+)"\} (\d+)/g;
  let n = 0;
  for (const x of text.matchAll(m)) if (x[1] === IMAGE) n = Number(x[2]);
  return n;
};
/** Waits (bounded: 5 min) until the pool holds a sandbox; false when it did not. */
const poolFilled = async (s: Server) => {
  for (let i = 0; i < 3000; i++) {
    if ((await ready(s)) >= 1) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
};

function check(ok: boolean, what: string): void {
  if (!ok) throw new Error(what);
}

try {
  const clientOf = async (s: Server) =>
    new SandboxdClient({ apiKey: (await newAccount(s, { tokens: 10_000_000 })).key, apiUrl: s.baseUrl });
  const clients = new Map<Server, SandboxdClient>([
    [pooled, await clientOf(pooled)],
    [cold, await clientOf(cold)],
  ]);
  const firstRun = async (s: Server, how: 'runCode' | 'exec') => {
    let sb: Sandbox | undefined;
    const ms = await timeMs(async () => {
      sb = await Sandbox.create({ image: IMAGE, timeoutMs: 600_000 }, clients.get(s));
      if (how === 'runCode') {
        const ex = await sb.runCode('1+1');
        check(ex.text === '2', `runCode('1+1'): ${JSON.stringify(ex)}`);
      } else {
        const r = await sb.exec(PY);
        check(r.stdout === '2\n', `${PY}: ${r.exitCode} ${r.stderr}`);
      }
    });
    await sb?.delete();
    return ms;
  };

  const samples = {
    pooledRunCode: [] as number[],
    coldRunCode: [] as number[],
    pooledExec: [] as number[],
    coldExec: [] as number[],
  };
  let unfilled = 0;
  for (let r = 0; r <= ROUNDS; r++) {
    const row: Record<keyof typeof samples, number> = {
      pooledRunCode: 0,
      coldRunCode: 0,
      pooledExec: 0,
      coldExec: 0,
    };
    if (!(await poolFilled(pooled))) unfilled++;
    row.pooledRunCode = await firstRun(pooled, 'runCode');
    row.coldRunCode = await firstRun(cold, 'runCode');
    if (!(await poolFilled(pooled))) unfilled++;
    row.pooledExec = await firstRun(pooled, 'exec');
    row.coldExec = await firstRun(cold, 'exec');
    if (r === 0) continue; // warm-up
    for (const k of Object.keys(row) as (keyof typeof samples)[]) samples[k].push(row[k]);
  }

  const sb = await Sandbox.create({ image: IMAGE, timeoutMs: 600_000 }, clients.get(cold));
  const rtRunCode: number[] = [];
  const rtExec: number[] = [];
  try {
    await sb.runCode('1+1');
    for (let i = 0; i < RUNS; i++) {
      rtRunCode.push(
        await timeMs(async () => {
          const ex = await sb.runCode('1+1');
          check(ex.text === '2', `runCode('1+1'): ${JSON.stringify(ex)}`);
        }),
      );
      rtExec.push(
        await timeMs(async () => {
          const r = await sb.exec(PY);
          check(r.stdout === '2\n', `${PY}: ${r.stderr}`);
        }),
      );
    }
  } finally {
    await sb.delete();
  }

  const ms = (x: number[]) => {
    const s = summarize(x);
    return { n: s.n, 'p50 ms': s.p50, 'p95 ms': s.p95, 'mean ms': s.mean };
  };
  report(
    'code-interpreter',
    [
      { what: 'create->first runCode(1+1)', server: 'pooled', ...ms(samples.pooledRunCode) },
      { what: 'create->first runCode(1+1)', server: 'cold', ...ms(samples.coldRunCode) },
      { what: `create->first exec ${PY}`, server: 'pooled', ...ms(samples.pooledExec) },
      { what: `create->first exec ${PY}`, server: 'cold', ...ms(samples.coldExec) },
      { what: 'round trip runCode(1+1)', server: '-', ...ms(rtRunCode) },
      { what: `round trip exec ${PY}`, server: '-', ...ms(rtExec) },
    ],
    {
      rounds: ROUNDS,
      runs: RUNS,
      poolNotRefilledInTime: unfilled,
      createToFirstRunCode: { pooled: summarize(samples.pooledRunCode), cold: summarize(samples.coldRunCode) },
      createToFirstExec: { pooled: summarize(samples.pooledExec), cold: summarize(samples.coldExec) },
      roundTrip: { runCode: summarize(rtRunCode), execPython: summarize(rtExec) },
    },
  );
} finally {
  await pooled.stop();
  await cold.stop();
}
