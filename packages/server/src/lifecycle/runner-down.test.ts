import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FakeRunners } from '../../test/fake-runners.js';
import { type FleetApp, makeFleetApp } from '../../test/fleet-app.js';
import type { SandboxRecord } from '../domain/sandbox.js';
import type { AccountRecord } from '../store/store.js';

/*
 * An API process (role api, as app.ts builds it) over two fake runners, on SQLite: what the
 * reaper does when a runner stops answering, and when it answers again. Health checks and
 * reconcile passes are driven by hand with a manual clock. Two replicas on PostgreSQL:
 * src/store/postgres/fleet-replicas.test.ts; the real runtime: test/e2e/fleet.test.ts.
 */

const A = 'http://a:1';
const B = 'http://b:1';
const DOWN_MS = 5000;

async function withFleetApp(fn: (t: FleetApp, runners: FakeRunners) => Promise<void>) {
  const runners = new FakeRunners({ [A]: 'a', [B]: 'b' });
  const t = await makeFleetApp(runners, [A, B], { runnerDownMs: DOWN_MS });
  try {
    await fn(t, runners);
  } finally {
    await t.close();
  }
}

const image = 'local/busybox:latest';
const create = (t: FleetApp, acct: AccountRecord, timeoutMs = 600_000) =>
  t.app.services.sandboxes.create(acct, { image, timeoutMs });
const refunds = async (t: FleetApp, acct: AccountRecord, id: string) =>
  (await t.app.store.listLedger(acct.id, { limit: 500 })).items.filter(
    (r) => r.sandboxId === id && r.reason === 'sandbox.refund',
  );

describe('a runner that stops answering (role api, fake runners)', () => {
  it('its started and paused sandboxes turn error after runnerDownMs, naming it, refunded once; stopped ones stay', () =>
    withFleetApp(async (t, runners) => {
      const acct = await t.account();
      const made: SandboxRecord[] = [];
      for (let i = 0; i < 6; i++) made.push(await create(t, acct));
      const on = async (node: string) => {
        const out = [];
        for (const s of made) if ((await t.app.store.getSandbox(s.id))?.runner === node) out.push(s.id);
        return out;
      };
      const [started, paused, stopped] = await on('a');
      const onB = await on('b');
      assert.equal(onB.length, 3, 'spread over both runners');
      t.clock.advance(90_000); // 1.5 minutes into their 10
      await t.app.services.lifecycle.pause(acct, paused);
      await t.app.services.lifecycle.stop(acct, stopped);
      const balance = await t.app.store.balance(acct.id);
      await t.fleet.refresh(); // a answers now (the timers check every second)

      runners.setDown(A);
      await t.fleet.refresh();
      assert.deepEqual((await t.app.reaper.reconcile()).lost, [], 'silent for less than runnerDownMs: nothing yet');
      assert.equal((await t.app.store.getSandbox(started))?.state, 'started');
      const early = await t.req({
        method: 'POST',
        url: `/api/v1/sandboxes/${started}/exec`,
        payload: { command: 'true' },
      });
      assert.equal(early.statusCode, 404, 'another account: the admin key does not see it');

      t.clock.advance(DOWN_MS);
      const report = await t.app.reaper.reconcile();
      assert.deepEqual(report.lost.sort(), [started, paused].sort());
      for (const id of [started, paused]) {
        const r = await t.app.store.getSandbox(id);
        assert.equal(r?.state, 'error');
        assert.equal(r?.details?.reason, 'runner_down');
        assert.equal(r?.details?.runner, 'a');
        assert.match(
          String(r?.details?.message),
          /^runner a has not answered for 5 s: it is not answering \(Runner http:\/\/a:1 is unreachable/,
        );
      }
      assert.equal((await t.app.store.getSandbox(stopped))?.state, 'stopped', 'a stopped one holds nothing: kept');
      for (const id of onB) assert.equal((await t.app.store.getSandbox(id))?.state, 'started');
      // The started one: 10 minutes reserved, 2 used (1.5 rounded up): 8 back. The paused one got its refund at pause.
      assert.deepEqual(
        (await refunds(t, acct, started)).map((r) => r.delta),
        [8],
      );
      assert.equal((await refunds(t, acct, paused)).length, 1, 'its pause refund only');
      assert.equal(await t.app.store.balance(acct.id), balance + 8);
      assert.deepEqual((await t.app.reaper.reconcile()).lost, [], 'once');
      assert.equal(await t.app.store.balance(acct.id), balance + 8);

      const next = await create(t, acct);
      assert.equal((await t.app.store.getSandbox(next.id))?.runner, 'b', 'nothing is placed on a meanwhile');

      // Back: the runner's sandboxes whose records are error are deleted; the stopped one is kept.
      runners.setDown(A, null);
      await t.fleet.refresh();
      const back = await t.app.reaper.reconcile();
      assert.deepEqual(back.orphans.sort(), [started, paused].sort());
      assert.deepEqual(await runners.ids(A), [stopped]);
      await t.app.services.lifecycle.start(acct, stopped);
      assert.equal((await t.app.store.getSandbox(stopped))?.state, 'started');
    }));

  it('a stopped sandbox of a silent runner: start answers 503 naming it, delete removes the record and later the rest', () =>
    withFleetApp(async (t, runners) => {
      const acct = await t.account();
      const a1 = await create(t, acct);
      await create(t, acct); // on b
      const a2 = await create(t, acct);
      assert.equal((await t.app.store.getSandbox(a2.id))?.runner, 'a');
      await t.app.services.lifecycle.stop(acct, a1.id);
      await t.app.services.lifecycle.stop(acct, a2.id);
      runners.setDown(A);
      await t.fleet.refresh();
      await assert.rejects(t.app.services.lifecycle.start(acct, a1.id), (e: { kind: string; message: string }) => {
        assert.equal(e.kind, 'unavailable');
        assert.match(e.message, /Runner a, where sandbox \S+ lives, cannot be used: it is not answering/);
        return true;
      });
      assert.equal((await t.app.store.getSandbox(a1.id))?.state, 'stopped', 'the failed start changed nothing');
      await t.app.services.sandboxes.delete(acct.id, a2.id);
      assert.equal(await t.app.store.getSandbox(a2.id), null);
      runners.setDown(A, null);
      await t.fleet.refresh();
      assert.deepEqual((await t.app.reaper.reconcile()).orphans, [a2.id]);
      assert.deepEqual(await runners.ids(A), [a1.id]);
    }));

  it('an ended sandbox of a silent runner is purged at the end of its retention; the runner drops it once back', () =>
    withFleetApp(async (t, runners) => {
      const acct = await t.account();
      const s = await create(t, acct);
      await t.app.services.lifecycle.stop(acct, s.id);
      runners.setDown(A);
      await t.fleet.refresh();
      t.clock.advance(86_400_000 + 60_000); // past stoppedRetentionMs (1 day)
      await t.app.reaper.tick();
      assert.equal(await t.app.store.getSandbox(s.id), null, 'the record is purged');
      assert.deepEqual(await runners.ids(A), [s.id], 'a still has it');
      runners.setDown(A, null);
      await t.fleet.refresh();
      assert.deepEqual((await t.app.reaper.reconcile()).orphans, [s.id]);
      assert.deepEqual(await runners.ids(A), []);
    }));

  it('/healthz and /metrics report each runner; creates answer 503 unavailable, then capacity, before anything is written', () =>
    withFleetApp(async (t, runners) => {
      runners.setDown(B);
      await t.fleet.refresh();
      t.clock.advance(1500);
      const h = await t.req({ method: 'GET', url: '/healthz' }); // the admin's key
      assert.equal(h.statusCode, 200);
      const body = h.json();
      // Anyone may ask; only an admin learns the runners (addresses, node names, why one is down).
      const { key: accountKey } = await t.app.services.auth.createKey((await t.account()).id, 'not an admin');
      for (const key of [null, accountKey, 'sk_not_a_key']) {
        const anon = await t.req({ method: 'GET', url: '/healthz', key });
        assert.equal(anon.statusCode, 200, String(key));
        assert.deepEqual(Object.keys(anon.json()).sort(), ['capacity', 'isolations', 'status'], String(key));
        assert.deepEqual(anon.json().capacity, body.capacity);
        assert.deepEqual(anon.json().isolations, body.isolations, 'the tiers of the runners that answer');
      }
      assert.equal(body.capacity.memory.availableBytes, 16 * 2 ** 30, 'the capacity of a, where a create goes');
      assert.deepEqual(
        body.runners.map((r: { node: string; state: string; sandboxes: number; downForMs?: number }) => [
          r.node,
          r.state,
          r.sandboxes,
          r.downForMs,
        ]),
        [
          ['a', 'up', 0, undefined],
          ['b', 'down', 0, 1500],
        ],
      );
      const m = await t.req({ method: 'GET', url: '/metrics', key: null });
      for (const line of [
        'sandboxd_runner_up{runner="a"} 1',
        'sandboxd_runner_up{runner="b"} 0',
        'sandboxd_runner_sandboxes{runner="a"} 0',
        'sandboxd_runner_addresses_free{runner="a"} 65533',
        'sandboxd_runner_memory_available_bytes{runner="a"} 17179869184',
      ])
        assert.ok(m.body.split('\n').includes(line), `metrics have ${line}`);

      runners.setDown(A);
      await t.fleet.refresh();
      const none = await t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image } });
      assert.equal(none.statusCode, 503, none.body);
      assert.equal(none.json().kind, 'unavailable');
      assert.match(none.json().message, /^No runner answers; /);
      const h2 = (await t.req({ method: 'GET', url: '/healthz' })).json();
      assert.equal(h2.capacity, undefined, 'no runner answers: nothing to measure');
      assert.deepEqual(
        h2.runners.map((r: { state: string }) => r.state),
        ['down', 'down'],
      );

      runners.setDown(A, null);
      runners.driver(A).hostCapacity.memoryAvailableBytes = 2 ** 20;
      await t.fleet.refresh();
      const full = await t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image } });
      assert.equal(full.statusCode, 503, full.body);
      assert.equal(full.json().kind, 'capacity');
      assert.equal(full.headers['retry-after'], '5');
      assert.match(full.json().message, /^No runner has room for more sandboxes: memory is low/);
      const list = await t.req({ method: 'GET', url: '/api/v1/sandboxes?state=error' });
      assert.deepEqual(list.json().sandboxes, [], 'refused before anything was recorded');
      const ledger = (await t.req({ method: 'GET', url: '/api/v1/account/ledger' })).json();
      assert.deepEqual(
        ledger.entries.filter((e: { reason: string }) => e.reason !== 'signup'),
        [],
        'nor charged',
      );
    }));
});
