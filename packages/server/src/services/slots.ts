/**
 * Counted slots per key (a sandbox, an account): a holder takes one while it holds a
 * resource and gives it back exactly once. Single-threaded; the count of a key with no
 * slot taken is forgotten, so memory follows what is held now.
 */
export class Slots {
  private readonly held = new Map<string, number>();

  /** Slots of `key` taken now. */
  count(key: string): number {
    return this.held.get(key) ?? 0;
  }

  /**
   * Takes a slot of `key` when fewer than `max` are taken (`max` 0: no limit), else throws
   * `refuse()`. Returns the release: idempotent, so every path that ends the holder may call it.
   */
  take(key: string, max: number, refuse: (held: number) => Error): () => void {
    const n = this.count(key);
    if (max > 0 && n >= max) throw refuse(n);
    this.held.set(key, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = this.count(key) - 1;
      if (left > 0) this.held.set(key, left);
      else this.held.delete(key);
    };
  }
}
