/**
 * Image pulls through the API of the real server (local runtime): a create names any image
 * reference, and the host pulls it. A tenant may make it pull only from the allowed
 * registries, never at a loopback address, and never with the server's registry credentials;
 * the admin's creates use them, and what they pulled is served from the cache only to those
 * the credentials serve (the admin, the accounts listed). Registries here are scripted ones on 127.0.0.1 that record
 * every request (packages/server/test/fake-registry.ts); nothing leaves loopback.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { dockerArchive } from './escape-support.js';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type FakeRegistry, startFakeRegistry } from '../../packages/server/test/fake-registry.js';
import { tempDir } from '../../packages/server/test/images.js';
import { ADMIN_KEY, newAccount, RUNTIME, startServer, type Server } from '../e2e/harness.js';

const local = RUNTIME === 'local';
const creds = { username: 'sbx', password: `server-secret-${process.pid}` };
const basic = `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;

describe('image pulls of creates', { skip: !local && 'needs SANDBOXD_E2E_RUNTIME=local' }, () => {
  let open: FakeRegistry; // not listed
  let priv: FakeRegistry; // listed, with the server's credentials (admin and `entitled`)
  let tmp: { dir: string; cleanup: () => Promise<void> };
  let s: Server;
  let tenant: { id: string; key: string };
  let entitled: { id: string; key: string };

  before(async () => {
    open = await startFakeRegistry();
    priv = await startFakeRegistry({ basicAuth: basic });
    tmp = await tempDir('pulls-e2e');
    const config = join(tmp.dir, 'config.json');
    const credentials = (accounts: string[]) =>
      writeFileSync(config, JSON.stringify({ registryCredentials: { [priv.host]: { ...creds, accounts } } }), {
        mode: 0o600,
      });
    credentials([]);
    // An image cache of its own: the images here are made up, the shared cache stays as it was.
    const env = {
      SANDBOXD_CONFIG: config,
      SANDBOXD_IMAGE_DIR: join(tmp.dir, 'images'),
      SANDBOXD_REGISTRIES_ALLOWED: `docker.io,${priv.host}`,
      SANDBOXD_INSECURE_REGISTRIES: `${open.host},${priv.host}`,
      SANDBOXD_WARM_POOL: 'off',
    };
    s = await startServer({ env });
    tenant = await newAccount(s);
    entitled = await newAccount(s);
    // The credentials serve `entitled` too: its id is known now, the config is read at start.
    credentials([entitled.id]);
    await s.stop({ keepData: true });
    s = await startServer({ env, dataDir: s.dataDir });
  });

  after(async () => {
    await s?.stop();
    await open?.stop();
    await priv?.stop();
    await tmp?.cleanup();
  });

  const create = (image: string, key?: string) =>
    s.api('POST', '/api/v1/sandboxes', { body: { image, timeoutMs: 60_000 }, key });

  it('a tenant cannot make the host pull from an unlisted registry, nor from loopback by name', async () => {
    const before = (await s.api('GET', '/api/v1/account', { key: tenant.key })).body;
    for (const image of [`${open.host}/sbx/tiny:1`, `localhost:${open.host.split(':')[1]}/sbx/tiny:1`]) {
      const r = await create(image, tenant.key);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.body.kind, 'validation');
      assert.match(r.body.message, /SANDBOXD_REGISTRIES_ALLOWED/);
    }
    assert.deepEqual(open.seen, [], 'the registry was never dialled');
    const list = await s.api('GET', '/api/v1/sandboxes', { key: tenant.key });
    assert.deepEqual(list.body.sandboxes ?? list.body, [], 'no sandbox recorded');
    const now = (await s.api('GET', '/api/v1/account', { key: tenant.key })).body;
    assert.deepEqual(now, before, 'balance and usage as before');
    // The admin may pull from unlisted registries, but not at a loopback address.
    const a = await create(`${open.host}/sbx/tiny:1`);
    assert.equal(a.status, 400, a.text);
    assert.match(a.body.message, /loopback/);
    assert.deepEqual(open.seen, []);
  });

  it("a tenant's pull never carries the server's registry credentials; the admin's does", async () => {
    const r = await create(`${priv.host}/sbx/private:1`, tenant.key);
    assert.equal(r.status, 404, r.text);
    assert.equal(r.body.kind, 'template_not_found');
    assert.ok(priv.seen.length > 0, 'the listed registry was asked');
    assert.equal(priv.seen.filter((q) => q.authorization === basic).length, 0);
    // The admin's create pulls with them (what it then runs is no matter here).
    await create(`${priv.host}/sbx/private:2`);
    assert.ok(priv.seen.some((q) => q.authorization === basic));
  });

  it("an image the admin pulled with the server's credentials is served from the cache only to the accounts they serve", async () => {
    const image = `${priv.host}/sbx/cached:1`;
    const withCreds = () => priv.seen.filter((q) => q.authorization === basic).length;
    const admin = await create(image);
    assert.equal(admin.status, 201, admin.text);
    const pulled = withCreds();
    assert.ok(pulled > 0, "the admin's pull used the credentials");
    // Another tenant: its own anonymous pull, which the registry refuses; nothing made or billed.
    const before = (await s.api('GET', '/api/v1/account', { key: tenant.key })).body;
    const r = await create(image, tenant.key);
    assert.equal(r.status, 404, r.text);
    assert.equal(r.body.kind, 'template_not_found');
    assert.equal(withCreds(), pulled, "the tenant's pull went out without the credentials");
    const list = await s.api('GET', '/api/v1/sandboxes', { key: tenant.key });
    assert.deepEqual(list.body.sandboxes ?? list.body, [], 'no sandbox recorded');
    assert.deepEqual((await s.api('GET', '/api/v1/account', { key: tenant.key })).body, before);
    // The account the credentials serve gets it from the cache: the registry is not asked.
    const asked = priv.seen.length;
    const e = await create(image, entitled.key);
    assert.equal(e.status, 201, e.text);
    assert.equal(priv.seen.length, asked, 'served from the cache');
  });

  it('a cached image of a registry a tenant may not pull from is refused to the tenant', async () => {
    // The admin imports an image under a name on the registry tenants may not pull from.
    const image = `${open.host}/sbx/imported:1`;
    const archive = dockerArchive(image, [{ name: 'etc/', type: 'dir' }], '0');
    const imp = await fetch(`${s.baseUrl}/api/v1/images/import?ref=${encodeURIComponent(image)}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/x-tar' },
      body: new Uint8Array(archive),
      signal: AbortSignal.timeout(60_000),
    });
    assert.equal(imp.status, 200, await imp.text());
    const r = await create(image, tenant.key);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.kind, 'validation');
    assert.match(r.body.message, /SANDBOXD_REGISTRIES_ALLOWED/);
    assert.deepEqual(open.seen, []);
    const list = await s.api('GET', '/api/v1/sandboxes', { key: tenant.key });
    assert.deepEqual(list.body.sandboxes ?? list.body, []);
  });
});
