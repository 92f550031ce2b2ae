import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { PortLinks } from './links.js';
import { get } from '../../test/proxy.js';

describe('private ports and port links (composed app, fake driver)', () => {
  let t: TestApp;
  const dataDir = mkdtempSync(join(tmpdir(), 'sbxd-link-'));
  // The key file of a version that kept the secret in the data dir: carried into the database.
  const fileKey = randomBytes(32);
  before(async () => {
    writeFileSync(join(dataDir, 'proxy-link.key'), `${fileKey.toString('hex')}\n`, { mode: 0o600 });
    t = await makeTestApp({ dataDir });
  });
  after(async () => {
    try {
      await t?.close();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
  const create = async (body: Record<string, unknown>) =>
    t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image: 'local/busybox:latest', ...body } });

  it('ports are public by default; "ports": {"public": false} is stored; the reply keeps the spec shape', async () => {
    const pub = (await create({})).json().sandbox;
    assert.equal((await t.app.store.getSandbox(pub.id))!.portsPublic, true);
    const c = await create({ ports: { public: false } });
    assert.equal(c.statusCode, 201);
    const priv = c.json().sandbox;
    assert.deepEqual(Object.keys(priv).sort(), [
      'createdAt',
      'id',
      'image',
      'isolation',
      'metadata',
      'name',
      'network',
      'onTimeout',
      'publicAccessUrlTemplate',
      'region',
      'state',
      'stopAt',
    ]);
    assert.equal((await t.app.store.getSandbox(priv.id))!.portsPublic, false);
    assert.equal((await create({ ports: { public: false, other: 1 } })).statusCode, 400);
    assert.equal((await create({ ports: { public: 'no' } })).statusCode, 400);
  });

  it('POST .../ports/{port}/link signs a link for that port; 400 bad port or lifetime; 404 other account; 409 stopped', async () => {
    const sb = (await create({ ports: { public: false } })).json().sandbox;
    const r = await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb.id}/ports/8000/link` });
    assert.equal(r.statusCode, 200);
    const { url, expiresAt } = r.json();
    const m = new RegExp(
      `^http://8000-${sb.id}\\.sandbox\\.localhost:8080/\\?sandboxd_token=(\\d+\\.[A-Za-z0-9_-]+)$`,
    ).exec(url);
    assert.ok(m, url);
    assert.equal(new Date(expiresAt).getTime(), t.clock.now() + 3_600_000);
    // The server's secret: the database's, the old key file's (so the links it signed still work).
    const held = Buffer.from((await t.app.store.getMeta('proxy.portLinkSecret')) ?? '', 'base64');
    assert.deepEqual(held, fileKey, 'the key file was moved into the database');
    const links = new PortLinks({ secret: () => fileKey });
    assert.equal(links.verify(m[1], { sandboxId: sb.id, port: 8000, now: t.clock.now() }), true);
    assert.equal(links.verify(m[1], { sandboxId: sb.id, port: 8001, now: t.clock.now() }), false);
    const short = await t.req({
      method: 'POST',
      url: `/api/v1/sandboxes/${sb.id}/ports/3000/link`,
      payload: { expiresInMs: 5000 },
    });
    assert.equal(new Date(short.json().expiresAt).getTime(), t.clock.now() + 5000);
    for (const [port, body] of [
      ['0', {}],
      ['65536', {}],
      ['http', {}],
      ['80', { expiresInMs: 10 }],
      ['80', { expiresInMs: 10 ** 10 }],
      ['80', { x: 1 }],
    ] as const) {
      const bad = await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb.id}/ports/${port}/link`, payload: body });
      assert.equal(bad.statusCode, 400, `${port} ${JSON.stringify(body)}`);
    }
    const other = await t.newAccount();
    assert.equal(
      (await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb.id}/ports/80/link`, key: other.key })).statusCode,
      404,
    );
    assert.equal(
      (await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb.id}/ports/80/link`, key: null })).statusCode,
      401,
    );
    await t.req({ method: 'PATCH', url: `/api/v1/sandboxes/${sb.id}/timeout`, payload: { timeoutMs: 0 } });
    assert.equal((await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb.id}/ports/80/link` })).statusCode, 409);
  });

  it('the listening app routes sandbox hosts to the proxy before fastify; the fake runtime has no address to reach', async () => {
    await t.app.http.listen({ host: '127.0.0.1', port: 0 });
    const port = (t.app.http.server.address() as AddressInfo).port;
    const sb = (await create({})).json().sandbox;
    const host = sb.publicAccessUrlTemplate.replace('{{PORT}}', '8000');
    const r = await get(port, host, { path: '/api/v1/sandboxes' });
    assert.equal(r.status, 502);
    assert.match(JSON.parse(r.body).message, /no network address/);
    assert.equal((await get(port, host.replace(sb.id, `sbx_${'z'.repeat(20)}`))).status, 404);
    const api = await get(port, `127.0.0.1:${port}`, {
      path: '/api/v1/sandboxes',
      headers: { authorization: `Bearer ${t.adminKey}` },
    });
    assert.equal(api.status, 200, 'other hosts still reach the API');
  });
});
