import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { FakeDriver } from '../runtime/fake/driver.js';

/*
 * Isolation tiers through E2B's door on the fake runtime: a template names its tier (in the
 * server's template config, or by its image's `org.sandboxd.isolation` label); E2B's pause of
 * a gVisor sandbox keeps its memory on disk and connect restores it; E2B's fork (SDK 2.x
 * `sandbox.fork()`) is sandboxd's fork.
 */
describe('E2B door: isolation tiers (fake runtime)', () => {
  let t: TestApp;
  before(
    async () =>
      (t = await makeTestApp(
        {
          e2bTemplates: {
            base: { image: 'local/debian:bookworm' },
            secure: { image: 'local/debian:bookworm', isolation: 'gvisor' },
          },
        },
        {
          driver: new FakeDriver({
            images: ['local/labelled:latest'],
            imageLabels: { 'local/labelled:latest': { 'org.sandboxd.isolation': 'gvisor' } },
          }),
        },
      )),
  );
  after(() => t.close());

  async function user() {
    const a = await t.newAccount({ tokens: 100_000 });
    const e2b = (method: string, url: string, payload?: unknown) =>
      t.req({
        method: method as 'GET',
        url: `/e2b${url}`,
        key: null,
        headers: { 'x-api-key': a.key },
        ...(payload === undefined ? {} : { payload: payload as object }),
      });
    const record = async (id: string) =>
      (await t.req({ method: 'GET', url: `/api/v1/sandboxes/${id}`, key: a.key })).json().sandbox;
    return { ...a, e2b, record };
  }

  it("a template names its tier: configured, or by the label of the account's own image; else the plan default", async () => {
    const u = await user();
    // An image of the account's own (a snapshot here; a template of sandboxd's builds alike)
    // whose label names gvisor. A plain image's label is not read (looking could pull it).
    const src = await t.req({
      method: 'POST',
      url: '/api/v1/sandboxes',
      key: u.key,
      payload: { image: 'local/labelled:latest' },
    });
    assert.equal(src.statusCode, 201, src.body);
    const snap = await t.req({
      method: 'POST',
      url: `/api/v1/sandboxes/${src.json().sandbox.id}/snapshot`,
      key: u.key,
      payload: { name: 'gv' },
    });
    assert.equal(snap.statusCode, 201, snap.body);
    for (const [templateID, isolation] of [
      ['secure', 'gvisor'],
      ['snapshots/gv', 'gvisor'],
      ['local/labelled:latest', 'container'],
      ['base', 'container'],
    ]) {
      const c = await u.e2b('POST', '/v2/sandboxes', { templateID, timeout: 60 });
      assert.equal(c.statusCode, 201, c.body);
      assert.equal((await u.record(c.json().sandboxID)).isolation, isolation, templateID);
    }
  });

  it("pause of a gVisor sandbox goes to disk (a container's stays in RAM); connect restores it", async () => {
    const u = await user();
    const g = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'secure', timeout: 60 })).json().sandboxID;
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 })).json().sandboxID;
    for (const id of [g, c]) assert.equal((await u.e2b('POST', `/sandboxes/${id}/pause`)).statusCode, 204);
    assert.deepEqual([(await u.record(g)).pausedMemory, (await u.record(c)).pausedMemory], ['disk', 'ram']);
    assert.ok(t.driver.calls.includes(`pause ${g} disk`));
    const back = await u.e2b('POST', `/sandboxes/${g}/connect`, { timeout: 60 });
    assert.equal(back.statusCode, 201, back.body);
    const r = await u.record(g);
    assert.deepEqual([r.state, r.pausedMemory], ['started', undefined]);
  });

  it("fork: 201 with one {sandbox} per fork, E2B's shape; a container sandbox is 400; 404 for an unknown one", async () => {
    const u = await user();
    const g = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'secure', timeout: 60 })).json().sandboxID;
    const f = await u.e2b('POST', `/sandboxes/${g}/fork`, { count: 2, timeout: 120 });
    assert.equal(f.statusCode, 201, f.body);
    const entries = f.json() as Array<{ sandbox: { sandboxID: string; envdAccessToken: string; templateID: string } }>;
    assert.equal(entries.length, 2);
    for (const e of entries) {
      assert.match(e.sandbox.sandboxID, /^sbx_/);
      assert.notEqual(e.sandbox.sandboxID, g);
      assert.equal(e.sandbox.templateID, 'secure');
      assert.equal(typeof e.sandbox.envdAccessToken, 'string');
      const r = await u.record(e.sandbox.sandboxID);
      assert.equal(r.isolation, 'gvisor');
      assert.ok(Date.parse(r.stopAt) - Date.parse(r.createdAt) === 120_000, 'the timeout asked');
    }
    const one = await u.e2b('POST', `/sandboxes/${g}/fork`);
    assert.equal(one.statusCode, 201, one.body);
    assert.equal(one.json().length, 1, 'count defaults to 1');
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 })).json().sandboxID;
    const refused = await u.e2b('POST', `/sandboxes/${c}/fork`, { count: 1 });
    assert.equal(refused.statusCode, 400, refused.body);
    assert.match(refused.json().message, /isolation is container/);
    assert.equal((await u.e2b('POST', '/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/fork', { count: 1 })).statusCode, 404);
    assert.equal((await u.e2b('POST', `/sandboxes/${g}/fork`, { count: 11 })).statusCode, 400);
    await u.e2b('POST', `/sandboxes/${g}/pause`);
    assert.equal((await u.e2b('POST', `/sandboxes/${g}/fork`, { count: 1 })).statusCode, 409, 'paused');
  });
});
