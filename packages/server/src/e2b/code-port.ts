/**
 * E2B's code-interpreter port (49999): the in-sandbox code server of the
 * `local/code-interpreter` image (docs/code-interpreter.md). E2B's SDK reaches it like any
 * sandbox port: at `49999-<id>.<domain>` (`E2B_DOMAIN`), or at `E2B_SANDBOX_URL` with the
 * headers `E2b-Sandbox-Id` and `E2b-Sandbox-Port: 49999`; both go through the port proxy
 * (its public/private rules hold), after {@link codePortGuard}.
 */
import type { IncomingMessage } from 'node:http';
import type { SandboxRecord } from '../domain/sandbox.js';
import type { PortAddress } from '../proxy/host.js';
import type { PortGuard } from '../proxy/proxy.js';
import { ProxyError } from '../proxy/reply.js';
import type { AccessTokens } from './tokens.js';

export const CODE_INTERPRETER_PORT = 49999;

/**
 * Requests E2B's SDK 2.8.0 makes to the code port without `X-Access-Token` (its context
 * calls) and the readiness check: the only ones that go on without a credential. An
 * allowlist of exact targets, not a denylist of `/execute`: the code server routes
 * `//execute` and `/execute/` as `/execute`, and whatever else it may route is unknown here.
 */
function tokenless(method: string, path: string): boolean {
  if (path === '/health') return method === 'GET' || method === 'HEAD';
  if (path === '/contexts') return method === 'GET' || method === 'POST';
  const m = /^\/contexts\/([^/]+)(\/restart)?$/.exec(path);
  if (!m) return false;
  return m[2] === undefined ? method === 'DELETE' : method === 'POST';
}

/**
 * The access rule of the code port (the code server runs code as it is told, so reaching
 * it is running code in the sandbox), checked for every sandbox, public ports included:
 *  - an `X-Access-Token` that is not the sandbox's: 401, on any path; the sandbox's opens all;
 *  - without one, only {@link tokenless} requests go on (`GET /health`, the context calls
 *    `@e2b/code-interpreter` 2.8.0 sends without its token), and never an upgrade (its tunnel
 *    is spliced byte for byte after the first request, so what follows is never checked);
 *  - the rest (`POST /execute` in any spelling, unknown paths): a sandbox created through
 *    E2B's API needs its access token (every such sandbox has an `envdAccessToken`:
 *    sandboxd's E2B sandboxes are always `secure`, as E2B's code server requires it); a
 *    sandbox of sandboxd's own API needs its owner's credential as a private port would
 *    (`X-Sandboxd-Key`, a port link, the traffic token: `ownerCredential`) or its access
 *    token. sandboxd's own clients use the authenticated relay (`/api/v1/sandboxes/{id}/code`).
 */
export function codePortGuard(d: {
  tokens: Pick<AccessTokens, 'verify'>;
  findSandbox(id: string): Promise<SandboxRecord | null>;
  /** Whether `req` carries a credential of the sandbox's owner for this port (key, link, traffic token). */
  ownerCredential(req: IncomingMessage, sandbox: SandboxRecord, addr: PortAddress): Promise<boolean>;
}): PortGuard {
  return async (req: IncomingMessage, addr: PortAddress) => {
    if (addr.port !== CODE_INTERPRETER_PORT) return;
    const raw = req.headers['x-access-token'];
    const token = Array.isArray(raw) ? raw[0] : raw;
    const where = { sandboxId: addr.sandboxId, port: addr.port };
    if (token !== undefined) {
      if (await d.tokens.verify(addr.sandboxId, token)) return;
      throw new ProxyError('unauthorized', "X-Access-Token is not this sandbox's access token", where);
    }
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (req.headers.upgrade === undefined && tokenless(req.method ?? '', path)) return;
    const sb = await d.findSandbox(addr.sandboxId);
    if (sb && sb.template === undefined && (await d.ownerCredential(req, sb, addr))) return;
    throw new ProxyError(
      'unauthorized',
      sb?.template === undefined
        ? `Running code through port ${CODE_INTERPRETER_PORT} needs the owner's key in X-Sandboxd-Key, a port link, or the sandbox's access token in X-Access-Token (or use /api/v1/sandboxes/${addr.sandboxId}/code)`
        : 'Running code in this sandbox needs its access token (envdAccessToken) in X-Access-Token',
      where,
    );
  };
}
