import type { IncomingMessage } from 'node:http';
import { SANDBOX_ID_PATTERN } from '@sandboxd/protocol';
import { ProxyError } from './reply.js';

/** A sandbox port named by a request's Host header. */
export interface PortAddress {
  sandboxId: string;
  port: number;
}

const SANDBOX_ID = new RegExp(SANDBOX_ID_PATTERN);
/** `host[:port]` with one optional decimal port; anything else (userinfo, a second port, IPv6 brackets) fails. */
const HOST_HEADER = /^([a-z0-9._-]+)(?::([0-9]{1,5}))?$/;
const LABEL = /^([0-9]{1,12})-([a-z0-9_]{1,64})$/;

/**
 * Recognises the hosts of `publicAccessUrlTemplate`: `<port>-<sandboxId>.<publicHost>`.
 * Only the Host header decides, compared case-insensitively and with one trailing dot
 * allowed; its port part is checked for shape and otherwise ignored (clients reach the
 * server through forwarders on other ports). The result only ever names a sandbox id and
 * a port: where that sandbox lives comes from the runtime, never from the request.
 */
export class PublicHosts {
  /** `.sandbox.localhost`: the hostname part of publicHost with a leading dot. */
  private readonly suffix: string;

  /** `publicHost` as configured, e.g. `sandbox.localhost:8080` or `sbx.example.com`. */
  constructor(publicHost: string) {
    const name = publicHost.toLowerCase().replace(/:\d+$/, '').replace(/\.$/, '');
    if (!/^[a-z0-9.-]+$/.test(name)) throw new Error(`publicHost "${publicHost}" is not a host name`);
    this.suffix = `.${name}`;
  }

  /**
   * Cheap test for the front door: does the Host header's name end in `.<publicHost>`?
   * Such requests are the proxy's, also when malformed, so that they are refused here
   * rather than served by the API.
   */
  readonly claims = (req: IncomingMessage): boolean => {
    const name = hostNameOf(req);
    return !!name?.endsWith(this.suffix) && name.length > this.suffix.length;
  };

  /**
   * Whether the Host header names exactly `<label>.<publicHost>` (port part ignored, one
   * trailing dot allowed), e.g. `api.<publicHost>` for E2B's control API.
   */
  names(req: IncomingMessage, label: string): boolean {
    return hostNameOf(req) === `${label}${this.suffix}`;
  }

  /**
   * The sandbox port a claimed request is for. Throws {@link ProxyError}: 400 for a
   * malformed Host (two Host headers, a second port, a label that is not
   * `<port>-<sandboxId>`, a non-canonical port) or a port outside 1-65535, 404 for a
   * label whose id cannot be a sandbox id.
   */
  parse(req: IncomingMessage): PortAddress {
    if (countHostHeaders(req) !== 1)
      throw new ProxyError('validation', 'The request must carry exactly one Host header');
    const m = HOST_HEADER.exec((req.headers.host ?? '').toLowerCase());
    if (!m) throw new ProxyError('validation', 'Malformed Host header');
    if (m[2] !== undefined && !validPort(m[2])) throw new ProxyError('validation', 'Malformed Host header: bad port');
    let name = m[1];
    if (name.endsWith('.')) name = name.slice(0, -1);
    if (!name.endsWith(this.suffix)) throw new ProxyError('validation', 'Malformed Host header');
    const label = name.slice(0, -this.suffix.length);
    const l = LABEL.exec(label);
    if (!l)
      throw new ProxyError('validation', `Host must be <port>-<sandboxId>${this.suffix}`, { host: req.headers.host });
    if (!validPort(l[1]))
      throw new ProxyError('validation', `Port ${l[1]} is out of range: ports are 1-65535 without leading zeros`, {
        port: l[1],
      });
    const sandboxId = l[2];
    if (!SANDBOX_ID.test(sandboxId)) throw new ProxyError('not_found', `No sandbox ${sandboxId}`, { sandboxId });
    return { sandboxId, port: Number(l[1]) };
  }
}

/** The Host header's name: lower case, without its port part and one trailing dot; null without a Host. */
function hostNameOf(req: IncomingMessage): string | null {
  const host = req.headers.host;
  if (!host) return null;
  const end = host.indexOf(':');
  const name = (end === -1 ? host : host.slice(0, end)).toLowerCase();
  return name.endsWith('.') ? name.slice(0, -1) : name;
}

/** Decimal 1..65535 written canonically (no sign, no leading zero). */
export function validPort(s: string): boolean {
  if (!/^[1-9][0-9]{0,4}$/.test(s)) return false;
  return Number(s) <= 65535;
}

function countHostHeaders(req: IncomingMessage): number {
  let n = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2)
    if (req.rawHeaders[i].length === 4 && req.rawHeaders[i].toLowerCase() === 'host') n++;
  return n;
}
