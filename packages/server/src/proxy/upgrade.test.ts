import assert from 'node:assert/strict';
import { request, type IncomingMessage } from 'node:http';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import { IDS, OWNER_KEY, startFixture, type Fixture } from '../../test/proxy.js';

/** Opens a WebSocket to the front server with the given Host; resolves open, or the HTTP refusal. */
function open(
  port: number,
  host: string,
  o: { path?: string; headers?: Record<string, string> } = {},
): Promise<{ ws: WebSocket } | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}${o.path ?? '/ws'}`, {
      headers: { host, ...o.headers },
      handshakeTimeout: 20_000,
    });
    ws.once('open', () => resolve({ ws }));
    ws.once('unexpected-response', (_req, res: IncomingMessage) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.once('error', reject);
  });
}

function echo(ws: WebSocket, data: string | Buffer): Promise<{ data: Buffer; binary: boolean }> {
  return new Promise((resolve) => {
    ws.once('message', (d: Buffer, binary) => resolve({ data: d, binary }));
    ws.send(data);
  });
}

describe('port proxy: WebSocket upgrades', () => {
  let f: Fixture;
  before(async () => (f = await startFixture()));
  after(() => f.close());

  it('tunnels a WebSocket to the sandbox port: text and binary frames echo back', async () => {
    const r = await open(f.port, f.host(IDS.pub), { path: '/ws?room=1' });
    assert.ok('ws' in r);
    const text = await echo(r.ws, 'hello through the proxy');
    assert.equal(text.data.toString(), 'hello through the proxy');
    assert.equal(text.binary, false);
    const big = Buffer.alloc(3 * 1024 * 1024, 9);
    const bin = await echo(r.ws, big);
    assert.equal(bin.binary, true);
    assert.ok(bin.data.equals(big));
    r.ws.close();
    const seen = [...f.seen].reverse().find((s) => s.url === '/ws?room=1');
    assert.equal(seen?.headers.host, f.host(IDS.pub));
    assert.equal(seen?.headers['x-forwarded-for'], '127.0.0.1');
    assert.equal(seen?.headers.upgrade, 'websocket');
  });

  it('refusals are plain HTTP with the error body: 404, 400, 502', async () => {
    const unknown = await open(f.port, f.host(IDS.unknown));
    assert.ok('status' in unknown);
    assert.equal(unknown.status, 404);
    assert.equal(JSON.parse(unknown.body).code, 404);
    const range = await open(f.port, f.host(IDS.pub, 70000));
    assert.ok('status' in range && range.status === 400);
    const refused = await open(f.port, f.host(IDS.pub, f.closedPort));
    assert.ok('status' in refused);
    assert.equal(refused.status, 502);
    assert.match(JSON.parse(refused.body).message, new RegExp(`Nothing is listening on port ${f.closedPort}`));
  });

  it("an upgrade for a host that is not a sandbox host is not the proxy's", async () => {
    const before = f.seen.length;
    const r = await open(f.port, `127.0.0.1:${f.upPort}`);
    assert.ok('status' in r);
    assert.equal(r.status, 404);
    assert.match(JSON.parse(r.body).message, /No WebSocket endpoint/);
    assert.equal(f.seen.length, before);
  });

  it('private ports: 401 without credentials; the owner key, a link token or its cookie open it', async () => {
    const none = await open(f.port, f.host(IDS.priv));
    assert.ok('status' in none && none.status === 401);
    const token = f.links.sign({ sandboxId: IDS.priv, port: f.upPort, expiresAt: Date.now() + 60_000 });
    const ways: Array<{ path?: string; headers?: Record<string, string> }> = [
      { headers: { 'x-sandboxd-key': OWNER_KEY } },
      { path: `/ws?sandboxd_token=${token}` },
      { headers: { cookie: `sandboxd_token=${token}` } },
    ];
    for (const o of ways) {
      const r = await open(f.port, f.host(IDS.priv), o);
      assert.ok('ws' in r, JSON.stringify(o));
      assert.equal((await echo(r.ws, 'x')).data.toString(), 'x');
      r.ws.close();
    }
    assert.equal([...f.seen].reverse().find((s) => s.url.startsWith('/ws'))?.headers.cookie, undefined);
    assert.ok(
      f.seen.every((s) => !s.url.includes('sandboxd_token')),
      'the token never reaches the sandbox',
    );
  });
});

describe('port proxy: WebSocket timeout and shutdown', () => {
  let f: Fixture;
  before(async () => (f = await startFixture({ timeoutMs: 200 })));
  after(() => f.close());

  it('504 when the sandbox accepts the connection but never answers the upgrade', async () => {
    const r = await open(f.port, f.host(IDS.pub), { path: '/silent' });
    assert.ok('status' in r);
    assert.equal(r.status, 504);
  });

  it('shutdown cuts open WebSockets and event streams', async () => {
    const r = await open(f.port, f.host(IDS.pub));
    assert.ok('ws' in r);
    const closed = new Promise<number>((resolve) => r.ws.once('close', (code) => resolve(code)));
    const sse = new Promise<string>((resolve) => {
      request({ host: '127.0.0.1', port: f.port, path: '/sse', headers: { host: f.host(IDS.pub) } }, (res) => {
        res.once('data', () => f.cutAll());
        res.on('error', () => resolve('cut'));
        res.on('end', () => resolve('ended'));
      })
        .on('error', () => resolve('cut'))
        .end();
    });
    assert.equal(await sse, 'cut');
    assert.equal(await closed, 1006);
  });
});
