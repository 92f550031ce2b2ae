import { SandboxdError } from '@sandboxd/protocol';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { AuthService, Principal } from '../services/auth.js';
import { addressKey, type RateLimits, requestLimiter } from './rate-limit.js';
import { sessionToken } from './session-cookie.js';

/** Who may call a route: anyone, any account, or admins only (others get 404). */
export type AuthLevel = 'none' | 'account' | 'admin';

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: AuthLevel;
    /** Error statuses the operation documents (OpenAPI only). */
    errors?: number[];
    // `rateLimit: false` (declared by @fastify/rate-limit): never rate limited (health, metrics).
  }
  interface FastifyRequest {
    principal: Principal | null;
  }
}

/**
 * Authenticates every routed request before validation: `Authorization: Bearer <key>`
 * or `X-API-Key: <key>`, else the session cookie. A state-changing request that relies on
 * the cookie must carry a same-origin `Origin` (CSRF). Unknown routes skip this (404).
 * Rate limits come first (@fastify/rate-limit's limiters, called here rather than per
 * route): an authenticated request is charged to its account, anything else (public routes,
 * unknown routes, failed credentials) to its client address; routes with
 * `rateLimit: false` (health, metrics) are never limited.
 */
export function registerAuth(app: FastifyInstance, auth: AuthService, limits: RateLimits): void {
  const byAccount = requestLimiter(app, limits, 'account', (req) => req.principal?.account.id ?? '');
  const byAddress = requestLimiter(app, limits, 'ip', (req) => addressKey(req.ip));
  app.decorateRequest('principal', null);
  app.addHook('onRequest', async (req) => {
    const config = req.routeOptions.config;
    if (config?.rateLimit === false) return;
    const level = config?.auth ?? 'account';
    if (!req.routeOptions.url || level === 'none') return byAddress(req);
    try {
      req.principal = await authenticate(req, auth);
    } catch (e) {
      await byAddress(req); // a flood of bad credentials meets the address's limit (429), not endless 401s
      throw e;
    }
    await byAccount(req);
    if (level === 'admin' && !req.principal.account.admin) throw new SandboxdError('not_found', 'Route not found');
  });
}

/**
 * The principal of a request on a public route (`auth: 'none'`) that tells admins more, or
 * null: no credentials, or credentials that do not authenticate (the answer is then the
 * anonymous one, as if none were sent).
 */
export async function optionalPrincipal(req: FastifyRequest, auth: AuthService): Promise<Principal | null> {
  return authenticate(req, auth).catch(() => null);
}

/** The principal of a request or `unauthorized` (WebSocket upgrades included: they are routed requests too). */
async function authenticate(req: FastifyRequest, auth: AuthService): Promise<Principal> {
  const header = req.headers.authorization;
  const xKey = req.headers['x-api-key'];
  if (header !== undefined) {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!m) throw new SandboxdError('unauthorized', 'Authorization must be "Bearer <API key>"');
    return auth.fromApiKey(m[1]);
  }
  if (typeof xKey === 'string' && xKey !== '') return auth.fromApiKey(xKey.trim());
  const token = sessionToken(req);
  if (!token)
    throw new SandboxdError(
      'unauthorized',
      'Missing credentials: send "Authorization: Bearer <API key>" or "X-API-Key: <API key>"',
    );
  return auth.fromSession(token);
}
