/**
 * Puts prepared images into the catalog: each digest is unpacked at most once at a time in
 * this process, into the caller's work dir, and then renamed into `by-digest/` in one step.
 */
import { rename } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import type { Catalog } from './catalog.js';
import type { PreparedSource } from './source.js';
import { unpackLayout, type ImageRecord } from './unpack.js';

export class Installer {
  private readonly running = new Map<string, Promise<ImageRecord>>();
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
   * process finished the same digest first, its copy wins. Throws `internal` on failure.
   */
  install(src: PreparedSource, work: string): Promise<ImageRecord> {
    const digest = src.image.configDigest;
    const cur = this.running.get(digest);
    if (cur) return cur;
    const p = this.unpack(src, digest, join(work, 'out')).finally(() => this.running.delete(digest));
    this.running.set(digest, p);
    return p;
  }

  private async unpack(src: PreparedSource, digest: string, out: string): Promise<ImageRecord> {
    const done = await this.cat.image(digest);
    if (done) return done;
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
      return theirs;
    }
    return rec;
  }
}
