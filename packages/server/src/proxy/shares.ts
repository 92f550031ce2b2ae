import { Slots } from '../services/slots.js';
import { ProxyError } from './reply.js';

/** Default of `proxyMaxConnsPerSandbox`: far above what browsers (6 per host) and honest load bring. */
export const DEFAULT_MAX_CONNS_PER_SANDBOX = 256;

/** What a refused client is asked to wait: connections of a sandbox end within moments. */
export const SHARE_RETRY_MS = 1000;

/**
 * Each sandbox's share of the port proxy: how many proxied exchanges (an HTTP request with
 * its connection to the sandbox, or a WebSocket tunnel) may be open for it at once. One
 * sandbox, or one client hammering one sandbox's URL, then holds at most `limit`
 * connections to sandboxes (and as many client sockets waiting on them), and the excess is
 * refused for that sandbox only: 503 `capacity` with `Retry-After`.
 */
export class ConnectionShares {
  private readonly slots = new Slots();

  constructor(readonly limit: number = DEFAULT_MAX_CONNS_PER_SANDBOX) {}

  /**
   * Takes one slot of `sandboxId`'s share; returns its release (idempotent). Throws the
   * 503 `capacity` {@link ProxyError} when the share is used up.
   */
  take(sandboxId: string): () => void {
    return this.slots.take(
      sandboxId,
      this.limit,
      () =>
        new ProxyError(
          'capacity',
          `Sandbox ${sandboxId} has ${this.limit} proxied connections open, its share of the port proxy; retry in ${SHARE_RETRY_MS / 1000} s`,
          { resource: 'proxy_connections', sandboxId, limit: this.limit, retryAfterMs: SHARE_RETRY_MS },
        ),
    );
  }

  /** Slots of `sandboxId` in use. */
  count(sandboxId: string): number {
    return this.slots.count(sandboxId);
  }
}
