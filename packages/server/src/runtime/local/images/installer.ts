/**
 * Puts prepared images into the catalog: each digest is unpacked at most once at a time in
 * this process, into the caller's work dir, and then renamed into `by-digest/` in one step.
 * An image whose config digest is unpacked already (or being unpacked) shares that rootfs
 * only with proof that it has its layers (see {@link Installer.install}).
 */
import { rename } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import type { Catalog } from './catalog.js';
import { checkDiffIds } from './diff-ids.js';
import type { PreparedSource } from './source.js';
import { unpackLayout, type ImageRecord } from './unpack.js';

export class Installer {
  /** Unpacks under way by config digest, with the manifest each unpacks. */
  private readonly running = new Map<string, { p: Promise<ImageRecord>; manifest: string }>();
  /** Unpacks done (for tests and metrics). */
  unpacks = 0;

  constructor(
    private readonly cat: Catalog,
    private readonly timeoutMs: number,
  ) {}

  /** Whether `digest` is being unpacked right now. */
  busy(digest: string): boolean {
    return this.running.has(digest);
  }

  /**
   * The record of `src`'s image, unpacking it (into `<work>/out`, then renamed into place)
   * unless it already is. Concurrent calls for one digest share one unpack; if another
   * process finished the same digest first, its copy wins. An image unpacked (or being
   * unpacked) from another manifest than `src`'s is shared only when `src`'s layers match
   * the config's diff_ids: the config digest alone does not prove one has the layers (a
   * config may be known without them), and the rootfs may be another account's image.
   * Throws `internal` on failure, a mismatch included (as umoci's own check on unpacking).
   */
  install(src: PreparedSource, work: string): Promise<ImageRecord> {
    const digest = src.image.configDigest;
    const cur = this.running.get(digest);
    if (cur?.manifest === src.image.manifestDigest) return cur.p;
    // Another manifest's unpack failing (umoci's check) is no reason for this one to fail.
    if (cur)
      return cur.p.then(
        (rec) => this.proven(src, rec),
        () => this.install(src, work),
      );
    const p = this.unpack(src, digest, join(work, 'out')).finally(() => this.running.delete(digest));
    this.running.set(digest, { p, manifest: src.image.manifestDigest });
    return p;
  }

  /** `rec` for `src` if `src` is the manifest `rec` was unpacked from, or has the layers its config names. */
  private async proven(src: PreparedSource, rec: ImageRecord): Promise<ImageRecord> {
    if (rec.manifestDigest === src.image.manifestDigest) return rec;
    try {
      await checkDiffIds(src.layout, src.image);
    } catch (e) {
      throw new SandboxdError('internal', `Unpacking image failed: ${(e as Error).message}`, {
        digest: src.image.configDigest,
      });
    }
    return rec;
  }

  private async unpack(src: PreparedSource, digest: string, out: string): Promise<ImageRecord> {
    const done = await this.cat.image(digest);
    if (done) return this.proven(src, done);
    let rec: ImageRecord;
    try {
      rec = await unpackLayout(src.layout, src.tag, src.image, out, this.timeoutMs);
    } catch (e) {
      throw new SandboxdError('internal', `Unpacking image failed: ${(e as Error).message}`, { digest });
    }
    this.unpacks++;
    try {
      await rename(out, this.cat.imageDir(digest));
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      const theirs = (code === 'ENOTEMPTY' || code === 'EEXIST') && (await this.cat.image(digest));
      if (!theirs) throw e;
      return theirs; // src's layers were checked by umoci: it unpacked them
    }
    return rec;
  }
}
