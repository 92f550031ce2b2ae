/**
 * Trusted reverse proxies (`SANDBOXD_TRUSTED_PROXIES` / `trustedProxies`): the peers whose
 * `X-Forwarded-For` and `X-Forwarded-Proto` are believed. From any other peer (and from
 * every peer when the list is empty, the default) those headers are ignored: the client
 * address is the socket's peer, and the scheme is the socket's (TLS or not).
 *
 * The client address (`req.ip`: rate limits, the access log, MCP) comes from fastify's
 * `trustProxy`, given {@link TrustedProxies.trusts}: the `X-Forwarded-For` chain is walked
 * from the right while the address seen is a trusted proxy; the first untrusted one is the
 * client. The scheme (`req.protocol`: the Secure session cookie, `wss://` terminal URLs) is
 * `X-Forwarded-Proto`'s last value when the peer is trusted.
 */
import type { IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { ConfigError } from '../config-values.js';

/** Parses `addr[/prefix],...` (IPv4 or IPv6, `none` or empty for none) into canonical entries. */
export function parseTrustedProxies(raw: string): string[] {
  const items = raw
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  if (items.length === 1 && items[0] === 'none') return [];
  for (const item of items) {
    const [addr, prefix, extra] = item.split('/');
    const family = isIP(addr);
    const max = family === 6 ? 128 : 32;
    const okPrefix = prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= max);
    if (!family || !okPrefix || extra !== undefined)
      throw new ConfigError(
        `SANDBOXD_TRUSTED_PROXIES must be IP addresses or CIDR ranges (addr or addr/prefix), comma-separated, got "${item}"`,
      );
  }
  return items;
}

/** The set of trusted peers, matched against a socket's remote address. */
export class TrustedProxies {
  private readonly list = new BlockList();
  readonly empty: boolean;

  constructor(entries: readonly string[]) {
    this.empty = entries.length === 0;
    for (const e of entries) {
      const [addr, prefix] = e.split('/');
      const type = isIP(addr) === 6 ? 'ipv6' : 'ipv4';
      if (prefix === undefined) this.list.addAddress(addr, type);
      else this.list.addSubnet(addr, Number(prefix), type);
    }
  }

  /** True when `address` (a socket's remote address, IPv4-mapped or not) is a trusted proxy. */
  trusts(address: string | undefined): boolean {
    if (this.empty || !address) return false;
    const a = address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
    const family = isIP(a);
    if (!family) return false;
    return this.list.check(a, family === 6 ? 'ipv6' : 'ipv4');
  }

  /**
   * The scheme `req` came with to the first proxy: `https` on a TLS socket; else, from a
   * trusted peer, the last value of its `X-Forwarded-Proto` (`http` or `https`); else `http`.
   * For the port proxy, which serves raw node requests (fastify's `req.protocol` elsewhere).
   */
  proto(req: IncomingMessage): 'http' | 'https' {
    if ((req.socket as TLSSocket).encrypted) return 'https';
    const raw = req.headers['x-forwarded-proto'];
    if (raw === undefined || !this.trusts(req.socket.remoteAddress)) return 'http';
    const last = String(raw).split(',').pop()?.trim().toLowerCase();
    return last === 'https' ? 'https' : 'http';
  }

  /** fastify's `trustProxy` option: false (headers never read) when the list is empty. */
  fastifyOption(): false | ((address: string, hop: number) => boolean) {
    return this.empty ? false : (address) => this.trusts(address);
  }
}
