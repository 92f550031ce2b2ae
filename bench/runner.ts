/**
 * Runner benchmark: what the api -> runner hop adds to an exec round trip. Two deployments
 * in the same run, on the same host and runtime: one `all` process, and an `api` process
 * whose sandboxes live on a `runner` process (loopback, plain HTTP, keep-alive). The client
 * (fetch with keep-alive) runs `true` on one sandbox of each, taking turns in blocks of 10.
 *
 *   exec round trip = POST /api/v1/sandboxes/{id}/exec `true`, answered
 *   added           = p50 (api + runner) - p50 (all)   (target: <= 1 ms)
 *
 * Env: BENCH_RUNS (default 300).
 */
import { randomBytes } from 'node:crypto';
import { newAccount, RUNTIME, type Server, startServer } from '../test/e2e/harness.js';
import { report, summarize, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
const RUNS = Number(process.env.BENCH_RUNS ?? 300);
const TOKEN = `bench-runner-token-${randomBytes(8).toString('hex')}`;
const quiet = { SANDBOXD_LOG_LEVEL: 'error' };

const servers: Server[] = [];
try {
  const all = await startServer({ env: quiet });
  servers.push(all);
  const runner = await startServer({
    env: { ...quiet, SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: TOKEN },
    ready: { path: '/runner/v1/health', headers: { authorization: `Bearer ${TOKEN}` } },
  });
  servers.push(runner);
  const api = await startServer({
    env: { ...quiet, SANDBOXD_ROLE: 'api', SANDBOXD_RUNNERS: runner.baseUrl, SANDBOXD_RUNNER_TOKEN: TOKEN },
  });
  servers.unshift(api); // stopped before its runner

  const target = async (s: Server) => {
    const { key } = await newAccount(s, { tokens: 10_000_000, plan: 'PRO' });
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: 'local/busybox:latest' } });
    if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
    const url = `${s.baseUrl}/api/v1/sandboxes/${c.body.sandbox.id}/exec`;
    const init = {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command: 'true' }),
    };
    return async () => {
      const r = await fetch(url, init);
      if (r.status !== 200) throw new Error(`exec: ${r.status}`);
      await r.arrayBuffer();
    };
  };
  const execAll = await target(all);
  const execApi = await target(api);
  for (let i = 0; i < 20; i++) {
    await execAll();
    await execApi();
  }
  const a: number[] = [];
  const b: number[] = [];
  for (let done = 0; done < RUNS; done += 10) {
    for (let i = 0; i < 10; i++) a.push(await timeMs(execAll));
    for (let i = 0; i < 10; i++) b.push(await timeMs(execApi));
  }
  const sa = summarize(a);
  const sb = summarize(b);
  report(
    'runner: exec round trip, one all process vs api + runner',
    [
      { deployment: 'all (one process)', ...sa },
      { deployment: 'api + runner (loopback)', ...sb },
      {
        deployment: 'added by the hop',
        n: sb.n,
        p50: sb.p50 - sa.p50,
        p95: sb.p95 - sa.p95,
        p99: sb.p99 - sa.p99,
        mean: sb.mean - sa.mean,
      },
    ],
    { all: sa, apiRunner: sb, addedP50Ms: sb.p50 - sa.p50, targetMs: 1 },
  );
} finally {
  for (const s of servers) await s.stop().catch((e) => console.error(`stop: ${e}`));
}
