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

/** How long {@link freeze} waits (wall clock) for the kernel to stop every task before giving up. */
const FREEZE_WAIT_MS = 10_000;

/**
 * Freezes the cgroup and resolves once every task is frozen. Rejects `internal` when the
 * cgroup is missing or will not freeze (then it is thawed again).
 *
 * v1 answers FREEZING until the last task stopped, and tries the tasks it could not stop
 * (in uninterruptible sleep, or forked meanwhile) only when FROZEN is written again: so it is
 * written again on every look, with a short thaw now and then so that a cgroup whose tasks
 * keep forking gets a fresh start (runc's freezer does the same). On a loaded host a plain
 * wait for FROZEN could time out.
 */
export async function freeze(parent: string, cid: string, root = CGROUP_ROOT): Promise<void> {
  const v = cgroupLayout(root);
  const file = cgroupFilePath('freeze', parent, cid, root, v);
  const write = async (state: 'FROZEN' | 'THAWED' | '1') => {
    try {
      await writeFile(file, state);
    } catch (e) {
      throw new SandboxdError('internal', `cannot freeze sandbox cgroup ${cid}: ${(e as Error).message}`);
    }
  };
  await write(v === 'v1' ? 'FROZEN' : '1');
  const started = Date.now();
  for (let step = 0; ; step++) {
    if (await isFrozen(parent, cid, root)) return;
    if (Date.now() - started >= FREEZE_WAIT_MS) {
      await thaw(parent, cid, root).catch(() => undefined);
      throw new SandboxdError('internal', `sandbox cgroup ${cid} did not freeze within ${FREEZE_WAIT_MS} ms`);
    }
    await sleep(Math.min(50, 2 ** step / 4));
    if (v === 'v1') {
      if (step % 50 === 49) {
        await write('THAWED');
        await sleep(10);
      }
      await write('FROZEN');
    }
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
