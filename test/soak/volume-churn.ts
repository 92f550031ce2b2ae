/**
 * Volume creates during and right after a churn of sandboxes, through the local driver:
 * the measurement behind "creates naming volumes answered 500 right after the load phase"
 * (the cause was elsewhere: two e2e servers on one host slot, test/e2e/local-runtime.ts).
 * Kept to re-check the loop-device and volume paths when the delete path changes.
 *
 * Each round: makes `--sandboxes` sandboxes (8 at a time; a quarter with a volume of their
 * own, a quarter sharing one, each with a background process), then deletes them all while
 * creating sandboxes with volumes one after another (new names, a volume held by a live
 * sandbox, the shared one), then 10 more right after; then, `--reacquire` times, deletes the
 * last holder of a volume and at once mounts it again, reading back what the last one wrote.
 * Every create writes and syncs a file in its volume. Prints counts and every failure with
 * the driver's own message; exit status 1 on any failure. Bounded in count.
 *
 * Run: node --import tsx test/soak/volume-churn.ts [--sandboxes 200] [--rounds 3] [--reacquire 30]
 * (root, crun and the test images; SANDBOXD_TEST_IMAGE_DIR).
 */
import { rmSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { testId } from '../../packages/server/src/runtime/conformance.js';
import type { SandboxSpec } from '../../packages/server/src/runtime/driver.js';
import { makeTestDriver } from '../../packages/server/test/local-driver.js';

const { values } = parseArgs({
  options: {
    sandboxes: { type: 'string', default: '200' },
    rounds: { type: 'string', default: '3' },
    reacquire: { type: 'string', default: '30' },
  },
});
const N = Math.min(Number(values.sandboxes), 500);
const ROUNDS = Math.min(Number(values.rounds), 20);
const REACQUIRE = Math.min(Number(values.reacquire), 500);
const PARALLEL = 8;
const LIMITS = { memoryBytes: 128 * 2 ** 20, cpus: 0.5, pids: 64, rootDiskBytes: 2 ** 30 };

type Vol = SandboxSpec['volumes'][number];
const vol = (name: string, mountPath = '/data'): Vol => ({ name, mountPath, sizeGb: 0.05 });

const { driver, dataDir } = makeTestDriver('vchurn');
const spec = (volumes: Vol[]): SandboxSpec => ({
  id: testId('vc'),
  image: 'local/busybox:latest',
  env: {},
  volumes,
  limits: LIMITS,
});
const failures: string[] = [];
const counts = { made: 0, volumeCreates: 0, reacquired: 0 };

async function inParallel<T>(items: T[], fn: (t: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: PARALLEL }, async () => {
      while (next < items.length) await fn(items[next++]);
    }),
  );
}

/** A create with volumes that writes to the first one; deleted again unless `keep`. */
async function volumeCreate(tag: string, volumes: Vol[], keep = false): Promise<string | undefined> {
  counts.volumeCreates++;
  try {
    const s = await driver.create(spec(volumes));
    const r = await driver.exec(s.id, `echo '${tag}' > /data/last && sync`, { timeoutMs: 20_000 });
    if (r.exitCode !== 0) throw new Error(`write: exit ${r.exitCode} ${r.stderr}`);
    if (!keep) await driver.delete(s.id);
    return s.id;
  } catch (e) {
    failures.push(`${tag}: ${(e as Error).message}`);
  }
}

try {
  await driver.init();
  await driver.recover();
  for (let round = 0; round < ROUNDS; round++) {
    const ids: string[] = [];
    await inParallel([...Array(N).keys()], async (i) => {
      const volumes = i % 4 === 0 ? [vol(`own_${round}_${i}`)] : i % 4 === 1 ? [vol('loadshared')] : [];
      try {
        const s = await driver.create(spec(volumes));
        ids.push(s.id);
        await driver.exec(s.id, 'sleep 1000 >/dev/null 2>&1 &', { timeoutMs: 20_000 });
      } catch (e) {
        failures.push(`load create: ${(e as Error).message}`);
      }
    });
    counts.made += ids.length;
    const holder = await volumeCreate(`holder r${round}`, [vol('held')], true);
    let deleting = true;
    const deletes = inParallel(ids, async (id) => {
      await driver.delete(id).catch((e: Error) => failures.push(`load delete: ${e.message}`));
    }).finally(() => {
      deleting = false;
    });
    const kinds = (j: number) => [[vol(`new_${round}_${j}`)], [vol('held')], [vol('loadshared')]][j % 3];
    for (let j = 0; deleting && j < 200; j++) await volumeCreate(`during r${round} #${j}`, kinds(j));
    await deletes;
    for (let j = 0; j < 10; j++) await volumeCreate(`after r${round} #${j}`, kinds(j));
    if (holder) await driver.delete(holder);
  }
  // The last holder goes, and the volume is mounted again at once.
  for (let i = 0; i < REACQUIRE; i++) {
    const id = await volumeCreate(`reacquire #${i}`, [vol('again')], true);
    if (!id) continue;
    await driver.delete(id);
    try {
      const s = await driver.create(spec([vol('again')]));
      const r = await driver.exec(s.id, 'cat /data/last', { timeoutMs: 20_000 });
      if (r.stdout !== `reacquire #${i}\n`) failures.push(`reacquire #${i}: read ${JSON.stringify(r.stdout)}`);
      else counts.reacquired++;
      await driver.delete(s.id);
    } catch (e) {
      failures.push(`reacquire #${i}: ${(e as Error).message}`);
    }
  }
} finally {
  await driver.destroyAll().catch((e: Error) => failures.push(`destroyAll: ${e.message}`));
  rmSync(dataDir, { recursive: true, force: true });
}
console.log(`VOLUME-CHURN ${JSON.stringify({ ...counts, failures: failures.length })}`);
for (const f of failures.slice(0, 50)) console.log(`  ${f}`);
process.exitCode = failures.length ? 1 : 0;
