import { SandboxdError } from '@sandboxd/protocol';
import type { Logger } from 'pino';
import type { Clock } from '../domain/clock.js';
import { isLayerNamespace, parseLayerRef } from '../domain/snapshots.js';
import type { ImageInfo, RuntimeDriver } from '../runtime/driver.js';
import type { LayerRecord, Store } from '../store/store.js';

/** 403 `quota`: the account's build cache would hold more than its plan's `buildCacheBytes`. */
export function buildCacheQuotaError(used: number, limit: number): SandboxdError {
  return new SandboxdError(
    'quota',
    `Build cache quota reached: the account's cached layers would use ${used} bytes even after removing every unused one; the plan allows ${limit}`,
    { quota: 'buildCacheBytes', limit, used },
  );
}

/** A config step's marker in the cache (a row with no image: see {@link BuildCache.mark}). */
const isMarker = (l: LayerRecord) => l.driverRef === '';
/** Markers not seen for this long are forgotten by {@link BuildCache.sweep}. */
const MARKER_TTL_MS = 30 * 86_400_000;

/**
 * The build cache: each step's result is an image of the runtime (a layer,
 * `snapshot/<accountId>/_l.<key>`) with a row keyed by the account and the step's key.
 *
 * A layer is in use while a template row names its image or a build of this process holds
 * it ({@link hold}); every other layer is cache, removed least recently used first while its
 * account is over its plan's `buildCacheBytes`. Rows whose image vanished are forgotten, and
 * layer images without a row (nor a template naming them) are removed ({@link sweep}).
 */
export class BuildCache {
  /** Layer images held by builds running here: ref -> holds. */
  private readonly held = new Map<string, number>();

  constructor(
    private readonly d: {
      store: Store;
      driver: Pick<RuntimeDriver, 'resolveImage' | 'deleteImage' | 'listSnapshots'>;
      clock: Clock;
      log: Logger;
    },
  ) {}

  hold(ref: string): void {
    this.held.set(ref, (this.held.get(ref) ?? 0) + 1);
  }

  release(ref: string): void {
    const n = (this.held.get(ref) ?? 0) - 1;
    if (n > 0) this.held.set(ref, n);
    else this.held.delete(ref);
  }

  /**
   * The layer of `key` with its image, when both are there (its use is recorded); null
   * otherwise. A row whose image the runtime no longer has is forgotten.
   */
  async lookup(accountId: string, key: string): Promise<{ layer: LayerRecord; info: ImageInfo } | null> {
    const layer = await this.d.store.getLayer(accountId, key);
    if (!layer || isMarker(layer)) return null;
    let info: ImageInfo;
    try {
      info = await this.d.driver.resolveImage(layer.driverRef);
    } catch (e) {
      if (!(e instanceof SandboxdError && e.kind === 'template_not_found')) throw e;
      this.d.log.warn({ accountId, key, image: layer.driverRef }, 'a cached layer lost its image; it is forgotten');
      await this.d.store.deleteLayer(accountId, key);
      return null;
    }
    const at = this.d.clock.now();
    await this.d.store.touchLayer(accountId, key, at);
    return { layer: { ...layer, lastUsedAt: Math.max(layer.lastUsedAt, at) }, info };
  }

  /**
   * Records that config step `key` was seen (a row without an image, 0 bytes) and says
   * whether it was seen before.
   */
  async mark(accountId: string, key: string): Promise<boolean> {
    const at = this.d.clock.now();
    const had = await this.d.store.getLayer(accountId, key);
    if (had) await this.d.store.touchLayer(accountId, key, at);
    else
      await this.d.store.putLayer({
        accountId,
        key,
        driverRef: '',
        parentKey: null,
        sizeBytes: 0,
        createdAt: at,
        lastUsedAt: at,
      });
    return had !== null;
  }

  async record(l: LayerRecord): Promise<void> {
    await this.d.store.putLayer(l);
  }

  /**
   * Makes the account's cache fit `quotaBytes`: unused layers go, least recently used first,
   * until it does. Throws `quota` when the layers in use alone pass it.
   */
  async fit(accountId: string, quotaBytes: number): Promise<void> {
    const { used } = await this.collect(accountId, quotaBytes);
    if (used > quotaBytes) throw buildCacheQuotaError(used, quotaBytes);
  }

  /**
   * Removes the account's unused layers, least recently used first, while its layers hold
   * more than `quotaBytes`. Returns what it removed and the bytes left.
   */
  async collect(accountId: string, quotaBytes: number): Promise<{ removed: string[]; used: number }> {
    const removed: string[] = [];
    const layers = await this.d.store.listLayers(accountId);
    let used = layers.reduce((n, l) => n + l.sizeBytes, 0);
    if (used <= quotaBytes) return { removed, used };
    const named = new Set((await this.d.store.listTemplates(accountId)).map((t) => t.driverRef));
    for (const l of layers) {
      if (used <= quotaBytes) break;
      if (isMarker(l) || named.has(l.driverRef) || this.held.has(l.driverRef)) continue;
      await this.remove(l);
      used -= l.sizeBytes;
      removed.push(l.key);
    }
    if (removed.length)
      this.d.log.info(
        { accountId, removed: removed.length, used, quotaBytes },
        'build cache: least recently used layers removed',
      );
    return { removed, used };
  }

  /**
   * Removes layer `l` unless it is in use (a template names its image, a build here holds
   * it); the row is removed only when it still names that image. Returns whether it went.
   */
  async discard(l: LayerRecord): Promise<boolean> {
    if (isMarker(l) || this.held.has(l.driverRef)) return false;
    if ((await this.d.store.listTemplates(l.accountId)).some((t) => t.driverRef === l.driverRef)) return false;
    await this.d.driver.deleteImage(l.driverRef);
    const row = await this.d.store.getLayer(l.accountId, l.key);
    if (row?.driverRef === l.driverRef) await this.d.store.deleteLayer(l.accountId, l.key);
    return true;
  }

  /** Removes a layer's image and row (its image first: a row never names a missing image for long). */
  async remove(l: LayerRecord): Promise<void> {
    if (!isMarker(l)) await this.d.driver.deleteImage(l.driverRef);
    await this.d.store.deleteLayer(l.accountId, l.key);
  }

  /**
   * Matches the layer rows with the runtime's images: rows whose image vanished are
   * forgotten, and layer images that no row nor template names are removed, except those
   * of `busy` accounts (a build of another server may be between its snapshot and its row).
   */
  async sweep(busy: Set<string>): Promise<{ forgotten: string[]; removed: string[] }> {
    const images = new Set(
      (await this.d.driver.listSnapshots()).map((i) => i.ref).filter((ref) => isLayerNamespace(ref)),
    );
    const forgotten: string[] = [];
    const removed: string[] = [];
    const named = new Set<string>();
    for (const accountId of await this.d.store.listLayerAccounts()) {
      for (const l of await this.d.store.listLayers(accountId)) {
        if (isMarker(l)) {
          // Markers of config steps not seen for a while go (they are rows only).
          if (this.d.clock.now() - l.lastUsedAt > MARKER_TTL_MS) await this.d.store.deleteLayer(accountId, l.key);
          continue;
        }
        named.add(l.driverRef);
        if (images.has(l.driverRef) || this.held.has(l.driverRef)) continue;
        await this.d.store.deleteLayer(accountId, l.key);
        forgotten.push(l.driverRef);
      }
    }
    for (const ref of images) {
      if (named.has(ref) || this.held.has(ref)) continue;
      const accountId = parseLayerRef(ref)?.accountId ?? ref.split('/')[1];
      if (busy.has(accountId)) continue;
      if ((await this.d.store.listTemplates(accountId)).some((t) => t.driverRef === ref)) continue;
      await this.d.driver
        .deleteImage(ref)
        .then(() => removed.push(ref))
        .catch((err) => this.d.log.warn({ err, image: ref }, 'removing a stray build layer failed'));
    }
    if (forgotten.length || removed.length)
      this.d.log.info({ forgotten: forgotten.length, removed: removed.length }, 'build cache matched with the runtime');
    return { forgotten, removed };
  }
}
