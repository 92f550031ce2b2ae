/**
 * The pull policy for real (skopeo against registries on 127.0.0.1): which registries a
 * tenant may pull from, whose pulls the server's credentials serve, and that no pull dials a
 * loopback, private or metadata address, by name, by DNS answer or by redirect, unless the
 * operator listed that registry.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { buildBusyboxLayout } from './build-busybox.js';
import { ImageStore } from './store.js';
import { ANONYMOUS, DEFAULT_REGISTRIES_ALLOWED, isForbiddenAddress, OPERATOR, PullPolicy } from './pull-policy.js';
import { pushLayout, startRegistry, tempDir, type TestRegistry } from '../../../../test/images.js';
import { type FakeRegistry, startFakeRegistry, startRecorder } from '../../../../test/fake-registry.js';

const tenant = (accountId: string) => ({ accountId, admin: false });
const ADMIN = { accountId: 'acc_admin', admin: true };

/** A refusal of the policy: 400 `validation` naming the registry (or address) and how to allow it. */
const refused = (what: string) => (e: unknown) => {
  assert.ok(e instanceof SandboxdError, String(e));
  assert.equal(e.kind, 'validation', e.message);
  assert.ok(e.message.includes(what), `${e.message} names ${what}`);
  assert.match(e.message, /SANDBOXD_REGISTRIES_ALLOWED/);
  return true;
};
const notFound = (e: unknown) => e instanceof SandboxdError && e.kind === 'template_not_found';

describe('pull policy', () => {
  let tmp: { dir: string; cleanup: () => Promise<void> };
  let reg: TestRegistry | undefined;
  let n = 0;
  const dir = () => join(tmp.dir, `s${++n}`);

  before(async () => {
    tmp = await tempDir('policy');
    const layout = join(tmp.dir, 'layout');
    const work = join(tmp.dir, 'bbwork');
    await mkdir(work);
    await buildBusyboxLayout(layout, 'latest', work, { timeoutMs: 60_000 });
    await mkdir(join(tmp.dir, 'reg'));
    reg = await startRegistry(join(tmp.dir, 'reg'));
    await pushLayout(layout, 'latest', `${reg.host}/sbx/busybox:1`, tmp.dir);
  });

  after(async () => {
    await reg?.stop();
    await tmp?.cleanup();
  });

  test('a tenant cannot pull from a registry the operator did not list; listed, it can', async () => {
    const ref = `${reg!.host}/sbx/busybox:1`;
    const store = new ImageStore({ dir: dir(), insecureRegistries: [reg!.host] });
    await assert.rejects(store.resolve(ref, { puller: tenant('acc_1') }), refused(reg!.host));
    await assert.rejects(store.pull(ref, { puller: tenant('acc_1') }), refused(reg!.host));
    // Nothing changed: no image, no pull started.
    assert.deepEqual(await store.list(), []);
    assert.equal(store.stats.pulls, 0);
    // The admin may pull from unlisted registries, but not at a loopback address.
    await assert.rejects(store.resolve(ref, { puller: ADMIN }), refused(reg!.host));
    assert.deepEqual(await store.list(), []);

    const listed = new ImageStore({ dir: dir(), insecureRegistries: [reg!.host], registriesAllowed: [reg!.host] });
    const img = await listed.resolve(ref, { puller: tenant('acc_1') });
    assert.ok(img.digest.startsWith('sha256:'));
  });

  test('a registry name that resolves to loopback is refused, for the admin too', async () => {
    const port = reg!.host.split(':')[1];
    const alias = `localhost:${port}`;
    const store = new ImageStore({ dir: dir(), insecureRegistries: [reg!.host, alias], registriesAllowed: ['*'] });
    await assert.rejects(store.resolve(`${alias}/sbx/busybox:1`, { puller: ADMIN }), refused('localhost'));
    await assert.rejects(store.resolve(`${alias}/sbx/busybox:1`, { puller: tenant('acc_1') }), refused('localhost'));
    // A name whose DNS answer is loopback (the resolver of the store is the test's here).
    const named = 'registry.sandboxd.test';
    const viaDns = new ImageStore({
      dir: dir(),
      insecureRegistries: [`${named}:${port}`],
      registriesAllowed: ['*'],
      lookup: async (host) => (host === named ? ['127.0.0.1'] : []),
    });
    await assert.rejects(viaDns.resolve(`${named}:${port}/sbx/busybox:1`, { puller: ADMIN }), refused(named));
    assert.deepEqual(await store.list(), []);
    assert.deepEqual(await viaDns.list(), []);
  });

  test('a blob redirect to a non-public address is refused or reaches nothing: 0.0.0.0, a name resolving to loopback, loopback literals', async () => {
    const target = await startRecorder();
    const named = 'cdn.sandboxd.test';
    const fakes = [
      await startFakeRegistry({ redirectBlobs: (d) => `http://0.0.0.0:${target.port}/blob/${d}` }),
      await startFakeRegistry({ redirectBlobs: (d) => `http://${named}:${target.port}/blob/${d}` }),
    ];
    // Go dials `localhost` and literal loopback addresses without the proxy: in the pull's own
    // network namespace they reach nothing (the pull fails as not found, nothing is reached).
    const direct: FakeRegistry[] = [];
    for (const h of ['127.0.0.1', 'localhost', '[::ffff:127.0.0.1]', '[::1]'])
      direct.push(await startFakeRegistry({ redirectBlobs: (d) => `http://${h}:${target.port}/blob/${d}` }));
    try {
      for (const fake of direct) {
        const store = new ImageStore({ dir: dir(), insecureRegistries: [fake.host], registriesAllowed: [fake.host] });
        await assert.rejects(store.resolve(`${fake.host}/sbx/tiny:1`, { puller: ADMIN }), notFound);
        assert.ok(fake.seen.some((r) => r.path.includes('/blobs/')));
        assert.equal(target.seen.length, 0, 'the redirect target was never reached');
      }
      for (const [i, fake] of fakes.entries()) {
        const store = new ImageStore({
          dir: dir(),
          insecureRegistries: [fake.host],
          registriesAllowed: [fake.host],
          lookup: async (host) => (host === named ? ['127.0.0.1'] : []),
        });
        await assert.rejects(
          store.resolve(`${fake.host}/sbx/tiny:1`, { puller: ADMIN }),
          refused(i === 0 ? '0.0.0.0' : named),
        );
        assert.ok(
          fake.seen.some((r) => r.path.includes('/blobs/')),
          'the registry was asked for a blob',
        );
        assert.deepEqual(target.seen, [], 'the redirect target was never reached');
        assert.deepEqual(await store.list(), []);
      }
    } finally {
      for (const f of [...fakes, ...direct]) await f.stop();
      await target.stop();
    }
  });

  test("the server's registry credentials serve the admin, and tenants only when configured", async () => {
    const creds = { username: 'sbx', password: `pw-${process.pid}` };
    const basic = `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;
    const fake = await startFakeRegistry({ basicAuth: basic });
    const sent = () => fake.seen.filter((r) => r.authorization === basic).length;
    const ref = `${fake.host}/sbx/private:1`;
    const storeWith = (c: Record<string, unknown>) =>
      new ImageStore({
        dir: dir(),
        insecureRegistries: [fake.host],
        registriesAllowed: [fake.host],
        credentials: { [fake.host]: { ...creds, ...c } },
      });
    try {
      // Default: admin only. A tenant's pull goes out anonymous (and finds nothing).
      const dflt = storeWith({});
      await assert.rejects(dflt.resolve(ref, { puller: tenant('acc_1') }), notFound);
      assert.equal(sent(), 0, "a tenant's pull never carries the server's credentials");
      assert.ok(fake.seen.length > 0, 'the registry was asked');
      await dflt.resolve(ref, { puller: ADMIN });
      assert.ok(sent() > 0, "the admin's pull uses them");

      // Named accounts: theirs, not others'.
      fake.seen.length = 0;
      const named = storeWith({ accounts: ['acc_1'] });
      await assert.rejects(named.resolve(ref, { puller: tenant('acc_2') }), notFound);
      assert.equal(sent(), 0);
      await named.resolve(ref, { puller: tenant('acc_1') });
      assert.ok(sent() > 0);

      // '*': every tenant.
      fake.seen.length = 0;
      const all = storeWith({ accounts: '*' });
      await all.resolve(ref, { puller: tenant('acc_3') });
      assert.ok(sent() > 0);
    } finally {
      await fake.stop();
    }
  });
});

/** The ref file of `canonical` in the catalog of store dir `dir` (catalog.ts). */
const refFile = (dir: string, canonical: string) =>
  join(dir, 'refs', `${createHash('sha256').update(canonical).digest('hex')}.json`);

describe('cached images follow the pull policy', () => {
  let tmp: { dir: string; cleanup: () => Promise<void> };
  let n = 0;
  const dir = () => join(tmp.dir, `c${++n}`);
  const creds = { username: 'sbx', password: `pw-cache-${process.pid}` };
  const basic = `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;

  before(async () => {
    tmp = await tempDir('policy-cache');
  });
  after(async () => {
    await tmp?.cleanup();
  });

  /** A store on `d` whose credentials for `fake` serve `accounts` (admin only when unset). */
  const storeOn = (d: string, fake: FakeRegistry, c: Record<string, unknown> | null = {}, allowed = [fake.host]) =>
    new ImageStore({
      dir: d,
      insecureRegistries: [fake.host],
      registriesAllowed: allowed,
      credentials: c ? { [fake.host]: { ...creds, ...c } } : undefined,
    });

  test("an image pulled with the server's credentials is served from the cache only to those they serve", async () => {
    const fake = await startFakeRegistry({ basicAuth: basic });
    const ref = `${fake.host}/sbx/private:1`;
    const sent = () => fake.seen.filter((r) => r.authorization === basic).length;
    try {
      const d = dir();
      const store = storeOn(d, fake, { accounts: ['acc_1'] });
      const img = await store.resolve(ref, { puller: ADMIN });
      assert.equal(store.stats.pulls, 1);
      const withCreds = sent();
      // Another tenant: its own anonymous pull, which finds nothing; the cache is not theirs.
      await assert.rejects(store.resolve(ref, { puller: tenant('acc_2') }), notFound);
      await assert.rejects(store.resolve(ref, { puller: ANONYMOUS }), notFound);
      assert.equal(store.stats.pulls, 3, 'each made its own pull');
      assert.equal(sent(), withCreds, "neither carried the server's credentials");
      // Those the credentials serve get it from the cache, as before; nothing was overwritten.
      assert.equal((await store.resolve(ref, { puller: tenant('acc_1') })).digest, img.digest);
      assert.equal((await store.resolve(ref, { puller: ADMIN })).digest, img.digest);
      assert.equal((await store.resolve(ref)).digest, img.digest, 'the operator');
      assert.equal(store.stats.pulls, 3);
      assert.equal(JSON.parse(await readFile(refFile(d, ref), 'utf8')).origin, 'credentials');
    } finally {
      await fake.stop();
    }
  });

  test('an anonymous pull of the same image opens the cache entry to all; of another image, leaves it as it was', async () => {
    // A public image on a registry the server has credentials for (admin only).
    const fake = await startFakeRegistry();
    const ref = `${fake.host}/sbx/public:1`;
    try {
      const store = storeOn(dir(), fake);
      const img = await store.resolve(ref, { puller: ADMIN });
      assert.equal(store.stats.pulls, 1);
      // The tenant's own pull finds the same image: from now on it is everyone's from the cache.
      assert.equal((await store.resolve(ref, { puller: tenant('acc_2') })).digest, img.digest);
      assert.equal(store.stats.pulls, 2);
      assert.equal((await store.resolve(ref, { puller: tenant('acc_3') })).digest, img.digest);
      assert.equal((await store.resolve(ref, { puller: ADMIN })).digest, img.digest);
      assert.equal(store.stats.pulls, 2);

      // The tag moved after the admin's pull: the tenant gets what its own pull found, the
      // admin still what the cache holds for it (a cached tag is not re-checked).
      const other = storeOn(dir(), fake);
      const first = await other.resolve(ref, { puller: ADMIN });
      fake.moveTags();
      const moved = await other.resolve(ref, { puller: tenant('acc_2') });
      assert.notEqual(moved.digest, first.digest);
      assert.equal((await other.resolve(ref, { puller: ADMIN })).digest, first.digest);
      // Still not cached for the tenant: it pulls again.
      const pulls = other.stats.pulls;
      assert.equal((await other.resolve(ref, { puller: tenant('acc_2') })).digest, moved.digest);
      assert.equal(other.stats.pulls, pulls + 1);
    } finally {
      await fake.stop();
    }
  });

  test('a cache entry written before pulls were recorded counts as pulled with credentials where there are any', async () => {
    const fake = await startFakeRegistry({ basicAuth: basic });
    const ref = `${fake.host}/sbx/private:1`;
    try {
      const d = dir();
      const store = storeOn(d, fake);
      const img = await store.resolve(ref, { puller: ADMIN });
      // An old catalog: the ref file without the marker.
      const file = refFile(d, ref);
      const { origin: _, ...old } = JSON.parse(await readFile(file, 'utf8'));
      await writeFile(file, JSON.stringify(old));
      await assert.rejects(store.resolve(ref, { puller: tenant('acc_2') }), notFound);
      assert.equal(store.stats.pulls, 2, "the tenant's own pull");
      assert.equal((await store.resolve(ref, { puller: ADMIN })).digest, img.digest);
      // Without credentials for that registry, an unmarked entry is anonymous: everyone's.
      const plain = storeOn(d, fake, null);
      assert.equal((await plain.resolve(ref, { puller: tenant('acc_2') })).digest, img.digest);
      assert.equal(plain.stats.pulls, 0);
    } finally {
      await fake.stop();
    }
  });

  test("an image claiming a cached image's config (same config digest) with other layers gets neither its rootfs nor the cache", async () => {
    const secret = `secret-${process.pid}`;
    const priv = await startFakeRegistry({ basicAuth: basic, file: secret });
    // The forger knows the private image's config, not its layer.
    const forger = await startFakeRegistry({ claimFile: secret });
    const ref = `${priv.host}/sbx/private:1`;
    const forged = `${forger.host}/sbx/forged:1`;
    const storeAt = (d: string) =>
      new ImageStore({
        dir: d,
        insecureRegistries: [priv.host, forger.host],
        registriesAllowed: [priv.host, forger.host],
        credentials: { [priv.host]: creds },
      });
    const internal = (e: unknown) => e instanceof SandboxdError && e.kind === 'internal';
    try {
      // The private image first: the forged one does not get its rootfs.
      const store = storeAt(dir());
      const img = await store.resolve(ref, { puller: ADMIN });
      assert.equal(await readFile(join(img.rootfsDir, 'sbx-file'), 'utf8'), secret);
      await assert.rejects(store.resolve(forged, { puller: tenant('acc_2') }), internal);
      await assert.rejects(store.resolve(forged, { puller: ADMIN }), internal);
      assert.deepEqual(
        (await store.list()).map((i) => i.ref),
        [ref],
      );
      // The forged one first: it is not unpacked, so it cannot stand in for the private one.
      const other = storeAt(dir());
      await assert.rejects(other.resolve(forged, { puller: tenant('acc_2') }), internal);
      const real = await other.resolve(ref, { puller: ADMIN });
      assert.equal(await readFile(join(real.rootfsDir, 'sbx-file'), 'utf8'), secret);
      // Both at once, whichever unpack starts first: the same outcome.
      const both = storeAt(dir());
      const [f, p] = await Promise.allSettled([
        both.resolve(forged, { puller: tenant('acc_2') }),
        both.resolve(ref, { puller: ADMIN }),
      ]);
      assert.equal(f.status, 'rejected');
      assert.ok(internal((f as PromiseRejectedResult).reason));
      assert.equal(p.status, 'fulfilled', String((p as PromiseRejectedResult).reason));
      assert.equal(await readFile(join(p.value.rootfsDir, 'sbx-file'), 'utf8'), secret);
    } finally {
      await priv.stop();
      await forger.stop();
    }
  });

  test('a cached image of a registry a tenant may not pull from is refused to the tenant, not to the admin', async () => {
    const fake = await startFakeRegistry();
    const ref = `${fake.host}/sbx/public:1`;
    try {
      const d = dir();
      const img = await storeOn(d, fake, null).resolve(ref, { puller: ADMIN });
      // The same cache, a server that no longer lists that registry for tenants.
      const store = storeOn(d, fake, null, ['docker.io']);
      await assert.rejects(store.resolve(ref, { puller: tenant('acc_1') }), refused(fake.host));
      await assert.rejects(store.resolve(ref, { puller: ANONYMOUS }), refused(fake.host));
      assert.equal((await store.resolve(ref, { puller: ADMIN })).digest, img.digest);
      assert.equal((await store.resolve(ref)).digest, img.digest, 'the operator');
      assert.equal(store.stats.pulls, 0);
    } finally {
      await fake.stop();
    }
  });
});

describe('pull policy rules', () => {
  test('forbidden addresses: loopback, private, link-local, CGNAT, metadata, IPv6 forms of IPv4 ones', () => {
    const bad = [
      '127.0.0.1',
      '127.8.9.10',
      '0.0.0.0',
      '10.1.2.3',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '100.100.100.200',
      '168.63.129.16',
      '224.0.0.1',
      '255.255.255.255',
      '::',
      '::1',
      'fc00::1',
      'fd00:ec2::254',
      'fe80::1',
      'ff02::1',
      '::ffff:127.0.0.1',
      '::ffff:a9fe:a9fe',
      '64:ff9b::a9fe:a9fe',
      '64:ff9b:1::a9fe:a9fe', // local-use NAT64
      '::ffff:0:a9fe:a9fe', // SIIT
      '2002:a9fe:a9fe::1', // 6to4
      '2001:0:4136:e378:8000:63bf:3fff:fdd2', // Teredo
      // The host's own addresses, whatever their range.
      ...Object.values(networkInterfaces()).flatMap((l) => (l ?? []).map((a) => a.address.replace(/%.*$/, ''))),
      'not-an-address',
    ];
    for (const ip of bad) assert.equal(isForbiddenAddress(ip), true, ip);
    for (const ip of ['1.1.1.1', '172.32.0.1', '100.128.0.1', '2606:4700::1111', '::ffff:8.8.8.8'])
      assert.equal(isForbiddenAddress(ip), false, ip);
  });

  test('who may pull from where, with whose credentials', () => {
    const p = new PullPolicy({
      credentials: {
        'index.docker.io': { username: 'u', password: 'p' },
        'ghcr.io': { username: 'g', password: 'p', accounts: ['acc_1'] },
        'quay.io:443': { username: 'q', password: 'p', accounts: '*' },
      },
    });
    for (const d of DEFAULT_REGISTRIES_ALLOWED) assert.doesNotThrow(() => p.check(d, tenant('acc_1'), d));
    assert.doesNotThrow(() => p.check('registry-1.docker.io', tenant('acc_1'), 'x'));
    assert.throws(() => p.check('evil.example:5000', tenant('acc_1'), 'x'), refused('evil.example:5000'));
    assert.throws(() => p.check('evil.example', ANONYMOUS, 'x'), refused('evil.example'));
    assert.doesNotThrow(() => p.check('evil.example', ADMIN, 'x'));
    assert.doesNotThrow(() => p.check('evil.example', OPERATOR, 'x'));
    // Only what the operator named may be at a private address; the defaults are public registries.
    assert.equal(p.listed('docker.io'), false);
    assert.equal(new PullPolicy({ registriesAllowed: ['docker.io'] }).listed('docker.io'), true);
    assert.equal(new PullPolicy({ registriesAllowed: ['*'] }).listed('10.0.0.1:5000'), false, '* names no registry');
    assert.equal(p.credentialsFor('docker.io', tenant('acc_1')), undefined);
    assert.deepEqual(p.credentialsFor('docker.io', ADMIN), { username: 'u', password: 'p' });
    assert.deepEqual(p.credentialsFor('ghcr.io', tenant('acc_1')), { username: 'g', password: 'p' });
    assert.equal(p.credentialsFor('ghcr.io', tenant('acc_2')), undefined);
    assert.equal(p.credentialsFor('ghcr.io', ANONYMOUS), undefined);
    assert.deepEqual(p.credentialsFor('quay.io', tenant('acc_9')), { username: 'q', password: 'p' });
  });
});
