import { LIMITS, SandboxdError, type TrackEvent } from '@sandboxd/protocol';
import type { EventRecord } from '../store/store.js';
import type { ServiceDeps } from './context.js';

/** Client-side onboarding events: stored with account, time and metadata (<= 8 KiB). */
export class EventService {
  constructor(private readonly d: ServiceDeps) {}

  /** Stores one event. `validation` when metadata is over 8 KiB as JSON. */
  async track(accountId: string, e: TrackEvent): Promise<void> {
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
