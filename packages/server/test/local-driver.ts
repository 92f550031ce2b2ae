import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { LocalDriver, type LocalDriverOptions } from '../src/runtime/local/driver.js';
import {
  hostSnapshot,
  loopDetach,
  loopsUnder,
  snapshotDiff,
  unmountUnder,
  type HostSnapshot,
} from '../src/runtime/local/rootfs/mounts.js';

/** The image cache shared by test runs (built by `npm test`'s set-up). */
export const TEST_IMAGE_DIR =
  process.env.SANDBOXD_TEST_IMAGE_DIR ?? resolve(import.meta.dirname, '../../../.sandboxd-test/images');

/**
 * A LocalDriver on temp dirs with its own bridge, subnet, uid range and cgroup folder, so
 * test files never collide with each other or with a running server. Call
 * `driver.destroyAll()` and remove `dataDir` when done.
 */
export function makeTestDriver(
  tag: string,
  over: Partial<LocalDriverOptions> = {},
): { driver: LocalDriver; options: LocalDriverOptions; dataDir: string; runDir: string } {
  const base = mkdtempSync(join(tmpdir(), `sbxd-${tag}-`));
  chmodSync(base, 0o711); // sandboxes' user namespaces must traverse it
  const dataDir = join(base, 'data');
  const runDir = join(base, 'run');
  // Salted with the pid so two runs of one test file at once get different bridges.
  const n = [...`${tag}/${process.pid}`].reduce((a, c) => (a * 31 + c.charCodeAt(0)) % 200, 7);
  const options: LocalDriverOptions = {
    dataDir,
    runDir,
    imageDir: TEST_IMAGE_DIR,
    bridge: `sbxt${n}`,
    subnet: `10.91.${n}.0/24`,
    uidRangeStart: 10_000_000 + n * 100 * 65536,
    cgroupParent: `sandboxd-test-${tag}-${n}`,
    ...over,
  };
  return { driver: new LocalDriver(options), options, dataDir: base, runDir };
}

/**
 * Test teardown for storage tests: unmounts and detaches everything under `root`, removes
 * it, and fails if the host gained mounts or loop devices there since `snap`. Changes made
 * meanwhile by other processes are printed, not failed on.
 */
export async function removeAndCheckLeaks(root: string, snap: HostSnapshot): Promise<void> {
  await unmountUnder(root).catch(() => undefined);
  await loopDetach((await loopsUnder(root).catch(() => [])).map((l) => l.device)).catch(() => undefined);
  rmSync(root, { recursive: true, force: true });
  const d = snapshotDiff(snap, await hostSnapshot(), root);
  if (d.others.length) console.log(`# other host activity meanwhile (not ours):\n# ${d.others.join('\n# ')}`);
  assert.deepEqual(d.mine, [], 'mounts or loop devices leaked');
}
