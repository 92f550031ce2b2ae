/**
 * Scale-out benchmark: one `all` process on SQLite against three `api` replicas on
 * PostgreSQL over two runners on two fake hosts (test/e2e/fake-host.ts: a network namespace
 * each, reached over a veth), in the same run on the same machine. The client is plain
 * fetch with keep-alive; against the replicas it spreads requests round-robin.
 *
 *   GET      = GET /api/v1/sandboxes/{id}, 16 in flight, BENCH_GETS requests
 *   exec     = POST .../exec `true`, one at a time, BENCH_RUNS of them (the two deployments
 *              take turns in blocks of 10); "added" = p50 (replicas) - p50 (all): PostgreSQL
 *              instead of SQLite (key, record, shared rate-limit counters) and the hop to the
 *              runner (the hop alone, against its 1 ms target: bench/runner.ts)
 *   exec/s   = the same with 8 in flight, BENCH_EXECS requests
 *   create/s = create + delete of busybox sandboxes, 4 in flight, BENCH_CREATES creates
 *
 * Env: BENCH_RUNS (200), BENCH_GETS (4000), BENCH_EXECS (1000), BENCH_CREATES (40).
 */
import { randomBytes } from 'node:crypto';
import { pgBinDir, startPostgres, type TestPostgres } from '../packages/server/test/postgres.js';
import { type FakeHost, makeFakeHost } from '../test/e2e/fake-host.js';
import { newAccount, RUNTIME, type Server, startServer } from '../test/e2e/harness.js';
import { report, summarize, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
if (!pgBinDir()) throw new Error('needs PostgreSQL (scripts/setup.sh --test installs it)');
const RUNS = Number(process.env.BENCH_RUNS ?? 200);
const GETS = Number(process.env.BENCH_GETS ?? 4000);
const EXECS = Number(process.env.BENCH_EXECS ?? 1000);
const CREATES = Number(process.env.BENCH_CREATES ?? 40);
const IMAGE = 'local/busybox:latest';
const TOKEN = `bench-scale-token-${randomBytes(8).toString('hex')}`;
const runnerReady = { path: '/runner/v1/health', headers: { authorization: `Bearer ${TOKEN}` } };
// Throughput runs go past one account's default rate limit: raised, not off.
const common = {
  SANDBOXD_LOG_LEVEL: 'error',
  SANDBOXD_RATE_LIMIT_ACCOUNT_PER_SEC: '1000000',
  SANDBOXD_RATE_LIMIT_ACCOUNT_BURST: '1000000',
};

/** One deployment as a client sees it: where to send the next request, and its key. */
interface Target {
  name: string;
  next(): Server;
  key: string;
}

/** Runs `n` calls of `fn`, `inFlight` at a time; resolves with each call's ms and the wall time. */
async function load(n: number, inFlight: number, fn: (i: number) => Promise<void>) {
  const times: number[] = [];
  let i = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (let k = i++; k < n; k = i++) times.push(await timeMs(() => fn(k)));
    }),
  );
  return { times, wallMs: performance.now() - t0 };
}

async function call(t: Target, method: string, path: string, body?: unknown) {
  const r = await t.next().api(method, path, { key: t.key, body });
  if (r.status >= 300) throw new Error(`${t.name}: ${method} ${path}: ${r.status} ${r.text}`);
  return r.body;
}

const servers: Server[] = [];
const hosts: FakeHost[] = [];
let pg: TestPostgres | undefined;
try {
  const all = await startServer({ env: common });
  servers.push(all);
  pg = await startPostgres();
  const runners: Server[] = [];
  for (const node of ['bench-a', 'bench-b']) {
    const host = await makeFakeHost();
    hosts.push(host);
    const r = await startServer({
      env: { ...common, SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: TOKEN, SANDBOXD_NODE_NAME: node },
      ready: runnerReady,
      on: host,
    });
    runners.push(r);
  }
  const apiEnv = {
    ...common,
    SANDBOXD_ROLE: 'api',
    SANDBOXD_RUNNERS: runners.map((r) => r.baseUrl).join(','),
    SANDBOXD_RUNNER_TOKEN: TOKEN,
    SANDBOXD_DATABASE_URL: await pg.createDatabase(),
  };
  const replicas: Server[] = [];
  for (let i = 0; i < 3; i++) replicas.push(await startServer({ env: apiEnv }));
  servers.unshift(...replicas); // stopped before the runners
  servers.push(...runners);

  let rr = 0;
  const single: Target = {
    name: 'all + SQLite',
    next: () => all,
    key: (await newAccount(all, { plan: 'PRO', tokens: 10_000_000 })).key,
  };
  const scaled: Target = {
    name: '3 api + 2 runners + PostgreSQL',
    next: () => replicas[rr++ % replicas.length],
    key: (await newAccount(replicas[0], { plan: 'PRO', tokens: 10_000_000 })).key,
  };
  const sandboxOf = async (t: Target) =>
    (
      (await call(t, 'POST', '/api/v1/sandboxes', { image: IMAGE, timeoutMs: 3_600_000 })) as {
        sandbox: { id: string };
      }
    ).sandbox.id;
  const targets = [single, scaled];
  const ids = new Map<Target, string>();
  for (const t of targets) ids.set(t, await sandboxOf(t));
  const exec = (t: Target) => () => call(t, 'POST', `/api/v1/sandboxes/${ids.get(t)}/exec`, { command: 'true' });
  for (const t of targets) for (let i = 0; i < 20; i++) await exec(t)(); // warm connections and caches

  // exec round trip, one at a time, the two in turns.
  const lat = new Map<Target, number[]>(targets.map((t) => [t, []]));
  for (let done = 0; done < RUNS; done += 10)
    for (const t of targets) for (let i = 0; i < 10; i++) lat.get(t)!.push(await timeMs(exec(t)));

  const rows: Record<string, string | number>[] = [];
  const json: Record<string, unknown> = {};
  for (const t of targets) {
    const get = await load(GETS, 16, async () => {
      await call(t, 'GET', `/api/v1/sandboxes/${ids.get(t)}`);
    });
    const ex = await load(EXECS, 8, async () => {
      await exec(t)();
    });
    const cr = await load(CREATES, 4, async () => {
      const id = await sandboxOf(t);
      await call(t, 'DELETE', `/api/v1/sandboxes/${id}`);
    });
    const e = summarize(lat.get(t)!);
    const figures = {
      getPerSec: (GETS / get.wallMs) * 1000,
      getP50: summarize(get.times).p50,
      execP50: e.p50,
      execP99: e.p99,
      execPerSec: (EXECS / ex.wallMs) * 1000,
      createPerSec: (CREATES / cr.wallMs) * 1000,
      createDeleteP50: summarize(cr.times).p50,
    };
    json[t.name] = figures;
    rows.push({
      deployment: t.name,
      'GET/s (16 in flight)': figures.getPerSec,
      'GET p50 ms': figures.getP50,
      'exec p50 ms': figures.execP50,
      'exec p99 ms': figures.execP99,
      'exec/s (8 in flight)': figures.execPerSec,
      'create+delete/s (4 in flight)': figures.createPerSec,
    });
  }
  const added = summarize(lat.get(scaled)!).p50 - summarize(lat.get(single)!).p50;
  rows.push({
    deployment: 'added: PostgreSQL + the hop',
    'GET/s (16 in flight)': '',
    'GET p50 ms': '',
    'exec p50 ms': added,
    'exec p99 ms': '',
    'exec/s (8 in flight)': '',
    'create+delete/s (4 in flight)': '',
  });
  report('scale: one all process on SQLite vs 3 api replicas + 2 runners on PostgreSQL', rows, {
    ...json,
    execAddedP50Ms: added,
    runs: RUNS,
  });
} finally {
  for (const s of servers) await s.stop().catch((e) => console.error(`stop: ${e}`));
  for (const h of hosts) await h.remove().catch((e) => console.error(`fake host: ${e}`));
  await pg?.stop();
}
