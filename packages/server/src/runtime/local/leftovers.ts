/**
 * What an earlier process of this instance left on the host and recovery did not adopt,
 * removed in the background with bounded concurrency, so that a server with many leftovers
 * serves without waiting for them. Until a leftover is gone, everything it holds stays
 * reserved: its id (its netns, veth, root and folder names), its uid slot (its container may
 * still run under that uid range) and its address (the network manager reads the host's).
 */
import type { LeftoverRemoval } from '../driver.js';

/** One leftover: its id and, when known, the uid slot its container or root was made for. */
export interface Leftover {
  id: string;
  slot?: number;
}

/** Options of {@link Leftovers}. */
export interface LeftoversOptions {
  /** Removals run at once, at most. */
  concurrency: number;
  /** Removes everything of leftover `item` from the host (the container first). */
  remove: (item: Leftover) => Promise<void>;
  /** Tests: removals start only once this settles. */
  hold?: Promise<unknown>;
}

/** A queue of leftovers being removed; see the file comment. */
export class Leftovers implements LeftoverRemoval {
  readonly done: Promise<{ cleaned: string[]; failed: Array<{ id: string; message: string }> }>;
  private readonly queue: Leftover[] = [];
  /** Every leftover not yet removed (queued or in progress), by id. */
  private readonly items = new Map<string, Leftover>();
  /** Removals in progress, by id: settled once the bookkeeping is done. */
  private readonly running = new Map<string, Promise<void>>();
  /** The same removals as the remover returned them (they reject on failure). */
  private readonly removals = new Map<string, Promise<void>>();
  private readonly cleaned: string[] = [];
  private readonly failed: Array<{ id: string; message: string }> = [];
  private stopped = false;
  /** False until `hold` settles. */
  private started = false;
  private settle!: () => void;

  constructor(
    items: Leftover[],
    private readonly o: LeftoversOptions,
  ) {
    for (const it of items) {
      if (this.items.has(it.id)) continue;
      this.items.set(it.id, it);
      this.queue.push(it);
    }
    this.done = new Promise<void>((r) => {
      this.settle = r;
    }).then(() => ({ cleaned: [...this.cleaned], failed: [...this.failed] }));
    if (this.queue.length === 0) this.settle();
    void Promise.resolve(o.hold)
      .catch(() => undefined)
      .then(() => {
        this.started = true;
        this.pump();
      });
  }

  /** Leftovers not yet removed. */
  pending(): number {
    return this.items.size;
  }

  /** True while leftover `id` is not yet removed. */
  has(id: string): boolean {
    return this.items.has(id);
  }

  /** Ids of the leftovers not yet removed. */
  ids(): string[] {
    return [...this.items.keys()];
  }

  /** Uid slots of the leftovers not yet removed. */
  slots(): number[] {
    return [...this.items.values()].flatMap((it) => (it.slot === undefined ? [] : [it.slot]));
  }

  /**
   * Resolves once leftover `id` is removed, rejects when its removal failed: a queued one
   * is removed now, ahead of the queue and of the concurrency bound. Not a leftover (any
   * more): resolves at once.
   */
  async expedite(id: string): Promise<void> {
    const i = this.queue.findIndex((it) => it.id === id);
    if (i >= 0) this.start(this.queue.splice(i, 1)[0]);
    await this.removals.get(id);
  }

  /**
   * Starts no further removal and waits for those in progress; the leftovers still queued
   * stay on the host (the next recovery finds them) and `done` settles.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const it of this.queue.splice(0)) this.items.delete(it.id);
    await Promise.all(this.running.values());
    this.finishIfIdle();
  }

  private pump(): void {
    if (!this.started && !this.stopped) return;
    while (!this.stopped && this.running.size < this.o.concurrency && this.queue.length > 0)
      this.start(this.queue.shift()!);
    this.finishIfIdle();
  }

  private start(it: Leftover): void {
    const removal = this.o.remove(it);
    this.removals.set(it.id, removal);
    const p = removal
      .then(
        () => {
          this.cleaned.push(it.id);
        },
        (e: unknown) => {
          this.failed.push({ id: it.id, message: (e as Error).message });
        },
      )
      .finally(() => {
        this.running.delete(it.id);
        this.removals.delete(it.id);
        this.items.delete(it.id);
        this.pump();
      });
    this.running.set(it.id, p);
  }

  private finishIfIdle(): void {
    if (this.running.size === 0 && this.queue.length === 0) this.settle();
  }
}
