/**
 * Rate-limit store benchmark: what each counter store (SANDBOXD_RATE_LIMIT_STORE) costs per
 * API request, measured side by side in one run against a floor with the limits off.
 *
 * Three real servers (own processes, the fake runtime: a GET of a sandbox reads the
 * database and never the runtime, so the runtime does not matter here) differ only in
 * their rate-limit counters: `off` (every limit 0: no counter touched), `memory`, and
 * `database` (the SQLite file of the server's data dir, WAL). Limits are raised far above
 * the load, so every request is counted and none refused. Rounds take turns so drift hits
 * all three alike.
 *
 *   GET throughput   = GET /api/v1/sandboxes/{id} with 16 requests in flight (keep-alive)
 *   GET latency      = the same GET one at a time
 *   added per request = 1/throughput of the store minus that of the floor: the server's
 *                      extra time per request (it runs one request at a time on its loop)
 *   counter hit       = Counters.hitCounter in this process, memory vs SQLite (file, WAL)
 *
 * Env: BENCH_ROUNDS (default 5), BENCH_GETS (requests per round, default 4000).
 */
import { Agent, request } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryCounters } from '../packages/server/src/store/memory-counters.js';
import { SqliteStore } from '../packages/server/src/store/sqlite/store.js';
import type { Counters } from '../packages/server/src/store/store.js';
import { report, summarize, timeMs } from './stats.js';

process.env.SANDBOXD_E2E_RUNTIME = 'fake'; // read by the harness when it loads
const { newAccount, startServer } = await import('../test/e2e/harness.js');

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const GETS = Number(process.env.BENCH_GETS ?? 4000);
const INFLIGHT = 16;
const SEQUENTIAL = 500;
const HIGH = '1000000000';
const STORES = ['off', 'memory', 'database'] as const;
type Side = (typeof STORES)[number];

const envOf = (side: Side): Record<string, string> => {
  const on = side !== 'off';
  return {
    SANDBOXD_RUNTIME: 'fake',
    SANDBOXD_LOG_LEVEL: 'error',
    SANDBOXD_RATE_LIMIT_STORE: side === 'database' ? 'database' : 'memory',
    SANDBOXD_RATE_LIMIT_ACCOUNT_PER_SEC: on ? HIGH : '0',
    SANDBOXD_RATE_LIMIT_ACCOUNT_BURST: on ? HIGH : '0',
    SANDBOXD_RATE_LIMIT_IP_PER_SEC: on ? HIGH : '0',
    SANDBOXD_RATE_LIMIT_IP_BURST: on ? HIGH : '0',
  };
};

/** GET over node:http with a keep-alive agent (a client that costs little next to the server). */
function client(baseUrl: string, key: string) {
  const agent = new Agent({ keepAlive: true, maxSockets: INFLIGHT });
  const { hostname, port } = new URL(baseUrl);
  const get = (path: string) =>
    new Promise<void>((resolve, reject) => {
      const req = request({ agent, hostname, port, path, headers: { authorization: `Bearer ${key}` } }, (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`GET ${path}: ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end();
    });
  return { get, close: () => agent.destroy() };
}

const servers = await Promise.all(STORES.map((side) => startServer({ env: envOf(side) })));
const dir = mkdtempSync(join(tmpdir(), 'sandboxd-bench-counters-'));
try {
  const sides = await Promise.all(
    servers.map(async (s, i) => {
      const { key } = await newAccount(s, { tokens: 100_000 });
      const created = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: 'local/busybox:latest' } });
      if (created.status !== 201) throw new Error(`create: ${created.status} ${created.text}`);
      const path = `/api/v1/sandboxes/${created.body.sandbox.id}`;
      return { side: STORES[i], path, http: client(s.baseUrl, key) };
    }),
  );
  const perSecond: Record<Side, number[]> = { off: [], memory: [], database: [] };
  const latency: Record<Side, number[]> = { off: [], memory: [], database: [] };
  for (let round = 0; round < ROUNDS + 1; round++) {
    for (const { side, path, http } of round % 2 ? [...sides].reverse() : sides) {
      let next = 0;
      const ms = await timeMs(() =>
        Promise.all(
          Array.from({ length: INFLIGHT }, async () => {
            while (next++ < GETS) await http.get(path);
          }),
        ),
      );
      const lat: number[] = [];
      for (let i = 0; i < SEQUENTIAL / ROUNDS; i++) lat.push(await timeMs(() => http.get(path)));
      if (round === 0) continue; // warm-up
      perSecond[side].push(GETS / (ms / 1000));
      latency[side].push(...lat);
    }
  }
  for (const s of sides) s.http.close();

  // The counters alone, in this process: 100,000 hits over 1,000 keys.
  const HITS = 100_000;
  const hitCost = async (c: Counters) => {
    for (let i = 0; i < 5000; i++) await c.hitCounter(`warm${i % 100}`, 60_000, i);
    const ms = await timeMs(async () => {
      for (let i = 0; i < HITS; i++) await c.hitCounter(`account:acc_${i % 1000}`, 2000, 1_000_000 + i);
    });
    return (ms * 1000) / HITS;
  };
  const memory = new MemoryCounters();
  const sqlite = new SqliteStore(join(dir, 'bench.sqlite'));
  const hitUs = { memory: await hitCost(memory), database: await hitCost(sqlite) };
  sqlite.close();

  const median = (xs: number[]) => summarize(xs).p50;
  const floorRps = median(perSecond.off);
  const rows = STORES.map((side) => {
    const rps = median(perSecond[side]);
    const lat = summarize(latency[side]);
    return {
      store: side === 'off' ? 'off (floor)' : side,
      [`GET req/s, ${INFLIGHT} in flight`]: Math.round(rps),
      'vs floor': side === 'off' ? '-' : `${(((rps - floorRps) / floorRps) * 100).toFixed(1)} %`,
      'added us/request': side === 'off' ? 0 : (1e6 / rps - 1e6 / floorRps).toFixed(1),
      'GET p50 ms (1 at a time)': lat.p50,
      'GET p99 ms': lat.p99,
      'counter hit us (in process)': side === 'off' ? '-' : hitUs[side].toFixed(2),
    };
  });
  report('rate-limit stores', rows, {
    rounds: ROUNDS,
    getsPerRound: GETS,
    inFlight: INFLIGHT,
    runtime: 'fake',
    perSecond: Object.fromEntries(STORES.map((s) => [s, summarize(perSecond[s])])),
    latencyMs: Object.fromEntries(STORES.map((s) => [s, summarize(latency[s])])),
    addedUsPerRequest: {
      memory: 1e6 / median(perSecond.memory) - 1e6 / floorRps,
      database: 1e6 / median(perSecond.database) - 1e6 / floorRps,
    },
    counterHitUs: hitUs,
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
  await Promise.all(servers.map((s) => s.stop()));
}
