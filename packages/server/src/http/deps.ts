import { SandboxdError } from '@sandboxd/protocol';
import type { FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import type { OffsetClock } from '../domain/clock.js';
import type { AccessTokens } from '../e2b/tokens.js';
import type { Reaper } from '../lifecycle/reaper.js';
import type { RunnerStatus } from '../runtime/remote/fleet/fleet.js';
import type { Principal } from '../services/auth.js';
import type { Services } from '../services/index.js';
import type { Metrics } from './metrics.js';
import type { RateLimits } from './rate-limit.js';

/** What route modules receive. */
export interface HttpDeps {
  services: Services;
  config: Readonly<Config>;
  metrics: Metrics;
  rateLimits: RateLimits;
  reaper: Reaper;
  /** Present only when `SANDBOXD_TEST_CLOCK=1`. */
  testClock: OffsetClock | null;
  /** The OpenAPI document (built after all routes are registered). */
  openapi: () => Record<string, unknown>;
  /** False until start-up (driver init, recovery) is done, and again once shutdown began. */
  isReady: () => boolean;
  /**
   * `/readyz`: whether this process can serve now (started, not shutting down, its database
   * answers, and for role `api` at least one runner answers). Never rejects.
   */
  readiness: () => Promise<boolean>;
  /** E2B's per-sandbox access tokens (the control API gives them, envd checks them). */
  accessTokens: AccessTokens;
  /** Role `api`: every runner's state for /healthz; null otherwise. */
  runners: (() => RunnerStatus[]) | null;
}

/** The authenticated principal of a request on an authenticated route. */
export function principalOf(req: FastifyRequest): Principal {
  if (!req.principal) throw new SandboxdError('unauthorized', 'Missing credentials');
  return req.principal;
}
