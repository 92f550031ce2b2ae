import { LIMITS, SandboxdError, type TrackEvent } from '@sandboxd/protocol';
import type { EventRecord } from '../store/store.js';
import type { ServiceDeps } from './context.js';

/** Deepest nesting of objects and arrays accepted in `metadata`. */
export const MAX_METADATA_DEPTH = 32;

/** True when `value` nests objects or arrays deeper than `max` levels (iterative). */
export function deeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth >= max) return true;
    for (const x of Object.values(v)) if (x !== null && typeof x === 'object') stack.push([x, depth + 1]);
  }
  return false;
}

/** Client-side onboarding events: stored with account, time and metadata (<= 8 KiB). */
export class EventService {
  constructor(private readonly d: Pick<ServiceDeps, 'store' | 'clock'>) {}

  /** Stores one event. `validation` when metadata is over 8 KiB as JSON. */
  async track(accountId: string, e: TrackEvent): Promise<void> {
    // Checked without recursion first: JSON.stringify of a 100,000-deep value overflows the stack.
    if (deeperThan(e.metadata, MAX_METADATA_DEPTH)) {
      const message = `metadata nests deeper than ${MAX_METADATA_DEPTH} levels`;
      throw new SandboxdError('validation', message, [{ in: 'body', path: '/metadata', message }]);
    }
    const size = Buffer.byteLength(JSON.stringify(e.metadata));
    if (size > LIMITS.maxEventMetadataBytes) {
      const message = `metadata is ${size} bytes as JSON; at most ${LIMITS.maxEventMetadataBytes}`;
      throw new SandboxdError('validation', message, [{ in: 'body', path: '/metadata', message }]);
    }
    await this.d.store.addEvent({ accountId, event: e.event, metadata: e.metadata, createdAt: this.d.clock.now() });
  }

  /** The newest `limit` events, oldest first. */
  list(accountId: string, limit = 1000): Promise<EventRecord[]> {
    return this.d.store.listEvents(accountId, limit);
  }
}
