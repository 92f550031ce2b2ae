/**
 * Per-sandbox writable root layer over a shared read-only image, size-capped by the kernel.
 *
 * `<dir>/<id>.img` is a sparse ext4 file of rootDiskBytes (a sparse copy of a per-size
 * template, ~100 KiB of data), loop-mounted (autoclear, direct I/O, nodev,nosuid) at
 * `<dir>/<id>/`, whose root is mode 0710 root:uidBase so that only host root and the
 * sandbox's root group (as which crun resolves the rootfs path) can enter. Inside it:
 *   layer/upper  overlay upper dir, owned by uidBase (layer/ is 0700)
 *   layer/work   overlay work dir
 *   lower/       mount point of the idmapped, read-only bind of the image; detached again
 *                once the overlay is up (overlayfs keeps a private clone of each layer)
 *   volumes/<i>  idmapped binds of the volumes passed to prepare(), for crun to bind
 *   rootfs/      overlayfs (lower = idmapped image, upper = layer/upper, nodev, volatile):
 *                the OCI root.path. The image's uid 0 shows as uidBase = root in the sandbox.
 *
 * A write past the cap fails with ENOSPC inside the sandbox and only fills the image file.
 * Everything is found again from the kernel's tables after a crash: see list().
 */
import { chmodSync, existsSync, mkdirSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, realpath, rename, rm, stat, chmod, open } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import { checkMapping, type OciMount } from './idmap.js';
import {
  isUnder,
  keyedLock,
  loopDetach,
  loopInfo,
  loopsUnder,
  mountHelper,
  mountsUnder,
  run,
  unmount,
  unmountUnder,
} from './mounts.js';

/** Sandbox ids accepted here (same rule as the driver's SandboxSpec.id). */
export const SANDBOX_ID_RE = /^[a-z0-9_]{1,64}$/;
/** Smallest root cap accepted; ext4 metadata needs room. */
export const MIN_ROOT_DISK_BYTES = 32 << 20;
/** Largest root cap accepted (a sanity bound; the file is sparse). */
export const MAX_ROOT_DISK_BYTES = 16 * 2 ** 40;

/** mkfs.ext4 options for the template: no journal (the layer dies with the sandbox), minimal metadata. */
const MKFS_ROOT = [
  '-F',
  '-q',
  '-b',
  '4096',
  '-m',
  '0',
  '-i',
  '16384',
  '-O',
  '^has_journal,^resize_inode,sparse_super2',
  '-E',
  'lazy_itable_init=1,lazy_journal_init=1,nodiscard,num_backup_sb=0,packed_meta_blocks=1',
];

/** Bump when MKFS_ROOT or TEMPLATE_DIRS change, so that old cached templates are not used. */
const TEMPLATE_VERSION = 'v1';
/** Directories (and modes) every root layer starts with. */
const TEMPLATE_DIRS: [string, number][] = [
  ['layer', 0o700],
  ['layer/upper', 0o755],
  ['layer/work', 0o700],
  ['lower', 0o700],
  ['rootfs', 0o755],
  ['volumes', 0o711],
];

/** Options of {@link RootfsManager.prepare}. */
export interface PrepareOptions {
  /** Sandbox id, `^[a-z0-9_]{1,64}$`. */
  id: string;
  /** Image rootfs directory (shared, read-only, owned by real uid 0 as in the image). */
  lowerDir: string;
  /** Cap of the writable layer in bytes (rounded down to whole MiB: one template per size). */
  rootDiskBytes: number;
  /** First host id of the sandbox's user namespace (sandbox id 0 = host id uidBase). */
  uidBase: number;
  /** Ids mapped; default 65536. */
  idRange?: number;
  /**
   * Host paths of mounted volumes (VolumeStore.acquire) to stage, idmapped for this
   * sandbox, at `<dir>/<id>/volumes/<index>`; bind those with {@link volumeOciMount}.
   */
  volumes?: string[];
}

/** What {@link RootfsManager.prepare} made. */
export interface PreparedRootfs {
  /** The merged directory: the OCI `root.path`. */
  rootfs: string;
  /** Staged idmapped volume mounts, in the order of `PrepareOptions.volumes`. */
  volumes: string[];
}

/** Creates, lists and removes per-sandbox root layers under one directory. */
export class RootfsManager {
  /** Real path of the directory holding one subdirectory per sandbox. */
  readonly dir: string;
  private readonly templateDir: string;
  private readonly templates = new Map<number, Promise<string>>();
  private readonly locked = keyedLock();
  /**
   * Loop device of each layer mounted by this process (read from the host's mount table
   * before {@link detach} drops it): lets {@link putAway} and {@link remount} tell in two
   * sysfs reads whether the layer's device is gone, instead of a scan of every loop device.
   */
  private readonly loops = new Map<string, string>();
  /**
   * Host mount points of each layer mounted by this process, newest first, as {@link prepare}
   * and {@link remount} made them: {@link detach} unmounts these without reading the host's
   * mount table (a burst of creates fills it, and each read is all of it).
   */
  private readonly mounted = new Map<string, string[]>();

  /** `dir` (e.g. `<dataDir>/sandboxes`) is created if missing and made mode 0711. */
  constructor(opts: { dir: string }) {
    mkdirSync(opts.dir, { recursive: true });
    chmodSync(opts.dir, 0o711);
    this.dir = realpathSync(opts.dir);
    this.templateDir = join(this.dir, '.templates');
    mkdirSync(this.templateDir, { recursive: true, mode: 0o700 });
    for (const f of readdirSync(this.templateDir))
      if (f.includes('.tmp')) rmSync(join(this.templateDir, f), { recursive: true, force: true });
  }

  /** Host directory of sandbox `id` (exists only between prepare and release). */
  pathOf(id: string): string {
    if (!SANDBOX_ID_RE.test(id)) throw new SandboxdError('validation', `bad sandbox id '${id}'`);
    return join(this.dir, id);
  }

  /**
   * Builds the root layer of sandbox `id`; resolves with the merged directory to use as
   * the OCI `root.path`. Throws 'conflict' if anything of `id` is already on the host,
   * 'validation' on bad arguments, 'internal' if the kernel refuses; on failure nothing
   * is left behind.
   */
  async prepare(o: PrepareOptions): Promise<PreparedRootfs> {
    const dir = this.pathOf(o.id);
    const { uidBase, size } = checkMapping({ uidBase: o.uidBase, size: o.idRange });
    const bytes = Math.floor(o.rootDiskBytes / 2 ** 20) * 2 ** 20;
    if (!Number.isFinite(o.rootDiskBytes) || bytes < MIN_ROOT_DISK_BYTES || bytes > MAX_ROOT_DISK_BYTES)
      throw new SandboxdError(
        'validation',
        `rootDiskBytes must be between ${MIN_ROOT_DISK_BYTES} and ${MAX_ROOT_DISK_BYTES}, got ${o.rootDiskBytes}`,
      );
    const lower = await realDir(o.lowerDir, 'image rootfs');
    const vols = await Promise.all((o.volumes ?? []).map((v) => realDir(v, 'volume')));
    return this.locked(o.id, async () => {
      // Anything mounted under `dir` needs `dir`: no look at the host's mount table (in a
      // burst of creates it holds every layer being made, and each look reads all of it).
      if (existsSync(dir) || existsSync(`${dir}.img`))
        throw new SandboxdError('conflict', `root layer of ${o.id} already exists`);
      const template = await this.template(bytes);
      try {
        return await this.mountLayer(o.id, template, { uidBase, size, lower, vols });
      } catch (e) {
        await this.releaseLocked(o.id).catch(() => {});
        throw e;
      }
    });
  }

  /**
   * Takes the root layer of a started sandbox off the host's mount table: its overlay, staged
   * volume binds and ext4 mount are unmounted on the host only. The sandbox's own mount
   * namespace holds its copies (made when it started), so the file systems live exactly as
   * long as the sandbox, and the loop device goes with the last of them (autoclear). The
   * directory and image file stay until {@link release}. Every new mount namespace (each
   * `crun run`) copies the host's mount table, and every look at /proc/self/mountinfo reads
   * all of it: mounts kept per sandbox would make each create cost more as sandboxes add up.
   * From here on the layer is reachable only from inside the sandbox. Unknown id: no-op.
   * `also`: more mount points to unmount in the same helper run, after the layer's (the
   * sandbox's netns name: one program per create fewer).
   */
  async detach(id: string, also: string[] = []): Promise<void> {
    const dir = this.pathOf(id);
    await this.locked(id, async () => {
      let points = this.mounted.get(id);
      this.mounted.delete(id);
      if (!points) {
        // Mounted before this process started (or by another): read from the host.
        const mounts = await mountsUnder(dir);
        this.remember(id, mounts);
        points = mounts.map((m) => m.mountPoint);
      }
      points = [...points, ...also];
      if (points.length) await unmount(points);
    });
  }

  /**
   * Mounts the kept root layer `<dir>/<id>.img` of a stopped sandbox again, as
   * {@link prepare} laid it out (same uid range: its files are owned by it on disk), without
   * copying the template: what the sandbox wrote before it stopped is there. overlayfs's
   * `volatile` marker left by the earlier mount is removed first (see idmap-mount.c): the
   * caller makes sure the layer's ext4 was unmounted cleanly since (the sandbox's death did:
   * {@link putAway} waits for it), so the upper dir is whole. Throws 'conflict' when the
   * layer file is gone or still in use (its loop device attached), 'internal' if the kernel
   * refuses; on failure nothing of it stays mounted on the host and the file is kept.
   */
  async remount(o: Omit<PrepareOptions, 'rootDiskBytes'>): Promise<PreparedRootfs> {
    const dir = this.pathOf(o.id);
    const { uidBase, size } = checkMapping({ uidBase: o.uidBase, size: o.idRange });
    const lower = await realDir(o.lowerDir, 'image rootfs');
    const vols = await Promise.all((o.volumes ?? []).map((v) => realDir(v, 'volume')));
    return this.locked(o.id, async () => {
      if (!existsSync(`${dir}.img`)) throw new SandboxdError('conflict', `the kept root layer of ${o.id} is gone`);
      if ((await mountsUnder(dir)).length || !(await this.idle(o.id, 5_000)))
        throw new SandboxdError('conflict', `the kept root layer of ${o.id} is still in use`);
      try {
        return await this.mountLayer(o.id, '-', { uidBase, size, lower, vols });
      } catch (e) {
        await this.unmountClean(dir).catch(() => {});
        throw e;
      }
    });
  }

  /**
   * Puts the layer of a sandbox whose container is gone away for a later {@link remount}:
   * whatever of it is mounted on the host is unmounted cleanly (written back, unlike
   * {@link release}), then waits (up to `waitMs`) until its loop device is gone, which the
   * kernel does once the last mount of its ext4 (the dead sandbox's) is released: its data
   * is then on the file. Resolves false when the device stayed. Unknown id: true.
   */
  async putAway(id: string, waitMs = 10_000): Promise<boolean> {
    const dir = this.pathOf(id);
    return this.locked(id, async () => {
      this.mounted.delete(id);
      this.remember(id, await mountsUnder(dir));
      await this.unmountClean(dir);
      return this.idle(id, waitMs);
    });
  }

  /**
   * Runs the mount helper's `rootfs` for layer `id` (`template`: the image file to copy, or
   * `-` for the kept one) and notes what it made: the loop device it printed and the host
   * mount points, newest first, for {@link detach}. Resolves with the root and the staged
   * volumes' paths, in the order given.
   */
  private async mountLayer(
    id: string,
    template: string,
    o: { uidBase: number; size: number; lower: string; vols: string[] },
  ): Promise<PreparedRootfs> {
    const dir = this.pathOf(id);
    const args = [String(o.uidBase), String(o.size), o.lower, ...o.vols];
    const dev = (await mountHelper(['rootfs', template, dir, ...args])).trim();
    if (/^\/dev\/loop\d+$/.test(dev)) this.loops.set(id, dev);
    const volumes = o.vols.map((_v, i) => join(dir, 'volumes', String(i)));
    const rootfs = join(dir, 'rootfs');
    this.mounted.set(id, [rootfs, ...[...volumes].reverse(), dir]);
    return { rootfs, volumes };
  }

  /** Notes the loop device of layer `id` from its host mounts (its ext4 at `<dir>/<id>`). */
  private remember(id: string, mounts: { mountPoint: string; source: string }[]): void {
    const dev = mounts.find((m) => m.mountPoint === join(this.dir, id) && m.source.startsWith('/dev/loop'))?.source;
    if (dev) this.loops.set(id, dev);
  }

  /** True once no loop device is backed by the layer file of `id` (polled up to `waitMs`). */
  private async idle(id: string, waitMs: number): Promise<boolean> {
    const img = `${join(this.dir, id)}.img`;
    const known = this.loops.get(id);
    // The known device (two sysfs reads), else every loop device (~15 µs each).
    const busy = async () => (known ? loopInfo(known)?.backingFile === img : (await loopsUnder(img)).length > 0);
    for (let waited = 0; ; waited += 5) {
      if (!(await busy())) {
        this.loops.delete(id);
        return true;
      }
      if (waited >= waitMs) return false;
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** Unmounts everything at or below `dir` with write-back (no shutdown), newest first. */
  private async unmountClean(dir: string): Promise<void> {
    const mounts = await mountsUnder(dir);
    if (mounts.length) await unmount(mounts.map((m) => m.mountPoint));
    if ((await mountsUnder(dir)).length) await unmountUnder(dir);
  }

  /**
   * Removes everything of sandbox `id`: unmounts (a mount still used by a live process is
   * detached lazily and freed by the kernel when that process ends), detaches its loop
   * device, deletes its files. A detached layer has nothing left on the host but its files
   * (its loop device goes with its last mount, in the sandbox). Idempotent; unknown ids are
   * a no-op.
   */
  async release(id: string): Promise<void> {
    this.pathOf(id);
    await this.locked(id, () => this.releaseLocked(id));
  }

  /**
   * Ids with anything on the host: a directory under `dir`, a mount below it (from
   * /proc/self/mountinfo) or a loop device backed by a file below it. For crash recovery:
   * every id listed here that is not a live sandbox should be released.
   */
  async list(): Promise<string[]> {
    const ids = new Set<string>();
    for (const e of await readdir(this.dir)) ids.add(e.replace(/\.img$/, ''));
    const idOf = (p: string) =>
      relative(this.dir, p)
        .split('/')[0]
        .replace(/\.img$/, '');
    for (const m of await mountsUnder(this.dir)) ids.add(idOf(m.mountPoint));
    for (const l of await loopsUnder(this.dir)) ids.add(idOf(l.backingFile));
    return [...ids].filter((id) => SANDBOX_ID_RE.test(id)).sort();
  }

  private async releaseLocked(id: string): Promise<void> {
    this.loops.delete(id);
    this.mounted.delete(id);
    const dir = join(this.dir, id);
    const mounts = await mountsUnder(dir);
    // The layer is thrown away: shut its ext4 down first so unmounting writes nothing back.
    if (mounts.length)
      await unmount(
        mounts.map((m) => m.mountPoint),
        { shutdown: dir },
      );
    if ((await mountsUnder(dir)).length) await unmountUnder(dir); // mounted meanwhile, or stacked
    // Autoclear normally frees the device with the unmount. Look for a device that stays
    // (a lazily detached mount still in use) via the mount's source. Without a host mount
    // (detached, or a crash leftover) there is nothing to do: every device made here has
    // autoclear from its start, so one still attached is held by a mount in some sandbox's
    // namespace and goes with it (detaching would only set autoclear again), and scanning
    // every loop device of the host per release would cost as much as there are sandboxes.
    const img = `${dir}.img`;
    const loops = mounts.flatMap((m) => loopInfo(m.source) ?? []).filter((l) => isUnder(l.backingFile, img));
    if (loops.length) await loopDetach(loops.map((l) => l.device));
    await rm(img, { force: true });
    await rm(dir, { recursive: true, force: true });
  }

  /** Path of the template image for `bytes`, made once with mkfs.ext4 (~5 ms for 10 GiB). */
  private template(bytes: number): Promise<string> {
    let p = this.templates.get(bytes);
    if (!p) {
      p = this.makeTemplate(bytes);
      this.templates.set(bytes, p);
      p.catch(() => this.templates.delete(bytes));
    }
    return p;
  }

  private async makeTemplate(bytes: number): Promise<string> {
    const path = join(this.templateDir, `ext4-${TEMPLATE_VERSION}-${bytes}.img`);
    try {
      await stat(path);
      return path;
    } catch {
      /* make it */
    }
    const tmp = `${path}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
    const tree = await mkdtemp(join(this.templateDir, 'tree.tmp-'));
    try {
      for (const [d, mode] of TEMPLATE_DIRS) {
        await mkdir(join(tree, d), { recursive: true });
        await chmod(join(tree, d), mode);
      }
      const fh = await open(tmp, 'wx', 0o600);
      await fh.truncate(bytes);
      await fh.close();
      await run('mkfs.ext4', [...MKFS_ROOT, '-d', tree, tmp], 60_000);
      await rename(tmp, path);
      return path;
    } finally {
      await rm(tmp, { force: true });
      await rm(tree, { recursive: true, force: true });
    }
  }
}

async function realDir(p: string, what: string): Promise<string> {
  try {
    const r = await realpath(p);
    if (!(await stat(r)).isDirectory()) throw new Error('not a directory');
    return r;
  } catch (e) {
    throw new SandboxdError('validation', `${what} ${p} is not a directory: ${(e as Error).message}`);
  }
}

/**
 * The OCI mount entry that binds a staged volume (`PreparedRootfs.volumes[i]`, already
 * idmapped for the sandbox) at `destination` inside it.
 */
export function volumeOciMount(staged: string, destination: string, readonly = false): OciMount {
  return {
    destination,
    type: 'bind',
    source: staged,
    options: ['bind', 'nosuid', 'nodev', ...(readonly ? ['ro'] : [])],
  };
}
