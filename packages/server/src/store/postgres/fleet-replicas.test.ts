import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FakeRunners } from '../../../test/fake-runners.js';
import { type FleetApp, makeFleetApp } from '../../../test/fleet-app.js';
import type { SandboxRecord } from '../../domain/sandbox.js';
import { withTestPostgres } from '../../../test/postgres.js';

/*
 * Two API replicas (role api, each its own fleet) on one real PostgreSQL, sharing two fake
 * runners: any replica serves any sandbox (its runner is in the database), and when a runner
 * stops answering its sandboxes turn `error` and are refunded exactly once, whichever
 * replica reconciles, even when both try at the same time.
 */

const A = 'http://a:1';
const B = 'http://b:1';
const DOWN_MS = 4000;

withTestPostgres('fleet replicas on PostgreSQL', (server) => {
  async function withReplicas(fn: (x: FleetApp, y: FleetApp, runners: FakeRunners) => Promise<void>) {
    const databaseUrl = await server().createSchema();
    const runners = new FakeRunners({ [A]: 'a', [B]: 'b' });
    const x = await makeFleetApp(runners, [A, B], { databaseUrl, runnerDownMs: DOWN_MS });
    const y = await makeFleetApp(runners, [A, B], { databaseUrl, runnerDownMs: DOWN_MS });
    try {
      await fn(x, y, runners);
    } finally {
      await x.close();
      await y.close();
    }
  }

  describe('API replicas on one PostgreSQL over shared runners', () => {
    it('a replica serves a sandbox another created: its runner is in the database', () =>
      withReplicas(async (x, y, runners) => {
        const acct = await x.account();
        const made: SandboxRecord[] = [];
        for (let i = 0; i < 4; i++)
          made.push(await x.app.services.sandboxes.create(acct, { image: 'local/busybox:latest' }));
        for (const s of made) {
          const node = (await y.app.store.getSandbox(s.id))?.runner;
          assert.ok(node === 'a' || node === 'b');
          const r = await y.app.services.exec.run(acct.id, { sandboxId: s.id, command: `echo ${s.id}` });
          assert.equal(r.stdout, `${s.id}\n`);
          assert.ok(runners.calls.get(node === 'a' ? A : B)!.includes(`exec ${s.id}`), 'on its runner');
        }
        // y places by what the runners report: after a health check it sees x's four.
        await y.fleet.refresh();
        const status = y.fleet.runners();
        assert.deepEqual(
          status.map((r) => [r.node, r.sandboxes]),
          [
            ['a', 2],
            ['b', 2],
          ],
        );
      }));

    it('a runner that stops answering: each of its sandboxes turns error and is refunded once, with both replicas reconciling', () =>
      withReplicas(async (x, y, runners) => {
        const acct = await x.account();
        const made: SandboxRecord[] = [];
        for (let i = 0; i < 6; i++)
          made.push(await (i % 2 ? y : x).app.services.sandboxes.create(acct, { image: 'local/busybox:latest' }));
        const onA: string[] = [];
        for (const s of made) if ((await x.app.store.getSandbox(s.id))?.runner === 'a') onA.push(s.id);
        assert.ok(onA.length > 0 && onA.length < 6, `spread: ${onA.length} of 6 on a`);
        const before = await x.app.store.balance(acct.id);

        runners.setDown(A);
        await Promise.all([x.fleet.refresh(), y.fleet.refresh()]);
        x.clock.advance(DOWN_MS + 1000);
        y.clock.advance(DOWN_MS + 1000);
        const rounds = await Promise.all(
          Array.from({ length: 4 }, () => Promise.all([x.app.reaper.reconcile(), y.app.reaper.reconcile()])),
        );
        const lost = rounds.flat().flatMap((r) => r.lost);
        assert.deepEqual(lost.sort(), [...onA].sort(), 'each once, by whichever held the lease');
        for (const id of onA) {
          const r = await y.app.store.getSandbox(id);
          assert.equal(r?.state, 'error');
          assert.equal(r?.details?.runner, 'a');
        }
        const ledger = (await x.app.store.listLedger(acct.id, { limit: 500 })).items;
        for (const id of onA)
          assert.equal(
            ledger.filter((l) => l.sandboxId === id && l.reason === 'sandbox.refund').length,
            1,
            `one refund for ${id}`,
          );
        // Each had 10 minutes reserved (the default timeout), 5 s used: 9 back each.
        assert.equal(await x.app.store.balance(acct.id), before + 9 * onA.length);

        // Creates from either replica go to b meanwhile.
        for (const t of [x, y]) {
          const s = await t.app.services.sandboxes.create(acct, { image: 'local/busybox:latest' });
          assert.equal((await t.app.store.getSandbox(s.id))?.runner, 'b');
        }
        // a answers again: the one reconciling deletes what a still holds of them.
        runners.setDown(A, null);
        await Promise.all([x.fleet.refresh(), y.fleet.refresh()]);
        const back = await Promise.all([x.app.reaper.reconcile(), y.app.reaper.reconcile()]);
        assert.deepEqual(back.flatMap((r) => r.orphans).sort(), [...onA].sort());
        assert.deepEqual(await runners.ids(A), []);
      }));
  });
});
