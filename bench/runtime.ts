/**
 * Runtime benchmark: the local driver against the floor of bare crun on the same image, in
 * the same run, interleaved so machine drift hits both alike.
 *
 *   floor  = `crun run -d` of the shared read-only image rootfs with catatonit as PID 1,
 *            then `crun exec true` (no user namespace, network, seccomp, limits or disk),
 *            both started through the spawner as the driver starts its programs
 *   driver = LocalDriver.create (user namespace, own netns on the bridge, seccomp, cgroup
 *            limits, size-capped copy-on-write root) then exec `true`
 *
 * Env: BENCH_RUNS (default 50), BENCH_ALIVE (default 200).
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { memoryUsage } from '../packages/server/src/runtime/local/bundle/cgroup-fs.js';
import { makeTestDriver } from '../packages/server/test/local-driver.js';
import { BareCrun } from './floor.js';
import { meminfo, report, summarize, timeMs } from './stats.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 50);
const ALIVE = Number(process.env.BENCH_ALIVE ?? 200);
const LIMITS = { memoryBytes: 2 * 1024 ** 3, cpus: 1, pids: 512, rootDiskBytes: 10 * 1024 ** 3 };

const { driver, dataDir, options } = makeTestDriver('bench');
await driver.init();
await driver.recover();
const image = await driver.images.resolve('local/busybox:latest');

const floor = new BareCrun(join(dataDir, 'floor'), image.rootfsDir);
const bareExec = (id: string) => floor.exec(id);

const s = {
  floorCreate: [] as number[],
  driverCreate: [] as number[],
  floorExec: [] as number[],
  driverExec: [] as number[],
  floorDelete: [] as number[],
  driverDelete: [] as number[],
};
const spec = (i: number) => ({
  id: `bench_${process.pid}_${i}`,
  image: 'local/busybox:latest',
  env: {},
  volumes: [],
  limits: LIMITS,
});

try {
  for (let i = 0; i < RUNS + 3; i++) {
    const warm = i < 3; // first runs warm caches and are not counted
    const fid = `floor_${process.pid}_${i}`;
    const fc = await timeMs(async () => {
      await floor.run(fid);
      await bareExec(fid);
    });
    const fe = await timeMs(() => bareExec(fid));
    const fd = await timeMs(() => floor.delete(fid));
    const sp = spec(i);
    const dc = await timeMs(async () => {
      await driver.create(sp);
      await driver.exec(sp.id, 'true');
    });
    const de = await timeMs(() => driver.exec(sp.id, 'true'));
    const dd = await timeMs(() => driver.delete(sp.id));
    if (warm) continue;
    s.floorCreate.push(fc);
    s.floorExec.push(fe);
    s.floorDelete.push(fd);
    s.driverCreate.push(dc);
    s.driverExec.push(de);
    s.driverDelete.push(dd);
  }

  const memAvailable = () => meminfo().MemAvailable;
  const kernelBefore = meminfo();
  const before = memAvailable();
  const alive: string[] = [];
  for (let i = 0; i < ALIVE; i++) {
    const sp = spec(10_000 + i);
    await driver.create(sp);
    alive.push(sp.id);
  }
  await new Promise((r) => setTimeout(r, 2000));
  const after = memAvailable();
  const kernelAfter = meminfo();
  let cgroupBytes = 0;
  for (const id of alive) cgroupBytes += memoryUsage(options.cgroupParent!, id).currentBytes ?? 0;
  const MiB = 1024 * 1024;
  const hostPerSandbox = (before - after) / ALIVE / MiB;
  const cgroupPerSandbox = cgroupBytes / ALIVE / MiB;
  const aliveDelete = await timeMs(async () => {
    for (const id of alive) await driver.delete(id);
  });

  const rows = [
    row('create -> first exec', s.driverCreate, s.floorCreate),
    row('exec round trip (true)', s.driverExec, s.floorExec),
    row('delete', s.driverDelete, s.floorDelete),
  ];
  report('runtime', rows, {
    runs: RUNS,
    createToFirstExec: { driver: summarize(s.driverCreate), floor: summarize(s.floorCreate) },
    exec: { driver: summarize(s.driverExec), floor: summarize(s.floorExec) },
    delete: { driver: summarize(s.driverDelete), floor: summarize(s.floorDelete) },
    idle: { sandboxes: ALIVE, deleteAllMs: aliveDelete },
  });
  const kernel = (k: string) => (kernelAfter[k] - kernelBefore[k]) / ALIVE / MiB;
  const kernelPerSandbox = kernel('SUnreclaim') + kernel('KernelStack') + kernel('PageTables') + kernel('Percpu');
  report(
    'idle sandboxes',
    [
      { measure: 'sandbox cgroup memory (its processes, page cache)', 'MiB / sandbox': cgroupPerSandbox },
      { measure: 'kernel: unreclaimable slab + stacks + page tables + percpu', 'MiB / sandbox': kernelPerSandbox },
      { measure: 'total', 'MiB / sandbox': cgroupPerSandbox + kernelPerSandbox },
      { measure: `(machine-wide MemAvailable drop; other processes move it)`, 'MiB / sandbox': hostPerSandbox },
    ],
    {
      sandboxes: ALIVE,
      totalMiBPerSandbox: cgroupPerSandbox + kernelPerSandbox,
      cgroupMiBPerSandbox: cgroupPerSandbox,
      kernelMiBPerSandbox: kernelPerSandbox,
      memAvailableDropMiBPerSandbox: hostPerSandbox,
    },
  );
} finally {
  for (const c of await floor.runtime.list()) await floor.delete(c.id);
  await driver.destroyAll();
  rmSync(dataDir, { recursive: true, force: true });
}

function row(step: string, d: number[], f: number[]): Record<string, string | number> {
  const sd = summarize(d);
  const sf = summarize(f);
  return {
    step,
    'driver p50 ms': sd.p50,
    'driver p99 ms': sd.p99,
    'floor p50 ms': sf.p50,
    'floor p99 ms': sf.p99,
    'ratio p50': sd.p50 / sf.p50,
  };
}
