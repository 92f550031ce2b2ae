import type { IncomingMessage } from 'node:http';
import type { TrustedProxies } from '../http/trusted-proxies.js';
import type { TLSSocket } from 'node:tls';
import { findCookie, KEY_HEADER } from './headers.js';
import { LINK_COOKIE, LINK_PARAM, type PortLinks } from './links.js';
import { ProxyError } from './reply.js';

/** What the proxy does with a request after the access check. */
export type AccessDecision =
  /** Forward it, with `path` as the request target (a link token taken out of the query). */
  | { kind: 'forward'; path: string }
  /** Answer 302 to `location` setting `cookie` (a link opened by a browser). */
  | { kind: 'redirect'; location: string; cookie: string };

/** What the access check needs to know about the sandbox and the request. */
export interface AccessRequest {
  req: IncomingMessage;
  sandboxId: string;
  port: number;
  accountId: string;
  portsPublic: boolean;
  /** True for an upgrade (WebSocket): never redirected. */
  upgrade: boolean;
}

/** Options of {@link PortAccess}. */
export interface PortAccessOptions {
  links: PortLinks;
  /** The account id of an API key, or null when the key is unknown. */
  accountOfKey: (key: string) => Promise<string | null>;
  /** Whether `token` is sandbox `sandboxId`'s E2B traffic access token (`E2B-Traffic-Access-Token`). Default: none is. */
  trafficToken?: (sandboxId: string, token: string) => Promise<boolean>;
  now: () => number;
  /** `SANDBOXD_TRUSTED_PROXIES`: behind a trusted TLS proxy the link cookie is `Secure`. */
  trusted?: Pick<TrustedProxies, 'proto'>;
}

/** The header E2B's SDKs send a sandbox's traffic access token in. */
export const TRAFFIC_TOKEN_HEADER = 'e2b-traffic-access-token';

/**
 * Who may use a sandbox port. Public ports (the default): everyone, and the request goes
 * on untouched. Private ports: the sandbox's E2B traffic access token in
 * `E2B-Traffic-Access-Token`, the owner's API key in `X-Sandboxd-Key`, or a link token
 * (from `POST /api/v1/sandboxes/{id}/ports/{port}/link`) in the `sandboxd_token` query
 * parameter or cookie. A browser opening a link (GET or HEAD, not an upgrade) is sent a
 * host-only HttpOnly cookie and redirected to the same URL without the token; other
 * requests with the token in the query are forwarded with the parameter removed.
 * Throws {@link ProxyError} 401 when no valid credential is shown.
 */
export class PortAccess {
  constructor(private readonly opts: PortAccessOptions) {}

  async check(a: AccessRequest): Promise<AccessDecision> {
    const url = a.req.url ?? '/';
    if (a.portsPublic) return { kind: 'forward', path: url };
    const where = { sandboxId: a.sandboxId, port: a.port };
    const traffic = a.req.headers[TRAFFIC_TOKEN_HEADER];
    if (typeof traffic === 'string' && traffic !== '' && this.opts.trafficToken) {
      if (await this.opts.trafficToken(a.sandboxId, traffic.trim())) return { kind: 'forward', path: url };
      throw new ProxyError(
        'unauthorized',
        `The token in E2B-Traffic-Access-Token does not open port ${a.port} of sandbox ${a.sandboxId}`,
        where,
      );
    }
    const key = a.req.headers[KEY_HEADER];
    if (typeof key === 'string' && key !== '') {
      const owner = await this.opts.accountOfKey(key.trim());
      if (owner !== a.accountId)
        throw new ProxyError(
          'unauthorized',
          `The key in X-Sandboxd-Key does not open port ${a.port} of sandbox ${a.sandboxId}`,
          where,
        );
      return { kind: 'forward', path: url };
    }
    const q = url.indexOf('?');
    const pairs = q === -1 ? [] : url.slice(q + 1).split('&');
    const isToken = (p: string) => p.split('=')[0] === LINK_PARAM;
    const tokenPair = pairs.find(isToken);
    if (tokenPair !== undefined) {
      const fromQuery = decodeURIComponentSafe(tokenPair.slice(LINK_PARAM.length + 1));
      if (!this.valid(fromQuery, a))
        throw new ProxyError('unauthorized', 'This link is invalid or has expired; ask for a new one', where);
      // Other parameters are kept byte for byte.
      const rest = pairs.filter((p) => !isToken(p)).join('&');
      const path = `${url.slice(0, q)}${rest ? `?${rest}` : ''}`;
      const method = a.req.method ?? 'GET';
      if (a.upgrade || (method !== 'GET' && method !== 'HEAD')) return { kind: 'forward', path };
      return { kind: 'redirect', location: path, cookie: this.cookie(fromQuery, a.req) };
    }
    if (findCookie(a.req, LINK_COOKIE, (t) => this.valid(t, a)) !== undefined) return { kind: 'forward', path: url };
    throw new ProxyError(
      'unauthorized',
      `Port ${a.port} of sandbox ${a.sandboxId} is private: send the owner's API key in X-Sandboxd-Key, ` +
        `or open a link from POST /api/v1/sandboxes/${a.sandboxId}/ports/${a.port}/link`,
      where,
    );
  }

  private valid(token: string, a: AccessRequest): boolean {
    return this.opts.links.verify(token, { sandboxId: a.sandboxId, port: a.port, now: this.opts.now() });
  }

  private cookie(token: string, req: IncomingMessage): string {
    const maxAge = this.opts.links.remainingSeconds(token, this.opts.now());
    const https = this.opts.trusted ? this.opts.trusted.proto(req) === 'https' : (req.socket as TLSSocket).encrypted;
    const secure = https ? '; Secure' : '';
    return `${LINK_COOKIE}=${token}; Path=/; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${secure}`;
  }
}

function decodeURIComponentSafe(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return '';
  }
}
