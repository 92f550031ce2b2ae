/**
 * Lifecycle latencies of the local driver (no HTTP): pause and resume (cgroup freezer) of a
 * sandbox running a busy loop, and start of a stopped sandbox (its kept root layer mounted
 * again) against a cold create and against bare `crun run` (bench/floor.ts), in the same run
 * on the same image. Each "+ first command" column adds the first `echo` answered.
 *
 * BENCH_LIFECYCLE_RUNS rounds (default 30) after 3 warm-up rounds. Targets: pause and
 * resume p50 <= 5 ms; start of a stopped sandbox no slower than a cold create.
 *
 * Snapshot timings (100 MiB written; create from a snapshot against its base image) are
 * bench/snapshot.ts's, run next by `npm run bench`.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { makeTestDriver, TEST_IMAGE_DIR } from '../packages/server/test/local-driver.js';
import type { SandboxSpec } from '../packages/server/src/runtime/driver.js';
import { ImageStore } from '../packages/server/src/runtime/local/images/store.js';
import { BareCrun } from './floor.js';
import { report, summarize, timeMs } from './stats.js';

const RUNS = Number(process.env.BENCH_LIFECYCLE_RUNS ?? 30);
const WARMUP = 3;
const IMAGE = 'local/busybox:latest';
const LIMITS = { memoryBytes: 256 << 20, cpus: 1, pids: 128, rootDiskBytes: 256 << 20 };

/** Timed steps: a name and its samples in ms. */
type Samples = Record<string, number[]>;

const { driver, dataDir } = makeTestDriver('lcbench');
await driver.init();
await driver.recover();
const image = await new ImageStore({ dir: TEST_IMAGE_DIR }).resolve(IMAGE);
const floor = new BareCrun(join(dataDir, 'floor'), image.rootfsDir);
let seq = 0;
const spec = (): SandboxSpec => ({
  id: `lcb_${process.pid}_${seq++}`,
  image: IMAGE,
  env: {},
  volumes: [],
  limits: LIMITS,
});

const samples: Samples = {
  pause: [],
  resume: [],
  stop: [],
  'start (stopped)': [],
  'start (stopped) + first command': [],
  'create (cold)': [],
  'create (cold) + first command': [],
  'bare crun run': [],
  'bare crun run + first command': [],
};
const add = (i: number, k: string, ms: number) => {
  if (i >= WARMUP) samples[k].push(ms);
};

try {
  // Pause / resume: one sandbox with a busy loop and a few processes in it.
  const busy = await driver.create(spec());
  await driver.execBackground(busy.id, "sh -c 'i=0; while true; do i=$((i+1)); done' &");
  await driver.execBackground(busy.id, 'sleep 100000 & sleep 100000 &');
  for (let i = 0; i < RUNS + WARMUP; i++) {
    add(i, 'pause', await timeMs(() => driver.pause(busy.id)));
    add(i, 'resume', await timeMs(() => driver.resume(busy.id)));
  }
  await driver.delete(busy.id);

  // Stop / start of one sandbox vs cold creates vs bare crun, taking turns.
  const kept = await driver.create(spec());
  await driver.exec(kept.id, 'echo data > /root/f');
  for (let i = 0; i < RUNS + WARMUP; i++) {
    add(i, 'stop', await timeMs(() => driver.stop(kept.id)));
    let ms = await timeMs(() => driver.start(kept.id, { limits: LIMITS }));
    add(i, 'start (stopped)', ms);
    ms += await timeMs(() => driver.exec(kept.id, 'echo ok'));
    add(i, 'start (stopped) + first command', ms);

    const s = spec();
    ms = await timeMs(() => driver.create(s));
    add(i, 'create (cold)', ms);
    ms += await timeMs(() => driver.exec(s.id, 'echo ok'));
    add(i, 'create (cold) + first command', ms);
    await driver.delete(s.id);

    const fid = `lcf_${process.pid}_${i}`;
    ms = await timeMs(() => floor.run(fid));
    add(i, 'bare crun run', ms);
    ms += await timeMs(() => floor.exec(fid, ['echo', 'ok']));
    add(i, 'bare crun run + first command', ms);
    await floor.delete(fid);
  }
  if ((await driver.exec(kept.id, 'cat /root/f')).stdout !== 'data\n') throw new Error('the kept layer lost a file');
  await driver.delete(kept.id);

  const cold = summarize(samples['create (cold)']).p50;
  report(
    'lifecycle',
    Object.entries(samples)
      .filter(([, x]) => x.length)
      .map(([step, x]) => {
        const s = summarize(x);
        return { step, 'p50 ms': s.p50, 'p95 ms': s.p95, 'p99 ms': s.p99, 'p50 / cold create': s.p50 / cold };
      }),
    {
      image: IMAGE,
      runs: RUNS,
      ...Object.fromEntries(Object.entries(samples).map(([k, x]) => [k, summarize(x)])),
    },
  );
} finally {
  await driver.destroyAll();
  rmSync(dataDir, { recursive: true, force: true });
}
