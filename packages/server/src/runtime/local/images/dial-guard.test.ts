/**
 * The per-pull proxy on its own: it answers only its own token, refuses a CONNECT or an
 * absolute-URI request to a non-public address (literal, or a name's DNS answer) without
 * dialling it, dials the operator's exempt host:port, and records what it refused.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect, createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { startRecorder } from '../../../../test/fake-registry.js';
import { checkHost, DialGuard } from './dial-guard.js';

/** One request through the proxy at `proxy` (an env URL): CONNECT line or absolute URI. */
function viaProxy(proxyUrl: string, target: string, method: 'CONNECT' | 'GET', auth = true): Promise<number> {
  const u = new URL(proxyUrl);
  const headers: Record<string, string> = {};
  if (auth) headers['proxy-authorization'] = `Basic ${Buffer.from(`${u.username}:${u.password}`).toString('base64')}`;
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, method, path: target, headers, agent: false });
    req.on('connect', (res, sock) => {
      sock.destroy();
      resolve(res.statusCode ?? 0);
    });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('dial guard', () => {
  let rec: Awaited<ReturnType<typeof startRecorder>>;
  before(async () => {
    rec = await startRecorder();
  });
  after(async () => {
    await rec?.stop();
  });

  test('checkHost: literal and resolved addresses, exempt, unresolvable', async () => {
    const lookup = async (h: string) => (h === 'a.test' ? ['8.8.8.8', '10.0.0.1'] : h === 'b.test' ? ['8.8.4.4'] : []);
    assert.deepEqual(await checkHost('a.test', false, lookup), { ok: false, refused: true, address: '10.0.0.1' });
    assert.deepEqual(await checkHost('a.test', true, lookup), { ok: true, address: '8.8.8.8' });
    assert.deepEqual(await checkHost('b.test', false, lookup), { ok: true, address: '8.8.4.4' });
    assert.deepEqual(await checkHost('[::1]', false, lookup), { ok: false, refused: true, address: '::1' });
    assert.equal((await checkHost('c.test', false, lookup)).ok, false);
  });

  test('refuses non-public targets without dialling them; exempt host:port is dialled', async () => {
    const lookup = async (h: string) => (h === 'rebind.test' ? ['127.0.0.1'] : []);
    const guard = await DialGuard.start({
      exempt: (h, p) => h === 'listed.test' && p === rec.port,
      lookup: async (h) => (h === 'listed.test' ? ['127.0.0.1'] : lookup(h)),
    });
    try {
      const url = guard.env().HTTPS_PROXY!;
      assert.equal(await viaProxy(url, `127.0.0.1:${rec.port}`, 'CONNECT'), 403);
      assert.equal(await viaProxy(url, `rebind.test:${rec.port}`, 'CONNECT'), 403);
      assert.equal(await viaProxy(url, `http://0.0.0.0:${rec.port}/x`, 'GET'), 403);
      assert.equal(await viaProxy(url, `http://rebind.test:${rec.port}/x`, 'GET'), 403);
      assert.equal(rec.seen.length, 0);
      assert.deepEqual(
        guard.events.map((e) => [e.host, e.refused]),
        [
          ['127.0.0.1', true],
          ['rebind.test', true],
          ['0.0.0.0', true],
          ['rebind.test', true],
        ],
      );
      // Without the pull's token: 407, nothing dialled, nothing recorded.
      assert.equal(await viaProxy(url, `http://listed.test:${rec.port}/x`, 'GET', false), 407);
      assert.equal(guard.events.length, 4);
      // The operator's registry, by its host:port only.
      assert.equal(await viaProxy(url, `http://listed.test:${rec.port}/ok`, 'GET'), 200);
      assert.equal(await viaProxy(url, `listed.test:${rec.port}`, 'CONNECT'), 200);
      assert.deepEqual(
        rec.seen.map((r) => r.path),
        ['/ok'],
      );
    } finally {
      await guard.close();
    }
    // Closed: nothing listens any more.
    const port = Number(new URL(guard.env().HTTPS_PROXY!).port);
    await assert.rejects(
      new Promise((resolve, reject) => {
        const s = connect(port, '127.0.0.1', () => resolve(s.destroy()));
        s.on('error', reject);
      }),
    );
  });
  test('a hostile upstream status (000, 099) answers 502 and never ends the process', async () => {
    const bad = createServer((sock) => {
      sock.once('data', () => {
        const code = bad.listening && (bad as { n?: number }).n ? '099' : '000';
        (bad as { n?: number }).n = 1;
        sock.end(`HTTP/1.1 ${code} X\r\ncontent-length: 0\r\n\r\n`);
      });
    });
    await new Promise<void>((r) => bad.listen(0, '127.0.0.1', r));
    const port = (bad.address() as { port: number }).port;
    const guard = await DialGuard.start({
      exempt: (h, p) => h === 'hostile.test' && p === port,
      lookup: async (h) => (h === 'hostile.test' ? ['127.0.0.1'] : []),
    });
    try {
      const url = guard.env().HTTP_PROXY!;
      assert.equal(await viaProxy(url, `http://hostile.test:${port}/v2/`, 'GET'), 502);
      assert.equal(await viaProxy(url, `http://hostile.test:${port}/v2/`, 'GET'), 502);
      // The guard still serves.
      assert.equal(await viaProxy(url, `http://127.0.0.1:${port}/x`, 'GET'), 403);
    } finally {
      await guard.close();
      await new Promise((r) => bad.close(r));
    }
  });
});
