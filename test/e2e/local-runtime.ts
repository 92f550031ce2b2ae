/**
 * Host isolation for e2e servers on the local (crun) runtime: each data dir gets its own
 * bridge, subnet, run dir, uid range and cgroup folder (stable for that dir, so a
 * restarted server adopts its sandboxes), and `teardownLocal` removes all of it after the
 * server has stopped (a stopped server leaves sandboxes and its bridge by design).
 */
import { chmodSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { LocalDriver, type LocalDriverOptions } from '../../packages/server/src/runtime/local/driver.js';

export const TEST_IMAGE_DIR =
  process.env.SANDBOXD_TEST_IMAGE_DIR ?? resolve(import.meta.dirname, '../../.sandboxd-test/images');

function slot(dataDir: string): number {
  return [...dataDir].reduce((a, c) => (a * 33 + c.charCodeAt(0)) % 50, 5) + 200;
}

/** Driver options the server started on `dataDir` uses (mirrors its env below). */
export function localOptions(dataDir: string): LocalDriverOptions {
  const n = slot(dataDir);
  return {
    dataDir,
    imageDir: TEST_IMAGE_DIR,
    runDir: join(dataDir, 'run'),
    bridge: `sbxe${n}`,
    subnet: `10.91.${n}.0/24`,
    uidRangeStart: 10_000_000 + n * 100 * 65536,
    cgroupParent: `sandboxd-e2e-${n}`,
  };
}

/** SANDBOXD_* env for a server on `dataDir`; also makes the dir searchable by sandbox uids. */
export function localEnv(dataDir: string): Record<string, string> {
  chmodSync(dataDir, 0o711);
  const o = localOptions(dataDir);
  return {
    SANDBOXD_IMAGE_DIR: o.imageDir,
    SANDBOXD_RUN_DIR: o.runDir!,
    SANDBOXD_BRIDGE: o.bridge!,
    SANDBOXD_SUBNET: o.subnet!,
    SANDBOXD_UID_RANGE_START: String(o.uidRangeStart),
    SANDBOXD_CGROUP_PARENT: o.cgroupParent!,
  };
}

/** Removes every sandbox, mount, netns, bridge, rule and cgroup the server on `dataDir` left. */
export async function teardownLocal(dataDir: string): Promise<void> {
  await new LocalDriver(localOptions(dataDir)).destroyAll();
}
