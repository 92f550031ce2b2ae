/** The store conformance suite's part on accounts, sessions, login links, API keys, the ledger, events, meta and leases. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import { type StoreTarget, storeRunner } from './support.js';

/** Registers what every Store must do with accounts and their keys, sessions and tokens, events, meta and leases. */
export function runAccountConformance(target: StoreTarget): void {
  const withStore = storeRunner(target);

  describe(`Store conformance, accounts: ${target.name}`, () => {
    it('sessions expire, login links work once, api keys are found by hash and scoped to their account', () =>
      withStore(async (s) => {
        await s.createSession({ tokenHash: 'h1', accountId: 'acc_a', createdAt: 10, expiresAt: 20 });
        assert.deepEqual(await s.getSession('h1', 19), { accountId: 'acc_a' });
        assert.equal(await s.getSession('h1', 20), null);
        await s.createLoginLink({ tokenHash: 'l1', accountId: 'acc_a', expiresAt: 100 });
        assert.equal(await s.consumeLoginLink('l1', 50), 'acc_a');
        assert.equal(await s.consumeLoginLink('l1', 51), null);
        await s.createApiKey({
          id: 'k1',
          accountId: 'acc_a',
          name: 'n',
          prefix: 'sk_x',
          keyHash: 'kh',
          createdAt: 1,
          lastUsedAt: null,
        });
        assert.equal((await s.findApiKeyByHash('kh'))?.id, 'k1');
        assert.equal(await s.deleteApiKey('acc_other', 'k1'), false);
        await s.touchApiKey('k1', 7);
        assert.equal((await s.listApiKeys('acc_a'))[0].lastUsedAt, 7);
        assert.equal(await s.deleteApiKey('acc_a', 'k1'), true);
        await assert.rejects(
          s.createAccount(
            { id: 'acc_b', email: 'A@X', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
            { tokens: 0, reason: 'signup' },
          ),
          (e: SandboxdError) => e.kind === 'conflict',
        );
      }));

    it('accounts: by id, by email case-insensitively, listed by creation, counted, plan changes', () =>
      withStore(async (s) => {
        await s.createAccount(
          { id: 'acc_b', email: 'Bee@X', passwordHash: 'scrypt$h', plan: 'PRO', admin: true, createdAt: 0 },
          { tokens: 0, reason: 'signup' },
        );
        assert.deepEqual(await s.getAccount('acc_b'), {
          id: 'acc_b',
          email: 'Bee@X',
          passwordHash: 'scrypt$h',
          plan: 'PRO',
          admin: true,
          createdAt: 0,
        });
        assert.equal((await s.getAccountByEmail('bee@x'))?.id, 'acc_b');
        assert.equal(await s.getAccountByEmail('nobody@x'), null);
        assert.equal(await s.getAccount('nope'), null);
        assert.deepEqual(
          (await s.listAccounts()).map((a) => a.id),
          ['acc_b', 'acc_a'],
        );
        assert.equal(await s.countAccounts(), 2);
        assert.equal(await s.balance('acc_b'), 0, 'a zero grant writes no ledger row');
        assert.equal((await s.listLedger('acc_b', { limit: 10 })).items.length, 0);
        await s.setAccountPlan('acc_b', 'FREE');
        assert.equal((await s.getAccount('acc_b'))?.plan, 'FREE');
        await assert.rejects(s.setAccountPlan('nope', 'FREE'), (e: SandboxdError) => e.kind === 'not_found');
      }));

    it('ledger: ids grow, pages newest first with a cursor, the balance is the sum', () =>
      withStore(async (s) => {
        const ids: number[] = [];
        for (let i = 1; i <= 5; i++)
          ids.push(
            await s.addLedger({ accountId: 'acc_a', delta: i, reason: 'admin.grant', sandboxId: null, createdAt: i }),
          );
        assert.deepEqual(
          ids,
          [...ids].sort((x, y) => x - y),
        );
        assert.equal(await s.balance('acc_a'), 25);
        assert.equal(await s.balance('acc_nobody'), 0);
        const seen: number[] = [];
        let cursor: string | undefined;
        do {
          const p = await s.listLedger('acc_a', { limit: 4, cursor });
          seen.push(...p.items.map((r) => r.delta));
          cursor = p.nextCursor;
        } while (cursor);
        assert.deepEqual(seen, [5, 4, 3, 2, 1, 10]);
        const [first] = (await s.listLedger('acc_a', { limit: 1 })).items;
        assert.deepEqual(first, {
          id: ids[4],
          accountId: 'acc_a',
          delta: 5,
          reason: 'admin.grant',
          sandboxId: null,
          createdAt: 5,
        });
      }));

    it('events: the last N in order with their metadata; meta: set, overwritten, read', () =>
      withStore(async (s) => {
        for (let i = 0; i < 5; i++)
          await s.addEvent({ accountId: 'acc_a', event: `e${i}`, metadata: { i, nested: { ok: true } }, createdAt: i });
        const ev = await s.listEvents('acc_a', 3);
        assert.deepEqual(
          ev.map((e) => e.event),
          ['e2', 'e3', 'e4'],
        );
        assert.deepEqual(ev[2], {
          accountId: 'acc_a',
          event: 'e4',
          metadata: { i: 4, nested: { ok: true } },
          createdAt: 4,
        });
        assert.deepEqual(await s.listEvents('acc_other', 3), []);
        assert.equal(await s.getMeta('k'), null);
        await s.setMeta('k', 'v1');
        await s.setMeta('k', 'v2');
        assert.equal(await s.getMeta('k'), 'v2');
      }));

    it('ping answers while the database is open, and fails once it is closed (readiness)', () =>
      withStore(async (s) => {
        await s.ping();
        await s.close();
        await assert.rejects(s.ping());
      }));

    it('leases: taken when free, renewed by the holder, refused to others while live, taken over once expired', () =>
      withStore(async (s) => {
        assert.deepEqual(await s.acquireLease('reaper', 'a', 3000, 1000), { held: true, holder: 'a', expiresAt: 4000 });
        assert.deepEqual(
          await s.acquireLease('reaper', 'b', 3000, 2000),
          { held: false, holder: 'a', expiresAt: 4000 },
          'another holder is told who has it, and nothing changes',
        );
        assert.deepEqual(
          await s.acquireLease('reaper', 'a', 3000, 2500),
          { held: true, holder: 'a', expiresAt: 5500 },
          'renewed',
        );
        assert.deepEqual(
          await s.acquireLease('other', 'b', 100, 2500),
          { held: true, holder: 'b', expiresAt: 2600 },
          'names apart',
        );
        assert.deepEqual(await s.acquireLease('reaper', 'b', 3000, 5499), {
          held: false,
          holder: 'a',
          expiresAt: 5500,
        });
        assert.deepEqual(
          await s.acquireLease('reaper', 'b', 3000, 5500),
          { held: true, holder: 'b', expiresAt: 8500 },
          'taken over once expired (not renewed in time)',
        );
        assert.deepEqual(await s.acquireLease('reaper', 'a', 3000, 6000), {
          held: false,
          holder: 'b',
          expiresAt: 8500,
        });
        assert.equal(await s.releaseLease('reaper', 'a'), false, 'not the holder: nothing released');
        assert.deepEqual(await s.acquireLease('reaper', 'a', 3000, 6000), {
          held: false,
          holder: 'b',
          expiresAt: 8500,
        });
        assert.equal(await s.releaseLease('reaper', 'b'), true);
        assert.deepEqual(
          await s.acquireLease('reaper', 'a', 3000, 6001),
          { held: true, holder: 'a', expiresAt: 9001 },
          'released: taken at once',
        );
        assert.equal(await s.releaseLease('never', 'a'), false);
      }));

    it('sessions: a new one purges expired ones; delete ends one', () =>
      withStore(async (s) => {
        await s.createSession({ tokenHash: 'old', accountId: 'acc_a', createdAt: 0, expiresAt: 10 });
        await s.createSession({ tokenHash: 'live', accountId: 'acc_a', createdAt: 0, expiresAt: 100 });
        await s.createSession({ tokenHash: 'new', accountId: 'acc_a', createdAt: 10, expiresAt: 100 });
        assert.equal(await s.getSession('old', 0), null, 'purged, not just expired');
        assert.deepEqual(await s.getSession('live', 50), { accountId: 'acc_a' });
        await s.deleteSession('live');
        assert.equal(await s.getSession('live', 50), null);
        await s.createLoginLink({ tokenHash: 'l', accountId: 'acc_a', expiresAt: 10 });
        assert.equal(await s.consumeLoginLink('l', 10), null, 'expired');
        assert.equal(await s.consumeLoginLink('unknown', 1), null);
      }));
  });
}
