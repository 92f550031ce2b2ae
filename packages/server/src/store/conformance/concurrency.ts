/** The store conformance suite's part with two stores on one database, as two replicas see it. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AccessTokens } from '../../e2b/tokens.js';
import { loadPortLinkSecret } from '../../proxy/link-secret.js';
import { outcomes, pairRunner, rec, snapshotRecord as snap, type StoreTarget } from './support.js';

/** Registers what every Store must hold when two stores on one database race. */
export function runConcurrencyConformance(target: StoreTarget): void {
  const withPair = pairRunner(target);

  describe(`Store conformance under concurrency, two stores on one database: ${target.name}`, () => {
    it('50 parallel reservations against a concurrency of 5 start exactly 5 and debit exactly 5', () =>
      withPair(100, async (a, b) => {
        const rs = await Promise.allSettled(
          Array.from({ length: 50 }, (_, i) =>
            (i % 2 ? a : b).reserveSandbox(rec(`s${i}`, 'acc_a', i + 1), {
              minutes: 1,
              concurrency: 5,
              volumes: [],
              newName: () => `r${i}`,
            }),
          ),
        );
        assert.deepEqual(outcomes(rs), { ok: 5, concurrency: 45 });
        assert.equal(await a.countLive('acc_a'), 5);
        assert.equal(await b.balance('acc_a'), 95);
        assert.equal((await a.listLedger('acc_a', { limit: 100 })).items.length, 6, 'the grant and 5 debits');
      }));

    it('two sandboxes sharing a new volume placed at once on two runners: one wins, the volume is its', () =>
      withPair(100, async (a, b) => {
        for (let round = 0; round < 5; round++) {
          const vol = `shared${round}`;
          const r = (id: string, at: number) => ({
            ...rec(id, 'acc_a', at),
            volumes: [{ mountPath: '/data', name: vol, sizeGb: 1 }],
          });
          const res = { minutes: 1, concurrency: 50, volumes: [{ name: vol, sizeGb: 1 }], newName: () => `r${round}` };
          await a.reserveSandbox(r(`x${round}`, round * 2 + 1), res);
          await b.reserveSandbox(r(`y${round}`, round * 2 + 2), { ...res, newName: () => `q${round}` });
          const rs = await Promise.allSettled([
            a.placeSandbox(`x${round}`, 'node-a'),
            b.placeSandbox(`y${round}`, 'node-b'),
          ]);
          assert.deepEqual(outcomes(rs), { ok: 1, conflict: 1 });
          const winner = rs[0].status === 'fulfilled' ? 'node-a' : 'node-b';
          assert.equal((await b.getVolume('acc_a', vol))?.runner, winner);
          const loser = winner === 'node-a' ? `y${round}` : `x${round}`;
          assert.equal((await a.getSandbox(loser))?.runner, undefined, 'the loser is not placed');
        }
      }));

    it('parallel reservations never overdraw: the balance covers exactly 3', () =>
      withPair(10, async (a, b) => {
        const rs = await Promise.allSettled(
          Array.from({ length: 20 }, (_, i) =>
            (i % 2 ? a : b).reserveSandbox(rec(`s${i}`, 'acc_a', i + 1), {
              minutes: 3,
              concurrency: 50,
              volumes: [],
              newName: () => `r${i}`,
            }),
          ),
        );
        assert.deepEqual(outcomes(rs), { ok: 3, tokens: 17 });
        assert.equal(await a.balance('acc_a'), 1);
      }));

    it('maxSandboxes holds across accounts and stores', () =>
      withPair(100, async (a, b) => {
        await b.createAccount(
          { id: 'acc_b', email: 'b@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
          { tokens: 100, reason: 'signup' },
        );
        const rs = await Promise.allSettled(
          Array.from({ length: 30 }, (_, i) =>
            (i % 2 ? a : b).reserveSandbox(rec(`s${i}`, i % 3 ? 'acc_a' : 'acc_b', i + 1), {
              minutes: 1,
              concurrency: 50,
              maxSandboxes: 4,
              volumes: [],
              newName: () => `r${i}`,
            }),
          ),
        );
        assert.deepEqual(outcomes(rs), { ok: 4, capacity: 26 });
        assert.equal(await a.countAllLive(), 4);
        assert.equal((await b.balance('acc_a')) + (await b.balance('acc_b')), 196);
      }));

    it('parallel updates: one of many stops wins, pauses stop at maxPaused, debits stop at the balance', () =>
      withPair(10, async (a, b) => {
        const r = { minutes: 1, concurrency: 10, volumes: [], newName: () => 'x' };
        for (const id of ['s1', 's2', 's3', 's4', 's5']) {
          await a.reserveSandbox(rec(id, 'acc_a', 1), r);
          await b.updateSandbox(id, { state: 'started', at: 2 });
        }
        const stops = await Promise.allSettled(
          Array.from({ length: 10 }, (_, i) =>
            (i % 2 ? a : b).updateSandbox('s1', {
              state: 'stopped',
              endedAt: 3,
              expectStates: ['started'],
              ledgerDelta: 1,
              at: 3,
            }),
          ),
        );
        assert.deepEqual(outcomes(stops), { ok: 1, conflict: 9 });
        assert.equal(await a.balance('acc_a'), 6, 'refunded once');
        const pauses = await Promise.allSettled(
          ['s2', 's3', 's4', 's5'].map((id, i) =>
            (i % 2 ? a : b).updateSandbox(id, { state: 'paused', at: 4, limits: { maxPaused: 2 } }),
          ),
        );
        assert.deepEqual(outcomes(pauses), { ok: 2, quota: 2 });
        const started = (await a.listSandboxesByState(['started'])).map((x) => x.id);
        assert.equal(started.length, 2);
        const extends_ = await Promise.allSettled(
          Array.from({ length: 10 }, (_, i) =>
            (i % 2 ? a : b).updateSandbox(started[i % 2], { ledgerDelta: -2, at: 5 }),
          ),
        );
        assert.deepEqual(outcomes(extends_), { ok: 3, tokens: 7 });
        assert.equal(await b.balance('acc_a'), 0);
      }));

    it('parallel snapshot begins of one name make one; parallel finishes stop at the quota', () =>
      withPair(10, async (a, b) => {
        const begins = await Promise.allSettled(
          Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).beginSnapshot(snap('same'), 100)),
        );
        assert.deepEqual(outcomes(begins), { ok: 1, conflict: 9 });
        await a.deleteSnapshot('acc_a', 'same');
        for (let i = 0; i < 10; i++) await (i % 2 ? a : b).beginSnapshot(snap(`n${i}`), 100);
        const finishes = await Promise.allSettled(
          Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).finishSnapshot('acc_a', `n${i}`, 30, 100)),
        );
        assert.deepEqual(outcomes(finishes), { ok: 3, quota: 7 });
        assert.equal(await b.snapshotBytes('acc_a'), 90);
        const over = await Promise.allSettled(
          Array.from({ length: 4 }, (_, i) => (i % 2 ? a : b).beginSnapshot(snap(`m${i}`), 90)),
        );
        assert.deepEqual(outcomes(over), { quota: 4 });
      }));

    it('counters hit from two stores count every hit once', () =>
      withPair(0, async (a, b) => {
        const counts = await Promise.all(
          Array.from({ length: 60 }, (_, i) => (i % 2 ? a : b).hitCounter('shared', 60_000, 5)),
        );
        assert.deepEqual(
          counts.map((w) => w.count).sort((x, y) => x - y),
          Array.from({ length: 60 }, (_, i) => i + 1),
        );
        assert.deepEqual(await b.readCounter('shared', 6), { count: 60, resetAt: 60_005 });
      }));

    it('a lease raced for from two stores has one holder; renewal, takeover after expiry and release hold across stores', () =>
      withPair(0, async (a, b) => {
        const race = await Promise.all(
          Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).acquireLease('reaper', `h${i}`, 3000, 1000)),
        );
        const winners = race.filter((r) => r.held);
        assert.equal(winners.length, 1, 'exactly one holder wins');
        const holder = winners[0].holder;
        assert.ok(
          race.every((r) => r.holder === holder && r.expiresAt === 4000),
          'the others are told who won',
        );
        assert.deepEqual(
          await a.acquireLease('reaper', holder, 3000, 3000),
          {
            held: true,
            holder,
            expiresAt: 6000,
          },
          'renewed through either store',
        );
        // Both race again for an expired lease: still one winner.
        const again = await Promise.all(
          Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).acquireLease('reaper', `n${i}`, 3000, 6000)),
        );
        assert.equal(again.filter((r) => r.held).length, 1, 'one takes the expired lease over');
        const next = again.find((r) => r.held)?.holder ?? '';
        assert.notEqual(next, holder);
        assert.equal(await a.releaseLease('reaper', next), true);
        assert.deepEqual(
          await b.acquireLease('reaper', 'late', 3000, 6001),
          {
            held: true,
            holder: 'late',
            expiresAt: 9001,
          },
          'released from one store: taken at once from the other',
        );
      }));

    it('shared secrets: replicas racing to make one on a fresh database all end with the same value', () =>
      withPair(0, async (a, b) => {
        // Eight "replicas" (alternately on each store) start at once: one envd token secret.
        const tokens = Array.from({ length: 8 }, (_, i) => new AccessTokens(i % 2 ? a : b));
        const made = await Promise.all(tokens.map((t) => t.tokenFor('sbx_x')));
        assert.equal(new Set(made).size, 1, `one secret, one token: ${made.join(' ')}`);
        assert.equal(await new AccessTokens(b).tokenFor('sbx_x'), made[0], 'a later start reads it back');
        // And one port-link secret.
        const quiet = { info: () => {}, warn: () => {} };
        const keys = await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            loadPortLinkSecret(i % 2 ? a : b, { legacyKeyFile: '/nonexistent/proxy-link.key', log: quiet }),
          ),
        );
        assert.equal(new Set(keys.map((k) => k.toString('hex'))).size, 1);
        // The primitive under it, raced many times: the first value stays, every racer reads it.
        for (let round = 0; round < 20; round++) {
          const key = `secret.${round}`;
          const got = await Promise.all(
            Array.from({ length: 6 }, (_, i) => (i % 2 ? a : b).ensureMeta(key, `v${round}.${i}`)),
          );
          assert.equal(new Set(got).size, 1, `round ${round}: ${got.join(' ')}`);
          assert.match(got[0], new RegExp(`^v${round}\\.[0-5]$`));
          assert.equal(await a.getMeta(key), got[0]);
          assert.equal(await b.ensureMeta(key, 'later'), got[0], 'an existing value is never replaced');
        }
      }));

    it('a login link is consumed once across stores', () =>
      withPair(0, async (a, b) => {
        await a.createLoginLink({ tokenHash: 'l', accountId: 'acc_a', expiresAt: 100 });
        const got = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).consumeLoginLink('l', 1)));
        assert.deepEqual(
          got.filter((x) => x !== null),
          ['acc_a'],
        );
      }));
  });
}
