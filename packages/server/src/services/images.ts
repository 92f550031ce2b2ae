import { DRIVER_SNAPSHOT_PREFIX } from '../domain/snapshots.js';
import { createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { SandboxdError, SNAPSHOT_IMAGE_PREFIX, type Image } from '@sandboxd/protocol';
import type { DriverImageStore, ImageInfo, ImageProgress } from '../runtime/driver.js';
import type { ServiceDeps } from './context.js';

/** Largest image archive accepted by import, in bytes (16 GiB). */
export const MAX_IMPORT_BYTES = 16 * 1024 ** 3;

/** Options of pull and build. */
export interface ImageJobOptions {
  /** Called in order with each progress report; the last one has phase `done`. */
  onProgress?: (p: ImageProgress) => void;
}

function wire(i: ImageInfo): Image {
  return {
    ref: i.ref,
    digest: i.digest,
    sizeBytes: i.sizeBytes,
    workingDir: i.workingDir,
    user: i.user,
    env: { ...i.env },
  };
}

/**
 * Admin image management over the runtime driver: list, pull, build and import. Server-wide
 * (images are shared by every account). Throws `validation` when the runtime has no image
 * management, and whatever the driver's image store throws (`template_not_found`,
 * `validation`, `internal`).
 */
export class ImageService {
  constructor(private readonly d: Pick<ServiceDeps, 'driver' | 'config' | 'log'>) {}

  /** Every cached image but accounts' snapshots (private; each account lists its own). */
  async list(): Promise<Image[]> {
    return (await this.d.driver.listImages()).filter((i) => !i.ref.startsWith(DRIVER_SNAPSHOT_PREFIX)).map(wire);
  }

  /** Pulls `ref` from its registry even when cached. */
  async pull(ref: string, opts: ImageJobOptions = {}): Promise<Image> {
    return this.job('pull', ref, () => this.store().pull(ref, opts));
  }

  /** (Re)builds one of the images built offline on this host. */
  async build(ref: string, opts: ImageJobOptions = {}): Promise<Image> {
    return this.job('build', ref, () => this.store().build(ref, opts));
  }

  /**
   * Writes the tar stream `body` to a temporary file under the data dir, imports it and
   * removes the file. Throws `payload_too_large` past {@link MAX_IMPORT_BYTES},
   * `validation` when the archive is unreadable or names no image and `ref` is missing.
   */
  async importArchive(body: AsyncIterable<Uint8Array>, ref?: string, opts: { maxBytes?: number } = {}): Promise<Image> {
    const store = this.store();
    const max = opts.maxBytes ?? MAX_IMPORT_BYTES;
    const parent = join(this.d.config.dataDir, 'tmp');
    await mkdir(parent, { recursive: true });
    const dir = await mkdtemp(join(parent, 'import-'));
    try {
      const file = join(dir, 'image.tar');
      let seen = 0;
      const cap = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          seen += chunk.length;
          if (seen > max) cb(new SandboxdError('payload_too_large', `Image archive is larger than ${max} bytes`));
          else cb(null, chunk);
        },
      });
      await pipeline(body, cap, createWriteStream(file));
      if (seen === 0) throw new SandboxdError('validation', 'Image archive is empty: send the tar as the request body');
      return await this.job('import', ref ?? '(archive name)', () => store.importArchive(file, ref));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  private store(): DriverImageStore {
    const s = this.d.driver.images;
    if (!s) throw new SandboxdError('validation', 'This runtime has no image management (pull, import, build)');
    return s;
  }

  private async job(what: string, ref: string, fn: () => Promise<ImageInfo>): Promise<Image> {
    if (ref.startsWith(DRIVER_SNAPSHOT_PREFIX) || ref.startsWith(SNAPSHOT_IMAGE_PREFIX))
      throw new SandboxdError(
        'validation',
        `${ref}: snapshot images are made by POST /api/v1/sandboxes/{id}/snapshot`,
        {
          image: ref,
        },
      );
    const t0 = Date.now();
    try {
      const img = wire(await fn());
      this.d.log.info({ image: img.ref, digest: img.digest, ms: Date.now() - t0 }, `image ${what} done`);
      return img;
    } catch (e) {
      this.d.log.warn({ image: ref, err: (e as Error).message }, `image ${what} failed`);
      throw e;
    }
  }
}
