/**
 * The browser session cookie: its name, its attributes, and the one way to read it.
 *
 * Port URLs (`<port>-<id>.<publicHost>`) are served by this same server, and a page there
 * may set a cookie for a parent domain (`Domain=<publicHost>`), which the browser then
 * sends to the API host too, before or after the real one. So:
 * - Over HTTPS the cookie is `__Host-sandboxd_session`: browsers accept that name only
 *   with `Secure`, `Path=/` and no `Domain`, from this host itself, so no other host can
 *   set it. The plain name is then ignored, wherever it came from.
 * - Over plain HTTP no name is safe (it is `sandboxd_session`): a request that carries the
 *   name more than once is refused (401), never resolved by taking the first, so a planted
 *   cookie cannot shadow the real one.
 * - A state-changing request (any method but GET/HEAD/OPTIONS, and every upgrade) whose
 *   cookie is read must carry a same-origin `Origin` (CSRF; a sandbox's page is another
 *   origin). Reading the cookie through {@link sessionTokens} checks it, so no route can
 *   act on the cookie without the check.
 */
import type { TLSSocket } from 'node:tls';
import { SandboxdError } from '@sandboxd/protocol';
import type { FastifyRequest } from 'fastify';

/** Name of the session cookie over plain HTTP. */
export const SESSION_COOKIE = 'sandboxd_session';
/** Name of the session cookie over HTTPS (TLS on the socket, or `X-Forwarded-Proto: https`). */
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

type Req = Pick<FastifyRequest, 'headers' | 'method' | 'raw' | 'protocol'>;

/**
 * True when the request reached this server over TLS, or a trusted proxy
 * (`SANDBOXD_TRUSTED_PROXIES`) says so with `X-Forwarded-Proto: https`; that header from
 * any other peer is ignored (fastify's `protocol`, see http/trusted-proxies.ts).
 */
export function overHttps(req: Req): boolean {
  if ((req.raw.socket as TLSSocket | undefined)?.encrypted === true) return true;
  return String(req.protocol).toLowerCase() === 'https';
}

/** The session cookie's name for this request's scheme. */
export function sessionCookieName(req: Req): string {
  return overHttps(req) ? SECURE_SESSION_COOKIE : SESSION_COOKIE;
}

/**
 * The attributes of the session cookie (Max-Age aside): HttpOnly, SameSite=Lax, Path=/,
 * no Domain, and Secure over HTTPS (which the `__Host-` name requires).
 */
export function sessionCookieOptions(req: Req) {
  return { path: '/', httpOnly: true, sameSite: 'lax', secure: overHttps(req) } as const;
}

/**
 * Every non-empty value of cookie `name` in the `Cookie` header, in the order sent (Node
 * joins several `Cookie` headers with `; `). Split as the `cookie` package splits (name
 * trimmed up to the first `=`, value trimmed and unquoted, URL-decoded when it decodes).
 */
export function cookieValues(header: string | undefined, name: string): string[] {
  const out: string[] = [];
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0 || part.slice(0, eq).trim() !== name) continue;
    let v = part.slice(eq + 1).trim();
    if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1);
    if (v.includes('%')) {
      try {
        v = decodeURIComponent(v);
      } catch {
        /* kept as sent */
      }
    }
    if (v !== '') out.push(v);
  }
  return out;
}

/**
 * Every session cookie value of the request (the name of its scheme), after the CSRF check:
 * throws `unauthorized` when there is one and the request changes state (or upgrades)
 * without a same-origin `Origin`. For logout, which ends them all; everything else reads
 * the one token with {@link sessionToken}.
 */
export function sessionTokens(req: Req): string[] {
  const tokens = cookieValues(req.headers.cookie, sessionCookieName(req));
  if (tokens.length === 0) return tokens;
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
  return tokens;
}

/**
 * The session token of the request, or undefined when it has none; `unauthorized` when it
 * fails the CSRF check ({@link sessionTokens}) or carries the cookie more than once (one
 * of them was set by another site under this domain: taking either could be the wrong one).
 */
export function sessionToken(req: Req): string | undefined {
  const tokens = sessionTokens(req);
  if (tokens.length > 1) {
    const name = sessionCookieName(req);
    throw new SandboxdError(
      'unauthorized',
      `The request carries ${tokens.length} ${name} cookies; another site under this domain may have set one. ` +
        "Sign out (POST /api/v1/auth/logout) or clear this site's cookies, then sign in again",
    );
  }
  return tokens[0];
}

/**
 * True when the `Origin` header names the host the request was sent to (and, on a TLS
 * socket, the https scheme: a page served over plain HTTP is not this origin).
 */
export function sameOrigin(req: Req): boolean {
  const origin = req.headers.origin;
  if (!origin || origin === 'null') return false;
  try {
    const o = new URL(origin);
    if ((req.raw.socket as TLSSocket | undefined)?.encrypted === true && o.protocol !== 'https:') return false;
    return !!req.headers.host && o.host === new URL(`${o.protocol}//${req.headers.host}`).host;
  } catch {
    return false;
  }
}
