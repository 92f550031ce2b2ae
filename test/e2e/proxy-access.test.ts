/**
 * Who and what the port proxy reaches, against real sandboxes on the local runtime: Host
 * tricks never reach the host or anything but the named sandbox's own address, public
 * ports are public across accounts, private ports need the owner's key or a signed link.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server as TcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import WebSocket from 'ws';
import { rawRequest } from '../../packages/server/test/proxy.js';
import { ADMIN_KEY, newAccount } from './harness.js';
import {
  hget,
  localUnavailable,
  startLocalServer,
  startPyApp,
  waitListening,
  type LocalServer,
} from './proxy-support.js';

const run = promisify(execFile);
const curl = async (...args: string[]) =>
  (await run('curl', ['-sS', '-m', '60', ...args], { maxBuffer: 1 << 20 })).stdout;
const skip = localUnavailable();
const statusOf = (raw: string) => Number(/^HTTP\/1\.[01] (\d{3})/.exec(raw)?.[1] ?? 0);

describe('port proxy e2e: escapes and private ports (local runtime)', { skip: skip ?? false }, () => {
  let s: LocalServer;
  let owner: { id: string; key: string };
  let canary: TcpServer;
  let canaryPort = 0;
  let canaryHits = 0;
  const sbx: Record<'app' | 'theirs' | 'priv', { id: string; name: string; host: (p: number) => string }> = {} as never;
  const sandbox = async (image: string, key: string, body: Record<string, unknown> = {}) => {
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image, ...body } });
    assert.equal(c.status, 201, c.text);
    const sb = c.body.sandbox;
    return {
      id: sb.id as string,
      name: sb.name as string,
      host: (p: number) => sb.publicAccessUrlTemplate.replace('{{PORT}}', String(p)) as string,
    };
  };
  const echo = async (host: string, headers: Record<string, string> = {}) => {
    const r = await hget(s.port, host, { path: '/echo', headers });
    return { status: r.status, body: r.status === 200 ? JSON.parse(r.body) : r.body };
  };

  before(async () => {
    canary = createServer((c) => {
      canaryHits++;
      c.destroy();
    });
    await new Promise<void>((r) => canary.listen(0, '0.0.0.0', () => r()));
    canaryPort = (canary.address() as { port: number }).port;
    s = await startLocalServer();
    owner = await newAccount(s);
    sbx.app = await sandbox('local/debian:bookworm', ADMIN_KEY);
    sbx.theirs = await sandbox('local/debian:bookworm', owner.key);
    sbx.priv = await sandbox('local/debian:bookworm', owner.key, { ports: { public: false } });
    await startPyApp(s, sbx.app.id, 8000);
    await startPyApp(s, sbx.theirs.id, 8000, owner.key);
    await startPyApp(s, sbx.priv.id, 8000, owner.key);
    await waitListening(s, sbx.app.host(8000), '/echo');
    await waitListening(s, sbx.theirs.host(8000), '/echo');
    await waitListening(s, sbx.priv.host(8000), '/echo', { 'x-sandboxd-key': owner.key });
  });
  after(async () => {
    await s?.teardown();
    canary?.close();
  });

  it("Host tricks never reach the host or another address: the target is always the sandbox's own", async () => {
    const app = sbx.app.host(8000);
    const gateway = s.subnet.replace(/0\/24$/, '1');
    // 'api': left to the API (not the proxy's: no X-Sandboxd-Proxy, nothing relayed).
    const cases: Array<[string, number | 'api']> = [
      [`GET / HTTP/1.1\r\nHost: ${sbx.app.host(canaryPort)}\r\n\r\n`, 502], // the sandbox's port, not the host's
      [`GET http://127.0.0.1:${canaryPort}/ HTTP/1.1\r\nHost: ${app}\r\n\r\n`, 400],
      [`GET http://${gateway}:${canaryPort}/ HTTP/1.1\r\nHost: ${app}\r\n\r\n`, 400],
      [`GET http://${sbx.app.host(canaryPort)}/ HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\n\r\n`, 'api'],
      [`GET / HTTP/1.1\r\nHost: 127.0.0.1:${canaryPort}\r\n\r\n`, 'api'],
      [`GET / HTTP/1.1\r\nHost: ${gateway}:${canaryPort}\r\n\r\n`, 'api'],
      [`GET / HTTP/1.1\r\nHost: ${canaryPort}-${gateway}.sandbox.localhost:${s.port}\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${canaryPort}-127.0.0.1.sandbox.localhost:${s.port}\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${app}:${canaryPort}\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${app}\r\nHost: 127.0.0.1:${canaryPort}\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${canaryPort}-${sbx.app.id}.${gateway}\r\n\r\n`, 'api'],
      [`GET / HTTP/1.1\r\nHost: 8000-sbx_${'z'.repeat(20)}.sandbox.localhost:${s.port}\r\n\r\n`, 404],
      [`GET / HTTP/1.1\r\nHost: 8000-${sbx.app.id}x.sandbox.localhost:${s.port}\r\n\r\n`, 404],
      [`GET / HTTP/1.1\r\nHost: 8000-${sbx.app.id}.sandbox.localhost..:${s.port}\r\n\r\n`, 'api'],
      [`GET / HTTP/1.1\r\nHost: 00008000-${sbx.app.id}.sandbox.localhost:${s.port}\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${sbx.app.host(canaryPort + 65536)}\r\n\r\n`, 400],
      [`CONNECT 127.0.0.1:${canaryPort} HTTP/1.1\r\nHost: ${app}\r\n\r\n`, 0], // no tunnel: the connection is closed
      [`GET / HTTP/1.1\r\nHost: 127.0.0.1:${canaryPort}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`, 'api'],
      [
        `GET http://127.0.0.1:${canaryPort}/ HTTP/1.1\r\nHost: ${app}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
        400,
      ],
    ];
    for (const [raw, want] of cases) {
      const out = await rawRequest(s.port, raw);
      if (want === 'api') assert.ok(statusOf(out) > 0 && !/\r\nx-sandboxd-proxy:/i.test(out), raw);
      else assert.equal(statusOf(out), want, raw);
    }
    assert.equal(canaryHits, 0, 'the host service was never contacted');
  });

  it("case and a trailing dot name the same sandbox; another account's public sandbox is public", async () => {
    for (const h of [sbx.app.host(8000).toUpperCase(), sbx.app.host(8000).replace(`:${s.port}`, `.:${s.port}`)]) {
      const r = await echo(h);
      assert.equal(r.body.hostname, sbx.app.name, h);
    }
    const theirs = await echo(sbx.theirs.host(8000));
    assert.equal(theirs.status, 200);
    assert.equal(theirs.body.hostname, sbx.theirs.name);
  });

  it("private ports: 401 (JSON or page) without credentials or with another account's key; the owner's key opens", async () => {
    const h = sbx.priv.host(8000);
    const none = await echo(h);
    assert.equal(none.status, 401);
    assert.match(JSON.parse(none.body).message, /is private/);
    assert.match(await curl('-H', 'Accept: text/html', `http://${h}/`), /<h1>401 Unauthorized<\/h1>/);
    assert.equal((await echo(h, { 'x-sandboxd-key': ADMIN_KEY })).status, 401);
    const ok = await echo(h, { 'x-sandboxd-key': owner.key });
    assert.equal(ok.status, 200);
    assert.equal(ok.body.hostname, sbx.priv.name);
    assert.equal(ok.body.headers['X-Sandboxd-Key'], undefined, 'the key never reaches the sandbox');
  });

  it('private ports: a signed link sets a cookie and redirects (curl -L), for that port only; WebSockets too', async () => {
    const other = await s.api('POST', `/api/v1/sandboxes/${sbx.priv.id}/ports/8000/link`);
    assert.equal(other.status, 404, 'only the owner mints links');
    const l = await s.api('POST', `/api/v1/sandboxes/${sbx.priv.id}/ports/8000/link`, {
      key: owner.key,
      body: { expiresInMs: 600_000 },
    });
    assert.equal(l.status, 200);
    assert.match(l.body.url, new RegExp(`^http://${sbx.priv.host(8000)}/\\?sandboxd_token=`));
    const dir = mkdtempSync(join(tmpdir(), 'sbxd-jar-'));
    try {
      const jar = join(dir, 'jar');
      const out = await curl(
        '-L',
        '-c',
        jar,
        '-b',
        jar,
        '-D',
        join(dir, 'headers'),
        `${l.body.url.replace('/?', '/echo?')}&keep=1`,
      );
      const body = JSON.parse(out);
      assert.equal(body.path, '/echo?keep=1', 'the token is taken out of the URL');
      assert.equal(body.headers.Cookie, undefined, 'the link cookie never reaches the sandbox');
      assert.match(
        readFileSync(join(dir, 'headers'), 'utf8'),
        /^HTTP\/1\.1 302 Found\r\n[\s\S]*set-cookie: sandboxd_token=[^;]+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax/im,
      );
      const again = JSON.parse(await curl('-b', jar, `http://${sbx.priv.host(8000)}/echo`));
      assert.equal(again.hostname, sbx.priv.name);
      const cookie = readFileSync(jar, 'utf8')
        .split('\n')
        .find((x) => x.includes('sandboxd_token'))!
        .split('\t');
      const token = cookie[cookie.length - 1];
      assert.equal(
        (await echo(sbx.priv.host(8001), { cookie: `sandboxd_token=${token}` })).status,
        401,
        'another port needs its own link',
      );
      const ws = new WebSocket(`ws://127.0.0.1:${s.port}/ws`, {
        headers: { host: sbx.priv.host(8000), cookie: `sandboxd_token=${token}` },
        handshakeTimeout: 20_000,
      });
      await new Promise((r, j) => {
        ws.once('open', r);
        ws.once('error', j);
      });
      const back = await new Promise<string>((r) => {
        ws.once('message', (m: Buffer) => r(m.toString()));
        ws.send('private hello');
      });
      assert.equal(back, 'private hello');
      ws.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
