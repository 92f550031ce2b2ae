/**
 * Runner benchmark: what the api -> runner hop adds to an exec round trip, and what the
 * fleet (the api's routing over several runners) adds to it. Three deployments in the same
 * run, on the same host and runtime, none sharing a runner (a runner belongs to the api
 * processes of one database): one `all` process; an `api` process over one `runner`; an
 * `api` process over two runners (the fleet places and routes; its sandbox is on one of
 * them). Loopback, plain HTTP, keep-alive. The client (fetch with keep-alive) runs `true` on
 * one sandbox of each, taking turns in blocks of 10. Then, in this process, the fleet's own
 * routing: `FleetDriver.exec` against calling its runner's driver directly, over in-memory
 * runners (no network), so the figure is the routing alone.
 *
 *   exec round trip = POST /api/v1/sandboxes/{id}/exec `true`, answered
 *   added           = p50 (api + runners) - p50 (all)   (target: <= 1 ms)
 *   routing         = mean (fleet.exec) - mean (runner driver's exec), microseconds
 *   floors          = a bare Node HTTP round trip to another process (keep-alive, an exec's
 *                     JSON each way), and the same as a WebSocket message each way (what
 *                     unary runner calls travel on): what any hop between two processes costs
 *
 * Env: BENCH_RUNS (default 300).
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Agent, request } from 'node:http';
import WebSocket from 'ws';
import { fakeFleet, MemoryRecords } from '../packages/server/test/fake-runners.js';
import { CONFORMANCE_LIMITS } from '../packages/server/src/runtime/conformance.js';
import { RemoteDriver } from '../packages/server/src/runtime/remote/driver.js';
import { FleetDriver } from '../packages/server/src/runtime/remote/fleet/fleet.js';
import { fixedUrls } from '../packages/server/src/runtime/remote/fleet/records.js';
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
  const runnerEnv = { ...quiet, SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: TOKEN };
  const ready = { path: '/runner/v1/health', headers: { authorization: `Bearer ${TOKEN}` } };
  const runner = await startServer({ env: { ...runnerEnv, SANDBOXD_NODE_NAME: 'bench-r1' }, ready });
  servers.push(runner);
  const runner2 = await startServer({ env: { ...runnerEnv, SANDBOXD_NODE_NAME: 'bench-r2' }, ready });
  servers.push(runner2);
  const runner3 = await startServer({ env: { ...runnerEnv, SANDBOXD_NODE_NAME: 'bench-r3' }, ready });
  servers.push(runner3);
  const apiEnv = { ...quiet, SANDBOXD_ROLE: 'api', SANDBOXD_RUNNER_TOKEN: TOKEN };
  const api = await startServer({ env: { ...apiEnv, SANDBOXD_RUNNERS: runner.baseUrl } });
  servers.unshift(api); // stopped before its runners
  const api2 = await startServer({ env: { ...apiEnv, SANDBOXD_RUNNERS: `${runner2.baseUrl},${runner3.baseUrl}` } });
  servers.unshift(api2);

  const sandboxOf = async (s: Server) => {
    const { key } = await newAccount(s, { tokens: 10_000_000, plan: 'PRO' });
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: 'local/busybox:latest' } });
    if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
    return { key, id: c.body.sandbox.id as string };
  };
  const target = async (s: Server) => {
    const { key, id } = await sandboxOf(s);
    const url = `${s.baseUrl}/api/v1/sandboxes/${id}/exec`;
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
  const execFleet = await target(api2);
  for (let i = 0; i < 20; i++) {
    await execAll();
    await execApi();
    await execFleet();
  }
  const a: number[] = [];
  const b: number[] = [];
  const f: number[] = [];
  for (let done = 0; done < RUNS; done += 10) {
    for (let i = 0; i < 10; i++) a.push(await timeMs(execAll));
    for (let i = 0; i < 10; i++) b.push(await timeMs(execApi));
    for (let i = 0; i < 10; i++) f.push(await timeMs(execFleet));
  }
  const sa = summarize(a);
  const sb = summarize(b);
  const sf = summarize(f);
  const added = (x: typeof sa) => ({
    n: x.n,
    p50: x.p50 - sa.p50,
    p95: x.p95 - sa.p95,
    p99: x.p99 - sa.p99,
    mean: x.mean - sa.mean,
  });
  const routing = await routingMicros();
  const bare = await bareHttpHop();
  const bareWs = await bareWsHop();
  // A sandbox of the api over runner bench-r1 (so that api's reconciler keeps it), called from here.
  const hop = await fleetOverRemote(runner.baseUrl, (await sandboxOf(api)).id);
  report(
    'runner: exec round trip, one all process vs api + runner(s)',
    [
      { deployment: 'all (one process)', ...sa },
      { deployment: 'api + 1 runner (loopback)', ...sb },
      { deployment: 'api + 2 runners (loopback)', ...sf },
      { deployment: 'added: api + 1 runner', ...added(sb) },
      { deployment: 'added: api + 2 runners', ...added(sf) },
    ],
    {
      all: sa,
      apiRunner: sb,
      apiTwoRunners: sf,
      addedP50Ms: sb.p50 - sa.p50,
      addedTwoRunnersP50Ms: sf.p50 - sa.p50,
      targetMs: 1,
      fleetRoutingMicros: routing,
      fleetOverRemote: hop,
      bareHttpHop: bare,
      bareWsHop: bareWs,
    },
  );
  report(
    'runner: exec from this process to the runner, a RemoteDriver vs the fleet over it',
    [
      { path: 'RemoteDriver', ...hop.remote },
      { path: 'FleetDriver (2 runners) -> RemoteDriver', ...hop.fleet },
      {
        path: 'added by the fleet',
        n: hop.fleet.n,
        p50: hop.fleet.p50 - hop.remote.p50,
        p95: hop.fleet.p95 - hop.remote.p95,
        p99: hop.fleet.p99 - hop.remote.p99,
        mean: hop.fleet.mean - hop.remote.mean,
      },
    ],
    { remote: hop.remote, fleet: hop.fleet, addedP50Ms: hop.fleet.p50 - hop.remote.p50 },
  );
  console.log(
    `floor: a bare Node HTTP round trip to another process (keep-alive, an exec's JSON each way): p50 ${bare.p50.toFixed(2)} ms, p99 ${bare.p99.toFixed(2)} ms`,
  );
  console.log(
    `floor: a bare WebSocket round trip to another process (the calls socket's transport, an exec's JSON each way): p50 ${bareWs.p50.toFixed(2)} ms, p99 ${bareWs.p99.toFixed(2)} ms`,
  );
  console.log(
    `fleet routing alone (in process, no network): ${routing.fleetMicros.toFixed(2)} us per exec through the fleet vs ${routing.directMicros.toFixed(2)} us on the runner's driver: ${routing.addedMicros.toFixed(2)} us added`,
  );
} finally {
  for (const s of servers) await s.stop().catch((e) => console.error(`stop: ${e}`));
}

/**
 * An exec on sandbox `id` of the real runner at `url` (node bench-r1), from this process:
 * through a RemoteDriver to it, and through a FleetDriver whose members are RemoteDrivers (it
 * and a second, silent URL; the records say where `id` lives), taking turns in blocks of 10:
 * what the fleet's routing adds on the real hop.
 */
async function fleetOverRemote(url: string, id: string) {
  const remote = new RemoteDriver({ url, token: TOKEN });
  const records = new MemoryRecords();
  records.sandboxes.set(id, 'bench-r1');
  const fleet = new FleetDriver({
    source: fixedUrls([url, 'http://127.0.0.1:9']),
    connect: (u) => new RemoteDriver({ url: u, token: TOKEN }),
    records,
    downAfterMs: 5000,
    floors: { memoryBytes: 0, diskBytes: 0 },
    log: { info() {}, warn() {} },
  });
  await fleet.init();
  try {
    for (let i = 0; i < 20; i++) {
      await remote.exec(id, 'true');
      await fleet.exec(id, 'true');
    }
    const r: number[] = [];
    const f: number[] = [];
    for (let done = 0; done < RUNS; done += 10) {
      for (let i = 0; i < 10; i++) r.push(await timeMs(() => remote.exec(id, 'true')));
      for (let i = 0; i < 10; i++) f.push(await timeMs(() => fleet.exec(id, 'true')));
    }
    return { remote: summarize(r), fleet: summarize(f) };
  } finally {
    await fleet.close();
    await remote.close();
  }
}

/** Mean microseconds of an exec through a FleetDriver of two in-memory runners against the runner's driver directly. */
async function routingMicros(): Promise<{ fleetMicros: number; directMicros: number; addedMicros: number }> {
  const { fleet, runners } = await fakeFleet({ 'http://r1:1': 'r1', 'http://r2:1': 'r2' });
  const s = await fleet.create({
    id: 'bench_fleet',
    image: 'local/busybox:latest',
    env: {},
    volumes: [],
    limits: CONFORMANCE_LIMITS,
  });
  const direct = runners.connect((await runners.ids('http://r1:1')).includes(s.id) ? 'http://r1:1' : 'http://r2:1');
  const N = 20_000;
  const time = async (fn: () => Promise<unknown>) => {
    for (let i = 0; i < 2000; i++) await fn();
    const t = process.hrtime.bigint();
    for (let i = 0; i < N; i++) await fn();
    return Number(process.hrtime.bigint() - t) / 1e3 / N;
  };
  let fleetMicros = 0;
  let directMicros = 0;
  for (let round = 0; round < 3; round++) {
    directMicros += (await time(() => direct.exec(s.id, 'true'))) / 3;
    fleetMicros += (await time(() => fleet.exec(s.id, 'true'))) / 3;
  }
  await fleet.close();
  return { fleetMicros, directMicros, addedMicros: fleetMicros - directMicros };
}

/** 100 round trips of `one` to warm up, then {@link RUNS} timed ones. */
async function warmThenTime(one: () => Promise<void>) {
  for (let i = 0; i < 100; i++) await one();
  const t: number[] = [];
  for (let i = 0; i < RUNS; i++) t.push(await timeMs(one));
  return summarize(t);
}

/**
 * The floor of the hop: a POST with an exec call's JSON to a minimal Node HTTP server in
 * another process, answered with an exec result's JSON, over one keep-alive connection.
 */
async function bareHttpHop() {
  const server = `
    require('node:http').createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const t = JSON.stringify({ result: { stdout: '', stderr: '', exitCode: 0 } });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(t) });
        res.end(t);
      });
    }).listen(0, '127.0.0.1', function () { process.send(this.address().port); });`;
  const child = fork('-e', [server], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      child.once('message', (m) => resolve(Number(m)));
      child.once('exit', (code) => reject(new Error(`the bare server exited (${code})`)));
    });
    const agent = new Agent({ keepAlive: true });
    const body = JSON.stringify({ args: ['sbx_0123456789abcdefghij', 'true', { timeoutMs: 60000 }] });
    const one = () =>
      new Promise<void>((resolve, reject) => {
        const req = request(
          {
            host: '127.0.0.1',
            port,
            method: 'POST',
            path: '/runner/v1/exec',
            agent,
            headers: { 'content-type': 'application/json' },
          },
          (res) => {
            res.resume();
            res.on('end', resolve);
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    const summary = await warmThenTime(one);
    agent.destroy();
    return summary;
  } finally {
    child.kill();
  }
}

/** The same as {@link bareHttpHop} as one WebSocket message each way (`ws`, as the calls socket). */
async function bareWsHop() {
  const server = `
    const { WebSocketServer } = require('ws');
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
    wss.on('connection', (ws) => ws.on('message', (m) => {
      const { id } = JSON.parse(m);
      ws.send(JSON.stringify({ id, result: { stdout: '', stderr: '', exitCode: 0 } }));
    }));
    wss.on('listening', () => process.send(wss.address().port));`;
  const child = fork('-e', [server], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      child.once('message', (m) => resolve(Number(m)));
      child.once('exit', (code) => reject(new Error(`the bare server exited (${code})`)));
    });
    const ws = new WebSocket(`ws://127.0.0.1:${port}`, { perMessageDeflate: false });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    let answer: () => void = () => undefined;
    ws.on('message', () => answer());
    let id = 0;
    const one = () =>
      new Promise<void>((resolve) => {
        answer = resolve;
        ws.send(
          JSON.stringify({
            id: ++id,
            method: 'exec',
            args: ['sbx_0123456789abcdefghij', 'true', { timeoutMs: 60000 }],
          }),
        );
      });
    const summary = await warmThenTime(one);
    ws.close();
    return summary;
  } finally {
    child.kill();
  }
}
