import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { getSignature } from 'e2b';
import pino from 'pino';
import type { SandboxRecord } from '../../domain/sandbox.js';
import { SqliteStore } from '../../store/sqlite/store.js';
import { AccessTokens } from '../tokens.js';
import { type EnvdCall, userOf } from './context.js';
import { EnvdDoor, refuse } from './door.js';

/** What `refuse` wrote: status, headers, body. */
function answer(headers: Record<string, string>, url = '/process.Process/Start') {
  const out = { status: 0, headers: {} as Record<string, unknown>, body: Buffer.alloc(0) };
  const res = {
    headersSent: false,
    writeHead(status: number, h: Record<string, unknown>) {
      out.status = status;
      out.headers = h;
      return this;
    },
    end(b: string | Buffer) {
      out.body = Buffer.from(b);
    },
  } as unknown as ServerResponse;
  refuse({ method: 'POST', url, headers } as unknown as IncomingMessage, res, 404, 'Sandbox x not found');
  return out;
}

describe('envd door refusals', () => {
  it("unary Connect calls get Connect's error JSON with the HTTP status", () => {
    const a = answer({ 'content-type': 'application/json' }, '/process.Process/List');
    assert.equal(a.status, 404);
    assert.deepEqual(JSON.parse(a.body.toString()), { code: 'not_found', message: 'Sandbox x not found' });
  });

  it('streaming Connect calls get a 200 whose one end-of-stream envelope carries the error', () => {
    const a = answer({ 'content-type': 'application/connect+json' });
    assert.equal(a.status, 200);
    assert.equal(a.headers['content-type'], 'application/connect+json');
    assert.equal(a.body[0], 2);
    assert.equal(a.body.readUInt32BE(1), a.body.length - 5);
    assert.deepEqual(JSON.parse(a.body.subarray(5).toString()), {
      error: { code: 'not_found', message: 'Sandbox x not found' },
    });
  });

  it("envd's HTTP paths get envd's {code, message} (with sandboxd's kind)", () => {
    const a = answer({}, '/files?path=/x');
    assert.equal(a.status, 404);
    assert.deepEqual(JSON.parse(a.body.toString()), {
      code: 404,
      kind: 'not_found',
      message: 'Sandbox x not found',
    });
  });
});

describe('envd door: who a call acts as', () => {
  const SBX = `sbx_${'d'.repeat(20)}`;
  const store = new SqliteStore(':memory:');
  const tokens = new AccessTokens(store);
  let server: Server;
  let base: string;
  let token: string;
  /** What the door handed to envd's HTTP paths last. */
  let seen: EnvdCall | null = null;

  before(async () => {
    token = await tokens.tokenFor(SBX);
    const sandbox = { id: SBX, accountId: 'acc', state: 'started', stopAt: 8e15, template: 'base' } as SandboxRecord;
    const door = new EnvdDoor({
      publicHost: 'sandbox.localhost',
      tokens,
      findSandbox: async (id) => (id === SBX ? sandbox : null),
      templates: { base: { image: 'local/debian:bookworm', user: 'user' } },
      now: () => Date.now(),
      log: pino({ level: 'silent' }),
      routes: () => {},
      rest: async (call, _req, res) => {
        seen = call;
        res.writeHead(200).end(String(userOf(call)));
        return true;
      },
      charge: async () => null,
    });
    server = createServer(door.handle);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await store.close();
  });

  /** A URL as E2B's SDK makes it with `uploadUrl`/`downloadUrl` (its own getSignature). */
  const signed = async (path: string, operation: 'read' | 'write', user?: string) => {
    const u = new URL('/files', base);
    if (user) u.searchParams.set('username', user);
    u.searchParams.set('path', path);
    const sig = await getSignature({ path, operation, user, envdAccessToken: token });
    u.searchParams.set('signature', sig.signature);
    return u.toString();
  };
  const send = async (url: string, o: { method?: string; user?: string; token?: boolean } = {}) => {
    seen = null;
    const headers: Record<string, string> = { 'E2b-Sandbox-Id': SBX };
    if (o.user !== undefined) headers.authorization = `Basic ${Buffer.from(`${o.user}:`).toString('base64')}`;
    if (o.token) headers['x-access-token'] = token;
    const r = await fetch(url, { method: o.method ?? 'GET', headers });
    return { status: r.status, body: await r.text() };
  };

  it("a signed URL acts as the user it was signed for, else the template's default; Basic cannot change it", async () => {
    const noUser = await signed('/etc/shadow', 'read');
    assert.deepEqual(await send(noUser), { status: 200, body: 'user' }, "the template's default user");
    const refused = await send(noUser, { user: 'root' });
    assert.equal(refused.status, 403);
    assert.match(JSON.parse(refused.body).message, /signed for the sandbox's default user; .* names 'root'/);
    assert.equal(seen, null, 'nothing reached the handlers');
    const asUser = await signed('/tmp/x', 'write', 'user');
    assert.equal((await send(asUser, { method: 'POST', user: 'root' })).status, 403);
    assert.deepEqual(await send(asUser, { method: 'POST', user: 'user' }), { status: 200, body: 'user' });
    assert.deepEqual(seen && (seen as EnvdCall).signed, { path: '/tmp/x', operation: 'write' });
    assert.deepEqual(await send(asUser, { method: 'POST' }), { status: 200, body: 'user' });
  });

  it('the grant is what was signed: another user, path or operation in the URL is not valid', async () => {
    const asUser = await signed('/tmp/x', 'write', 'user');
    for (const bad of [
      asUser.replace('username=user', 'username=root'),
      asUser.replace('username=user&', ''),
      asUser.replace('path=%2Ftmp%2Fx', 'path=%2Froot%2Fx'),
      `${asUser}&username=root`.replace('username=user&', ''),
    ])
      assert.equal((await send(bad, { method: 'POST' })).status, 404, bad);
    assert.equal((await send(asUser)).status, 404, 'a write URL does not read');
  });

  it('the access token is the whole sandbox: its calls name any user with Basic', async () => {
    assert.deepEqual(await send(`${base}/files?path=/x`, { token: true, user: 'root' }), { status: 200, body: 'root' });
    assert.equal(seen && (seen as EnvdCall).signed, undefined);
    assert.deepEqual(await send(`${base}/files?path=/x`, { token: true }), { status: 200, body: 'user' });
  });
});

describe('envd door: E2b-Sandbox-Port values (another port goes to the port proxy)', () => {
  const SBX = `sbx_${'e'.repeat(20)}`;
  const store = new SqliteStore(':memory:');
  const tokens = new AccessTokens(store);
  let server: Server;
  let port: number;
  const forwarded: Array<{ sandboxId: string; port: number }> = [];

  before(async () => {
    const door = new EnvdDoor({
      publicHost: 'sandbox.localhost',
      tokens,
      findSandbox: async () => null,
      templates: {},
      now: () => Date.now(),
      log: pino({ level: 'silent' }),
      routes: () => {},
      rest: async () => false,
      charge: async () => null,
      forwardPort: (_req, res, addr) => {
        forwarded.push(addr);
        res.writeHead(204).end();
      },
    });
    server = createServer(door.handle);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await store.close();
  });

  /** One request with the raw header value `value` (sent byte for byte, not normalised by fetch). */
  const send = (value: string, id = SBX) =>
    new Promise<number>((resolve, reject) => {
      const req = request({
        host: '127.0.0.1',
        port,
        path: '/health',
        headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': value },
        agent: false,
      });
      req.on('response', (r) => {
        r.resume();
        resolve(r.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });

  it('a decimal port 1-65535 other than envd’s is forwarded as exactly that port of that sandbox', async () => {
    forwarded.length = 0;
    assert.equal(await send('49999'), 204);
    assert.equal(await send('8080'), 204);
    assert.deepEqual(forwarded, [
      { sandboxId: SBX, port: 49999 },
      { sandboxId: SBX, port: 8080 },
    ]);
  });

  it('anything else is refused (400) or, naming envd’s port, served by envd with its token rule: never forwarded', async () => {
    forwarded.length = 0;
    for (const v of ['0', '65536', '99999', '+80', '1e3', '0x50', '080', '-1', '4.9999e4', '80,81', 'http'])
      assert.equal(await send(v), 400, `E2b-Sandbox-Port ${v}`);
    // envd's port however spelled is envd's: without X-Access-Token, 401.
    for (const v of ['49983', ' 49983 ', '+49983']) assert.equal(await send(v), 401, `E2b-Sandbox-Port ${v}`);
    // A malformed sandbox id is not found, never forwarded.
    assert.equal(await send('49999', '../sbx'), 404);
    assert.deepEqual(forwarded, []);
  });
});
