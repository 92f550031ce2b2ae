import type { RootfsManager } from '../rootfs/roots.js';
import { type Pool, pooledId } from './pool.js';

/** A root layer prepared ahead of need, with the uid slot it was prepared for. */
export interface PooledRoot {
  id: string;
  slot: number;
  lowerDir: string;
  rootDiskBytes: number;
  /** The merged directory, the OCI `root.path`. */
  rootfs: string;
}

/**
 * Root layers prepared ahead of need, under `rootpool_` ids, for the image and size last
 * asked for: a root is made for one uid slot and one image, so roots for anything else are
 * released. Each holds its slot from the start of its preparation until it is taken.
 */
export class RootPool implements Pool {
  readonly prefix = 'rootpool_';
  private readonly roots: PooledRoot[] = [];
  /** Slots of roots being prepared. */
  private readonly preparing = new Set<number>();
  private want: { lowerDir: string; rootDiskBytes: number } | null = null;

  constructor(
    private readonly o: {
      /** How many roots to keep prepared for the image and size last asked for; 0 keeps none. */
      size: number;
      rootfs: Pick<RootfsManager, 'prepare' | 'release'>;
      /** A uid slot that neither a sandbox nor this pool ({@link slots}) holds. */
      allocSlot: () => number;
      /** First host uid of `slot`'s range. */
      uidBase: (slot: number) => number;
    },
  ) {}

  /**
   * A root prepared for image rootfs `lowerDir` and cap `rootDiskBytes`, or undefined. Either
   * way, the pool is kept for these from now on.
   */
  take(lowerDir: string, rootDiskBytes: number): PooledRoot | undefined {
    this.want = { lowerDir, rootDiskBytes };
    const i = this.roots.findIndex((r) => r.lowerDir === lowerDir && r.rootDiskBytes === rootDiskBytes);
    return i >= 0 ? this.roots.splice(i, 1)[0] : undefined;
  }

  /** Uid slots the pool holds: those of its roots and of roots being prepared. */
  slots(): number[] {
    return [...this.roots.map((r) => r.slot), ...this.preparing];
  }

  refillStep(): Promise<void> | null {
    const want = this.want;
    const stale = this.roots.findIndex(
      (r) => !want || r.lowerDir !== want.lowerDir || r.rootDiskBytes !== want.rootDiskBytes,
    );
    if (stale >= 0) return this.o.rootfs.release(this.roots.splice(stale, 1)[0].id);
    if (!want || this.roots.length >= this.o.size) return null;
    const slot = this.o.allocSlot();
    this.preparing.add(slot);
    const id = pooledId(this.prefix);
    return this.o.rootfs
      .prepare({ id, lowerDir: want.lowerDir, rootDiskBytes: want.rootDiskBytes, uidBase: this.o.uidBase(slot) })
      .then(({ rootfs }) => {
        this.roots.push({ id, slot, lowerDir: want.lowerDir, rootDiskBytes: want.rootDiskBytes, rootfs });
      })
      .finally(() => this.preparing.delete(slot));
  }

  async drain(): Promise<void> {
    for (const r of this.roots.splice(0)) await this.o.rootfs.release(r.id);
  }
}
