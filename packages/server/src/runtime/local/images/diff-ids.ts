/**
 * Proof that an image's layers are the ones its config names: the sha256 of each layer,
 * uncompressed, against the config's `rootfs.diff_ids` (what umoci checks when it unpacks).
 * The store keys unpacked images by config digest; an image whose config is already
 * unpacked is not unpacked again, so this is what stops a made-up image that copies another
 * one's config (not its layers) from being handed that one's rootfs (installer.ts).
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { Writable, type Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createZstdDecompress } from 'node:zlib';
import { blobPath, type SelectedImage } from './oci-read.js';

/** The decompressor of a layer media type (null: stored uncompressed); throws for any other. */
function decompressor(mediaType: string): Transform | null {
  if (/gzip$/.test(mediaType)) return createGunzip();
  if (/zstd$/.test(mediaType)) return createZstdDecompress();
  if (/tar$/.test(mediaType)) return null;
  throw new Error(`layer media type ${mediaType} is not supported`);
}

/** sha256 of blob `digest` of `layout`, uncompressed as `mediaType` says. */
async function diffId(layout: string, digest: string, mediaType: string): Promise<string> {
  const hash = createHash('sha256');
  const sink = new Writable({
    write(chunk, _enc, done) {
      hash.update(chunk);
      done();
    },
  });
  const d = decompressor(mediaType);
  const src = createReadStream(blobPath(layout, digest));
  await (d ? pipeline(src, d, sink) : pipeline(src, sink));
  return `sha256:${hash.digest('hex')}`;
}

/**
 * Checks every layer of `image` (in OCI layout `layout`) against its config's diff_ids.
 * Throws an Error naming the first layer that does not match (or a count that differs).
 */
export async function checkDiffIds(layout: string, image: SelectedImage): Promise<void> {
  const layers = image.manifest.layers ?? [];
  const want = image.config.rootfs?.diff_ids ?? [];
  if (layers.length !== want.length)
    throw new Error(`the manifest has ${layers.length} layers, the config ${want.length} diff_ids`);
  for (const [i, l] of layers.entries()) {
    const got = await diffId(layout, l.digest, l.mediaType);
    if (got !== want[i]) throw new Error(`layer ${l.digest}: diffid mismatch: got ${got} expected ${want[i]}`);
  }
}
