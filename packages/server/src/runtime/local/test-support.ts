import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { LocalDriver, type LocalDriverOptions } from './driver.js';

/** The image cache shared by test runs (built by `npm test`'s set-up). */
export const TEST_IMAGE_DIR = process.env.SANDBOXD_TEST_IMAGE_DIR ?? resolve(import.meta.dirname, '../../../../../.sandboxd-test/images');

/**
 * A LocalDriver on temp dirs with its own bridge, subnet, uid range and cgroup folder, so
 * test files never collide with each other or with a running server. Call
 * `driver.destroyAll()` and remove `dataDir` when done.
 */
export function makeTestDriver(tag: string, over: Partial<LocalDriverOptions> = {}): { driver: LocalDriver; dataDir: string; runDir: string } {
  const base = mkdtempSync(join(tmpdir(), `sbxd-${tag}-`));
  const dataDir = join(base, 'data');
  const runDir = join(base, 'run');
  const n = [...tag].reduce((a, c) => (a * 31 + c.charCodeAt(0)) % 200, 7);
  const driver = new LocalDriver({
    dataDir, runDir, imageDir: TEST_IMAGE_DIR, bridge: `sbxt${n}`, subnet: `10.89.${n}.0/24`,
    uidRangeStart: 10_000_000 + n * 100 * 65536, cgroupParent: `sandboxd-test-${tag}`, ...over,
  });
  return { driver, dataDir: base, runDir };
}
