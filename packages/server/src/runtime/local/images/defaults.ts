/**
 * Makes sure the images every install needs exist: used by set-up scripts and tests.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ciRevision } from './build-code-interpreter.js';
import { DEBIAN_REVISION } from './build-debian.js';
import type { ImageStore, StoredImage } from './store.js';

/** The local images built offline, in build order (small first). */
const DEFAULTS = ['local/busybox:latest', 'local/debian:bookworm', 'local/code-interpreter:latest'] as const;

/**
 * The revision each build writes to `/etc/sandboxd-image-revision` (none: 1). A number is
 * bumped by hand (an older one is rebuilt); a string is a hash of the image's definition
 * (any other one is rebuilt).
 */
const REVISION: Record<(typeof DEFAULTS)[number], () => Promise<number | string>> = {
  'local/busybox:latest': async () => 1,
  'local/debian:bookworm': async () => DEBIAN_REVISION,
  'local/code-interpreter:latest': () => ciRevision(),
};

/** The revision marker of a built image as written (undefined: none). */
export function imageRevisionText(img: StoredImage): string | undefined {
  try {
    return readFileSync(join(img.rootfsDir, 'etc/sandboxd-image-revision'), 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** Whether `img` is at revision `want` (a number: at least it; a hash: exactly it). */
function upToDate(img: StoredImage, want: number | string): boolean {
  return typeof want === 'number' ? imageRevision(img) >= want : imageRevisionText(img) === want;
}

/** The revision a built image carries (1 when it has no marker: built before markers). */
export function imageRevision(img: StoredImage): number {
  try {
    return Number.parseInt(readFileSync(join(img.rootfsDir, 'etc/sandboxd-image-revision'), 'utf8'), 10) || 1;
  } catch {
    return 1;
  }
}

/**
 * Builds `local/busybox:latest`, `local/debian:bookworm` and `local/code-interpreter:latest`
 * unless already in `store` at this version's revision (one after the other; the Debian
 * ones take minutes). Resolves with the three images, in that order.
 * Throws what {@link ImageStore.build} throws.
 */
export async function ensureDefaultImages(store: ImageStore, log?: (msg: string) => void): Promise<StoredImage[]> {
  const out: StoredImage[] = [];
  for (const ref of DEFAULTS) {
    const want = await REVISION[ref]();
    if (await store.has(ref)) {
      const img = await store.resolve(ref);
      if (upToDate(img, want)) {
        log?.(`${ref}: present (${img.digest.slice(0, 19)})`);
        out.push(img);
        continue;
      }
      // Sandboxes made from the old build keep its rootfs until the image store prunes it.
      log?.(
        `${ref}: present but not this version's build (revision ${imageRevisionText(img) ?? 1}, want ${want}): rebuilding`,
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
