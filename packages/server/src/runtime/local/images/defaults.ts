/**
 * Makes sure the images every install needs exist: used by set-up scripts and tests.
 */
import type { ImageStore, StoredImage } from './store.js';

/** The local images built offline, in build order (small first). */
const DEFAULTS = ['local/busybox:latest', 'local/debian:bookworm'] as const;

/**
 * Builds `local/busybox:latest` and `local/debian:bookworm` unless already in `store`
 * (one after the other; Debian takes a few minutes). Resolves with both images.
 * Throws what {@link ImageStore.build} throws.
 */
export async function ensureDefaultImages(store: ImageStore, log?: (msg: string) => void): Promise<StoredImage[]> {
  const out: StoredImage[] = [];
  for (const ref of DEFAULTS) {
    if (await store.has(ref)) {
      const img = await store.resolve(ref);
      log?.(`${ref}: present (${img.digest.slice(0, 19)})`);
      out.push(img);
      continue;
    }
    log?.(`${ref}: building`);
    const t0 = Date.now();
    const img = await store.build(ref, {
      onProgress: (p) => {
        if (p.phase !== 'done') log?.(`${ref}: ${p.phase} (+${((Date.now() - t0) / 1000).toFixed(1)} s)`);
      },
    });
    const mb = (img.sizeBytes / 1048576).toFixed(1);
    log?.(`${ref}: built ${img.digest.slice(0, 19)} (${mb} MiB) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    out.push(img);
  }
  return out;
}
