import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { FakeDriver } from '../runtime/fake/driver.js';

/*
 * A full host over HTTP on the fake runtime: creates past `maxSandboxes`, below the memory
 * and disk floors, with no address, or failing in the runtime for lack of room answer 503
 * `capacity` with Retry-After; nothing is charged or left; /healthz and /metrics report what
 * is left. The real runtime: test/e2e/capacity.test.ts.
 */

const IMAGE = 'local/busybox:latest';

function assertCapacity(r: LightMyRequestResponse, resource: string): Record<string, unknown> {
  assert.equal(r.statusCode, 503, r.body);
  assert.equal(r.headers['retry-after'], '5');
  const b = r.json();
  assert.equal(b.code, 503);
  assert.equal(b.kind, 'capacity');
  assert.equal(b.details.resource, resource);
  assert.equal(b.details.retryAfterMs, 5000);
  assert.match(b.message, /^The host has no room for more sandboxes: .*; retry in 5 s$/);
  return b;
}

describe('capacity over HTTP (fake runtime)', () => {
  let t: TestApp;
  const driver = new FakeDriver();
  before(async () => (t = await makeTestApp({ maxSandboxes: 3 }, { driver })));
  after(() => t.close());
  afterEach(async () => {
    // Every test starts with an empty, roomy host.
    for (const s of await t.app.store.listSandboxesByState(['creating', 'started']))
      await t.app.services.sandboxes.delete(s.accountId, s.id);
    driver.hostCapacity = { memoryAvailableBytes: 16 * 2 ** 30, diskFreeBytes: 100 * 2 ** 30, addressTotal: 65_533 };
    t.app.services.capacity.forget();
  });

  const create = (key: string, body: Record<string, unknown> = { image: IMAGE }) =>
    t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: body, key });
  const ledger = async (key: string) =>
    (await t.req({ method: 'GET', url: '/api/v1/account/ledger?limit=100', key })).json().entries as unknown[];
  const balance = async (key: string) => (await t.req({ method: 'GET', url: '/api/v1/account', key })).json().balance;

  it('at maxSandboxes (all accounts together) the next create answers 503 naming sandboxes; nothing is charged; a delete makes room', async () => {
    const a = await t.newAccount({ tokens: 1000 });
    const b = await t.newAccount({ tokens: 1000 });
    const ids: string[] = [];
    for (const k of [a.key, a.key, b.key]) {
      const r = await create(k);
      assert.equal(r.statusCode, 201, r.body);
      ids.push(r.json().sandbox.id);
    }
    const rows = (await ledger(b.key)).length;
    const before = await balance(b.key);
    const body = assertCapacity(await create(b.key), 'sandboxes');
    assert.equal(
      body.message,
      'The host has no room for more sandboxes: 3 of 3 are in use (maxSandboxes); retry in 5 s',
    );
    assert.deepEqual(body.details, { resource: 'sandboxes', retryAfterMs: 5000, used: 3, max: 3 });
    assert.equal((await ledger(b.key)).length, rows, 'no ledger row');
    assert.equal(await balance(b.key), before);
    const listed = (await t.req({ method: 'GET', url: '/api/v1/sandboxes', key: b.key })).json().sandboxes;
    assert.equal(listed.length, 1, 'no record of the refused create');

    const health = (await t.req({ method: 'GET', url: '/healthz', key: null })).json();
    assert.deepEqual(health.capacity.sandboxes, { used: 3, max: 3, free: 0 });
    assert.deepEqual(health.capacity.full, ['sandboxes']);

    assert.equal((await t.req({ method: 'DELETE', url: `/api/v1/sandboxes/${ids[0]}`, key: a.key })).statusCode, 204);
    assert.equal((await create(b.key)).statusCode, 201, 'room again');
  });

  it('50 parallel creates at maxSandboxes 3: exactly 3 start, the rest 503, and only 3 are charged', async () => {
    // Creates that overlap in the runtime.
    const slow = await makeTestApp({ maxSandboxes: 3 }, { driver: new FakeDriver({ createDelayMs: 5 }) });
    try {
      const accounts = await Promise.all(Array.from({ length: 5 }, () => slow.newAccount({ tokens: 1000 })));
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          slow.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image: IMAGE }, key: accounts[i % 5].key }),
        ),
      );
      assert.equal(results.filter((r) => r.statusCode === 201).length, 3);
      for (const r of results) if (r.statusCode !== 201) assertCapacity(r, 'sandboxes');
      let debits = 0;
      for (const a of accounts) {
        const rows = await slow.app.store.listLedger(a.id, { limit: 100 });
        debits += rows.items.filter((row) => row.reason === 'sandbox.create').length;
      }
      assert.equal(debits, 3);
      assert.deepEqual(await slow.app.store.countByState(), {
        creating: 0,
        started: 3,
        paused: 0,
        stopped: 0,
        starting: 0,
        error: 0,
      });
    } finally {
      await slow.close();
    }
  });

  it('below the memory or disk floor, or with no free address: 503 naming it, before anything is reserved', async () => {
    const a = await t.newAccount({ tokens: 1000 });
    const rows = (await ledger(a.key)).length;
    const calls = driver.calls.length;
    driver.hostCapacity.memoryAvailableBytes = 10 * 2 ** 20;
    t.app.services.capacity.forget();
    const mem = assertCapacity(await create(a.key), 'memory');
    assert.match(mem.message as string, /memory is low \(10 MiB available, the floor is 256 MiB/);
    driver.hostCapacity.memoryAvailableBytes = 2 ** 30;
    driver.hostCapacity.diskFreeBytes = 2 ** 20;
    t.app.services.capacity.forget();
    assertCapacity(await create(a.key), 'disk');
    driver.hostCapacity.diskFreeBytes = 2 ** 40;
    driver.hostCapacity.addressTotal = 0;
    t.app.services.capacity.forget();
    assertCapacity(await create(a.key), 'addresses');
    const health = (await t.req({ method: 'GET', url: '/healthz', key: null })).json();
    assert.equal(health.status, 'ok', 'a full host is still healthy');
    assert.deepEqual(health.capacity.full, ['addresses']);
    assert.deepEqual(health.capacity.addresses, { free: 0, total: 0 });
    assert.equal(driver.calls.length, calls, 'the runtime was not asked to create');
    assert.equal((await ledger(a.key)).length, rows);
    assert.equal((await t.app.store.countByState()).creating, 0);
  });

  it('a runtime failure that means a full host (bridge full, EAGAIN) is a 503, refunded, with no record left', async () => {
    const a = await t.newAccount({ tokens: 1000 });
    for (const [err, resource] of [
      [new Error('network: sh failed (2): RTNETLINK answers: Exchange full'), 'addresses'],
      [Object.assign(new Error('spawn crun EAGAIN'), { code: 'EAGAIN' }), 'processes'],
    ] as const) {
      driver.failNextCreate = err;
      const r = assertCapacity(await create(a.key), resource);
      assert.doesNotMatch(r.message as string, /RTNETLINK|crun/, 'the runtime words stay in the log');
    }
    assert.equal(await balance(a.key), 1000, 'refunded');
    assert.deepEqual((await t.req({ method: 'GET', url: '/api/v1/sandboxes', key: a.key })).json().sandboxes, []);
    assert.equal((await t.app.store.countByState()).creating, 0);
  });

  it("E2B's create answers 503 too, in E2B's error shape with Retry-After", async () => {
    const a = await t.newAccount({ tokens: 1000 });
    for (let i = 0; i < 3; i++) assert.equal((await create(a.key)).statusCode, 201);
    const r = await t.req({
      method: 'POST',
      url: '/e2b/v2/sandboxes',
      payload: { templateID: IMAGE },
      key: null,
      headers: { 'x-api-key': a.key },
    });
    assertCapacity(r, 'sandboxes');
  });

  it('/metrics has the capacity gauges', async () => {
    driver.hostCapacity.memoryAvailableBytes = null;
    t.app.services.capacity.forget();
    const a = await t.newAccount({ tokens: 1000 });
    assert.equal((await create(a.key)).statusCode, 201);
    t.app.services.capacity.forget(); // measured before the create: the address it took is not in it
    const m = (await t.req({ method: 'GET', url: '/metrics', key: null })).body;
    for (const line of [
      'sandboxd_capacity_sandboxes_used 1',
      'sandboxd_capacity_sandboxes_max 3',
      'sandboxd_capacity_memory_available_bytes Nan', // unknown (prom-client writes NaN so)
      `sandboxd_capacity_memory_floor_bytes ${256 * 2 ** 20}`,
      `sandboxd_capacity_disk_free_bytes ${100 * 2 ** 30}`,
      `sandboxd_capacity_disk_floor_bytes ${512 * 2 ** 20}`,
      'sandboxd_capacity_addresses_free 65532',
      'sandboxd_capacity_addresses_total 65533',
      'sandboxd_capacity_full{resource="sandboxes"} 0',
      'sandboxd_capacity_full{resource="addresses"} 0',
    ])
      assert.ok(
        m.split('\n').includes(line),
        `${line} in\n${m
          .split('\n')
          .filter((l) => l.includes('capacity'))
          .join('\n')}`,
      );
  });
});
