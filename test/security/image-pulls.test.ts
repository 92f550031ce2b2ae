/**
 * Image pulls through the API of the real server (local runtime): a create names any image
 * reference, and the host pulls it. A tenant may make it pull only from the allowed
 * registries, never at a loopback address, and never with the server's registry credentials;
 * the admin's creates use them. Registries here are scripted ones on 127.0.0.1 that record
 * every request (packages/server/test/fake-registry.ts); nothing leaves loopback.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type FakeRegistry, startFakeRegistry } from '../../packages/server/test/fake-registry.js';
import { tempDir } from '../../packages/server/test/images.js';
import { newAccount, RUNTIME, startServer, type Server } from '../e2e/harness.js';

const local = RUNTIME === 'local';
const creds = { username: 'sbx', password: `server-secret-${process.pid}` };
const basic = `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;

describe('image pulls of creates', { skip: !local && 'needs SANDBOXD_E2E_RUNTIME=local' }, () => {
  let open: FakeRegistry; // not listed
  let priv: FakeRegistry; // listed, with the server's credentials (admin only)
  let tmp: { dir: string; cleanup: () => Promise<void> };
  let s: Server;
  let tenant: { id: string; key: string };

  before(async () => {
    open = await startFakeRegistry();
    priv = await startFakeRegistry({ basicAuth: basic });
    tmp = await tempDir('pulls-e2e');
    const config = join(tmp.dir, 'config.json');
    writeFileSync(config, JSON.stringify({ registryCredentials: { [priv.host]: creds } }), { mode: 0o600 });
    s = await startServer({
      env: {
        SANDBOXD_CONFIG: config,
        SANDBOXD_REGISTRIES_ALLOWED: `docker.io,${priv.host}`,
        SANDBOXD_INSECURE_REGISTRIES: `${open.host},${priv.host}`,
        SANDBOXD_WARM_POOL: 'off',
      },
    });
    tenant = await newAccount(s);
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
});
