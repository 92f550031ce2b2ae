/**
 * Named volumes: one sparse ext4 image per volume, whose size the kernel enforces (a write
 * past it fails with ENOSPC). Each volume is loop-mounted at most ONCE on the host, on
 * its first acquire, and every sandbox that uses it gets its own idmapped bind of that
 * mount (see idmap.ts / RootfsManager.prepare's `volumes`). Ownership on disk is canonical:
 * uid 0 on disk is root in every sandbox, whatever its uidBase.
 *
 * Layout (mode 0700, host root only): `<dir>/<name>/volume.img`, `<dir>/<name>/mnt/`.
 * Mounting one image through two loop devices would corrupt it, so before attaching a new
 * loop device the kernel's loop table is checked; a device still attached to the image (a
 * lazily detached mount, a leftover sandbox) is mounted again instead, which the kernel
 * resolves to the same file system instance.
 */
import { chmodSync, mkdirSync, realpathSync } from 'node:fs';
import { mkdir, mkdtemp, open, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import { keyedLock, loopDetach, loopInfo, loopMount, loopsUnder, readMounts, run, unmount } from './mounts.js';

/** Volume names accepted here (the driver scopes them, e.g. `<accountId>__<name>`). */
export const VOLUME_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const GIB = 2 ** 30;
/** Smallest volume (ext4 with a journal needs room); tests use fractional sizeGb down to this. */
export const MIN_VOLUME_BYTES = 32 << 20;
/** Largest volume accepted here (a sanity bound; the API allows 1..100). */
export const MAX_VOLUME_GB = 1024;

/** Journal kept (volumes are durable); no resize inode; metadata zeroing left to the sparse file. */
const MKFS_VOLUME = [
  '-F',
  '-q',
  '-b',
  '4096',
  '-m',
  '0',
  '-O',
  '^resize_inode',
  '-E',
  'lazy_itable_init=1,lazy_journal_init=1,nodiscard',
];
const MOUNT_OPTS = 'noinit_itable,discard';

/** What {@link VolumeStore.list} reports per volume. */
export interface VolumeEntry {
  name: string;
  sizeGb: number;
  /** Sandboxes holding it (acquired and not released), sorted. */
  mountedBy: string[];
}

/** Creates, mounts, shares and deletes named volumes under one directory. */
export class VolumeStore {
  /** Real path of the directory holding one subdirectory per volume. */
  readonly dir: string;
  private readonly refs = new Map<string, Set<string>>();
  private readonly locked = keyedLock();

  /** `dir` (e.g. `<dataDir>/volumes`) is created if missing and made mode 0700. */
  constructor(opts: { dir: string }) {
    mkdirSync(opts.dir, { recursive: true });
    chmodSync(opts.dir, 0o700);
    this.dir = realpathSync(opts.dir);
  }

  /** Host path at which the volume is mounted while acquired. */
  mountPath(name: string): string {
    return join(this.dirOf(name), 'mnt');
  }

  /**
   * Creates the volume if missing (~10 ms: sparse file + mkfs.ext4). Throws 'conflict'
   * naming the existing size when it exists with another size, 'validation' on a bad name
   * or size. `sizeGb` may be fractional (tests); the API layer bounds it to 1..100.
   */
  async ensure(name: string, sizeGb: number): Promise<{ name: string; sizeGb: number }> {
    const dir = this.dirOf(name);
    const bytes = Math.floor((sizeGb * GIB) / 4096) * 4096;
    if (!Number.isFinite(sizeGb) || bytes < MIN_VOLUME_BYTES || sizeGb > MAX_VOLUME_GB)
      throw new SandboxdError(
        'validation',
        `volume size must be between ${MIN_VOLUME_BYTES / GIB} and ${MAX_VOLUME_GB} GiB, got ${sizeGb}`,
      );
    return this.locked(name, async () => {
      const have = await this.sizeOf(name);
      if (have !== undefined) {
        if (have !== bytes)
          throw new SandboxdError(
            'conflict',
            `volume ${name} exists with size ${fmtGb(have)} GB, not ${fmtGb(bytes)} GB`,
            { name, sizeGb: have / GIB },
          );
        return { name, sizeGb: have / GIB };
      }
      if (await isMountPoint(this.mountPath(name)))
        throw new SandboxdError('conflict', `volume ${name} is mounted but has no image`);
      await rm(dir, { recursive: true, force: true }); // leftover of an interrupted delete
      const tmp = await mkdtemp(join(this.dir, '.tmp-'));
      try {
        const fh = await open(join(tmp, 'volume.img'), 'wx', 0o600);
        await fh.truncate(bytes);
        await fh.close();
        await run('mkfs.ext4', [...MKFS_VOLUME, join(tmp, 'volume.img')], 60_000);
        await mkdir(join(tmp, 'mnt'), { mode: 0o700 });
        await rename(tmp, dir);
      } finally {
        await rm(tmp, { recursive: true, force: true });
      }
      return { name, sizeGb: bytes / GIB };
    });
  }

  /** Every volume with its size and the sandboxes holding it, sorted by name. */
  async list(): Promise<VolumeEntry[]> {
    const out: VolumeEntry[] = [];
    for (const name of (await readdir(this.dir)).sort()) {
      if (!VOLUME_NAME_RE.test(name)) continue;
      const bytes = await this.sizeOf(name);
      if (bytes !== undefined)
        out.push({ name, sizeGb: bytes / GIB, mountedBy: [...(this.refs.get(name) ?? [])].sort() });
    }
    return out;
  }

  /**
   * Records that `sandboxId` uses the volume and returns the host path where it is mounted,
   * mounting it first if needed. Idempotent per (name, sandboxId). Throws 'not_found'.
   */
  async acquire(name: string, sandboxId: string): Promise<string> {
    this.dirOf(name);
    return this.locked(name, async () => {
      if ((await this.sizeOf(name)) === undefined) throw new SandboxdError('not_found', `volume ${name} not found`);
      const mnt = this.mountPath(name);
      if (!(await isMountPoint(mnt))) await this.mount(name, mnt);
      let set = this.refs.get(name);
      if (!set) {
        set = new Set();
        this.refs.set(name, set);
      }
      set.add(sandboxId);
      return mnt;
    });
  }

  /**
   * Drops `sandboxId`'s hold; on the last one the volume is unmounted (and its loop device
   * detached by autoclear). If the host mount is still busy it stays mounted, and the next
   * acquire reuses it. Unknown volume or holder: no-op.
   */
  async release(name: string, sandboxId: string): Promise<void> {
    this.dirOf(name);
    await this.locked(name, async () => {
      const set = this.refs.get(name);
      set?.delete(sandboxId);
      if (set?.size) return;
      this.refs.delete(name);
      await unmount([this.mountPath(name)], { strict: true }).catch((e) => {
        if (!(e instanceof SandboxdError && e.kind === 'conflict')) throw e;
      });
    });
  }

  /**
   * Deletes the volume and its data. Throws 'conflict' while a sandbox holds it or the
   * kernel still uses it, 'not_found' if it does not exist.
   */
  async delete(name: string): Promise<void> {
    this.dirOf(name);
    await this.locked(name, async () => {
      if ((await this.sizeOf(name)) === undefined) throw new SandboxdError('not_found', `volume ${name} not found`);
      const holders = [...(this.refs.get(name) ?? [])].sort();
      if (holders.length)
        throw new SandboxdError('conflict', `volume ${name} is mounted by ${holders.join(', ')}`, {
          mountedBy: holders,
        });
      await unmount([this.mountPath(name)], { strict: true });
      if (await isMountPoint(this.mountPath(name)))
        throw new SandboxdError('conflict', `volume ${name} is mounted more than once`);
      // The kernel detaches an autoclear loop device from a work queue after the last
      // unmount (a sandbox's mount namespace may go a moment after its processes): wait a
      // little for that before calling it busy.
      let loops = await loopsUnder(join(this.dirOf(name), 'volume.img'));
      for (let i = 0; i < 40 && loops.length; i++) {
        await new Promise((r) => setTimeout(r, 50));
        loops = await loopsUnder(join(this.dirOf(name), 'volume.img'));
      }
      if (loops.length)
        throw new SandboxdError(
          'conflict',
          `volume ${name} is still in use by the kernel (${loops.map((l) => l.device).join(', ')})`,
        );
      await rm(this.dirOf(name), { recursive: true, force: true });
    });
  }

  /**
   * After a restart: `live` maps each running sandbox to the volume names it uses. Rebuilds
   * the holders from it, unmounts volumes no live sandbox uses (a busy one stays mounted),
   * asks the kernel to drop loop devices of unused volumes, and removes half-made volumes.
   */
  async recover(live: Map<string, string[]>): Promise<void> {
    const names = new Set((await this.list()).map((v) => v.name));
    this.refs.clear();
    for (const [sbx, vols] of live)
      for (const n of vols) {
        if (!names.has(n)) continue;
        if (!this.refs.has(n)) this.refs.set(n, new Set());
        this.refs.get(n)!.add(sbx);
      }
    const mounts = (await readMounts()).filter((m) => m.mountPoint.startsWith(`${this.dir}/`)).reverse();
    for (const m of mounts) {
      const name = m.mountPoint.slice(this.dir.length + 1).split('/')[0];
      if (this.refs.has(name) && m.mountPoint === this.mountPath(name)) continue;
      await unmount([m.mountPoint], { strict: true }).catch(() => undefined);
    }
    for (const l of await loopsUnder(this.dir)) {
      const name = l.backingFile.slice(this.dir.length + 1).split('/')[0];
      if (this.refs.has(name) || (await isMountPoint(this.mountPath(name)).catch(() => false))) continue;
      await loopDetach([l.device]).catch(() => undefined); // busy: the kernel detaches it when freed
    }
    for (const e of await readdir(this.dir))
      if (e.startsWith('.tmp-')) await rm(join(this.dir, e), { recursive: true, force: true });
  }

  /**
   * Mounts the volume's image at `mnt`. A loop device still attached to it (its last mount
   * elsewhere not yet gone: a lazily detached mount, a deleted sandbox's last process still
   * exiting) is mounted again, which the kernel resolves to the same file system; attaching
   * the image to a second device would corrupt it. That device may be detached by the
   * kernel at any moment (autoclear, on its last close) and then given to another image, so
   * it is held open while it is checked and mounted: an open device is never detached. If it
   * went before it could be held, the image is attached anew. A device whose backing file
   * was unlinked is an older image of that name, never this one.
   */
  private async mount(name: string, mnt: string): Promise<void> {
    const img = join(this.dirOf(name), 'volume.img');
    for (let attempt = 0; attempt < 3; attempt++) {
      const loops = (await loopsUnder(img)).filter((l) => !l.deleted);
      if (loops.length > 1)
        throw new SandboxdError(
          'internal',
          `volume ${name} is attached to ${loops.length} loop devices (${loops.map((l) => l.device).join(', ')}); refusing to mount it again`,
        );
      if (loops.length === 0) return loopMount(img, mnt, MOUNT_OPTS);
      const held = await open(loops[0].device, 'r').catch(() => undefined);
      try {
        const now = held && loopInfo(loops[0].device);
        if (!now || now.deleted || now.backingFile !== img) continue; // detached meanwhile
        await run('mount', ['-t', 'ext4', '-o', `nodev,nosuid,${MOUNT_OPTS}`, now.device, mnt]);
        return;
      } finally {
        await held?.close();
      }
    }
    throw new SandboxdError('internal', `volume ${name}: its loop device kept changing while being mounted`);
  }

  private dirOf(name: string): string {
    if (typeof name !== 'string' || !VOLUME_NAME_RE.test(name))
      throw new SandboxdError('validation', `bad volume name '${name}'`);
    return join(this.dir, name);
  }

  private async sizeOf(name: string): Promise<number | undefined> {
    try {
      return (await stat(join(this.dirOf(name), 'volume.img'))).size;
    } catch {
      return undefined;
    }
  }
}

async function isMountPoint(p: string): Promise<boolean> {
  return (await readMounts()).some((m) => m.mountPoint === p);
}

function fmtGb(bytes: number): string {
  return String(Number((bytes / GIB).toFixed(3)));
}
