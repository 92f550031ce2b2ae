import { readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxdError } from '@sandboxd/protocol';
import { CGROUP_ROOT, cgroupFilePath, cgroupLayout } from './cgroup-fs.js';

/**
 * The cgroup freezer of sandbox cgroup `<parent>/<cid>`: every process of the sandbox (its
 * exec agent included) is stopped by the kernel, keeps its memory, open files and
 * connections, and continues where it was when thawed. The state lives in the kernel, so
 * it outlives the server: a restarted server reads it back with {@link isFrozen}.
 *
 * cgroup v1 (`freezer` hierarchy, `freezer.state` FROZEN/FREEZING/THAWED) or, where only the
 * unified hierarchy is mounted, v2 (`cgroup.freeze`, `cgroup.events` `frozen 1`); paths
 * from cgroup-fs.ts. The files are written directly: no runtime process per pause (crun
 * pause does the same writes, at the cost of a process start).
 */

/** How long {@link freeze} waits for the kernel to stop every task before giving up. */
const FREEZE_WAIT_MS = 5_000;

/** Freezes the cgroup and resolves once every task is frozen. Rejects `internal` when the cgroup is missing or will not freeze. */
export async function freeze(parent: string, cid: string, root = CGROUP_ROOT): Promise<void> {
  const v = cgroupLayout(root);
  try {
    await writeFile(cgroupFilePath('freeze', parent, cid, root, v), v === 'v1' ? 'FROZEN' : '1');
  } catch (e) {
    throw new SandboxdError('internal', `cannot freeze sandbox cgroup ${cid}: ${(e as Error).message}`);
  }
  // v1 answers FREEZING until the last task stopped (tasks in uninterruptible sleep take a while).
  for (let waited = 0, step = 0; ; ) {
    if (await isFrozen(parent, cid, root)) return;
    if (waited >= FREEZE_WAIT_MS) {
      await thaw(parent, cid, root).catch(() => undefined);
      throw new SandboxdError('internal', `sandbox cgroup ${cid} did not freeze within ${FREEZE_WAIT_MS} ms`);
    }
    const ms = Math.min(50, 2 ** step++ / 4);
    await sleep(ms);
    waited += ms;
  }
}

/** Thaws the cgroup (no-op when it is not frozen). Rejects `internal` when the cgroup is missing. */
export async function thaw(parent: string, cid: string, root = CGROUP_ROOT): Promise<void> {
  const v = cgroupLayout(root);
  try {
    await writeFile(cgroupFilePath('freeze', parent, cid, root, v), v === 'v1' ? 'THAWED' : '0');
  } catch (e) {
    throw new SandboxdError('internal', `cannot thaw sandbox cgroup ${cid}: ${(e as Error).message}`);
  }
}

/** True when the cgroup is frozen (or freezing: a freeze was asked); false when thawed or missing. */
export async function isFrozen(parent: string, cid: string, root = CGROUP_ROOT): Promise<boolean> {
  try {
    const v = cgroupLayout(root);
    const text = await readFile(cgroupFilePath('frozen', parent, cid, root, v), 'utf8');
    return v === 'v1' ? text.trim() === 'FROZEN' : /^frozen 1$/m.test(text);
  } catch {
    return false;
  }
}

/**
 * True when a freeze was asked and not undone (FROZEN or FREEZING; v2: cgroup.freeze is 1).
 * Every command asks first, so the read is synchronous: a cgroup file is a few microseconds
 * to read, and a pool thread's round trip cost each command ~0.2 ms of waiting.
 */
export async function freezeAsked(parent: string, cid: string, root = CGROUP_ROOT): Promise<boolean> {
  try {
    const v = cgroupLayout(root);
    const s = readFileSync(cgroupFilePath('freeze', parent, cid, root, v), 'utf8').trim();
    return v === 'v1' ? s === 'FROZEN' || s === 'FREEZING' : s === '1';
  } catch {
    return false;
  }
}
