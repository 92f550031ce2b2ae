import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { DEFAULT_PLANS } from '../config.js';
import { FakeDriver } from '../runtime/fake/driver.js';

/**
 * Isolation tiers above the driver, over HTTP on the fake runtime (which offers both tiers,
 * gVisor with memory snapshots): the tier of a create (plan, instance default, host), pause
 * to disk, fork. Real-runtime proof: test/e2e/isolation.test.ts.
 */
describe('isolation tiers (fake runtime)', () => {
  let t: TestApp;
  before(
    async () =>
      (t = await makeTestApp({
        plans: {
          ...DEFAULT_PLANS,
          CONTAINERS: { ...DEFAULT_PLANS.FREE, isolations: ['container'] },
          STRICT: { ...DEFAULT_PLANS.FREE, isolations: ['gvisor'], defaultIsolation: 'gvisor' },
          PAIR: { ...DEFAULT_PLANS.FREE, concurrency: 2 },
        },
      })),
  );
  after(() => t.close());

  const call = async (key: string, method: 'GET' | 'POST' | 'DELETE', url: string, payload?: object) => {
    const r = await t.req({ method, url, key, ...(payload ? { payload } : {}) });
    return { status: r.statusCode, body: r.body ? r.json() : null };
  };
  const create = async (key: string, body: object = {}) => {
    const r = await call(key, 'POST', '/api/v1/sandboxes', {
      image: 'local/busybox:latest',
      timeoutMs: 600_000,
      ...body,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.sandbox;
  };
  const balance = async (key: string) => (await call(key, 'GET', '/api/v1/account')).body.balance as number;
  const exec = async (key: string, id: string, command: string) =>
    (await call(key, 'POST', `/api/v1/sandboxes/${id}/exec`, { command })).body;
  const count = async (key: string) => (await call(key, 'GET', '/api/v1/sandboxes')).body.count as number;

  it("create: the plan's default (container), or the tier asked; the record, the list and the driver's spec say it", async () => {
    const { key } = await t.newAccount();
    const c = await create(key);
    assert.equal(c.isolation, 'container');
    assert.equal(t.driver.specOf(c.id)?.isolation, undefined, 'container: no tier in the spec');
    const g = await create(key, { isolation: 'gvisor' });
    assert.equal(g.isolation, 'gvisor');
    assert.equal(t.driver.specOf(g.id)?.isolation, 'gvisor');
    assert.equal((await call(key, 'GET', `/api/v1/sandboxes/${g.id}`)).body.sandbox.isolation, 'gvisor');
    const list = (await call(key, 'GET', '/api/v1/sandboxes')).body.sandboxes as Array<{
      id: string;
      isolation: string;
    }>;
    assert.deepEqual(Object.fromEntries(list.map((s) => [s.id, s.isolation])), {
      [c.id]: 'container',
      [g.id]: 'gvisor',
    });
    assert.equal(c.pausedMemory, undefined, 'pausedMemory only while paused');
    const strict = await t.newAccount({ plan: 'STRICT' });
    assert.equal((await create(strict.key)).isolation, 'gvisor', "the plan's defaultIsolation");
  });

  it("a tier the plan does not allow is 403 quota naming the plan's list; an unknown tier 400; nothing charged or made", async () => {
    const { key } = await t.newAccount({ plan: 'CONTAINERS' });
    const before = await balance(key);
    const r = await call(key, 'POST', '/api/v1/sandboxes', { image: 'local/busybox:latest', isolation: 'gvisor' });
    assert.equal(r.status, 403, JSON.stringify(r.body));
    assert.equal(r.body.kind, 'quota');
    assert.match(r.body.message, /isolation gvisor is not allowed on plan CONTAINERS \(allowed: container\)/);
    assert.deepEqual(r.body.details.allowed, ['container']);
    const bad = await call(key, 'POST', '/api/v1/sandboxes', { image: 'local/busybox:latest', isolation: 'kata' });
    assert.equal(bad.status, 400);
    assert.match(JSON.stringify(bad.body), /isolation/);
    assert.equal(await balance(key), before);
    assert.equal(await count(key), 0);
  });

  it('a tier the host does not offer is 400 validation at /isolation naming what it offers (no isolations(): containers only)', async () => {
    for (const isolations of [['container' as const], null]) {
      const h = await makeTestApp({}, { driver: new FakeDriver({ isolations }) });
      try {
        const { key } = await h.newAccount();
        const r = await h.req({
          method: 'POST',
          url: '/api/v1/sandboxes',
          key,
          payload: { image: 'local/busybox:latest', isolation: 'gvisor' },
        });
        assert.equal(r.statusCode, 400, r.body);
        const body = r.json();
        assert.equal(body.kind, 'validation');
        assert.match(body.message, /isolation gvisor is not offered by this host \(it offers container\)/);
        assert.equal(body.details[0].path, '/isolation');
        const c = await h.req({
          method: 'POST',
          url: '/api/v1/sandboxes',
          key,
          payload: { image: 'local/busybox:latest' },
        });
        assert.equal(c.statusCode, 201, 'containers still work');
        const health = (await h.req({ method: 'GET', url: '/healthz', key: null })).json();
        assert.deepEqual(
          health.isolations.map((x: { isolation: string }) => x.isolation),
          ['container'],
        );
      } finally {
        await h.close();
      }
    }
  });

  it('/healthz lists the tiers the runtime offers', async () => {
    const h = (await call(t.adminKey, 'GET', '/healthz')).body;
    assert.deepEqual(h.isolations, [
      { isolation: 'container', runtime: 'fake', memorySnapshots: false },
      { isolation: 'gvisor', runtime: 'fake-runsc', platform: 'fake', memorySnapshots: true },
    ]);
  });

  it('pause {memory: "disk"} checkpoints a gVisor sandbox (pausedMemory disk); resume restores it; no body stays in RAM', async () => {
    const { key } = await t.newAccount();
    const g = await create(key, { isolation: 'gvisor' });
    const p = await call(key, 'POST', `/api/v1/sandboxes/${g.id}/pause`, { memory: 'disk' });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.deepEqual([p.body.sandbox.state, p.body.sandbox.pausedMemory], ['paused', 'disk']);
    assert.ok(t.driver.calls.includes(`pause ${g.id} disk`));
    assert.equal((await call(key, 'GET', `/api/v1/sandboxes/${g.id}`)).body.sandbox.pausedMemory, 'disk');
    const again = await call(key, 'POST', `/api/v1/sandboxes/${g.id}/pause`, { memory: 'disk' });
    assert.equal(again.status, 409);
    const r = await call(key, 'POST', `/api/v1/sandboxes/${g.id}/resume`, {});
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.sandbox.state, 'started');
    assert.equal(r.body.sandbox.pausedMemory, undefined);
    assert.equal((await t.driver.inspect(g.id))?.pausedMemory, undefined);
    // No body (as before tiers), or {memory: "ram"}: frozen in RAM.
    const ram = await call(key, 'POST', `/api/v1/sandboxes/${g.id}/pause`);
    assert.deepEqual([ram.status, ram.body.sandbox.pausedMemory], [200, 'ram']);
    assert.ok(t.driver.calls.includes(`pause ${g.id}`));
    await call(key, 'POST', `/api/v1/sandboxes/${g.id}/resume`, {});
    const ram2 = await call(key, 'POST', `/api/v1/sandboxes/${g.id}/pause`, { memory: 'ram' });
    assert.deepEqual([ram2.status, ram2.body.sandbox.pausedMemory], [200, 'ram']);
    const junk = await call(key, 'POST', `/api/v1/sandboxes/${g.id}/pause`, { memory: 'tape' });
    assert.equal(junk.status, 400);
  });

  it('a restore from disk the runtime fails leaves the sandbox paused to disk (not lost), refunded, and a later resume works', async () => {
    const { key } = await t.newAccount();
    const g = await create(key, { isolation: 'gvisor' });
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${g.id}/pause`, { memory: 'disk' })).status, 200);
    const before = await balance(key);
    t.driver.failNextResume = { error: new Error('runsc restore failed (128): no host FD available') };
    const r = await call(key, 'POST', `/api/v1/sandboxes/${g.id}/resume`, {});
    assert.equal(r.status, 500);
    assert.match(r.body.message, /stays paused to disk.*resume may be tried again/);
    const kept = (await call(key, 'GET', `/api/v1/sandboxes/${g.id}`)).body.sandbox;
    assert.deepEqual([kept.state, kept.pausedMemory], ['paused', 'disk']);
    assert.equal(await balance(key), before, 'the run that did not happen is refunded');
    const again = await call(key, 'POST', `/api/v1/sandboxes/${g.id}/resume`, {});
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(again.body.sandbox.state, 'started');
  });

  it('pause to disk on a container sandbox is 400 naming its tier, and changes nothing', async () => {
    const { key } = await t.newAccount();
    const c = await create(key);
    const before = await balance(key);
    const r = await call(key, 'POST', `/api/v1/sandboxes/${c.id}/pause`, { memory: 'disk' });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.match(r.body.message, /memory "disk" needs a gvisor sandbox; this sandbox's isolation is container/);
    assert.equal(r.body.details[0].path, '/memory');
    assert.equal((await call(key, 'GET', `/api/v1/sandboxes/${c.id}`)).body.sandbox.state, 'started');
    assert.equal(await balance(key), before);
    assert.ok(!t.driver.calls.includes(`pause ${c.id} disk`));
  });

  it("fork: N sandboxes of the account with the source's image, env, metadata, network, files and tier; named <name>-fork-<n>; billed as creates", async () => {
    const { key } = await t.newAccount({ tokens: 100 });
    const src = await create(key, {
      isolation: 'gvisor',
      env: { WHO: 'source' },
      metadata: { team: 'a' },
      network: { egress: { allow: ['pypi.org'] } },
      onTimeout: 'pause',
    });
    assert.equal((await exec(key, src.id, 'echo 41 > /state')).exitCode, 0);
    const before = await balance(key);
    const r = await call(key, 'POST', `/api/v1/sandboxes/${src.id}/fork`, { count: 2 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const forks = r.body.sandboxes as Array<Record<string, unknown> & { id: string; name: string }>;
    assert.equal(forks.length, 2);
    assert.deepEqual(
      forks.map((f) => f.name),
      [`${src.name}-fork-1`, `${src.name}-fork-2`],
    );
    for (const f of forks) {
      assert.notEqual(f.id, src.id);
      assert.deepEqual(
        [f.state, f.image, f.isolation, f.metadata, f.network, f.onTimeout],
        ['started', src.image, 'gvisor', { team: 'a' }, { egress: { allow: ['pypi.org'] } }, 'pause'],
      );
      assert.equal((await exec(key, f.id, 'cat /state')).stdout, '41\n', "the source's files");
      assert.equal((await exec(key, f.id, 'printenv WHO')).stdout, 'source\n');
      assert.equal(t.driver.specOf(f.id)?.hostname, f.name);
    }
    // Each has its own address and layer: a write in one is not in the other nor the source.
    await exec(key, forks[0].id, 'echo mine > /state');
    assert.equal((await exec(key, forks[1].id, 'cat /state')).stdout, '41\n');
    assert.equal((await exec(key, src.id, 'cat /state')).stdout, '41\n');
    const addrs = await Promise.all(
      [src.id, ...forks.map((f) => f.id)].map(async (id) => (await t.driver.inspect(id))?.address),
    );
    assert.equal(new Set(addrs).size, 3);
    assert.equal(before - (await balance(key)), 2 * 10, 'each fork billed as a create (the default 10 minutes)');
    assert.ok(t.driver.calls.includes(`fork ${src.id} ${forks.map((f) => f.id).join(',')}`));
    // A second fork of the same source: the names are taken, so a suffix is added.
    const again = await call(key, 'POST', `/api/v1/sandboxes/${src.id}/fork`, {});
    assert.equal(again.status, 201, JSON.stringify(again.body));
    assert.equal(again.body.sandboxes.length, 1, 'count defaults to 1');
    assert.match(again.body.sandboxes[0].name, new RegExp(`^${src.name}-fork-1-\\d{4}$`));
  });

  it('fork keeps the secret rules and their placeholders; the forks get the values', async () => {
    const { key } = await t.newAccount({ tokens: 100 });
    const V = 'v1-sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345';
    assert.equal((await call(key, 'POST', '/api/v1/secrets', { name: 'OPENAI', value: V })).status, 201);
    const src = await create(key, {
      isolation: 'gvisor',
      network: { egress: { allow: ['api.openai.com'] }, secrets: [{ secret: 'OPENAI', domains: ['api.openai.com'] }] },
    });
    const r = await call(key, 'POST', `/api/v1/sandboxes/${src.id}/fork`, { count: 1 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const [f] = r.body.sandboxes;
    assert.deepEqual(f.network, src.network, 'the same rules, the same placeholder');
    const ph = (await exec(key, src.id, 'printenv OPENAI')).stdout;
    assert.match(ph, /\S/);
    assert.equal((await exec(key, f.id, 'printenv OPENAI')).stdout, ph);
    assert.equal(t.driver.secretsOf(f.id)?.[0].value, V);
  });

  it('fork refusals change nothing: not found 404, paused 409, container 400, volumes 409, count out of 1..10 400', async () => {
    const { key } = await t.newAccount({ tokens: 1000 });
    const c = await create(key);
    const g = await create(key, { isolation: 'gvisor' });
    const v = await create(key, { isolation: 'gvisor', volumes: { '/data': 'vol1' } });
    const p = await create(key, { isolation: 'gvisor' });
    await call(key, 'POST', `/api/v1/sandboxes/${p.id}/pause`);
    const before = [await balance(key), await count(key)];
    const fork = (id: string, body: object = { count: 1 }) => call(key, 'POST', `/api/v1/sandboxes/${id}/fork`, body);
    assert.equal((await fork('sbx_aaaaaaaaaaaaaaaaaaaa')).status, 404);
    const other = await t.newAccount();
    assert.equal((await call(other.key, 'POST', `/api/v1/sandboxes/${g.id}/fork`, { count: 1 })).status, 404);
    const ct = await fork(c.id);
    assert.equal(ct.status, 400);
    assert.match(ct.body.message, /Only gvisor sandboxes can be forked; this sandbox's isolation is container/);
    const vol = await fork(v.id);
    assert.equal(vol.status, 409);
    assert.match(vol.body.message, /volumes/);
    for (const n of [0, 11, 1.5]) assert.equal((await fork(g.id, { count: n })).status, 400, `count ${n}`);
    assert.equal((await fork(g.id, { count: 1, extra: 1 })).status, 400);
    const paused = await fork(p.id);
    assert.equal(paused.status, 409);
    assert.equal(paused.body.details.state, 'paused');
    assert.deepEqual([await balance(key), await count(key)], before);
  });

  it('fork checks the concurrency limit (403) and the balance (402) for all N before making any', async () => {
    const pair = await t.newAccount({ plan: 'PAIR', tokens: 1000 });
    const src = await create(pair.key, { isolation: 'gvisor' });
    const before = [await balance(pair.key), await count(pair.key)];
    const r = await call(pair.key, 'POST', `/api/v1/sandboxes/${src.id}/fork`, { count: 2 });
    assert.equal(r.status, 403, JSON.stringify(r.body));
    assert.equal(r.body.kind, 'concurrency');
    assert.deepEqual([await balance(pair.key), await count(pair.key)], before);
    assert.equal((await call(pair.key, 'POST', `/api/v1/sandboxes/${src.id}/fork`, { count: 1 })).status, 201);

    const poor = await t.newAccount({ tokens: 20 });
    const s2 = await create(poor.key, { isolation: 'gvisor' }); // 10 minutes: 10 left
    const left = await balance(poor.key);
    const broke = await call(poor.key, 'POST', `/api/v1/sandboxes/${s2.id}/fork`, { count: 3 });
    assert.equal(broke.status, 402, JSON.stringify(broke.body));
    assert.deepEqual(broke.body.details, { required: 30, balance: left });
    assert.deepEqual([await balance(poor.key), await count(poor.key)], [left, 1]);
  });

  it('a fork the runtime fails leaves no record and no runtime sandbox, and refunds', async () => {
    const { key } = await t.newAccount({ tokens: 100 });
    const src = await create(key, { isolation: 'gvisor' });
    const before = await balance(key);
    const runtime = (await t.driver.list()).length;
    t.driver.failNextFork = new SandboxdError('internal', 'checkpoint failed');
    const r = await call(key, 'POST', `/api/v1/sandboxes/${src.id}/fork`, { count: 3 });
    assert.equal(r.status, 500, JSON.stringify(r.body));
    assert.equal(await balance(key), before);
    assert.equal(await count(key), 1);
    assert.equal((await t.driver.list()).length, runtime);
    assert.equal((await call(key, 'GET', `/api/v1/sandboxes/${src.id}`)).body.sandbox.state, 'started');
  });
});
