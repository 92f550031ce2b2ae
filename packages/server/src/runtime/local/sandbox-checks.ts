import { stat } from 'node:fs/promises';
import { dirname, posix, resolve } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import type { SandboxSpec } from '../driver.js';

// Checks on what a caller asks of the local driver, the host folders it uses, and env merging.

const FORBIDDEN_MOUNT_ROOTS = ['/proc', '/sys', '/dev', '/etc/hosts', '/etc/hostname', '/etc/resolv.conf'];

/** Checks a volume mount path: absolute, normalised, not `/` and not a kernel/runtime path. */
export function checkMountPath(p: string): void {
  const bad = (why: string) => new SandboxdError('validation', `volume mount path "${p}" ${why}`, { path: p });
  if (!p.startsWith('/')) throw bad('must be absolute');
  if (p.includes('\0') || p.split('/').some((s) => s === '..' || s === '.'))
    throw bad('must not contain "." or ".." segments');
  const norm = posix.normalize(p).replace(/\/+$/, '');
  if (norm === '') throw bad('must not be the root directory');
  if (FORBIDDEN_MOUNT_ROOTS.some((r) => norm === r || norm.startsWith(`${r}/`)))
    throw bad('is reserved by the runtime');
}

/**
 * Throws `validation` when one mount path is the same as, or inside, another: the inner
 * mount's target would be resolved through the outer volume's content, which other
 * sandboxes sharing that volume can rewrite (symlinks planted there).
 */
export function checkMountPathsDisjoint(paths: string[]): void {
  const norm = paths.map((p) => posix.normalize(p).replace(/\/+$/, ''));
  for (let i = 0; i < norm.length; i++) {
    for (let j = 0; j < norm.length; j++) {
      if (i !== j && (norm[i] === norm[j] ? i > j : norm[i].startsWith(`${norm[j]}/`))) {
        throw new SandboxdError(
          'validation',
          `volume mount path "${paths[i]}" is inside (or the same as) "${paths[j]}"`,
          { path: paths[i] },
        );
      }
    }
  }
}

/**
 * Sandbox roots and bind sources live under `dir`; crun mounts them from inside the
 * sandbox's user namespace, where host root is nobody, so every folder on the way must be
 * searchable by others. Throws with the folder to fix.
 */
export async function checkTraversable(dir: string): Promise<void> {
  for (let d = resolve(dir); ; d = dirname(d)) {
    const st = await stat(d);
    if ((st.mode & 0o001) === 0) {
      throw new SandboxdError(
        'internal',
        `${d} is not searchable by other users (mode ${(st.mode & 0o777).toString(8)}); sandboxes run as unprivileged uids and need to traverse it: chmod o+x ${d}`,
      );
    }
    if (d === dirname(d)) return;
  }
}

/** Rejects limits the kernel would refuse or that could not run a shell. */
export function checkLimits(l: SandboxSpec['limits']): void {
  const bad = (field: string, rule: string, value: number) =>
    new SandboxdError('validation', `limits.${field} must be ${rule}, got ${value}`, { field, value });
  if (!Number.isSafeInteger(l.memoryBytes) || l.memoryBytes < 16 << 20)
    throw bad('memoryBytes', 'an integer of at least 16 MiB', l.memoryBytes);
  if (!(l.cpus >= 0.01 && l.cpus <= 1024)) throw bad('cpus', 'between 0.01 and 1024', l.cpus);
  if (!Number.isSafeInteger(l.pids) || l.pids < 8) throw bad('pids', 'an integer of at least 8', l.pids);
  if (!Number.isSafeInteger(l.rootDiskBytes) || l.rootDiskBytes < 32 << 20)
    throw bad('rootDiskBytes', 'an integer of at least 32 MiB', l.rootDiskBytes);
}

export function splitEnv(kv: string): [string, string] {
  const i = kv.indexOf('=');
  return [kv.slice(0, i), kv.slice(i + 1)];
}

/** Image env overlaid by sandbox env, as KEY=VALUE in a stable order. */
export function mergeEnv(base: Record<string, string>, over: Record<string, string>): string[] {
  return Object.entries({ ...base, ...over }).map(([k, v]) => `${k}=${v}`);
}

export function mergeEnvList(base: string[], over?: Record<string, string>): string[] {
  if (!over || Object.keys(over).length === 0) return base;
  return mergeEnv(Object.fromEntries(base.map(splitEnv)), over);
}
