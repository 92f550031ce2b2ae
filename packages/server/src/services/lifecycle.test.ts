import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { SandboxdError } from '@sandboxd/protocol';
import { DEFAULT_PLANS } from '../config.js';

/** Pause, resume, stop, start, snapshots and the reaper's part, over HTTP on the fake runtime (real-runtime proof: test/e2e/pause-stop-snapshot.test.ts). */
describe('lifecycle (fake runtime)', () => {
  let t: TestApp;
  before(
    async () =>
      (t = await makeTestApp({
        plans: {
          ...DEFAULT_PLANS,
          TINY: { ...DEFAULT_PLANS.FREE, concurrency: 1, maxPaused: 1, snapshotBytes: 10 },
        },
      })),
  );
  after(() => t.close());

  const call = async (key: string, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: object) => {
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
    return r.body.sandbox as { id: string; state: string; stopAt: string; metadata: object; onTimeout: string };
  };
  const balance = async (key: string) => (await call(key, 'GET', '/api/v1/account')).body.balance as number;

  it('pause refunds the unused minutes, resume reserves a new run; each wrong state is a 409 naming it', async () => {
    const { key } = await t.newAccount({ tokens: 100 });
    const sb = await create(key);
    assert.equal(await balance(key), 90);
    const p = await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/pause`);
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.sandbox.state, 'paused');
    assert.ok(p.body.sandbox.expiresAt, 'a paused sandbox says when it is deleted');
    assert.equal(await balance(key), 99, '9 unused minutes refunded');
    assert.ok(t.driver.calls.includes(`pause ${sb.id}`));
    for (const [url, body] of [
      [`/api/v1/sandboxes/${sb.id}/pause`, undefined],
      [`/api/v1/sandboxes/${sb.id}/start`, {}],
      [`/api/v1/sandboxes/${sb.id}/exec`, { command: 'true' }],
    ] as const) {
      const r = await call(key, 'POST', url, body);
      assert.equal(r.status, 409, url);
      assert.equal(r.body.details.state, 'paused');
      assert.match(r.body.message, /paused/);
    }
    assert.equal((await call(key, 'PATCH', `/api/v1/sandboxes/${sb.id}/timeout`, { timeoutMs: 1000 })).status, 409);
    // Time passes while paused: nothing is billed.
    t.clock.advance(3_600_000);
    await t.app.reaper.tick();
    assert.equal(await balance(key), 99);
    const r = await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/resume`, { timeoutMs: 120_000 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.sandbox.state, 'started');
    assert.equal(Date.parse(r.body.sandbox.stopAt), t.clock.now() + 120_000);
    assert.equal(await balance(key), 97);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/resume`)).status, 409);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/start`)).status, 409);
    const ledger = (await call(key, 'GET', '/api/v1/account/ledger')).body.entries.map(
      (e: { reason: string; delta: number }) => `${e.reason}:${e.delta}`,
    );
    assert.deepEqual(ledger.reverse(), ['signup:100', 'sandbox.create:-10', 'sandbox.refund:9', 'sandbox.resume:-2']);
  });

  it('a resume the runner does not answer is 503; the record stays paused, the run refunded; a retry resumes it', async () => {
    const { key } = await t.newAccount({ tokens: 100 });
    const sb = await create(key);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/pause`)).status, 200);
    const paused = (await call(key, 'GET', `/api/v1/sandboxes/${sb.id}`)).body.sandbox;
    const before = await balance(key);
    // Refused before the thaw (runner unreachable), and after it (the answer lost with the runner).
    for (const applied of [false, true]) {
      t.driver.failNextResume = {
        error: new SandboxdError('unavailable', 'Runner 127.0.0.1:1 closed the connection before answering (1006)'),
        applied,
      };
      const r = await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/resume`, { timeoutMs: 120_000 });
      assert.equal(r.status, 503, JSON.stringify(r.body));
      assert.equal(r.body.kind, 'unavailable');
      const now = (await call(key, 'GET', `/api/v1/sandboxes/${sb.id}`)).body.sandbox;
      assert.deepEqual(now, paused, `applied=${applied}: the record as it was`);
      assert.equal(await balance(key), before);
    }
    const ok = await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/resume`, { timeoutMs: 120_000 });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(ok.body.sandbox.state, 'started');
    assert.equal(await balance(key), before - 2);
  });

  it('stop keeps the layer, start boots it again from it (a new run billed), stop of a paused one, 409s', async () => {
    const { key } = await t.newAccount({ tokens: 100 });
    const sb = await create(key);
    const s = await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/stop`);
    assert.equal(s.status, 200);
    assert.equal(s.body.sandbox.state, 'stopped');
    assert.ok(s.body.sandbox.expiresAt);
    assert.ok(t.driver.calls.includes(`stop ${sb.id}`));
    assert.ok(!t.driver.calls.includes(`delete ${sb.id}`), 'the layer is kept');
    assert.equal(await balance(key), 99);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/stop`)).status, 409);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/pause`)).status, 409);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/resume`)).status, 409);
    const over = await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/start`, { timeoutMs: 99_999_999 });
    assert.equal(over.status, 400);
    const st = await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/start`, { timeoutMs: 60_000 });
    assert.equal(st.status, 200, JSON.stringify(st.body));
    assert.equal(st.body.sandbox.state, 'started');
    assert.equal(await balance(key), 98);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/exec`, { command: 'echo hi' })).status, 200);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/pause`)).status, 200);
    const sp = await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/stop`);
    assert.equal(sp.body.sandbox.state, 'stopped');
    assert.equal((await call(key, 'DELETE', `/api/v1/sandboxes/${sb.id}`)).status, 204);
    assert.ok(t.driver.calls.includes(`delete ${sb.id}`));
  });

  it('limits: start and resume count toward concurrency (403), pauses toward maxPaused (403 quota), tokens (402)', async () => {
    const { key } = await t.newAccount({ tokens: 30, plan: 'TINY' });
    const a = await create(key);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${a.id}/pause`)).status, 200);
    const b = await create(key); // a paused one takes no concurrency slot
    const q = await call(key, 'POST', `/api/v1/sandboxes/${b.id}/pause`);
    assert.equal(q.status, 403);
    assert.equal(q.body.kind, 'quota');
    assert.equal(q.body.details.quota, 'maxPaused');
    assert.ok(!t.driver.calls.includes(`pause ${b.id}`), 'a refused pause freezes nothing');
    const c = await call(key, 'POST', `/api/v1/sandboxes/${a.id}/resume`);
    assert.equal(c.status, 403);
    assert.equal(c.body.kind, 'concurrency');
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${b.id}/stop`)).status, 200);
    const poor = await call(key, 'POST', `/api/v1/sandboxes/${a.id}/resume`, { timeoutMs: 3_600_000 });
    assert.equal(poor.status, 402, JSON.stringify(poor.body));
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${a.id}/resume`)).status, 200);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${b.id}/start`)).status, 403);
    const acct = (await call(key, 'GET', '/api/v1/account')).body;
    assert.equal(acct.limits.maxPaused, 1);
    assert.deepEqual(acct.usage, { startedSandboxes: 1, pausedSandboxes: 0, volumes: 0, snapshotBytes: 0 });
  });

  it('onTimeout pause: the reaper pauses at stopAt; a paused sandbox is deleted after its retention', async () => {
    const { key } = await t.newAccount({ tokens: 100 });
    const sb = await create(key, { timeoutMs: 60_000, onTimeout: 'pause', metadata: { job: 'j1' } });
    assert.equal(sb.onTimeout, 'pause');
    assert.deepEqual(sb.metadata, { job: 'j1' });
    t.clock.advance(60_000);
    assert.deepEqual(await t.app.reaper.tick(), [sb.id]);
    const g = await call(key, 'GET', `/api/v1/sandboxes/${sb.id}`);
    assert.equal(g.body.sandbox.state, 'paused');
    assert.equal(Date.parse(g.body.sandbox.expiresAt), t.clock.now() + DEFAULT_PLANS.FREE.pausedRetentionMs);
    const listed = await call(key, 'GET', '/api/v1/sandboxes?state=paused&metadata.job=j1');
    assert.deepEqual(
      listed.body.sandboxes.map((s: { id: string }) => s.id),
      [sb.id],
    );
    assert.equal((await call(key, 'GET', '/api/v1/sandboxes?metadata.job=j2')).body.count, 0);
    t.clock.advance(DEFAULT_PLANS.FREE.pausedRetentionMs);
    await t.app.reaper.tick();
    assert.equal((await call(key, 'GET', `/api/v1/sandboxes/${sb.id}`)).status, 404);
    assert.ok(t.driver.calls.includes(`delete ${sb.id}`));
  });

  it('metadata: at most 50 keys and 1 KiB; filters AND together', async () => {
    const { key } = await t.newAccount({ tokens: 100 });
    const big = await call(key, 'POST', '/api/v1/sandboxes', {
      image: 'local/busybox:latest',
      metadata: { k: 'v'.repeat(1024) },
    });
    assert.equal(big.status, 400);
    assert.match(big.body.message, /metadata/);
    const many = await call(key, 'POST', '/api/v1/sandboxes', {
      image: 'local/busybox:latest',
      metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, 'v'])),
    });
    assert.equal(many.status, 400);
    const notStr = await call(key, 'POST', '/api/v1/sandboxes', { image: 'local/busybox:latest', metadata: { a: 1 } });
    assert.equal(notStr.status, 400);
    const a = await create(key, { metadata: { team: 'x', 'odd key&=': 'ü v' } });
    await create(key, { metadata: { team: 'x' } });
    const q = `metadata.team=x&${encodeURIComponent('metadata.odd key&=')}=${encodeURIComponent('ü v')}`;
    const both = await call(key, 'GET', `/api/v1/sandboxes?${q}`);
    assert.deepEqual(
      both.body.sandboxes.map((s: { id: string }) => s.id),
      [a.id],
    );
    assert.equal((await call(key, 'GET', '/api/v1/sandboxes?metadata.team=x')).body.count, 2);
    assert.equal((await call(key, 'GET', '/api/v1/sandboxes?bogus=1')).status, 400);
  });

  it('snapshots: private to the account, listed, quota, deleted; create from one', async () => {
    const { key } = await t.newAccount({ tokens: 100 });
    const other = await t.newAccount({ tokens: 100 });
    const sb = await create(key);
    await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/exec`, { command: 'echo hello > /f' });
    const s = await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/snapshot`, { name: 'base.v1' });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    assert.equal(s.body.image, 'snapshots/base.v1');
    assert.equal(s.body.baseImage, 'local/busybox:latest');
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/snapshot`, { name: 'base.v1' })).status, 409);
    assert.equal((await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/snapshot`, { name: 'Bad/Name' })).status, 400);
    const list = await call(key, 'GET', '/api/v1/snapshots');
    assert.equal(list.body.count, 1);
    assert.equal((await call(key, 'GET', '/api/v1/snapshots/base.v1')).body.snapshot.name, 'base.v1');
    const mine = await create(key, { image: 'snapshots/base.v1' });
    const out = await call(key, 'POST', `/api/v1/sandboxes/${mine.id}/exec`, { command: 'cat /f' });
    assert.equal(out.body.stdout, 'hello\n');
    for (const image of [
      'snapshots/base.v1',
      `snapshot/${(await call(key, 'GET', '/api/v1/account')).body.id}/base.v1`,
    ]) {
      const theirs = await call(other.key, 'POST', '/api/v1/sandboxes', { image });
      assert.equal(theirs.status, 404, image);
      assert.equal(theirs.body.kind, 'template_not_found');
    }
    assert.equal((await call(other.key, 'GET', '/api/v1/snapshots')).body.count, 0);
    assert.equal((await call(other.key, 'DELETE', '/api/v1/snapshots/base.v1')).status, 404);
    assert.equal((await call(key, 'DELETE', '/api/v1/snapshots/base.v1')).status, 204);
    assert.equal((await call(key, 'POST', '/api/v1/sandboxes', { image: 'snapshots/base.v1' })).status, 404);
    // The quota: TINY allows 10 bytes.
    const tiny = await t.newAccount({ tokens: 100, plan: 'TINY' });
    const ts = await create(tiny.key);
    await call(tiny.key, 'POST', `/api/v1/sandboxes/${ts.id}/exec`, { command: 'echo 0123456789abcdef > /f' });
    const q = await call(tiny.key, 'POST', `/api/v1/sandboxes/${ts.id}/snapshot`, { name: 'big' });
    assert.equal(q.status, 403);
    assert.equal(q.body.kind, 'quota');
    assert.equal(q.body.details.quota, 'snapshotBytes');
    assert.equal((await call(tiny.key, 'GET', '/api/v1/snapshots')).body.count, 0, 'nothing left of it');
    assert.deepEqual(await t.driver.listSnapshots().then((l) => l.filter((i) => i.ref.includes('/big'))), []);
  });

  it('start-up reconciliation: a crash mid-start goes back to stopped refunded; a started record over a frozen sandbox is thawed; a creating snapshot row is dropped', async () => {
    const { id: accountId, key } = await t.newAccount({ tokens: 100 });
    const sb = await create(key);
    await call(key, 'POST', `/api/v1/sandboxes/${sb.id}/stop`);
    const other = await create(key);
    const before = await balance(key);
    // As a crash would leave it: `starting`, reserved, with nothing in progress.
    await t.app.store.updateSandbox(sb.id, {
      state: 'starting',
      ledgerDelta: -5,
      reservedMinutes: 5,
      expectStates: ['stopped'],
      at: t.clock.now(),
    });
    await t.driver.pause(other.id); // a pause cut short before its record
    await t.app.store.beginSnapshot(
      { accountId, name: 'half', state: 'creating', sizeBytes: 0, baseImage: 'x', sandboxId: other.id, createdAt: 1 },
      1e12,
    );
    const report = await t.app.reaper.reconcile({ startup: true });
    assert.deepEqual(report.aligned.sort(), [sb.id, other.id].sort());
    assert.equal((await call(key, 'GET', `/api/v1/sandboxes/${sb.id}`)).body.sandbox.state, 'stopped');
    assert.equal(await balance(key), before, 'the cut-short start is refunded');
    assert.equal((await t.driver.inspect(other.id))?.state, 'running');
    await t.app.services.snapshots.reconcile();
    assert.equal(await t.app.store.getSnapshot(accountId, 'half'), null);
  });
});
