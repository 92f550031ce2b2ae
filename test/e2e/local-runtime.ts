/**
 * Host isolation for e2e servers on the local (crun) runtime: each data dir gets its own
 * bridge, subnet, run dir, uid range and cgroup folder (one of 50 slots, kept for that dir
 * so a restarted server adopts its sandboxes), and `teardownLocal` removes all of it after
 * the server has stopped (a stopped server leaves sandboxes and its bridge by design).
 *
 * Two servers on one slot would share a bridge (docs/runtime.md: one NetworkManager per
 * bridge), and the first one's teardown takes the other's bridge, veths and pooled network
 * namespaces with it: every later create of the survivor fails with 500. A slot used to be a
 * hash of the dir's name, so two servers side by side (the escape suite's second server) met
 * on one about once in 50 runs. Now a slot is claimed before use, atomically across
 * processes, in {@link CLAIMS}: one file per slot in use naming its data dir and the
 * claiming process, dropped by `teardownLocal`. The dir keeps its slot in `<dataDir>/.e2e-slot`.
 */
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { bridgeLockName, dataDirLockName, instanceKey } from '../../packages/server/src/instance.js';
import { LocalDriver, type LocalDriverOptions } from '../../packages/server/src/runtime/local/driver.js';

export const TEST_IMAGE_DIR =
  process.env.SANDBOXD_TEST_IMAGE_DIR ?? resolve(import.meta.dirname, '../../.sandboxd-test/images');

/** Slots FIRST..FIRST+SLOTS-1: bridge sbxe<n>, subnet 10.91.<n>.0/24, cgroup folder sandboxd-e2e-<n>. */
const FIRST = 200;
const SLOTS = 50;
/** Claims of slots in use, one file `<n>` each: `{dataDir, pid}`. On tmpfs: a reboot clears them, as it clears bridges. */
export const CLAIMS = '/run/sandboxd-test/e2e-slots';
const SLOT_FILE = '.e2e-slot';
/** Slots of the dirs this process has seen (a dir's slot is still known once the dir is removed). */
const known = new Map<string, number>();

interface Claim {
  dataDir: string;
  pid: number;
}

function optionsOf(dataDir: string, n: number): LocalDriverOptions {
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

function readClaim(n: number): Claim | undefined {
  try {
    return JSON.parse(readFileSync(join(CLAIMS, String(n)), 'utf8')) as Claim;
  } catch {
    return undefined; // none, or being written by its claimer this instant
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Abstract unix socket names listened on now (`/proc/net/unix`, without the `@`). */
function abstractSockets(): Set<string> {
  const names = new Set<string>();
  for (const line of readFileSync('/proc/net/unix', 'utf8').split('\n')) {
    const path = line.trim().split(/\s+/)[7];
    if (path?.startsWith('@')) names.add(path.slice(1));
  }
  return names;
}

/**
 * The slot's bridge or cgroup folder is on the host, or a live sandboxd holds its bridge's
 * lock (a server of an older checkout, or one a failed test left running, whose bridge a
 * teardown may already have taken).
 */
function hostUses(n: number): boolean {
  const o = optionsOf('', n);
  if (existsSync(`/sys/class/net/${o.bridge}`)) return true;
  if (abstractSockets().has(bridgeLockName(o.bridge!))) return true;
  const cg = '/sys/fs/cgroup';
  return existsSync(join(cg, o.cgroupParent!)) || readdirSync(cg).some((c) => existsSync(join(cg, c, o.cgroupParent!)));
}

/**
 * Claims slot `n` for `dataDir`; true when it is now `dataDir`'s. `fresh`: the dir has no slot
 * yet, so one whose bridge or cgroup folder exists is not taken. A claim whose data dir is
 * gone, or whose process and bridge are both gone, is stale (a run that ended without its
 * teardown) and is taken over: unlink, then exclusive create, so two processes taking over
 * the same stale claim at the same instant could both succeed; a leftover's only way in.
 */
function claim(n: number, dataDir: string, fresh: boolean): boolean {
  const file = join(CLAIMS, String(n));
  const mine = JSON.stringify({ dataDir, pid: process.pid } satisfies Claim);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      writeFileSync(file, mine, { flag: 'wx', mode: 0o600 });
      if (fresh && hostUses(n)) {
        release(n, dataDir);
        return false;
      }
      return true;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') {
        mkdirSync(CLAIMS, { recursive: true, mode: 0o700 }); // first claim, or the last one was just dropped
        continue;
      }
      if (code !== 'EEXIST') throw e;
    }
    const c = readClaim(n);
    if (c === undefined) continue;
    if (c.dataDir === dataDir) {
      writeFileSync(file, mine); // this dir's server again (a restart), maybe from another process
      return true;
    }
    if (existsSync(c.dataDir) && (alive(c.pid) || existsSync(`/sys/class/net/sbxe${n}`))) return false;
    rmSync(file, { force: true });
  }
  return false;
}

/** Drops `dataDir`'s claim of slot `n`; the claims folder goes with the last claim. */
function release(n: number, dataDir: string): void {
  if (readClaim(n)?.dataDir !== dataDir) return;
  rmSync(join(CLAIMS, String(n)), { force: true });
  for (const dir of [CLAIMS, dirname(CLAIMS)]) {
    try {
      rmdirSync(dir);
    } catch {
      return; // claims left (or one being made): it stays
    }
  }
}

/**
 * Gives back the slot of `dataDir`, if it holds one, without tearing anything down: for a
 * test that started servers on the dir with its own network settings and removed them itself.
 */
export function releaseSlot(dataDir: string): void {
  const n = slotOf(dataDir);
  if (n !== undefined) release(n, dataDir);
}

/** The slot `dataDir` was given, if any. */
function slotOf(dataDir: string): number | undefined {
  const k = known.get(dataDir);
  if (k !== undefined) return k;
  try {
    const n = Number(readFileSync(join(dataDir, SLOT_FILE), 'utf8'));
    known.set(dataDir, n);
    return n;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    return undefined;
  }
}

/** Gives `dataDir` (which has no slot yet) the first free slot from a hash of its path. */
function newSlot(dataDir: string): number {
  const start = [...dataDir].reduce((a, c) => (a * 33 + c.charCodeAt(0)) % SLOTS, 5);
  for (let i = 0; i < SLOTS; i++) {
    const n = FIRST + ((start + i) % SLOTS);
    if (!claim(n, dataDir, true)) continue;
    try {
      writeFileSync(join(dataDir, SLOT_FILE), String(n));
    } catch (e) {
      release(n, dataDir);
      throw e;
    }
    known.set(dataDir, n);
    return n;
  }
  throw new Error(`all ${SLOTS} e2e slots are claimed (${CLAIMS}): ${SLOTS} servers seem to run on this host`);
}

/** Driver options of the server on `dataDir` (mirrors its env below); a new dir gets a slot here. */
export function localOptions(dataDir: string): LocalDriverOptions {
  return optionsOf(dataDir, slotOf(dataDir) ?? newSlot(dataDir));
}

/**
 * SANDBOXD_* env for a server on `dataDir`; also makes the dir searchable by sandbox uids.
 * Throws when the dir's slot was given back and another server has it now.
 */
export function localEnv(dataDir: string): Record<string, string> {
  chmodSync(dataDir, 0o711);
  const have = slotOf(dataDir);
  if (have !== undefined && !claim(have, dataDir, false))
    throw new Error(`e2e slot ${have} of ${dataDir} is claimed by ${readClaim(have)?.dataDir} (${CLAIMS}/${have})`);
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

/**
 * Removes every sandbox, mount, netns, bridge, rule and cgroup the server started on
 * `harnessDir` left (its data in `dataDir` when SANDBOXD_DATA_DIR pointed elsewhere), then
 * gives the slot back. A dir never given a slot has nothing on the host; one whose slot
 * another server has claimed since was torn down before, and that server is left alone.
 */
export async function teardownLocal(harnessDir: string, dataDir = harnessDir): Promise<void> {
  const n = slotOf(harnessDir);
  if (n === undefined || !claim(n, harnessDir, false)) return;
  // A server still running on the dir (one a failed test lost track of) keeps its slot: tearing
  // its bridge down under it and handing the slot to the next server would break both.
  if (existsSync(dataDir) && abstractSockets().has(dataDirLockName(instanceKey(dataDir))))
    throw new Error(`a sandboxd still runs on ${dataDir}: stop it before its teardown (slot ${n} kept)`);
  await new LocalDriver({ ...optionsOf(harnessDir, n), dataDir }).destroyAll();
  release(n, harnessDir);
}
