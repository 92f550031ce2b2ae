import { type CapacityFloors, type CapacityResource, shortagesIn } from '../../../domain/capacity.js';
import type { IsolationSupport } from '../../driver.js';
import type { RunnerMember } from './member.js';

/** One runner as /healthz and /metrics report it. */
export interface RunnerStatus {
  /** Its node name (null until it first answered). */
  node: string | null;
  url: string;
  /** `up`: creates may go there; `down`: it does not answer (or is a duplicate); `removed`: its URL left the list. */
  state: 'up' | 'down' | 'removed';
  /** While not up: how long it has not answered, ms, and why. */
  downForMs?: number;
  reason?: string;
  /** Sandboxes it holds (running or paused), as it last reported; null: never reported. */
  sandboxes: number | null;
  /** Its capacity as last reported (null: never reported, or it cannot tell). */
  memoryAvailableBytes: number | null;
  diskFreeBytes: number | null;
  addresses: { free: number; total: number } | null;
  /** What it has no room in, by its last report and the API's floors. */
  full: Array<Exclude<CapacityResource, 'sandboxes' | 'processes'>>;
  /** The isolation tiers it offers, as last reported; absent: never reported. */
  isolations?: IsolationSupport[];
}

/** `members` as /healthz and /metrics report them (by node name, else URL), at `now`. */
export function runnerStatuses(members: RunnerMember[], floors: CapacityFloors, now: number): RunnerStatus[] {
  return members
    .map((m) => {
      const h = m.health;
      const state = m.up ? 'up' : m.removed ? 'removed' : 'down';
      return {
        node: m.node,
        url: m.url,
        state,
        ...(state === 'up' ? {} : { downForMs: Math.max(0, now - m.lastOkAt), reason: m.why }),
        sandboxes: h?.sandboxes ?? null,
        memoryAvailableBytes: h?.capacity.memoryAvailableBytes ?? null,
        diskFreeBytes: h?.capacity.diskFreeBytes ?? null,
        addresses: h?.capacity.addresses ?? null,
        full: h ? shortagesIn(h.capacity, floors).map((x) => x.resource as RunnerStatus['full'][number]) : [],
        ...(h
          ? {
              isolations: h.isolations ?? [
                { isolation: 'container' as const, runtime: 'crun', memorySnapshots: false },
              ],
            }
          : {}),
      } satisfies RunnerStatus;
    })
    .sort((a, b) => ((a.node ?? a.url) < (b.node ?? b.url) ? -1 : 1));
}
