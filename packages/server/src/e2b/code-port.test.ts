/**
 * codePortGuard: who may reach the code server (port 49999) through the port proxy. The
 * request is played as the proxy hands it over (method, raw target, headers); the guard is
 * an allowlist, so path spellings the code server routes like `/execute` (`//execute`,
 * `/execute/`), unknown paths and upgrades (whose tunnel carries whatever follows) need a
 * credential too.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import { ProxyError } from '../proxy/reply.js';
import { CODE_INTERPRETER_PORT, codePortGuard } from './code-port.js';

const E2B_SBX = 'sbxe2b';
const OWN_SBX = 'sbxown';
const TOKEN = 'ea_good';

function guard() {
  return codePortGuard({
    tokens: { verify: async (id, t) => id !== undefined && t === TOKEN },
    findSandbox: async (id) =>
      ({ id, accountId: 'acc', ...(id === E2B_SBX ? { template: 'code-interpreter-v1' } : {}) }) as never,
    ownerCredential: async (req) => req.headers['x-sandboxd-key'] === 'owner-key',
  });
}

function req(method: string, url: string, headers: Record<string, string> = {}): IncomingMessage {
  return { method, url, headers } as unknown as IncomingMessage;
}

const passes = async (sandboxId: string, r: IncomingMessage, port = CODE_INTERPRETER_PORT) => {
  await guard()(r, { sandboxId, port });
};
const refused = async (sandboxId: string, r: IncomingMessage) =>
  assert.rejects(
    guard()(r, { sandboxId, port: CODE_INTERPRETER_PORT }),
    (e) => e instanceof ProxyError && e.status === 401,
    `${r.method} ${r.url} should be refused`,
  );

/** What the code server runs as `POST /execute` (it splits the path on `/` and drops empty parts). */
const EXECUTE_SPELLINGS = ['/execute', '//execute', '/execute/', '/execute//', '//execute/?x=1', '/execute?a=b'];

describe('codePortGuard', () => {
  it('other ports are not its business', async () => {
    await passes(E2B_SBX, req('POST', '/execute'), 8080);
  });

  for (const sbx of [E2B_SBX, OWN_SBX])
    it(`${sbx === E2B_SBX ? 'E2B' : "sandboxd's"} sandbox: running code without a credential is refused whatever the path's spelling`, async () => {
      for (const p of EXECUTE_SPELLINGS) await refused(sbx, req('POST', p));
    });

  it('the context calls E2B’s SDK makes without a token, and /health, go on', async () => {
    for (const sbx of [E2B_SBX, OWN_SBX]) {
      await passes(sbx, req('GET', '/health'));
      await passes(sbx, req('HEAD', '/health'));
      await passes(sbx, req('GET', '/contexts'));
      await passes(sbx, req('POST', '/contexts'));
      await passes(sbx, req('DELETE', '/contexts/abc-123'));
      await passes(sbx, req('POST', '/contexts/abc-123/restart'));
    }
  });

  it('anything else without a credential is refused (unknown paths, other methods, upgrades)', async () => {
    for (const sbx of [E2B_SBX, OWN_SBX]) {
      await refused(sbx, req('PUT', '/contexts'));
      await refused(sbx, req('POST', '/anything'));
      await refused(sbx, req('GET', '/contexts/a/b/c'));
      // An upgrade is spliced byte for byte after its first request: what follows is never checked.
      await refused(sbx, req('GET', '/health', { connection: 'Upgrade', upgrade: 'websocket' }));
    }
  });

  it("the sandbox's access token opens everything; a wrong one is refused on any path", async () => {
    for (const sbx of [E2B_SBX, OWN_SBX]) {
      for (const p of EXECUTE_SPELLINGS) await passes(sbx, req('POST', p, { 'x-access-token': TOKEN }));
      await passes(sbx, req('GET', '/health', { 'x-access-token': TOKEN, upgrade: 'websocket' }));
      await refused(sbx, req('GET', '/health', { 'x-access-token': 'ea_bad' }));
    }
  });

  it("a sandbox of sandboxd's API: the owner's credential (key, link) runs code too; E2B's needs its access token", async () => {
    await passes(OWN_SBX, req('POST', '/execute', { 'x-sandboxd-key': 'owner-key' }));
    await refused(OWN_SBX, req('POST', '/execute', { 'x-sandboxd-key': 'someone-else' }));
    await refused(E2B_SBX, req('POST', '/execute', { 'x-sandboxd-key': 'owner-key' }));
  });
});
