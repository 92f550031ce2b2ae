/**
 * Temporary work dirs of the image store. Each is named after the process that made it
 * (`<pid>.<start time>.<random>`), so a new store can tell the leftovers of a dead process
 * (killed mid-pull or mid-unpack) from the live work of another one, and delete only those.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';

/** Start time (clock ticks since boot) of a process, or null if it does not exist. */
function startTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 22; the command name (field 2) may hold spaces and parens, so count after the last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

const SELF = `${process.pid}.${startTime(process.pid) ?? '0'}`;

/** Mount points at or below `dir` (never delete through one: it may be a bind of /dev). */
export function mountsUnder(dir: string): string[] {
  const root = resolve(dir);
  let info = '';
  try {
    info = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  return info
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((m): m is string => !!m)
    .map((m) => m.replace(/\\(\d{3})/g, (_s, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((m) => m === root || m.startsWith(`${root}/`));
}

/** Removes a tree unless something is mounted inside it; returns false if it refused. */
export async function removeTree(dir: string): Promise<boolean> {
  if (mountsUnder(dir).length > 0) return false;
  await rm(dir, { recursive: true, force: true });
  return true;
}

/** The store's `tmp/` area. */
export class TempArea {
  readonly root: string;
  constructor(root: string) {
    this.root = root;
    mkdirSync(root, { recursive: true });
  }

  /**
   * Deletes work dirs left by processes that no longer run (synchronous: called from the
   * store's constructor). Returns the names removed; skips any dir with a mount inside.
   */
  cleanStale(log?: (msg: string, level?: 'info' | 'warn') => void): string[] {
    const removed: string[] = [];
    for (const name of readdirSync(this.root)) {
      const m = /^(\d+)\.(\d+)\./.exec(name);
      if (m && startTime(Number(m[1])) === m[2]) continue; // owner still alive
      const p = join(this.root, name);
      if (mountsUnder(p).length > 0) {
        log?.(`image store: not removing ${p}: something is mounted inside it`, 'warn');
        continue;
      }
      rmSync(p, { recursive: true, force: true });
      removed.push(name);
    }
    return removed;
  }

  /** Creates a fresh work dir owned by this process. */
  async make(label: string): Promise<string> {
    const safe = label.replace(/[^a-z0-9-]/gi, '').slice(0, 24);
    const dir = join(this.root, `${SELF}.${randomBytes(6).toString('hex')}${safe ? `.${safe}` : ''}`);
    await mkdir(dir, { mode: 0o700 });
    return dir;
  }

  /**
   * Moves `from` to `to` (same file system), replacing what was there; the old copy is
   * deleted afterwards. Retries when another process puts its own copy there in between.
   */
  async replaceDir(from: string, to: string): Promise<void> {
    const trash = await this.make('trash');
    try {
      for (let i = 0; ; i++) {
        await rename(to, join(trash, `old${i}`)).catch((e: NodeJS.ErrnoException) => {
          if (e.code !== 'ENOENT') throw e;
        });
        try {
          await rename(from, to);
          return;
        } catch (e) {
          const code = (e as NodeJS.ErrnoException).code;
          if (i >= 3 || (code !== 'ENOTEMPTY' && code !== 'EEXIST')) throw e;
        }
      }
    } finally {
      await removeTree(trash);
    }
  }

  /**
   * Takes `path` out of sight at once (rename into a trash dir), then deletes it. Returns
   * false when something is mounted inside (then it stays in the trash dir until a restart
   * of a store finds it stale). A missing `path` is fine.
   */
  async discard(path: string): Promise<boolean> {
    const trash = await this.make('trash');
    await rename(path, join(trash, 'x')).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
    });
    return removeTree(trash);
  }

  /** Runs `fn` in a fresh work dir and removes the dir afterwards, whatever happens. */
  async with<T>(label: string, fn: (dir: string) => Promise<T>): Promise<T> {
    const dir = await this.make(label);
    try {
      return await fn(dir);
    } finally {
      if (existsSync(dir)) await removeTree(dir);
    }
  }
}
