import type { Capacity, SandboxdError } from '@sandboxd/protocol';
import type { Config } from '../config.js';
import { type CapacityFloors, capacityShortages, NO_ROOM } from '../domain/capacity.js';
import type { RuntimeCapacity, RuntimeDriver } from '../runtime/driver.js';
import type { Store } from '../store/store.js';

/** What the host has left for new sandboxes, as /healthz and /metrics report it (protocol's `Capacity`). */
export type CapacityReport = Capacity;

/** How long a measurement of the runtime is reused, ms. */
export const CAPACITY_CACHE_MS = 1000;

/**
 * The host's room for new sandboxes. Memory, disk and addresses come from the runtime's
 * `capacity()`, measured at most once per {@link CAPACITY_CACHE_MS} however many creates,
 * health checks and scrapes ask (concurrent askers share one measurement); the count of
 * sandboxes is the store's, and `maxSandboxes` itself is enforced atomically by the store's
 * reservation (see SandboxService.create), not here.
 */
export class CapacityService {
  private cached: { at: number; value: Promise<RuntimeCapacity> } | null = null;
  private readonly now: () => number;
  private readonly cacheMs: number;
  /** How refusals begin: one host's, or (role `api`) every runner's. */
  private readonly subject: string;

  constructor(
    private readonly d: {
      driver: Pick<RuntimeDriver, 'capacity'>;
      store: Pick<Store, 'countAllLive'>;
      config: Pick<Config, 'maxSandboxes' | 'createMinFreeMb' | 'createMinMemoryMb'>;
    },
    opts: { now?: () => number; cacheMs?: number; subject?: string } = {},
  ) {
    this.now = opts.now ?? (() => performance.now());
    this.cacheMs = opts.cacheMs ?? CAPACITY_CACHE_MS;
    this.subject = opts.subject ?? NO_ROOM.host;
  }

  /** The floors of creates, bytes. */
  private get floors(): CapacityFloors {
    return {
      memoryBytes: this.d.config.createMinMemoryMb * 2 ** 20,
      diskBytes: this.d.config.createMinFreeMb * 2 ** 20,
    };
  }

  /** The runtime's figures, from the cache while fresh. A failed measurement is not kept. */
  private measure(): Promise<RuntimeCapacity> {
    const at = this.now();
    if (this.cached && at - this.cached.at < this.cacheMs) return this.cached.value;
    const value = this.d.driver.capacity();
    const entry = { at, value };
    this.cached = entry;
    value.catch(() => {
      if (this.cached === entry) this.cached = null;
    });
    return value;
  }

  /** Forgets the cached measurement (a create just failed for lack of room: measure again). */
  forget(): void {
    this.cached = null;
  }

  /**
   * Throws 503 `capacity` naming the first of memory, disk and addresses that has no room
   * for another sandbox. The count of sandboxes is checked by the reservation itself.
   */
  async check(): Promise<void> {
    let [first] = this.shortages(await this.measure());
    if (first) {
      // A refusal rests on a figure measured now, never on one cached from before room was freed.
      this.forget();
      [first] = this.shortages(await this.measure());
    }
    if (first) throw first;
  }

  /** A refusal for each of memory, disk and addresses that is at its limit, in that order. */
  private shortages(c: RuntimeCapacity): SandboxdError[] {
    return capacityShortages(c, this.floors, this.subject);
  }

  /** What is left, for /healthz and /metrics. */
  async report(): Promise<CapacityReport> {
    const [c, used] = await Promise.all([this.measure(), this.d.store.countAllLive()]);
    const max = this.d.config.maxSandboxes || null;
    const f = this.floors;
    const full: Capacity['full'] = max !== null && used >= max ? ['sandboxes'] : [];
    for (const e of this.shortages(c)) full.push((e.details as { resource: Capacity['full'][number] }).resource);
    return {
      sandboxes: { used, max, free: max === null ? null : Math.max(0, max - used) },
      memory: { availableBytes: c.memoryAvailableBytes, floorBytes: f.memoryBytes },
      disk: { freeBytes: c.diskFreeBytes, floorBytes: f.diskBytes },
      addresses: c.addresses,
      full,
    };
  }
}
