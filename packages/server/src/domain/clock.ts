/** Time source; services and the reaper take one so tests move time instead of sleeping. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

/** The wall clock. */
export const systemClock: Clock = { now: () => Date.now() };

/** A clock that runs with the wall clock plus an offset that only grows; for tests. */
export class OffsetClock implements Clock {
  private offsetMs = 0;
  now(): number {
    return Date.now() + this.offsetMs;
  }
  /** Moves time forward by `ms` (>= 0). */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError('advance needs ms >= 0');
    this.offsetMs += ms;
  }
}

/** A clock that stands still until moved; for unit tests. */
export class ManualClock implements Clock {
  constructor(private t = Date.UTC(2030, 0, 1)) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}
