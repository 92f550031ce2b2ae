/**
 * Time-to-interactive, the way public benchmarks measure sandbox services: the SDK's
 * `Sandbox.create` answered, then the first command (`python3 --version` in the default
 * image) answered. Three sides, in the same run, on the same image:
 *
 *   pooled = a server whose warm pool holds started sandboxes of the image (a create claims one)
 *   cold   = a server without a warm pool (a create starts its sandbox)
 *   floor  = bare `crun run -d` + `crun exec python3 --version` (bench/floor.ts)
 *
 * Sequential: BENCH_TTI_RUNS runs (default 100), the three sides taking turns run by run;
 * before each pooled run the pool has refilled (not timed), as it would between a user's
 * creates. Every timed run and burst starts on a quiet host (bench/stats.ts quietHost): the
 * three sides share the machine, and a run must not pay for what another side left running
 * (the pool refilling after a claim, a delete settling). Burst: BENCH_TTI_BURST creates at
 * once (default 100), each followed by its first command, with the pool sized for the burst;
 * then the same burst cold, then the floor's.
 *
 * Each burst also shows the whole host's CPU per create: a burst keeps both cores busy, so
 * its p99 follows the total work, whichever program does it.
 *
 * Targets: pooled p50 <= 0.6x the floor's and p99 <= 1x; cold within 1.3x; burst p99 no
 * worse than the floor's burst, and <= 1 s pooled.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HttpClient, Sandbox } from '../packages/sdk/src/index.js';
import { TEST_IMAGE_DIR } from '../packages/server/test/local-driver.js';
import { ImageStore } from '../packages/server/src/runtime/local/images/store.js';
import { newAccount, RUNTIME, type Server, startServer } from '../test/e2e/harness.js';
import { BareCrun } from './floor.js';
import { hostTicks, quietHost, report, summarize, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
const RUNS = Number(process.env.BENCH_TTI_RUNS ?? 100);
const BURST = Number(process.env.BENCH_TTI_BURST ?? 100);
const IMAGE = 'local/debian:bookworm';
const FIRST = 'python3 --version';
const MiB = 1024 * 1024;

const base = mkdtempSync(join(tmpdir(), 'sandboxd-tti-'));
// One plan for every side, the default plan too: the pool starts its sandboxes with its limits.
const config = join(base, 'config.json');
writeFileSync(
  config,
  JSON.stringify({
    plans: {
      BENCH: {
        maxLifetimeMs: 86_400_000,
        concurrency: BURST + 10,
        signupTokens: 0,
        limits: { memoryBytes: 512 * MiB, cpus: 1, pids: 512, rootDiskBytes: 1024 * MiB },
      },
    },
  }),
);
const serverEnv = (pool: string) => ({
  SANDBOXD_LOG_LEVEL: 'error',
  SANDBOXD_CONFIG: config,
  SANDBOXD_DEFAULT_PLAN: 'BENCH',
  SANDBOXD_WARM_POOL: pool,
  SANDBOXD_RATE_LIMIT_ACCOUNT_PER_SEC: '1000000',
  SANDBOXD_RATE_LIMIT_ACCOUNT_BURST: '1000000',
});
const pooled = await startServer({ env: serverEnv(`${IMAGE}=${BURST}`) });
const cold = await startServer({ env: serverEnv('off') });
const image = await new ImageStore({ dir: TEST_IMAGE_DIR }).resolve(IMAGE);
const floor = new BareCrun(join(base, 'floor'), image.rootfsDir);

const sdkOf = async (s: Server) => {
  const { key } = await newAccount(s, { plan: 'BENCH', tokens: 10_000_000 });
  return { http: new HttpClient({ apiUrl: s.baseUrl, apiKey: key }) };
};
const sdk = new Map<Server, Awaited<ReturnType<typeof sdkOf>>>([
  [pooled, await sdkOf(pooled)],
  [cold, await sdkOf(cold)],
]);

/** Started sandboxes in `s`'s warm pool, from /metrics. */
const ready = async (s: Server) => {
  const text = await (await fetch(`${s.baseUrl}/metrics`)).text();
  return Number(/sandboxd_warm_pool_ready\{image="local\/debian:bookworm"\} (\d+)/.exec(text)?.[1] ?? 0);
};
/** Waits (bounded: 10 min) until the pool holds `n`. */
const poolHolds = async (s: Server, n: number) => {
  for (let i = 0; i < 6000 && (await ready(s)) < n; i++) await new Promise((r) => setTimeout(r, 100));
};

const apiTti = async (s: Server) => {
  let sb: Sandbox | undefined;
  const ms = await timeMs(async () => {
    sb = await Sandbox.create({ image: IMAGE, timeoutMs: 3_600_000 }, sdk.get(s));
    const r = await sb.exec(FIRST);
    if (r.exitCode !== 0) throw new Error(`${FIRST}: ${r.exitCode} ${r.stderr}`);
  });
  return { ms, sb: sb! };
};
let seq = 0;
const floorTti = async () => {
  const id = `tti_${process.pid}_${seq++}`;
  const ms = await timeMs(async () => {
    await floor.run(id);
    await floor.exec(id, FIRST.split(' '));
  });
  return { ms, id };
};

const s = { pooled: [] as number[], cold: [] as number[], floor: [] as number[] };
const burst = { pooled: [] as number[], cold: [] as number[], floor: [] as number[] };
const burstWall = { pooled: 0, cold: 0, floor: 0 };
/**
 * CPU of the whole host during each burst, per create (ms): every program counts (the
 * servers, the runtime and its helpers, the client, the kernel's work), since a burst keeps
 * both cores busy and its p99 follows the total.
 */
const burstCpu = { pooled: 0, cold: 0, floor: 0 };
const MS_PER_TICK = 10; // USER_HZ is 100 on Linux
const cpuPerCreate = async (run: () => Promise<unknown>): Promise<number> => {
  const before = hostTicks().busy;
  await run();
  return ((hostTicks().busy - before) * MS_PER_TICK) / BURST;
};
try {
  await poolHolds(pooled, Math.min(BURST, 4));
  // Each timed run starts with the pool holding `n` and on a quiet host: it does not pay for
  // what the one before left running (a delete settling, the pool refilling after a claim),
  // whichever side that was.
  let loud = 0;
  const settled = async (n: number) => {
    await poolHolds(pooled, n);
    if (!(await quietHost())) loud++;
  };
  for (let i = 0; i < RUNS + 3; i++) {
    await settled(1);
    const p = await apiTti(pooled);
    await p.sb.delete();
    await settled(1);
    const c = await apiTti(cold);
    await c.sb.delete();
    await settled(1);
    const f = await floorTti();
    await floor.delete(f.id);
    if (i < 3) continue; // warm-up
    s.pooled.push(p.ms);
    s.cold.push(c.ms);
    s.floor.push(f.ms);
  }

  // Bursts: all at once, each create followed by its first command.
  for (const side of ['pooled', 'cold'] as const) {
    const server = side === 'pooled' ? pooled : cold;
    await settled(BURST);
    let made: { ms: number; sb: Sandbox }[] = [];
    burstCpu[side] = await cpuPerCreate(async () => {
      burstWall[side] = await timeMs(async () => {
        made = await Promise.all(Array.from({ length: BURST }, () => apiTti(server)));
      });
    });
    burst[side].push(...made.map((m) => m.ms));
    await Promise.all(made.map((m) => m.sb.delete()));
  }
  let floors: { ms: number; id: string }[] = [];
  await settled(BURST);
  burstCpu.floor = await cpuPerCreate(async () => {
    burstWall.floor = await timeMs(async () => {
      floors = await Promise.all(Array.from({ length: BURST }, floorTti));
    });
  });
  burst.floor.push(...floors.map((f) => f.ms));
  for (const f of floors) await floor.delete(f.id);

  const sf = summarize(s.floor);
  const bf = summarize(burst.floor);
  const row = (step: string, x: number[], f: ReturnType<typeof summarize>, cpu?: number) => {
    const sx = summarize(x);
    return {
      step,
      'p50 ms': sx.p50,
      'p95 ms': sx.p95,
      'p99 ms': sx.p99,
      'floor p50 ms': f.p50,
      'floor p99 ms': f.p99,
      'p50 / floor': sx.p50 / f.p50,
      'p99 / floor': sx.p99 / f.p99,
      'CPU ms per create': cpu ?? '',
    };
  };
  report(
    'time-to-interactive',
    [
      row(`sequential x${RUNS}, pooled`, s.pooled, sf),
      row(`sequential x${RUNS}, cold`, s.cold, sf),
      row(`sequential x${RUNS}, bare crun`, s.floor, sf),
      row(`burst of ${BURST}, pooled`, burst.pooled, bf, burstCpu.pooled),
      row(`burst of ${BURST}, cold`, burst.cold, bf, burstCpu.cold),
      row(`burst of ${BURST}, bare crun`, burst.floor, bf, burstCpu.floor),
    ],
    {
      image: IMAGE,
      firstCommand: FIRST,
      sequential: { runs: RUNS, pooled: summarize(s.pooled), cold: summarize(s.cold), floor: sf },
      burst: {
        size: BURST,
        pooled: summarize(burst.pooled),
        cold: summarize(burst.cold),
        floor: bf,
        wallMs: burstWall,
        cpuMsPerCreate: burstCpu,
      },
      runsNotQuiet: loud,
    },
  );
} finally {
  await pooled.stop();
  await cold.stop();
  rmSync(base, { recursive: true, force: true });
}
