/**
 * Snapshot benchmark (local driver, debian image):
 *
 *   snapshot  = LocalDriver.snapshot of a running sandbox that wrote 100 MiB (BENCH_SNAPSHOT_MIB)
 *               to its root: hard-link copy of the image, freeze, copy of the layer, thaw
 *   frozen    = how long the sandbox was frozen meanwhile (its freezer state polled every ~2 ms)
 *   create    = LocalDriver.create + exec `true` from that snapshot, against the same from
 *               its base image, in the same run (order alternating run by run); before each
 *               timed create the roots pool has refilled for that image (not timed), as it
 *               does between a user's creates of one image
 *
 * Env: BENCH_SNAPSHOT_RUNS (default 8), BENCH_SNAPSHOT_MIB (default 100).
 */
import { rmSync } from 'node:fs';
import { freezeAsked } from '../packages/server/src/runtime/local/bundle/freezer.js';
import { makeTestDriver } from '../packages/server/test/local-driver.js';
import { report, summarize, timeMs } from './stats.js';

const RUNS = Number(process.env.BENCH_SNAPSHOT_RUNS ?? 8);
const MIB = Number(process.env.BENCH_SNAPSHOT_MIB ?? 100);
const IMAGE = 'local/debian:bookworm';
const LIMITS = { memoryBytes: 512 * 1024 ** 2, cpus: 1, pids: 512, rootDiskBytes: 2 * 1024 ** 3 };

const { driver, dataDir, options } = makeTestDriver('snapbench');
await driver.init();
await driver.recover();
await driver.resolveImage(IMAGE);

let seq = 0;
const spec = (image: string) => ({
  id: `snapbench_${process.pid}_${seq++}`,
  image,
  env: {},
  volumes: [],
  limits: LIMITS,
});
const s = {
  snapshot: [] as number[],
  frozen: [] as number[],
  fromSnapshot: [] as number[],
  fromBase: [] as number[],
  sizeBytes: 0,
};
const refs: string[] = [];

/** Create + first exec from `image`, timed, after an untimed create that points the roots pool at it. */
const createFrom = async (image: string): Promise<number> => {
  const warm = spec(image);
  await driver.create(warm);
  await driver.delete(warm.id);
  await driver.refillPools();
  const sp = spec(image);
  const ms = await timeMs(async () => {
    await driver.create(sp);
    await driver.exec(sp.id, 'true');
  });
  await driver.delete(sp.id);
  return ms;
};

try {
  for (let i = 0; i < RUNS + 1; i++) {
    const counted = i > 0; // the first run warms caches
    const src = spec(IMAGE);
    await driver.create(src);
    const w = await driver.exec(src.id, `head -c ${MIB * 1024 * 1024} /dev/urandom > /root/data && sync`, {
      timeoutMs: 120_000,
    });
    if (w.exitCode !== 0) throw new Error(`write failed: ${w.stderr}`);
    const ref = `snapshot/bench_${process.pid}/s${i}`;
    refs.push(ref);
    let size = 0;
    // How long the sandbox is frozen: its freezer state polled every ~2 ms meanwhile.
    let frozenSince = 0;
    let frozen = 0;
    let polling = true;
    const poll = (async () => {
      while (polling) {
        const f = await freezeAsked(options.cgroupParent!, driver.containerIdOf(src.id)!);
        const now = performance.now();
        if (f && !frozenSince) frozenSince = now;
        if (!f && frozenSince) {
          frozen += now - frozenSince;
          frozenSince = 0;
        }
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
    const snap = await timeMs(async () => {
      size = (await driver.snapshot(src.id, ref)).sizeBytes;
    });
    polling = false;
    await poll;
    await driver.delete(src.id);
    const order = i % 2 === 0 ? [ref, IMAGE] : [IMAGE, ref];
    const t: Record<string, number> = {};
    for (const image of order) t[image] = await createFrom(image);
    if (counted) {
      s.snapshot.push(snap);
      s.frozen.push(frozen);
      s.fromSnapshot.push(t[ref]);
      s.fromBase.push(t[IMAGE]);
      s.sizeBytes = size;
    }
    await driver.deleteImage(ref);
  }
  const row = (name: string, xs: number[]) => {
    const x = summarize(xs);
    return { measure: name, n: x.n, p50_ms: x.p50, p95_ms: x.p95, mean_ms: x.mean };
  };
  report(
    'snapshot',
    [
      row(`snapshot (${MIB} MiB written)`, s.snapshot),
      row('  of which frozen', s.frozen),
      row('create+exec from snapshot', s.fromSnapshot),
      row('create+exec from base image', s.fromBase),
    ],
    {
      mib: MIB,
      sizeBytes: s.sizeBytes,
      snapshot: summarize(s.snapshot),
      frozen: summarize(s.frozen),
      fromSnapshot: summarize(s.fromSnapshot),
      fromBase: summarize(s.fromBase),
    },
  );
} finally {
  for (const ref of refs) await driver.deleteImage(ref).catch(() => undefined);
  await driver.destroyAll();
  rmSync(dataDir, { recursive: true, force: true });
}
