import type { CounterWindow, Counters } from './store.js';

/** Counters kept at most by default (about 100 bytes each). */
export const DEFAULT_MAX_COUNTERS = 500_000;

/**
 * {@link Counters} in this process's memory: the rate limits' store for a single server
 * (`SANDBOXD_RATE_LIMIT_STORE=memory`); a restart forgets them. Bounded: at most `maxKeys`
 * counters, the least recently hit dropped first past it, and ended windows dropped when
 * met or purged.
 */
export class MemoryCounters implements Counters {
  private readonly windows = new Map<string, CounterWindow>();

  constructor(private readonly maxKeys = DEFAULT_MAX_COUNTERS) {}

  get size(): number {
    return this.windows.size;
  }

  async hitCounter(key: string, windowMs: number, now: number): Promise<CounterWindow> {
    const old = this.windows.get(key);
    if (old)
      this.windows.delete(key); // re-inserted below: Map order is least recently hit first
    else if (this.windows.size >= this.maxKeys) this.windows.delete(this.windows.keys().next().value as string);
    const w =
      old && old.resetAt > now ? { count: old.count + 1, resetAt: old.resetAt } : { count: 1, resetAt: now + windowMs };
    this.windows.set(key, w);
    return { ...w };
  }

  async readCounter(key: string, now: number): Promise<CounterWindow | null> {
    const w = this.windows.get(key);
    if (!w) return null;
    if (w.resetAt > now) return { ...w };
    this.windows.delete(key);
    return null;
  }

  async releaseCounter(key: string, resetAt: number): Promise<void> {
    const w = this.windows.get(key);
    if (w && w.resetAt === resetAt && w.count > 0) w.count--;
  }

  async deleteCounter(key: string): Promise<void> {
    this.windows.delete(key);
  }

  async purgeCounters(now: number): Promise<number> {
    let n = 0;
    for (const [k, w] of this.windows)
      if (w.resetAt <= now) {
        this.windows.delete(k);
        n++;
      }
    return n;
  }

  close(): void {
    this.windows.clear();
  }
}
