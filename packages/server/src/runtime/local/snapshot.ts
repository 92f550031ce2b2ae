/**
 * Snapshots of the local runtime's sandboxes: a sandbox's filesystem (its image with its
 * writable layer applied) becomes a cached image `snapshot/<owner>/<name>` (storage and
 * format: images/snapshots.ts).
 *
 * The writable layer is `layer/upper` of the sandbox's ext4 root image (rootfs/roots.ts).
 * While the sandbox runs, that file system is mounted only in the sandbox's own mount
 * namespace (detached from the host's), on a loop device: the `snapshot-apply` helper
 * mounts that same device again (the same superblock, so the sandbox's own view, page cache
 * included) read-only in a private mount namespace of its own, which nothing outlives. A
 * sandbox that does not run (killed, or stopped with its layer kept) has its image file
 * attached read-only instead.
 *
 * Consistency: a running sandbox is frozen (cgroup freezer) for the copy of its layer and
 * thawed after, also when the copy fails; the hard-link copy of the base image is made
 * before, so the freeze lasts as long as copying what the sandbox wrote. A paused one stays
 * paused, a stopped one stopped.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import type { ImageConfigOverride, ImageInfo, SandboxSpec } from '../driver.js';
import { freeze, freezeAsked, thaw } from './bundle/freezer.js';
import { ID_RANGE_SIZE } from './bundle/oci-config.js';
import { ANONYMOUS } from './images/pull-policy.js';
import { type ImageStore, imageInfoOf } from './images/store.js';
import { nativeBin } from './native.js';
import { isAlive, type SandboxRecord } from './records.js';
import { loopsUnder, run } from './rootfs/mounts.js';

/** What the driver lends the snapshots. */
export interface SnapshotHost {
  images: ImageStore;
  /** The driver's instance key: snapshots are listed and collected per instance. */
  instance: string;
  cgroupParent: string;
  /** Directory of the sandboxes' root layers (`<rootId>.img`). */
  rootsDir: string;
  /** The record of sandbox `id` if the driver knows it (running, paused or stopped), else undefined. */
  record(id: string): SandboxRecord | undefined;
  /** Image digests of every sandbox the driver has (running or not, recorded on disk or not). */
  imagesInUse(): Promise<Set<string>>;
}

/** Time limit of the layer's copy. */
const APPLY_MS = 10 * 60_000;

let helper: string | undefined;
function helperPath(): string {
  helper ??= nativeBin('snapshot-apply');
  return helper;
}

export class Snapshots {
  constructor(private readonly host: SnapshotHost) {}

  /** Compiles the helper (no request pays for it) and removes unnamed snapshot dirs left by a crash. */
  async init(): Promise<void> {
    helperPath();
    await this.collect();
  }

  /** Removes the files of this instance's snapshots that no ref names and no sandbox of it uses. */
  async collect(): Promise<void> {
    await this.host.images.snapshots.collect(this.host.instance, await this.host.imagesInUse());
  }

  async snapshot(id: string, ref: string, config?: ImageConfigOverride): Promise<ImageInfo> {
    const store = this.host.images.snapshots;
    store.check(ref);
    const rec = this.host.record(id);
    if (!rec) throw new SandboxdError('not_found', `sandbox ${id} not found`);
    await store.checkFree(ref);
    const base = await this.host.images.byDigest(rec.imageDigest);
    if (!base) throw new SandboxdError('internal', `the image of sandbox ${id} (${rec.imageDigest}) is gone`);
    const img = join(this.host.rootsDir, `${rec.rootId ?? rec.spec.id}.img`);
    const made = await store.make(ref, {
      // Its labels (a service it declares) go with it, also those of a record older than labels.
      base: await this.host.images.withLabelsOf(base.record, rec.spec.image),
      baseRootfs: base.rootfsDir,
      instance: this.host.instance,
      sandbox: id,
      apply: (rootfs, mnt) => this.apply(rec, img, rootfs, mnt),
      config,
    });
    return imageInfoOf(this.host.images.viewOf(made, ref));
  }

  /**
   * Image `to` with the files of `from` (resolved, and pulled if need be, as a create of
   * `pullAs` would) and `config` over its config: a snapshot of this instance whose base is
   * `from` (see images/snapshots.ts).
   */
  async derive(
    from: string,
    to: string,
    config: ImageConfigOverride,
    pullAs?: SandboxSpec['pullAs'],
  ): Promise<ImageInfo> {
    const store = this.host.images.snapshots;
    store.check(to);
    const base = await this.host.images.resolve(from, { puller: pullAs ?? ANONYMOUS });
    await store.checkFree(to);
    const rec = await this.host.images.byDigest(base.digest);
    if (!rec) throw new SandboxdError('internal', `the image ${from} (${base.digest}) is gone`);
    const made = await store.derive(to, {
      base: await this.host.images.withLabelsOf(rec.record, from),
      baseRootfs: rec.rootfsDir,
      instance: this.host.instance,
      config,
      from,
    });
    return imageInfoOf(this.host.images.viewOf(made, to));
  }

  async deleteImage(ref: string): Promise<void> {
    await this.host.images.snapshots.remove(ref, this.host.instance, await this.host.imagesInUse());
  }

  async listSnapshots(): Promise<ImageInfo[]> {
    const recs = await this.host.images.snapshots.list(this.host.instance);
    return recs.map((r) => imageInfoOf(this.host.images.viewOf(r, r.snapshot.ref)));
  }

  /** Copies the layer of `rec` (root image file `img`) onto `rootfs`, frozen if it runs; returns the bytes copied. */
  private async apply(rec: SandboxRecord, img: string, rootfs: string, mnt: string): Promise<number> {
    const running = isAlive(rec);
    const thawAfter = running && !(await freezeAsked(this.host.cgroupParent, rec.cid));
    if (thawAfter) await freeze(this.host.cgroupParent, rec.cid);
    try {
      // The device the sandbox's ext4 is on; without one (not running), the image file.
      const loop = (await loopsUnder(img)).find((l) => l.backingFile === img && !l.deleted);
      const source = loop?.device ?? img;
      if (!loop && (running || !existsSync(img)))
        throw new SandboxdError('internal', `the root layer of sandbox ${rec.spec.id} is not on this host`);
      const out = await run(helperPath(), [source, mnt, rootfs, String(rec.uidBase), String(ID_RANGE_SIZE)], APPLY_MS);
      return (JSON.parse(out) as { bytes: number }).bytes;
    } finally {
      if (thawAfter) await thaw(this.host.cgroupParent, rec.cid);
    }
  }
}
