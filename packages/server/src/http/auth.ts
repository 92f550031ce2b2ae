import { SandboxdError } from '@sandboxd/protocol';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { AuthService, Principal } from '../services/auth.js';
import { addressKey, type RateLimits, requestLimiter } from './rate-limit.js';

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

/** Name of the session cookie (set by /api/v1/auth/login, signup and the login link). */
export const SESSION_COOKIE = 'sandboxd_session';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

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
  const token = req.cookies[SESSION_COOKIE];
  if (!token)
    throw new SandboxdError(
      'unauthorized',
      'Missing credentials: send "Authorization: Bearer <API key>" or "X-API-Key: <API key>"',
    );
  const p = await auth.fromSession(token);
  // A WebSocket is a GET that opens a two-way channel: a cross-site page could drive it
  // with the user's cookie (cross-site WebSocket hijacking), so it needs the check too.
  const upgrade = req.headers.upgrade !== undefined;
  if ((upgrade || !SAFE_METHODS.has(req.method)) && !sameOrigin(req)) {
    throw new SandboxdError(
      'unauthorized',
      upgrade
        ? 'A WebSocket authenticated by session cookie must carry a same-origin Origin header'
        : 'A request authenticated by session cookie must carry a same-origin Origin header',
    );
  }
  return p;
}

/** True when the `Origin` header names the host the request was sent to. */
function sameOrigin(req: FastifyRequest): boolean {
  const origin = req.headers.origin;
  if (!origin || origin === 'null') return false;
  try {
    const o = new URL(origin);
    return !!req.headers.host && o.host === new URL(`${o.protocol}//${req.headers.host}`).host;
  } catch {
    return false;
  }
}
