/**
 * Density benchmark: how many idle sandboxes one host holds, and whether creating one costs
 * the same with thousands alive as with none. The server is the real one (own process, local
 * runtime) on a network, uid range and cgroup folder of its own; sandboxes are made through
 * the API (`local/busybox:latest`, 256 MiB memory limit, 8 creates in flight) up to the
 * target count, then all deleted.
 *
 * Reported at 0, 1/4, 1/2, 3/4 of the target and near the target alive (0, 500, 1,000,
 * 1,500 and 1,900 for 2,000):
 *   create rate   creates per second over a window of creates starting there (window =
 *                 target / 20, at least 8), with their p50/p99 latency (request to answer)
 *   MiB/sandbox   host memory per sandbox: the drop of MemAvailable (/proc/meminfo) from
 *                 before the first create, the server process included, divided by the
 *                 sandboxes alive (measured with no create in flight, after 2 s); beside it
 *                 what the kernel holds unreclaimable (slab, stacks, page tables, percpu)
 *                 and the server's RSS growth, per sandbox
 * and the floor of the same run: bare `crun run -d` + `crun delete` of the busybox rootfs
 * (read-only, catatonit as PID 1, own pid/ipc/uts/mount/net namespaces; no user namespace,
 * seccomp, cgroup limits, network or disk), 8 at once, once before the first create and once
 * with the target alive. Then every sandbox is deleted through the API (8 in flight):
 * the time until the last delete answered, and until the host had released everything.
 *
 * Count: SANDBOXD_BENCH_DENSITY (or the first argument); default 200 (`npm run bench`).
 * The full run is SANDBOXD_BENCH_DENSITY=2000 (about 10 minutes and 2 GiB; it needs a
 * /20 of free addresses, 10.96.0.0/20 here, and uids 2,000,000,000 up).
 */
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { LocalDriver, type LocalDriverOptions } from '../packages/server/src/runtime/local/driver.js';
import { ImageStore } from '../packages/server/src/runtime/local/images/store.js';
import { releaseSlot, TEST_IMAGE_DIR } from '../test/e2e/local-runtime.js';
import { newAccount, RUNTIME, type Server, startServer } from '../test/e2e/harness.js';
import { BareCrun } from './floor.js';
import { meminfo, report, summarize, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
const TARGET = Number(process.argv[2] ?? process.env.SANDBOXD_BENCH_DENSITY ?? 200);
if (!Number.isInteger(TARGET) || TARGET < 8 || TARGET > 4000) throw new Error('count must be 8..4000');
const INFLIGHT = 8;
const WINDOW = Math.max(8, Math.round(TARGET / 20));
const IMAGE = 'local/busybox:latest';
const MiB = 2 ** 20;
const TIMEOUT_MS = 3_600_000;

const base = mkdtempSync(join(tmpdir(), 'sandboxd-density-'));
chmodSync(base, 0o711);
const dataDir = join(base, 'data');
mkdirSync(dataDir);
chmodSync(dataDir, 0o711);
const drv: LocalDriverOptions = {
  dataDir,
  imageDir: TEST_IMAGE_DIR,
  runDir: join(dataDir, 'run'),
  bridge: 'sbxdens',
  subnet: '10.96.0.0/20',
  uidRangeStart: 2_000_000_000,
  cgroupParent: `sandboxd-density-${process.pid}`,
};
writeFileSync(
  join(base, 'config.json'),
  JSON.stringify({
    plans: {
      DENSITY: {
        maxLifetimeMs: TIMEOUT_MS,
        concurrency: TARGET + 10,
        signupTokens: 0,
        limits: { memoryBytes: 256 * MiB, cpus: 1, pids: 256, rootDiskBytes: 256 * MiB },
      },
    },
  }),
);

const kernelUnreclaimable = (m: Record<string, number>) => m.SUnreclaim + m.KernelStack + m.PageTables + m.Percpu;
/** CPU time (user + system, ms) of process `pid` so far, with its waited-for children. */
const cpuMsOf = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 1000) / 100;
};
const rssOf = (pid: number) =>
  Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;

/** Bare crun: `n` containers created 8 at once, then deleted; the create rate. */
async function floorRun(n: number, tag: string): Promise<{ perSecond: number; p50: number; p99: number }> {
  const image = await new ImageStore({ dir: TEST_IMAGE_DIR }).resolve(IMAGE);
  // A bundle per container: crun writes its pid file into the bundle.
  const floor = new BareCrun(join(base, `floor-${tag}`), image.rootfsDir);
  const lat: number[] = [];
  let next = 0;
  const t0 = performance.now();
  try {
    await Promise.all(
      Array.from({ length: INFLIGHT }, async () => {
        while (next < n) {
          const id = `floor_${tag}_${next++}`;
          lat.push(await timeMs(() => floor.run(id)));
        }
      }),
    );
  } finally {
    const ids = (await floor.runtime.list()).map((c) => c.id);
    for (const id of ids) await floor.delete(id);
  }
  const s = summarize(lat);
  return { perSecond: n / ((performance.now() - t0) / 1000), p50: s.p50, p99: s.p99 };
}

let server: Server | undefined;
const ids: string[] = [];
try {
  server = await startServer({
    dataDir,
    env: {
      SANDBOXD_RUNTIME: 'local',
      SANDBOXD_CONFIG: join(base, 'config.json'),
      SANDBOXD_LOG_LEVEL: 'error',
      SANDBOXD_IMAGE_DIR: drv.imageDir,
      SANDBOXD_RUN_DIR: drv.runDir!,
      SANDBOXD_BRIDGE: drv.bridge!,
      SANDBOXD_SUBNET: drv.subnet!,
      SANDBOXD_UID_RANGE_START: String(drv.uidRangeStart),
      SANDBOXD_CGROUP_PARENT: drv.cgroupParent!,
      SANDBOXD_RATE_LIMIT_ACCOUNT_PER_SEC: '1000000',
      SANDBOXD_RATE_LIMIT_ACCOUNT_BURST: '1000000',
    },
  });
  const srv = server;
  const pid = srv.proc.pid!;
  const { key } = await newAccount(srv, {
    plan: 'DENSITY',
    tokens: TARGET * Math.ceil(TIMEOUT_MS / 60_000) + 1000,
  });
  const create = async (): Promise<string> => {
    const r = await srv.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, timeoutMs: TIMEOUT_MS } });
    if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
    return r.body.sandbox.id as string;
  };
  // Warm-up (image cache, pools, code paths), deleted again before the baseline.
  for (const id of await Promise.all(Array.from({ length: INFLIGHT }, create)))
    await srv.api('DELETE', `/api/v1/sandboxes/${id}`, { key });
  const floor0 = await floorRun(WINDOW, 'zero');
  await sleep(3000);
  const mem0 = meminfo();
  const rss0 = rssOf(pid);

  const checkpoints = [0, TARGET / 4, TARGET / 2, (3 * TARGET) / 4].map(Math.round);
  const rateAt = [...checkpoints, TARGET - WINDOW];
  const memAt = [...checkpoints.slice(1), TARGET];
  const lat: number[] = [];
  const done: number[] = [];
  const start: number[] = [];
  const mem = new Map<number, { avail: number; kernel: number; rss: number }>();
  /** Server CPU ms read when create `i` started (key i) and when create `i + WINDOW` started (key i + 0.5). */
  const cpuAt = new Map<number, number>();
  let made = 0;
  for (const stop of memAt) {
    await Promise.all(
      Array.from({ length: INFLIGHT }, async () => {
        while (made < stop) {
          const i = made++;
          if (rateAt.includes(i)) cpuAt.set(i, cpuMsOf(pid));
          if (rateAt.includes(i - WINDOW)) cpuAt.set(i - WINDOW + 0.5, cpuMsOf(pid));
          start[i] = performance.now();
          ids.push(await create());
          done[i] = performance.now();
          lat[i] = done[i] - start[i];
        }
      }),
    );
    if (!cpuAt.has(made - WINDOW + 0.5) && rateAt.includes(made - WINDOW)) cpuAt.set(made - WINDOW + 0.5, cpuMsOf(pid));
    await sleep(2000);
    const m = meminfo();
    mem.set(stop, {
      avail: (mem0.MemAvailable - m.MemAvailable) / stop / MiB,
      kernel: (kernelUnreclaimable(m) - kernelUnreclaimable(mem0)) / stop / MiB,
      rss: (rssOf(pid) - rss0) / stop / MiB,
    });
    console.log(`# ${stop} alive: ${mem.get(stop)!.avail.toFixed(2)} MiB per sandbox`);
  }
  const floorN = await floorRun(WINDOW, 'full');

  const rows = rateAt.map((at) => {
    const w = Array.from({ length: WINDOW }, (_, k) => at + k);
    const s = summarize(w.map((i) => lat[i]));
    const perSecond = WINDOW / ((Math.max(...w.map((i) => done[i])) - Math.min(...w.map((i) => start[i]))) / 1000);
    const m = mem.get(at === TARGET - WINDOW ? TARGET : at);
    return {
      alive: at,
      'creates/s': perSecond,
      'p50 ms': s.p50,
      'p99 ms': s.p99,
      'server CPU ms/create': ((cpuAt.get(at + 0.5) ?? Number.NaN) - (cpuAt.get(at) ?? Number.NaN)) / WINDOW,
      'MiB/sandbox (MemAvailable)': m ? m.avail : '-',
      'kernel MiB/sb': m ? m.kernel : '-',
      'server MiB/sb': m ? m.rss : '-',
    };
  });
  const floorRow = (alive: number, f: Awaited<ReturnType<typeof floorRun>>) => ({
    alive,
    'creates/s': f.perSecond,
    'p50 ms': f.p50,
    'p99 ms': f.p99,
    'server CPU ms/create': '-',
    'MiB/sandbox (MemAvailable)': 'floor: bare crun run',
    'kernel MiB/sb': '-',
    'server MiB/sb': '-',
  });

  // Delete everything: until the last delete answered, then until the host released all.
  let nextDel = 0;
  const delMs = await timeMs(() =>
    Promise.all(
      Array.from({ length: INFLIGHT }, async () => {
        while (nextDel < ids.length) {
          const id = ids[nextDel++];
          const r = await srv.api('DELETE', `/api/v1/sandboxes/${id}`, { key });
          if (r.status !== 204 && r.status !== 200) throw new Error(`delete ${id}: ${r.status} ${r.text}`);
        }
      }),
    ),
  );
  const stateDir = join(dataDir, 'sandboxes');
  const releaseMs = await timeMs(async () => {
    for (let i = 0; i < 6000 && readdirSync(stateDir).length > 0; i++) await sleep(100);
  });
  const deleted = ids.splice(0);

  report('density', [...rows, floorRow(0, floor0), floorRow(TARGET, floorN)], {
    target: TARGET,
    inFlight: INFLIGHT,
    window: WINDOW,
    rates: rows.map((r) => ({ alive: r.alive, perSecond: r['creates/s'], p50: r['p50 ms'], p99: r['p99 ms'] })),
    flatRatio: rows[rows.length - 1]['creates/s'] / rows[0]['creates/s'],
    memory: [...mem].map(([alive, m]) => ({
      alive,
      memAvailableMiBPerSandbox: m.avail,
      kernelMiBPerSandbox: m.kernel,
      serverMiBPerSandbox: m.rss,
    })),
    floor: { atZero: floor0, atTarget: floorN },
    deleteAll: { sandboxes: deleted.length, answeredMs: delMs, releasedMs: delMs + releaseMs },
  });
  report(
    'density delete',
    [
      { step: `delete ${deleted.length} (${INFLIGHT} in flight): last answer`, seconds: delMs / 1000 },
      { step: '... and everything released on the host', seconds: (delMs + releaseMs) / 1000 },
    ],
    { answeredMs: delMs, releasedMs: delMs + releaseMs },
  );
} finally {
  // Whatever is left (a failed run): the server's sandboxes stay on SIGTERM; the driver removes
  // them, the network, rules and cgroup folder.
  if (ids.length) console.log(`# removing ${ids.length} sandboxes left by a failed run`);
  await server?.kill('SIGTERM');
  await new LocalDriver(drv).destroyAll();
  releaseSlot(dataDir); // the harness's claim of a host slot (this run's network settings are its own)
  rmSync(base, { recursive: true, force: true });
}
