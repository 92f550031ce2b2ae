import { readdirSync, statfsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { mountsUnder, run, unmount } from './rootfs/mounts.js';

/** statfs(2) `f_type` of tmpfs. */
const TMPFS_MAGIC = 0x01021994;

/**
 * Makes `dir`, an instance's run dir (crun's root, the sandboxes' bundles, exec pid files),
 * a tmpfs of its own, unless it is on a tmpfs already (`/run` usually is; on some hosts it
 * is not). Everything in it is made and deleted per sandbox: on a disk file system each of
 * those files costs the file system's inode allocator (on ext4 without a journal, every
 * create walks past the inodes freed in the last seconds), so a burst of creates paid more
 * for the files than a bare `crun run` does. Kept when the process stops (running sandboxes
 * are adopted by the next start); {@link removeRunDir} unmounts it.
 *
 * Not mounted over a run dir that holds files (the state of sandboxes a version that kept
 * it on disk left running: a mount would hide it), nor where mounting is refused: the dir
 * stays on disk, which only costs speed. Resolves with where the dir lives now.
 */
export async function ensureRunTmpfs(dir: string): Promise<'tmpfs' | 'mounted' | 'disk'> {
  await mkdir(dir, { recursive: true });
  if (statfsSync(dir).type === TMPFS_MAGIC) return 'tmpfs';
  if (readdirSync(dir).length > 0) return 'disk';
  try {
    await run('mount', ['-t', 'tmpfs', '-o', 'mode=0755,nosuid,nodev', 'sandboxd-run', dir]);
    return 'mounted';
  } catch {
    return 'disk';
  }
}

/** Removes run dir `dir`: its contents, its tmpfs if it has one of its own, the dir. */
export async function removeRunDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true }).catch(() => undefined); // a mount point stays
  const mounts = (await mountsUnder(dir)).map((m) => m.mountPoint).reverse();
  await unmount(mounts);
  await rm(dir, { recursive: true, force: true });
}
