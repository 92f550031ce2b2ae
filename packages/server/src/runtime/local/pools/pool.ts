import { randomBytes } from 'node:crypto';

/**
 * One kind of thing the local driver keeps made ahead of need (networks, root layers), so
 * that a create takes one instead of waiting for it to be made. A pool holds its things and
 * knows its next piece of refill work; when that work runs is the {@link PoolKeeper}'s call.
 */
export interface Pool {
  /**
   * Prefix of the ids this pool makes its things under. Sandbox ids never start with it,
   * and a leftover of a crash found on the host with it is this pool's: recovery removes it
   * unless an adopted sandbox uses it.
   */
  readonly prefix: string;
  /**
   * Starts the next piece of refill work (make one thing, or release one no longer wanted)
   * and returns it, or null when the pool is as it should be. Decides synchronously. Called
   * one at a time: a step is never started while another of any pool runs. The step rejects
   * when the host refuses; the pool is then left short.
   */
  refillStep(): Promise<void> | null;
  /** Releases every thing the pool holds from the host. Called only once refilling stopped. */
  drain(): Promise<void>;
}

/** A fresh id for a pooled thing: `prefix` and 12 random hex digits. */
export function pooledId(prefix: string): string {
  return `${prefix}${randomBytes(6).toString('hex')}`;
}
