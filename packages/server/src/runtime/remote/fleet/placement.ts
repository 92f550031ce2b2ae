import type { SandboxdError } from '@sandboxd/protocol';
import { type CapacityFloors, capacityError, NO_ROOM, type Shortage, shortagesIn } from '../../../domain/capacity.js';
import type { RuntimeCapacity } from '../../driver.js';

/**
 * Placement of a new sandbox among runners, as pure functions of what each runner reported
 * (its health) and what this process placed on it since. No I/O: the fleet gathers the
 * candidates, these decide.
 */

/** One runner a create may go to. */
export interface Candidate {
  /** The runner's node name. */
  node: string;
  /** Sandboxes it holds (its health's count) plus creates placed on it since that report. */
  load: number;
  /** Whether the create's image is in its image cache (no pull). */
  cached: boolean;
  /** Its capacity as last reported; null: not known (never refuses). */
  capacity: RuntimeCapacity | null;
  /** Creates placed on it that its report does not count yet (each will take an address). */
  pending: number;
}

/** The runtime figures of `c` less what the creates in flight will take (an address each). */
export function afterPending(c: Candidate): RuntimeCapacity | null {
  if (!c.capacity) return null;
  const a = c.capacity.addresses;
  return a ? { ...c.capacity, addresses: { ...a, free: Math.max(0, a.free - c.pending) } } : c.capacity;
}

/** What one runner has no room in: memory, disk, addresses, in that order (empty: it has room). */
export function shortagesOf(c: Candidate, floors: CapacityFloors): Shortage[] {
  const cap = afterPending(c);
  return cap ? shortagesIn(cap, floors) : [];
}

/**
 * Candidates best first: least loaded (fewest sandboxes), then one with the image cached,
 * then the most available memory, then by node name (a stable order).
 */
export function rank(cands: readonly Candidate[]): Candidate[] {
  const mem = (c: Candidate) => c.capacity?.memoryAvailableBytes ?? -1;
  return [...cands].sort(
    (a, b) =>
      a.load - b.load ||
      Number(b.cached) - Number(a.cached) ||
      mem(b) - mem(a) ||
      (a.node < b.node ? -1 : a.node > b.node ? 1 : 0),
  );
}

/** What {@link choose} decided: a runner, or the 503 `capacity` naming what the candidates lack. */
export type Choice = { node: string } | { refusal: SandboxdError };

/**
 * The runner a create goes to: the best ranked with room ({@link rank}). When none has room,
 * a 503 `capacity` naming the first resource the best ranked candidate lacks, each
 * candidate's shortages in the message and in `details.runners`. `where` (e.g. "runner a,
 * where volume data lives") says what the candidates are when they were narrowed down.
 * `cands` must not be empty.
 */
export function choose(cands: readonly Candidate[], floors: CapacityFloors, where?: string): Choice {
  const full: Array<{ node: string; short: Shortage[] }> = [];
  for (const c of rank(cands)) {
    const short = shortagesOf(c, floors);
    if (!short.length) return { node: c.node };
    full.push({ node: c.node, short });
  }
  const why = full.map((f) => `${f.node}: ${f.short.map((x) => x.why).join(', ')}`).join('; ');
  return {
    refusal: capacityError(
      full[0].short[0].resource,
      where ? `${where}; ${why}` : why,
      { runners: full.map((f) => ({ node: f.node, full: f.short.map((x) => x.resource) })) },
      NO_ROOM.runners,
    ),
  };
}

/**
 * The figures /healthz and the create check report for a fleet: those of the runner a
 * create would go to now (the best ranked with room), else of the best ranked of all (whose
 * shortages then say why a create is refused). `cands` must not be empty.
 */
export function bestCapacity(cands: readonly Candidate[], floors: CapacityFloors): RuntimeCapacity {
  const ranked = rank(cands);
  const pick = ranked.find((c) => !shortagesOf(c, floors).length) ?? ranked[0];
  return afterPending(pick) ?? { memoryAvailableBytes: null, diskFreeBytes: null, addresses: null };
}
