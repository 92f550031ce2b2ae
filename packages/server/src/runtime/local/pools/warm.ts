import type { ResourceLimits } from '../../driver.js';
import { type Pool, pooledId } from './pool.js';

/** One image the warm pool keeps started sandboxes of, and how many. */
export interface WarmEntry {
  /** Image reference, as creates name it (e.g. `local/debian:bookworm`). */
  image: string;
  /** Sandboxes kept started; 0 keeps none. */
  size: number;
}

/** What a pooled sandbox was started with: the image's digest, root disk cap and limits. */
export interface WarmShape {
  digest: string;
  rootDiskBytes: number;
  limits: ResourceLimits;
}

/** Options of {@link WarmPool}. */
export interface WarmPoolOptions {
  entries: readonly WarmEntry[];
  /** Limits pooled sandboxes start with until a create of their image asks for others. */
  limits: ResourceLimits;
  /**
   * Starts a sandbox of `image` under container id `cid` with `limits` (which holds the
   * root disk cap); resolves with the digest of the image it runs. Rejects when it cannot
   * (the driver has then removed whatever it made).
   */
  start: (cid: string, image: string, limits: ResourceLimits) => Promise<string>;
  /** Stops and removes pooled sandbox `cid` from the host. */
  release: (cid: string) => Promise<void>;
}

interface EntryState {
  entry: WarmEntry;
  /** Started sandboxes, oldest first. */
  ready: { cid: string; shape: WarmShape }[];
  /** Sandboxes being started. */
  starting: number;
  /** Limits (and root disk cap) the next sandbox starts with: those of the last create of the image. */
  limits: ResourceLimits;
  /** Digest of the image as last started or asked for; sandboxes of another digest are stale. */
  digest: string | null;
}

/**
 * Sandboxes already started, per configured image, under `warm_` container ids: a create of
 * such an image with the root disk cap they were started with claims one instead of
 * starting one (see LocalDriver). A pooled sandbox has never run anything of any account;
 * it is handed out once and never comes back.
 *
 * The root disk cap is fixed when a sandbox starts, so the pool keeps each image's
 * sandboxes at the cap (and limits) of the last create of that image; sandboxes of another
 * cap, or of an older build of the image, are released by the refill. Memory, CPU and pid
 * limits are applied at claim. Takes are synchronous: concurrent creates never get the same one.
 */
export class WarmPool implements Pool {
  readonly prefix = 'warm_';
  private readonly states: EntryState[];

  constructor(private readonly o: WarmPoolOptions) {
    this.states = o.entries
      .filter((e) => e.size > 0)
      .map((entry) => ({ entry, ready: [], starting: 0, limits: { ...o.limits }, digest: null }));
  }

  /** True when some image is pooled at all. */
  get enabled(): boolean {
    return this.states.length > 0;
  }

  /**
   * The container id of a started sandbox of image `image` (reference as asked, resolved to
   * `digest`) with root disk cap `limits.rootDiskBytes`, or undefined. Either way the pool
   * keeps the image's sandboxes for these limits from now on.
   */
  take(image: string, digest: string, limits: ResourceLimits): string | undefined {
    const st = this.states.find((s) => s.entry.image === image || s.digest === digest);
    if (!st) return undefined;
    st.limits = { ...limits };
    st.digest = digest;
    const i = st.ready.findIndex((r) => r.shape.digest === digest && r.shape.rootDiskBytes === limits.rootDiskBytes);
    return i >= 0 ? st.ready.splice(i, 1)[0].cid : undefined;
  }

  /** Ready sandboxes per image (for metrics and tests). */
  counts(): Record<string, number> {
    return Object.fromEntries(this.states.map((s) => [s.entry.image, s.ready.length]));
  }

  refillStep(): Promise<void> | null {
    for (const st of this.states) {
      const stale = st.ready.findIndex(
        (r) =>
          (st.digest !== null && r.shape.digest !== st.digest) || r.shape.rootDiskBytes !== st.limits.rootDiskBytes,
      );
      if (stale >= 0) return this.o.release(st.ready.splice(stale, 1)[0].cid);
    }
    for (const st of this.states) {
      if (st.ready.length + st.starting >= st.entry.size) continue;
      const cid = pooledId(this.prefix);
      const limits = { ...st.limits };
      st.starting++;
      return this.o
        .start(cid, st.entry.image, limits)
        .then((digest) => {
          st.digest ??= digest;
          st.ready.push({ cid, shape: { digest, rootDiskBytes: limits.rootDiskBytes, limits } });
        })
        .finally(() => {
          st.starting--;
        });
    }
    return null;
  }

  async drain(): Promise<void> {
    for (const st of this.states) for (const r of st.ready.splice(0)) await this.o.release(r.cid);
  }
}
