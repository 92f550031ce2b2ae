/**
 * API benchmark: what the HTTP API adds on top of the runtime, measured side by side in the
 * same run. The server is the real one (own process, local runtime); the floor is the same
 * driver called directly from this process on the same host, making sandboxes with the
 * same limits (the bench account's plan), the two taking turns run by run.
 *
 * The client is the SDK, as users run it (in Node its JSON requests go over node:http with
 * keep-alive); the exec round trip is also shown with plain fetch, which costs more per call.
 *
 *   time-to-interactive = Sandbox.create answered, then the first exec answered
 *   exec round trip     = exec `true` over HTTP (SDK, and fetch) vs driver.exec, in turn in
 *                         blocks of 10, on one running sandbox each, after the pools refilled
 *   GET throughput      = GET /sandboxes/{id} with 16 requests in flight, for a fixed count
 *
 * Env: BENCH_RUNS (default 50).
 */
import { rmSync } from 'node:fs';
import { HttpClient, Sandbox } from '../packages/sdk/src/index.js';
import { DEFAULT_PLANS } from '../packages/server/src/config.js';
import { makeTestDriver } from '../packages/server/test/local-driver.js';
import { newAccount, RUNTIME, startServer } from '../test/e2e/harness.js';
import { report, summarize, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
const RUNS = Number(process.env.BENCH_RUNS ?? 50);
const PARALLEL = 10;
const IMAGE = 'local/busybox:latest';
// The floor makes the same sandboxes as the API does for the bench's account: PRO's limits.
const PLAN = 'PRO';
const LIMITS = DEFAULT_PLANS[PLAN].limits;

// The GET throughput run goes past one account's default rate limit (1,000/s): raised, not off,
// so the limiter's own cost stays in the figure.
const server = await startServer({
  env: {
    SANDBOXD_RUNTIME: 'local',
    SANDBOXD_LOG_LEVEL: 'error',
    SANDBOXD_RATE_LIMIT_ACCOUNT_PER_SEC: '1000000',
    SANDBOXD_RATE_LIMIT_ACCOUNT_BURST: '1000000',
  },
});
const { driver, dataDir } = makeTestDriver('apibench');
await driver.init();
await driver.recover();
const { key } = await newAccount(server, { plan: PLAN, tokens: 100_000 });
const sdk = { http: new HttpClient({ apiUrl: server.baseUrl, apiKey: key }) };
/** The same request with fetch and no SDK (the harness's client). */
const fetchApi = async (method: string, path: string, body?: unknown) => {
  const r = await server.api(method, path, { key, body });
  if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${r.text}`);
  return r.body;
};

const apiTti = async () => {
  let sb: Sandbox | undefined;
  const ms = await timeMs(async () => {
    sb = await Sandbox.create({ image: IMAGE, timeoutMs: 600_000 }, sdk);
    await sb.exec('true');
  });
  return { ms, sb: sb! };
};
let seq = 0;
const driverTti = async () => {
  const id = `apibench_${process.pid}_${seq++}`;
  const ms = await timeMs(async () => {
    await driver.create({ id, image: IMAGE, env: {}, volumes: [], limits: LIMITS });
    await driver.exec(id, 'true');
  });
  return { ms, id };
};

const s = {
  apiTti: [] as number[],
  rtTti: [] as number[],
  apiExec: [] as number[],
  fetchExec: [] as number[],
  rtExec: [] as number[],
  apiPar: [] as number[],
  rtPar: [] as number[],
};
try {
  // The sides take turns, each create following the other side's delete (whose teardown the
  // kernel partly finishes in the background).
  const apiSide = async () => {
    const a = await apiTti();
    await a.sb.delete();
    return a.ms;
  };
  const driverSide = async () => {
    const r = await driverTti();
    await driver.delete(r.id);
    return r.ms;
  };
  for (let i = 0; i < RUNS + 2; i++) {
    const a = await apiSide();
    const r = await driverSide();
    if (i < 2) continue; // warm-up
    s.apiTti.push(a);
    s.rtTti.push(r);
  }
  // Exec in steady state: one sandbox each, after the pools refilled (a refill is work in
  // the process that made the sandbox, and this process is also the HTTP client).
  {
    const a = await Sandbox.create({ image: IMAGE, timeoutMs: 600_000 }, sdk);
    const r = `apibench_${process.pid}_exec`;
    await driver.create({ id: r, image: IMAGE, env: {}, volumes: [], limits: LIMITS });
    await new Promise((res) => setTimeout(res, 1000));
    // In blocks of 10, so each side runs warm as a client would, and drift hits both.
    for (let block = 0; block < Math.ceil(RUNS / 10) + 1; block++) {
      for (let i = 0; i < 10; i++) {
        const ms = await timeMs(() => a.exec('true'));
        if (block > 0) s.apiExec.push(ms);
      }
      for (let i = 0; i < 10; i++) {
        const ms = await timeMs(() => fetchApi('POST', `/api/v1/sandboxes/${a.id}/exec`, { command: 'true' }));
        if (block > 0) s.fetchExec.push(ms);
      }
      for (let i = 0; i < 10; i++) {
        const ms = await timeMs(() => driver.exec(r, 'true'));
        if (block > 0) s.rtExec.push(ms);
      }
    }
    await a.delete();
    await driver.delete(r);
  }
  for (let round = 0; round < Math.max(1, Math.round(RUNS / PARALLEL)); round++) {
    const a = await Promise.all(Array.from({ length: PARALLEL }, apiTti));
    for (const x of a) {
      s.apiPar.push(x.ms);
      await x.sb.delete();
    }
    const r = await Promise.all(Array.from({ length: PARALLEL }, driverTti));
    for (const x of r) {
      s.rtPar.push(x.ms);
      await driver.delete(x.id);
    }
  }

  const target = await Sandbox.create({ image: IMAGE }, sdk);
  const GETS = 4000;
  const INFLIGHT = 16;
  let next = 0;
  const getMs = await timeMs(() =>
    Promise.all(
      Array.from({ length: INFLIGHT }, async () => {
        while (next++ < GETS) await target.refresh();
      }),
    ),
  );
  await target.delete();

  const row = (step: string, a: number[], r: number[]) => {
    const sa = summarize(a);
    const sr = summarize(r);
    return {
      step,
      'api p50 ms': sa.p50,
      'api p99 ms': sa.p99,
      'runtime p50 ms': sr.p50,
      'runtime p99 ms': sr.p99,
      'added p50 ms': sa.p50 - sr.p50,
    };
  };
  report(
    'api',
    [
      row('time-to-interactive, sequential', s.apiTti, s.rtTti),
      row(`time-to-interactive, ${PARALLEL}-way parallel`, s.apiPar, s.rtPar),
      row('exec round trip (true)', s.apiExec, s.rtExec),
      row('exec round trip (true), fetch', s.fetchExec, s.rtExec),
    ],
    {
      runs: RUNS,
      ttiSequential: { api: summarize(s.apiTti), runtime: summarize(s.rtTti) },
      ttiParallel: { parallel: PARALLEL, api: summarize(s.apiPar), runtime: summarize(s.rtPar) },
      exec: { api: summarize(s.apiExec), fetch: summarize(s.fetchExec), runtime: summarize(s.rtExec) },
      getThroughput: { requests: GETS, inFlight: INFLIGHT, perSecond: GETS / (getMs / 1000) },
    },
  );
  report(
    'api GET throughput',
    [{ measure: `GET /sandboxes/{id}, ${INFLIGHT} in flight`, 'requests/s': GETS / (getMs / 1000) }],
    { perSecond: GETS / (getMs / 1000) },
  );
} finally {
  await driver.destroyAll();
  rmSync(dataDir, { recursive: true, force: true });
  await server.stop();
}
