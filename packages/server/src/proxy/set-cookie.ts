/**
 * What a sandbox may set as cookies through the port proxy: cookies for its own port host
 * only. Its page is served under `<port>-<id>.<publicHost>`, beside every other sandbox's
 * port hosts and often under the API's own domain, so a `Set-Cookie` with a `Domain` of a
 * parent (`Domain=<publicHost>`) would reach them all: it could shadow another sandbox's
 * link cookie or plant a session cookie on the API host ("cookie tossing"). Such headers,
 * and any cookie named like this server's own (the session and link cookies, in every
 * prefix and case), are dropped from the sandbox's answer.
 *
 * This guards the headers only: a page's script can still write `document.cookie` for the
 * parent domain. The API defends itself against that (http/session-cookie.ts: a
 * `__Host-` cookie over HTTPS, a cookie sent twice refused).
 */

/** Cookie names of this server a sandbox may never set, whatever prefix or case. */
const OWN_NAMES = /^(__host-|__secure-)?sandboxd_(session|token)$/i;

/**
 * True when the `Set-Cookie` value `header` only sets a cookie for `hostName` (the request's
 * host without port): no `Domain` attribute, or one naming that host exactly, and not one of
 * this server's own names.
 */
export function cookieForHostOnly(header: string, hostName: string): boolean {
  const [pair, ...attrs] = header.split(';');
  const eq = pair.indexOf('=');
  const name = (eq < 0 ? '' : pair.slice(0, eq)).trim();
  if (OWN_NAMES.test(name)) return false;
  const host = hostName.toLowerCase().replace(/\.$/, '');
  for (const a of attrs) {
    const i = a.indexOf('=');
    if (i < 0 || a.slice(0, i).trim().toLowerCase() !== 'domain') continue;
    const domain = a
      .slice(i + 1)
      .trim()
      .toLowerCase()
      .replace(/^\./, '')
      .replace(/\.$/, '');
    if (domain !== '' && domain !== host) return false;
  }
  return true;
}

/**
 * The flat response header list without the `Set-Cookie` headers that set a cookie beyond
 * the host `hostHeader` (the request's `Host`, port and all) or under this server's names.
 */
export function hostCookiesOnly(rawHeaders: string[], hostHeader: string | undefined): string[] {
  let hostName = '';
  try {
    hostName = new URL(`http://${hostHeader ?? ''}`).hostname;
  } catch {
    /* no host: every Domain cookie is dropped */
  }
  const out: string[] = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i].toLowerCase() === 'set-cookie' && !cookieForHostOnly(rawHeaders[i + 1], hostName)) continue;
    out.push(rawHeaders[i], rawHeaders[i + 1]);
  }
  return out;
}
