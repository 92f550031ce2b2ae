import type { FastifyInstance } from 'fastify';
import type { HttpDeps } from '../http/deps.js';

/**
 * E2B's control API (the `api.e2b.app` of E2B's SDKs), served under `/e2b` over the same
 * services as sandboxd's own API. Registered with the prefix `/e2b`.
 */
export async function e2bControlRoutes(_app: FastifyInstance, _deps: HttpDeps): Promise<void> {}
