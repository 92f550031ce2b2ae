/**
 * Snapshot images of the image store: `snapshot/<owner>/<name>` refs, made on this host
 * from a sandbox's root (see ../snapshot.ts), never pulled. Stored like any unpacked image
 * (catalog.ts): `by-digest/<hex>/rootfs` + `image.json`, and a ref file, so that a create
 * from a snapshot is a create from a cached image.
 *
 * The rootfs is flattened: a hard-link copy of the base image's rootfs (`cp -a --link`:
 * directories are new, every other entry shares the base's inode) onto which the sandbox's
 * writable layer is applied by replacing entries, never by writing to a shared inode (image
 * rootfs dirs are never written in place, so sharing is safe). A snapshot's digest is made
 * up (random), so each one, even one remade under a deleted one's ref, has a rootfs dir of
 * its own (the roots pool keys on that dir).
 *
 * Whole or nothing: the copy is made in a work dir of `tmp/` (a dead process's is removed
 * when a store opens), renamed into `by-digest/` with its record, and only then named by
 * its ref, which is created exclusively (link(2)): a second snapshot to one ref loses with
 * `conflict` and drops its copy. A crash between the rename and the ref leaves an unnamed
 * dir that {@link SnapshotStore.collect} removes. The record says which driver instance
 * made it: listing and collecting only ever look at one instance's snapshots (several
 * instances may share an image dir).
 *
 * An image build's images are snapshots too: its layers (a sandbox's snapshot with the
 * config the build reached, `config`), and images with another image's files and a config
 * of their own (`derive`: the hard-link copy alone, nothing applied), named
 * `snapshot/<account>/_l.<key>` (ref.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import { run } from '../rootfs/mounts.js';
import type { Catalog } from './catalog.js';
import { isSnapshotNamespace, parseRef } from './ref.js';
import type { ImageConfigOverride } from '../../driver.js';
import type { TempArea } from './tmp.js';
import type { ImageRecord } from './unpack.js';

/** The record (`image.json`) of a snapshot image. */
export interface SnapshotRecord extends ImageRecord {
  snapshot: {
    ref: string;
    /** Config digest of the image the sandbox ran (the base of the copy). */
    base: string;
    /** Instance key of the driver that made it. */
    instance: string;
    /** Sandbox it was taken of; `''` for an image derived from another (`from`). */
    sandbox: string;
    /** The ref of the image it was derived from (SnapshotStore.derive), when it was. */
    from?: string;
  };
}

export function isSnapshotRecord(r: ImageRecord | undefined): r is SnapshotRecord {
  return !!r && typeof (r as Partial<SnapshotRecord>).snapshot?.instance === 'string';
}

/** Time limits: the hard-link copy of the base, and the layer's copy. */
const LINK_COPY_MS = 10 * 60_000;

export interface MakeSnapshot {
  /** Record of the base image (its rootfs must exist). */
  base: ImageRecord;
  baseRootfs: string;
  instance: string;
  sandbox: string;
  /**
   * Applies the sandbox's writable layer onto `rootfs` (the hard-link copy of the base);
   * `mnt` is an empty dir to mount the layer at. Resolves with the bytes it copied.
   */
  apply: (rootfs: string, mnt: string) => Promise<number>;
  /** Config fields replacing the base's in the record (an image build's). */
  config?: ImageConfigOverride;
}

/** `base`'s config with each field of `c` given in its place (null entrypoint or cmd: none). */
export function withConfig(base: ImageRecord, c: ImageConfigOverride = {}): ImageRecord {
  return {
    ...base,
    env: c.env !== undefined ? { ...c.env } : base.env,
    workingDir: c.workingDir !== undefined ? c.workingDir : base.workingDir,
    user: c.user !== undefined ? c.user : base.user,
    entrypoint: c.entrypoint !== undefined ? [...(c.entrypoint ?? [])] : base.entrypoint,
    cmd: c.cmd !== undefined ? [...(c.cmd ?? [])] : base.cmd,
    labels: c.labels !== undefined ? { ...c.labels } : base.labels,
  };
}

export class SnapshotStore {
  /** Digests renamed into place whose ref is not written yet: never collected. */
  private readonly making = new Set<string>();

  constructor(
    private readonly cat: Catalog,
    private readonly tmp: TempArea,
  ) {}

  /** The canonical form of a snapshot ref; `validation` for anything else. */
  check(ref: string): string {
    const r = parseRef(ref);
    if (!r.snapshot)
      throw new SandboxdError('validation', 'Invalid snapshot reference: want snapshot/<owner>/<name>', {
        image: ref,
      });
    return r.canonical;
  }

  /** Throws `conflict` when `ref` names an image already. */
  async checkFree(ref: string): Promise<void> {
    if (await this.cat.ref(this.check(ref))) throw new SandboxdError('conflict', `Image ${ref} exists`, { image: ref });
  }

  /** Makes snapshot image `ref` (see the file's comment). Throws `validation`, `conflict`, `internal`. */
  async make(ref: string, o: MakeSnapshot): Promise<SnapshotRecord> {
    return this.install(ref, o, { sandbox: o.sandbox });
  }

  /**
   * Makes snapshot image `ref` of the files of `o.base` (its hard-link copy, nothing applied)
   * with the config `o.config`: an image build's config-only steps. Whole or nothing as
   * {@link make}. `sizeBytes` 0: it adds no file. Throws `validation`, `conflict`, `internal`.
   */
  async derive(ref: string, o: Omit<MakeSnapshot, 'apply' | 'sandbox'> & { from: string }): Promise<SnapshotRecord> {
    return this.install(ref, { ...o, sandbox: '', apply: async () => 0 }, { sandbox: '', from: o.from });
  }

  private async install(
    ref: string,
    o: MakeSnapshot,
    origin: { sandbox: string; from?: string },
  ): Promise<SnapshotRecord> {
    const canonical = this.check(ref);
    await this.checkFree(ref);
    return this.tmp.with('snapshot', async (work) => {
      const out = join(work, 'out');
      const mnt = join(work, 'mnt');
      await mkdir(out, { mode: 0o755 });
      await mkdir(mnt, { mode: 0o700 });
      const rootfs = join(out, 'rootfs');
      await run('cp', ['-a', '--link', '--no-target-directory', o.baseRootfs, rootfs], LINK_COPY_MS);
      const bytes = await o.apply(rootfs, mnt);
      const digest = `sha256:${createHash('sha256')
        .update(`${canonical}\n${o.instance}\n${Date.now()}\n${randomBytes(16).toString('hex')}`)
        .digest('hex')}`;
      const config = withConfig(o.base, o.config);
      const record: SnapshotRecord = {
        digest,
        manifestDigest: digest,
        env: config.env,
        workingDir: config.workingDir,
        user: config.user,
        sizeBytes: bytes,
        entrypoint: config.entrypoint,
        cmd: config.cmd,
        labels: config.labels,
        architecture: o.base.architecture,
        unpackedAt: new Date().toISOString(),
        snapshot: { ref: canonical, base: o.base.digest, instance: o.instance, ...origin },
      };
      await writeFile(join(out, 'image.json'), JSON.stringify(record, null, 2));
      this.making.add(digest);
      try {
        await rename(out, this.cat.imageDir(digest));
        if (!(await this.cat.createRef(canonical, digest))) {
          await this.tmp.discard(this.cat.imageDir(digest));
          throw new SandboxdError('conflict', `Image ${ref} exists`, { image: ref });
        }
      } finally {
        this.making.delete(digest);
      }
      return record;
    });
  }

  /**
   * Forgets snapshot `ref` (no ref of another form, none of another instance's: no-op) and
   * removes its files unless `inUse` (image digests of sandboxes) holds its digest: those
   * stay until a {@link collect} (every call here runs one) finds them unused.
   */
  async remove(ref: string, instance: string, inUse: ReadonlySet<string>): Promise<void> {
    if (!isSnapshotNamespace(ref)) return;
    let canonical: string;
    try {
      canonical = this.check(ref);
    } catch {
      return; // not a ref a snapshot can have: missing
    }
    await this.cat.deleteRef(canonical);
    await this.collect(instance, inUse);
  }

  /** Snapshot images of `instance` that a ref names (`ref` is the snapshot ref). */
  async list(instance: string): Promise<SnapshotRecord[]> {
    const out: SnapshotRecord[] = [];
    for (const e of await this.cat.allRefs()) {
      if (!isSnapshotNamespace(e.ref)) continue;
      const rec = await this.cat.image(e.digest);
      if (isSnapshotRecord(rec) && rec.snapshot.instance === instance && rec.snapshot.ref === e.ref) out.push(rec);
    }
    return out;
  }

  /**
   * Removes the files of `instance`'s snapshot images that no ref names (deleted, or cut
   * short by a crash before their ref) unless `inUse` holds their digest. Returns the
   * digests removed.
   */
  async collect(instance: string, inUse: ReadonlySet<string>): Promise<string[]> {
    const named = new Set((await this.cat.allRefs()).map((e) => e.digest));
    const gone: string[] = [];
    for (const d of await this.cat.allDigests()) {
      if (named.has(d) || inUse.has(d) || this.making.has(d)) continue;
      const rec = await this.cat.image(d).catch(() => undefined);
      if (!isSnapshotRecord(rec) || rec.snapshot.instance !== instance) continue;
      await this.tmp.discard(this.cat.imageDir(d));
      gone.push(d);
    }
    return gone;
  }
}
