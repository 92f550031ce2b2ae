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
 * E2B's access rule for the code port, as its code server applies it with the sandbox's
 * envd access token (every sandbox made through E2B's API has one: sandboxd's E2B
 * sandboxes are always `secure`):
 *  - an `X-Access-Token` that is not the sandbox's: 401, whatever the sandbox;
 *  - `POST /execute` (running code) of a sandbox created through E2B's API without one: 401.
 * Other requests without a token go on: `@e2b/code-interpreter` 2.8.0 sends the token only
 * with `runCode`, not with its context calls (create, list, restart, remove), nor does
 * anything need it for `GET /health`. Sandboxes of sandboxd's own API keep sandboxd's port
 * rules alone (public, or the owner's key or a link).
 */
export function codePortGuard(d: {
  tokens: Pick<AccessTokens, 'verify'>;
  findSandbox(id: string): Promise<SandboxRecord | null>;
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
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'POST' || path !== '/execute') return;
    const sb = await d.findSandbox(addr.sandboxId);
    if (sb?.template === undefined) return;
    throw new ProxyError(
      'unauthorized',
      'Running code in this sandbox needs its access token (envdAccessToken) in X-Access-Token',
      where,
    );
  };
}
