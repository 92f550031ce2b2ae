import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { parseCookie } from 'cookie';
import type { TrustedProxies } from '../http/trusted-proxies.js';
import { FRAMING_HEADERS } from './framing.js';
import { LINK_COOKIE } from './links.js';

/** Header carrying the owner's API key to a private port; never forwarded to the sandbox. */
export const KEY_HEADER = 'x-sandboxd-key';

/** Hop-by-hop headers (RFC 9110 7.6.1) plus those the proxy sets or consumes itself; framing is handled apart. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'expect',
]);
const SET_BY_PROXY = new Set(['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', KEY_HEADER]);

/**
 * The header list sent to the sandbox, as flat `[name, value, ...]` in the client's order
 * and spelling: hop-by-hop headers and those named in `Connection` dropped (kept for an
 * upgrade: `Connection: Upgrade` and `Upgrade`), the proxy's credentials removed (the key
 * header, the link cookie), `Host` kept as sent, and `X-Forwarded-For` (appended to the
 * client's chain), `X-Forwarded-Proto` (the socket's scheme, or a trusted proxy's
 * `X-Forwarded-Proto`: `trusted`) and `X-Forwarded-Host` (both replaced) added.
 * Framing (`Content-Length`, `Transfer-Encoding`) is never dropped because `Connection`
 * names it: for a plain request it is left out here and the caller frames the body itself
 * (`requestFraming`); for an upgrade, whose bytes are tunnelled as sent, it is kept as sent.
 */
export function upstreamHeaders(
  req: IncomingMessage,
  opts: { upgrade: boolean; trusted?: Pick<TrustedProxies, 'proto'> },
): string[] {
  const named = connectionTokens(req.headers.connection);
  const out: string[] = [];
  const chain: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    const lower = name.toLowerCase();
    const value = raw[i + 1];
    if (lower === 'x-forwarded-for') chain.push(value);
    if (FRAMING_HEADERS.has(lower)) {
      if (opts.upgrade) out.push(name, value);
      continue;
    }
    if (HOP_BY_HOP.has(lower) || SET_BY_PROXY.has(lower) || (named.has(lower) && lower !== 'host')) continue;
    if (lower === 'cookie') {
      const kept = withoutCookie(value, LINK_COOKIE);
      if (kept) out.push(name, kept);
      continue;
    }
    out.push(name, value);
  }
  if (opts.upgrade) out.push('Connection', 'Upgrade', 'Upgrade', req.headers.upgrade ?? 'websocket');
  chain.push(clientAddress(req));
  out.push('X-Forwarded-For', chain.join(', '));
  out.push('X-Forwarded-Proto', opts.trusted?.proto(req) ?? ((req.socket as TLSSocket).encrypted ? 'https' : 'http'));
  out.push('X-Forwarded-Host', req.headers.host ?? '');
  return out;
}

/**
 * The sandbox's response headers for the client, flat, with hop-by-hop headers and those
 * named in `Connection` dropped. The sandbox's framing headers are never passed on, and
 * `Connection` cannot remove framing: the proxy frames the answer to the client itself,
 * with `contentLength` (the length it reads the body by, or a body-less answer's declared
 * one) as the one `Content-Length`, or none (node then frames it chunked, or by close).
 */
export function downstreamHeaders(rawHeaders: string[], opts: { contentLength: string | null }): string[] {
  let connection = '';
  for (let i = 0; i < rawHeaders.length; i += 2)
    if (rawHeaders[i].toLowerCase() === 'connection') connection += `,${rawHeaders[i + 1]}`;
  const named = connectionTokens(connection);
  const out: string[] = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const lower = rawHeaders[i].toLowerCase();
    if (HOP_BY_HOP.has(lower) || named.has(lower) || FRAMING_HEADERS.has(lower)) continue;
    out.push(rawHeaders[i], rawHeaders[i + 1]);
  }
  if (opts.contentLength !== null) out.push('Content-Length', opts.contentLength);
  return out;
}

/** The `Cookie` header value without the cookie `name`; empty when nothing is left. */
export function withoutCookie(header: string, name: string): string {
  return header
    .split(';')
    .map((p) => p.trim())
    .filter((p) => p !== '' && p.split('=')[0].trim() !== name)
    .join('; ');
}

/**
 * The first value of cookie `name` that `accept` takes, parsed by the `cookie` package (the
 * one @fastify/cookie uses; values as sent, not URL-decoded). A request can carry the
 * name several times: a page on another sandbox host may set one for the parent domain,
 * which the browser then sends too, so the first one alone would let it shadow the real
 * one. `accept` is the parser's decode step: a value it refuses is skipped and the next of
 * that name tried; it also sees the values of other names, which are dropped.
 */
export function findCookie(req: IncomingMessage, name: string, accept: (value: string) => boolean): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  return parseCookie(header, { decode: (v) => (accept(v) ? v : undefined) })[name];
}

/** The client's IP without the IPv4-mapped prefix. */
export function clientAddress(req: IncomingMessage): string {
  const a = req.socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

function connectionTokens(v: string | undefined): Set<string> {
  const s = new Set<string>();
  for (const t of (v ?? '').split(',')) {
    const x = t.trim().toLowerCase();
    if (x) s.add(x);
  }
  return s;
}
