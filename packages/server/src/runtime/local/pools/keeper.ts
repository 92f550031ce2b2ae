import type { NetworkManager, SandboxNet } from '../network/manager.js';
import type { RootfsManager } from '../rootfs/roots.js';
import { NetPool } from './nets.js';
import type { Pool } from './pool.js';
import { type PooledRoot, RootPool } from './roots.js';
import { WarmPool, type WarmPoolOptions } from './warm.js';

/**
 * How long after a take the refill starts: the refill spawns `ip`, `mkfs` and mounts, and
 * would otherwise compete with the create that took and with its first exec, which usually
 * follows at once.
 */
export const POOL_REFILL_DELAY_MS = 50;

/** Options of {@link PoolKeeper}. */
export interface PoolKeeperOptions {
  /** Networks kept made; 0 keeps none. */
  nets: number;
  /** Roots kept prepared for the image and size last taken for; 0 keeps none. */
  roots: number;
  network: Pick<NetworkManager, 'attach' | 'detach' | 'hasFreeAddress'>;
  rootfs: Pick<RootfsManager, 'prepare' | 'release'>;
  /** A uid slot that neither a sandbox nor a pool ({@link PoolKeeper.slots}) holds. */
  allocSlot: () => number;
  /** First host uid of `slot`'s range. */
  uidBase: (slot: number) => number;
  /** Started sandboxes kept per image; none when omitted. */
  warm?: Omit<WarmPoolOptions, 'entries'> & { entries: WarmPoolOptions['entries'] };
  /**
   * True while requests are being served that the refill would compete with (creates in
   * progress): the next refill step then waits until it turns false, at most
   * {@link POOL_MAX_YIELD_MS}.
   */
  busy?: () => boolean;
}

/** How often a refill that waits for requests looks again. */
export const POOL_YIELD_MS = 20;
/** The longest a refill step waits for requests in progress to finish. */
export const POOL_MAX_YIELD_MS = 1000;

/**
 * The local driver's pools and their refill. A take hands out what a pool holds at once
 * (or nothing) and schedules a refill; the refill runs in the background, one step at a
 * time across all pools (earlier pools first), until every pool is full. The pools are an
 * optimisation: a failed step ends that refill, the pools stay short and a create makes what
 * it needs; the next take schedules a new refill. Leftovers of a crash are recovery's.
 * Takes are synchronous, so concurrent creates never get the same thing.
 *
 * A new kind of pooled thing is one more {@link Pool} in `pools` and a take method here.
 */
export class PoolKeeper {
  private readonly nets: NetPool;
  private readonly roots: RootPool;
  private readonly warm: WarmPool;
  private readonly busy: () => boolean;
  /** Refilled in this order. */
  private readonly pools: readonly Pool[];
  private filling: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(o: PoolKeeperOptions) {
    this.nets = new NetPool({ size: o.nets, network: o.network });
    this.roots = new RootPool({ size: o.roots, rootfs: o.rootfs, allocSlot: o.allocSlot, uidBase: o.uidBase });
    const noop = () => Promise.reject(new Error('no warm pool'));
    this.warm = new WarmPool(o.warm ?? { entries: [], limits: {} as never, start: noop, release: noop });
    // Networks and roots first: they serve cold creates, which wait on them.
    this.pools = [this.nets, this.roots, this.warm];
    this.busy = o.busy ?? (() => false);
  }

  /** Id prefixes of the pooled things, one per pool. */
  get prefixes(): string[] {
    return this.pools.map((p) => p.prefix);
  }

  /** True when `id` is (or was) a pooled thing's id, of any pool. */
  owns(id: string): boolean {
    return this.pools.some((p) => id.startsWith(p.prefix));
  }

  /** A network made ahead of need (under its pooled id), or undefined; schedules a refill. */
  takeNet(): SandboxNet | undefined {
    const net = this.nets.take();
    this.refillSoon();
    return net;
  }

  /**
   * {@link takeNet} once the network a refill step is making now is made: when no address
   * is left, the last one may be going to that network, which the create should then get
   * rather than a 503 for addresses while it is moments from ready.
   */
  async takeNetBeingMade(): Promise<SandboxNet | undefined> {
    await this.nets.made();
    return this.takeNet();
  }

  /**
   * A root prepared for image rootfs `lowerDir` and cap `rootDiskBytes` (with its uid slot),
   * or undefined; from now on roots are prepared for these. Schedules a refill.
   */
  takeRoot(lowerDir: string, rootDiskBytes: number): PooledRoot | undefined {
    const root = this.roots.take(lowerDir, rootDiskBytes);
    this.refillSoon();
    return root;
  }

  /**
   * The container id of a started sandbox of `image` (resolved to `digest`) with these
   * limits' root disk cap, or undefined; schedules a refill. See {@link WarmPool.take}.
   */
  takeWarm(image: string, digest: string, limits: Parameters<WarmPool['take']>[2]): string | undefined {
    if (!this.warm.enabled) return undefined;
    const cid = this.warm.take(image, digest, limits);
    this.refillSoon();
    return cid;
  }

  /** Started sandboxes ready per pooled image. */
  warmCounts(): Record<string, number> {
    return this.warm.counts();
  }

  /** Networks made ahead of need, or being made now, that a create can take (see {@link takeNetBeingMade}). */
  readyNets(): number {
    return this.nets.available();
  }

  /** Uid slots held by pooled things and by things being made for a pool. */
  slots(): number[] {
    return this.roots.slots();
  }

  /** Starts a refill now, or returns the one running. Never rejects. */
  refill(): Promise<void> {
    if (this.filling || this.closed) return this.filling ?? Promise.resolve();
    const run = async () => {
      while (!this.closed) {
        // Requests first, but not for ever: under a steady stream of creates a step still
        // runs every POOL_MAX_YIELD_MS, so the pools do not stay empty.
        for (let waited = 0; this.busy() && waited < POOL_MAX_YIELD_MS && !this.closed; waited += POOL_YIELD_MS)
          await new Promise((r) => setTimeout(r, POOL_YIELD_MS));
        if (this.closed) break;
        const step = this.nextStep();
        if (!step) break;
        await step;
      }
    };
    // Cleared in a callback, never synchronously: a refill with nothing to do ends before
    // `filling` is assigned, and clearing it first would leave it set for good (no refill again).
    const filling: Promise<void> = run()
      .catch(() => {
        /* create makes what it needs */
      })
      .finally(() => {
        if (this.filling === filling) this.filling = null;
      });
    this.filling = filling;
    return filling;
  }

  /**
   * Stops refilling for good and waits for a step in progress. What the pools hold stays
   * on the host; the next `recover()` of a driver removes it.
   */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.filling;
  }

  /** {@link close}, then releases everything the pools hold, pool by pool. */
  async drain(): Promise<void> {
    await this.close();
    for (const p of this.pools) await p.drain();
  }

  /** The first pool's next step that has one, started. */
  private nextStep(): Promise<void> | null {
    for (const p of this.pools) {
      const step = p.refillStep();
      if (step) return step;
    }
    return null;
  }

  private refillSoon(): void {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.refill();
    }, POOL_REFILL_DELAY_MS);
    this.timer.unref();
  }
}
