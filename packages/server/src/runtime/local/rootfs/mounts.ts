/**
 * Small host helpers shared by the local driver's storage code: what is mounted under a
 * path (from /proc/self/mountinfo), unmounting, and which loop devices are backed by files
 * under a path (from /sys/block/loop*). Reading the kernel's own tables is what makes
 * crash recovery possible: nothing here keeps state of its own.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { SandboxdError } from '@sandboxd/protocol';
import { nativeBin } from '../native.js';
import { HostSpawner, type SpawnResult } from '../commands/spawner.js';

/** One line of /proc/self/mountinfo, with paths unescaped. */
export interface MountEntry {
  id: number;
  parentId: number;
  /** `major:minor` of the mounted file system. */
  dev: string;
  /** Path inside the file system that is mounted (e.g. `/` or a bind's subdir). */
  root: string;
  mountPoint: string;
  /** Per-mount options, e.g. `rw,nosuid,nodev,relatime`. */
  options: string;
  fsType: string;
  source: string;
}

/** A loop device and the file behind it. */
export interface LoopDevice {
  /** `/dev/loopN` */
  device: string;
  /** Path of the backing file as the kernel prints it, without ` (deleted)`. */
  backingFile: string;
  /** The backing file was unlinked while attached. */
  deleted: boolean;
  autoclear: boolean;
}

/** Decodes the octal escapes (`\040` etc.) the kernel uses in mountinfo paths. */
function unescapeOctal(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Parses /proc/self/mountinfo text; exported for tests. */
export function parseMountinfo(text: string): MountEntry[] {
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const f = line.split(' ');
    const sep = f.indexOf('-', 6);
    if (sep < 0) continue;
    out.push({
      id: Number(f[0]),
      parentId: Number(f[1]),
      dev: f[2],
      root: unescapeOctal(f[3]),
      mountPoint: unescapeOctal(f[4]),
      options: f[5],
      fsType: f[sep + 1],
      source: unescapeOctal(f[sep + 2] ?? ''),
    });
  }
  return out;
}

/** Every mount of this process's mount namespace, in the kernel's order (parents first). */
export async function readMounts(): Promise<MountEntry[]> {
  return parseMountinfo(await readFile('/proc/self/mountinfo', 'utf8'));
}

/** True when `p` is `dir` or lies below it. Both must be absolute and normalized. */
export function isUnder(p: string, dir: string): boolean {
  return p === dir || p.startsWith(dir.endsWith('/') ? dir : `${dir}/`);
}

/** Mounts at or below `dir`, newest first (the order to unmount them in). */
export async function mountsUnder(dir: string): Promise<MountEntry[]> {
  // Parse only lines that can match: cheap with thousands of mounts.
  const needle = dir.replace(/[\\ \t\n]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const lines = text.split('\n').filter((l) => l.includes(needle));
  return parseMountinfo(lines.join('\n'))
    .filter((m) => isUnder(m.mountPoint, dir))
    .reverse();
}

/**
 * One loop device as sysfs shows it (`device` is `/dev/loopN`), or undefined when it is
 * not attached. Synchronous: two tiny sysfs reads (~15 µs), far cheaper than going
 * through the thread pool when hundreds of devices exist.
 */
export function loopInfo(device: string): LoopDevice | undefined {
  const n = device.replace(/^\/dev\//, '');
  if (!/^loop\d+$/.test(n)) return undefined;
  let file: string;
  let autoclear: string;
  try {
    file = readFileSync(`/sys/block/${n}/loop/backing_file`, 'utf8').replace(/\n$/, '');
    autoclear = readFileSync(`/sys/block/${n}/loop/autoclear`, 'utf8').trim();
  } catch {
    return undefined; // not attached (no loop/ dir), or detached meanwhile
  }
  const deleted = file.endsWith(' (deleted)');
  return {
    device: `/dev/${n}`,
    backingFile: deleted ? file.slice(0, -' (deleted)'.length) : file,
    deleted,
    autoclear: autoclear === '1',
  };
}

/**
 * Attached loop devices whose backing file is `path` or lies below it (deleted files
 * included); every attached device when `path` is omitted. Reads sysfs synchronously
 * (~15 µs per device).
 */
export async function loopsUnder(path?: string): Promise<LoopDevice[]> {
  const out: LoopDevice[] = [];
  for (const n of readdirSync('/sys/block')) {
    if (!/^loop\d+$/.test(n)) continue;
    let file: string;
    try {
      file = readFileSync(`/sys/block/${n}/loop/backing_file`, 'utf8')
        .replace(/\n$/, '')
        .replace(/ \(deleted\)$/, '');
    } catch {
      continue;
    }
    if (path !== undefined && !isUnder(file, path)) continue;
    const l = loopInfo(n);
    if (l) out.push(l);
  }
  return out.sort((a, b) => a.device.localeCompare(b.device, 'en', { numeric: true }));
}

/**
 * Runs a program (through the host spawner) with a time limit; resolves with its stdout,
 * rejects with SandboxdError('internal') naming stderr.
 */
export async function run(file: string, args: string[], timeoutMs = 30_000): Promise<string> {
  const name = `${file.split('/').pop()} ${args[0] ?? ''}`;
  let r: SpawnResult;
  try {
    r = await HostSpawner.shared().run(file, args, { timeoutMs });
  } catch (e) {
    throw new SandboxdError('internal', `${name} failed: ${(e as Error).message}`);
  }
  if (r.code === 0 && !r.truncated) return r.stdout.toString();
  const why = r.timedOut
    ? `timed out after ${timeoutMs} ms`
    : r.stderr.toString().trim() ||
      (r.truncated ? 'more than 1 MiB of output' : r.signal ? `killed by signal ${r.signal}` : `exit code ${r.code}`);
  throw new SandboxdError('internal', `${name} failed: ${why}`);
}

let helper: string | undefined;
/**
 * Path of the `idmap-mount` native helper, compiling it if needed (synchronous, ~0.3 s the
 * first time): call it at driver init so that no request pays for the compiler.
 */
export function mountHelperPath(): string {
  helper ??= nativeBin('idmap-mount');
  return helper;
}

/** Runs the `idmap-mount` native helper (see packages/server/native/idmap-mount.c). */
export function mountHelper(args: string[], timeoutMs?: number): Promise<string> {
  return run(mountHelperPath(), args, timeoutMs);
}

/**
 * Unmounts `paths` in the order given. Not mounted: ignored. A busy mount is detached
 * lazily (it disappears from the tree now, and the kernel frees it when its last user goes)
 * unless `strict`, in which case the call fails with 'conflict' and the mount stays.
 * `shutdown`: the root of a loop-backed ext4 that is being thrown away; it is shut down
 * first (all further I/O fails, nothing is written back), which makes unmounting instant.
 */
export async function unmount(paths: string[], opts: { strict?: boolean; shutdown?: string } = {}): Promise<void> {
  if (paths.length === 0) return;
  const flags = [...(opts.strict ? ['--strict'] : []), ...(opts.shutdown ? [`--shutdown=${opts.shutdown}`] : [])];
  try {
    await mountHelper(['umount', ...flags, ...paths]);
  } catch (e) {
    if (opts.strict && e instanceof SandboxdError && /busy/i.test(e.message))
      throw new SandboxdError('conflict', `mount is busy: ${paths.join(', ')}`);
    throw e;
  }
}

/**
 * Unmounts everything at or below `dir`, newest first, repeating while mounts remain
 * (stacked mounts). Returns the mount points it unmounted.
 */
export async function unmountUnder(dir: string): Promise<string[]> {
  const done: string[] = [];
  for (let round = 0; round < 8; round++) {
    const left = await mountsUnder(dir);
    if (left.length === 0) return done;
    await unmount(left.map((m) => m.mountPoint));
    done.push(...left.map((m) => m.mountPoint));
  }
  const left = await mountsUnder(dir);
  if (left.length)
    throw new SandboxdError('internal', `mounts remain under ${dir}: ${left.map((m) => m.mountPoint).join(', ')}`);
  return done;
}

/**
 * Attaches `image` to a free loop device with autoclear and mounts it as ext4 at `dst`
 * (nodev, nosuid, plus `options`). The device is detached by the kernel on the last unmount.
 */
export async function loopMount(image: string, dst: string, options = 'noinit_itable,discard'): Promise<void> {
  await mountHelper(['loopmount', image, dst, options]);
}

/**
 * Detaches loop devices. One still in use (mounted, possibly lazily) is only marked
 * autoclear by the kernel and goes away with its last user.
 */
export async function loopDetach(devices: string[]): Promise<void> {
  for (const d of devices) {
    try {
      await run('losetup', ['-d', d], 10_000);
    } catch (e) {
      // Already gone (detached by autoclear meanwhile) is fine.
      if (!loopInfo(d)) continue;
      throw e;
    }
  }
}

export { keyedLock } from '../../../domain/keyed-lock.js';

/** The host's mount and loop tables, for leak checks in tests and diagnostics. */
export interface HostSnapshot {
  /** Lines of /proc/self/mountinfo. */
  mounts: string[];
  /** Lines of `losetup -a`. */
  loops: string[];
}

/** Reads /proc/self/mountinfo and `losetup -a`. */
export async function hostSnapshot(): Promise<HostSnapshot> {
  const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter(Boolean);
  const loops = (await run('losetup', ['-a'], 10_000)).split('\n').filter(Boolean);
  return { mounts, loops };
}

/**
 * Lines that differ between two snapshots. `mine` holds those that mention `root` (what
 * code working under `root` leaked or lost); `others` the rest (other processes on the
 * host mounting things meanwhile), so that tests on a shared host stay exact about their own.
 */
export function snapshotDiff(
  before: HostSnapshot,
  after: HostSnapshot,
  root: string,
): { mine: string[]; others: string[] } {
  const diff = (a: string[], b: string[]) => a.filter((l) => !b.includes(l));
  const lines = [
    ...diff(after.mounts, before.mounts).map((l) => `+mount ${l}`),
    ...diff(before.mounts, after.mounts).map((l) => `-mount ${l}`),
    ...diff(after.loops, before.loops).map((l) => `+loop ${l}`),
    ...diff(before.loops, after.loops).map((l) => `-loop ${l}`),
  ];
  return { mine: lines.filter((l) => l.includes(root)), others: lines.filter((l) => !l.includes(root)) };
}
