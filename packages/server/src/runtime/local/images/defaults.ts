/**
 * Makes sure the images every install needs exist: used by set-up scripts and tests.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEBIAN_REVISION } from './build-debian.js';
import type { ImageStore, StoredImage } from './store.js';

/** The local images built offline, in build order (small first). */
const DEFAULTS = ['local/busybox:latest', 'local/debian:bookworm'] as const;

/** The revision each build writes to `/etc/sandboxd-image-revision` (none: 1). */
const REVISION: Record<(typeof DEFAULTS)[number], number> = {
  'local/busybox:latest': 1,
  'local/debian:bookworm': DEBIAN_REVISION,
};

/** The revision a built image carries (1 when it has no marker: built before markers). */
export function imageRevision(img: StoredImage): number {
  try {
    return Number.parseInt(readFileSync(join(img.rootfsDir, 'etc/sandboxd-image-revision'), 'utf8'), 10) || 1;
  } catch {
    return 1;
  }
}

/**
 * Builds `local/busybox:latest` and `local/debian:bookworm` unless already in `store` at
 * this version's revision
 * (one after the other; Debian takes a few minutes). Resolves with both images.
 * Throws what {@link ImageStore.build} throws.
 */
export async function ensureDefaultImages(store: ImageStore, log?: (msg: string) => void): Promise<StoredImage[]> {
  const out: StoredImage[] = [];
  for (const ref of DEFAULTS) {
    if (await store.has(ref)) {
      const img = await store.resolve(ref);
      if (imageRevision(img) >= REVISION[ref]) {
        log?.(`${ref}: present (${img.digest.slice(0, 19)})`);
        out.push(img);
        continue;
      }
      // Sandboxes made from the old build keep its rootfs until the image store prunes it.
      log?.(
        `${ref}: present but older than this version's build (revision ${imageRevision(img)} < ${REVISION[ref]}): rebuilding`,
      );
    } else log?.(`${ref}: building`);
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
