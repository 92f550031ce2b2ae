import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import type { SandboxRecord } from '../domain/sandbox.js';
import type { Counters, Store } from './store.js';

/** What the suite needs: a fresh, empty store per test. */
export interface StoreTarget {
  name: string;
  make: () => Promise<Store>;
}

const rec = (id: string, accountId: string, createdAt: number): SandboxRecord => ({
  id,
  accountId,
  name: `n-${id}`,
  image: 'img',
  region: 'local',
  env: { A: '1' },
  volumes: [],
  createdAt,
  state: 'creating',
  stopAt: createdAt + 60_000,
  reservedMinutes: 0,
  endedAt: null,
  details: null,
});

/**
 * Registers the behaviour every {@link Counters} must show (the Store's, and the memory
 * counters of the rate limits): fixed windows, atomic under concurrent hits.
 */
export function runCounterConformance(target: { name: string; make: () => Promise<Counters & { close(): void }> }) {
  async function withCounters(fn: (c: Counters) => Promise<void>) {
    const c = await target.make();
    try {
      await fn(c);
    } finally {
      c.close();
    }
  }

  describe(`Counters conformance: ${target.name}`, () => {
    it('counts within a fixed window, restarts after its end, keys apart', () =>
      withCounters(async (c) => {
        assert.deepEqual(await c.hitCounter('a', 1000, 10_000), { count: 1, resetAt: 11_000 });
        assert.deepEqual(await c.hitCounter('a', 1000, 10_500), { count: 2, resetAt: 11_000 }, 'the end does not move');
        assert.deepEqual(await c.hitCounter('b', 500, 10_500), { count: 1, resetAt: 11_000 });
        assert.deepEqual(await c.hitCounter('a', 1000, 10_999), { count: 3, resetAt: 11_000 });
        assert.deepEqual(await c.hitCounter('a', 1000, 11_000), { count: 1, resetAt: 12_000 }, 'a new window');
        assert.deepEqual(await c.hitCounter('b', 500, 11_000), { count: 1, resetAt: 11_500 });
      }));

    it('read changes nothing and sees only a live window; delete forgets', () =>
      withCounters(async (c) => {
        assert.equal(await c.readCounter('k', 0), null);
        await c.hitCounter('k', 100, 0);
        await c.hitCounter('k', 100, 1);
        assert.deepEqual(await c.readCounter('k', 50), { count: 2, resetAt: 100 });
        assert.deepEqual(await c.readCounter('k', 50), { count: 2, resetAt: 100 });
        assert.equal(await c.readCounter('k', 100), null, 'ended');
        await c.deleteCounter('k');
        assert.equal(await c.readCounter('k', 50), null);
        await c.deleteCounter('never-seen');
        assert.deepEqual(await c.hitCounter('k', 100, 60), { count: 1, resetAt: 160 });
      }));

    it('purge removes ended windows only', () =>
      withCounters(async (c) => {
        await c.hitCounter('old1', 100, 0);
        await c.hitCounter('old2', 200, 0);
        await c.hitCounter('live', 1000, 0);
        assert.equal(await c.purgeCounters(200), 2);
        assert.equal(await c.purgeCounters(200), 0);
        assert.deepEqual(await c.readCounter('live', 200), { count: 1, resetAt: 1000 });
        assert.equal(await c.readCounter('old2', 150), null, 'gone, not just ended');
      }));

    it('concurrent hits on one key each get their own count', () =>
      withCounters(async (c) => {
        const counts = await Promise.all(Array.from({ length: 50 }, () => c.hitCounter('hot', 60_000, 5)));
        assert.deepEqual(
          counts.map((w) => w.count).sort((x, y) => x - y),
          Array.from({ length: 50 }, (_, i) => i + 1),
        );
        assert.ok(counts.every((w) => w.resetAt === 60_005));
      }));
  });
}

/** Registers the behaviour every Store must show with node's test runner. */
export function runStoreConformance(target: StoreTarget): void {
  runCounterConformance(target);

  async function withStore(fn: (s: Store) => Promise<void>) {
    const s = await target.make();
    await s.createAccount(
      { id: 'acc_a', email: 'a@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
      { tokens: 10, reason: 'signup' },
    );
    try {
      await fn(s);
    } finally {
      s.close();
    }
  }

  describe(`Store conformance: ${target.name}`, () => {
    it('reserve debits, counts live sandboxes and refuses with 402 then 403', () =>
      withStore(async (s) => {
        await s.reserveSandbox(rec('s1', 'acc_a', 1), { minutes: 4, concurrency: 2, volumes: [], newName: () => 'x' });
        assert.equal(await s.balance('acc_a'), 6);
        await assert.rejects(
          s.reserveSandbox(rec('s2', 'acc_a', 2), { minutes: 7, concurrency: 2, volumes: [], newName: () => 'x' }),
          (e: SandboxdError) => e.kind === 'tokens',
        );
        await s.reserveSandbox(rec('s2', 'acc_a', 2), { minutes: 1, concurrency: 2, volumes: [], newName: () => 'x' });
        await assert.rejects(
          s.reserveSandbox(rec('s3', 'acc_a', 3), { minutes: 1, concurrency: 2, volumes: [], newName: () => 'x' }),
          (e: SandboxdError) => e.kind === 'concurrency',
        );
        assert.equal(await s.countLive('acc_a'), 2);
      }));

    it('maxSandboxes counts live sandboxes of every account; at it 503 capacity first, with nothing written', () =>
      withStore(async (s) => {
        await s.createAccount(
          { id: 'acc_b', email: 'b@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
          { tokens: 0, reason: 'signup' },
        );
        const host = { minutes: 1, concurrency: 5, volumes: [], newName: () => 'x', maxSandboxes: 2 };
        await s.reserveSandbox(rec('s1', 'acc_a', 1), host);
        await s.reserveSandbox(rec('s2', 'acc_a', 2), host);
        await s.updateSandbox('s1', { state: 'started', at: 3 });
        const ledger = (await s.listLedger('acc_a', { limit: 100 })).items.length;
        for (const [id, account] of [
          ['s3', 'acc_a'],
          ['s4', 'acc_b'], // no tokens: the host's limit is said first
        ]) {
          await assert.rejects(s.reserveSandbox(rec(id, account, 3), host), (e: SandboxdError) => {
            assert.equal(e.kind, 'capacity');
            assert.deepEqual(e.details, { resource: 'sandboxes', retryAfterMs: 5000, used: 2, max: 2 });
            assert.match(e.message, /2 of 2 are in use \(maxSandboxes\)/);
            return true;
          });
          assert.equal(await s.getSandbox(id), null);
        }
        assert.equal((await s.listLedger('acc_a', { limit: 100 })).items.length, ledger, 'no ledger row');
        assert.equal(await s.balance('acc_a'), 8);
        await s.updateSandbox('s2', { state: 'error', endedAt: 4, at: 4 });
        await s.reserveSandbox(rec('s3', 'acc_a', 5), host);
        await s.reserveSandbox(rec('s5', 'acc_a', 6), { ...host, maxSandboxes: 0 }); // 0: no limit
        assert.equal(await s.countLive('acc_a'), 3);
        await s.createAccount(
          { id: 'acc_c', email: 'c@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
          { tokens: 5, reason: 'signup' },
        );
        await s.reserveSandbox(rec('s6', 'acc_c', 7), { ...host, maxSandboxes: 0 });
        assert.equal(await s.countAllLive(), 4, 'every account');
      }));

    it("keeps E2B's template and metadata of a sandbox; absent when not given", () =>
      withStore(async (s) => {
        const labels = { user: 'abc', 'k=&/ü': 'v&=ü', empty: '' };
        const r = await s.reserveSandbox(
          { ...rec('s1', 'acc_a', 1), template: 'base', metadata: labels },
          { minutes: 1, concurrency: 5, volumes: [], newName: () => 'x' },
        );
        assert.equal(r.template, 'base');
        assert.deepEqual(r.metadata, labels);
        await s.reserveSandbox(rec('s2', 'acc_a', 2), { minutes: 1, concurrency: 5, volumes: [], newName: () => 'y' });
        await s.updateSandbox('s1', { state: 'started', at: 3 });
        const got = await s.getSandbox('s1');
        assert.equal(got?.template, 'base');
        assert.deepEqual(got?.metadata, labels);
        const plain = await s.getSandbox('s2');
        assert.ok(plain && !('template' in plain) && !('metadata' in plain), 'no template, no metadata');
        const listed = await s.listSandboxes('acc_a', { states: ['started', 'creating'], limit: 10 });
        assert.deepEqual(
          listed.items.map((x) => [x.id, x.template, x.metadata]),
          [
            ['s2', undefined, undefined],
            ['s1', 'base', labels],
          ],
        );
        assert.deepEqual(
          (await s.listSandboxesByState(['started'])).map((x) => x.metadata),
          [labels],
        );
      }));

    it('renames on a name clash within the account', () =>
      withStore(async (s) => {
        await s.reserveSandbox(rec('s1', 'acc_a', 1), {
          minutes: 1,
          concurrency: 5,
          volumes: [],
          newName: () => 'other',
        });
        const r2 = await s.reserveSandbox(
          { ...rec('s2', 'acc_a', 2), name: 'n-s1' },
          { minutes: 1, concurrency: 5, volumes: [], newName: () => 'other' },
        );
        assert.equal(r2.name, 'other');
      }));

    it('update enforces the transition table, expectStates and the balance', () =>
      withStore(async (s) => {
        await s.reserveSandbox(rec('s1', 'acc_a', 1), { minutes: 1, concurrency: 5, volumes: [], newName: () => 'x' });
        await assert.rejects(
          s.updateSandbox('s1', { state: 'stopped', at: 5 }),
          (e: SandboxdError) => e.kind === 'conflict',
        );
        await s.updateSandbox('s1', { state: 'started', at: 5 });
        await assert.rejects(
          s.updateSandbox('s1', { ledgerDelta: -100, at: 5 }),
          (e: SandboxdError) => e.kind === 'tokens',
        );
        const r = await s.updateSandbox('s1', { ledgerDelta: -2, stopAt: 99, at: 5 });
        assert.equal(r.reservedMinutes, 3);
        assert.equal(await s.balance('acc_a'), 7);
        await assert.rejects(
          s.updateSandbox('s1', { state: 'stopped', expectStates: ['creating'], at: 5 }),
          (e: SandboxdError) => e.kind === 'conflict',
        );
        await assert.rejects(s.updateSandbox('nope', { at: 5 }), (e: SandboxdError) => e.kind === 'not_found');
      }));

    it('lists newest first with a cursor and filters by state', () =>
      withStore(async (s) => {
        for (let i = 0; i < 5; i++) {
          await s.reserveSandbox(rec(`s${i}`, 'acc_a', 100 + (i % 3)), {
            minutes: 1,
            concurrency: 10,
            volumes: [],
            newName: () => `z${i}`,
          });
          await s.updateSandbox(`s${i}`, { state: 'started', at: 1 });
        }
        const seen: string[] = [];
        let cursor: string | undefined;
        do {
          const p = await s.listSandboxes('acc_a', { states: ['started'], limit: 2, cursor });
          seen.push(...p.items.map((x) => x.id));
          cursor = p.nextCursor;
        } while (cursor);
        assert.deepEqual(seen, ['s2', 's4', 's1', 's3', 's0']);
        assert.equal((await s.listSandboxes('acc_a', { states: ['stopped'], limit: 10 })).items.length, 0);
        await assert.rejects(
          s.listSandboxes('acc_a', { states: ['started'], limit: 2, cursor: 'garbage' }),
          (e: SandboxdError) => e.kind === 'validation',
        );
      }));

    it('volumes: size conflict on reserve, 409 on delete while mounted', () =>
      withStore(async (s) => {
        const r = { ...rec('s1', 'acc_a', 1), volumes: [{ mountPath: '/d', name: 'v', sizeGb: 1 }] };
        await s.reserveSandbox(r, {
          minutes: 1,
          concurrency: 5,
          volumes: [{ name: 'v', sizeGb: 2 }],
          newName: () => 'x',
        });
        assert.deepEqual(
          (await s.listVolumes('acc_a')).map((v) => [v.name, v.sizeGb, v.mountedBy]),
          [['v', 2, ['s1']]],
        );
        const r2 = { ...rec('s2', 'acc_a', 2), volumes: [{ mountPath: '/d', name: 'v', sizeGb: 1 }] };
        await assert.rejects(
          s.reserveSandbox(r2, { minutes: 1, concurrency: 5, volumes: [{ name: 'v', sizeGb: 3 }], newName: () => 'x' }),
          (e: SandboxdError) => e.kind === 'conflict',
        );
        await assert.rejects(s.deleteVolume('acc_a', 'v'), (e: SandboxdError) => e.kind === 'conflict');
        await s.updateSandbox('s1', { state: 'error', endedAt: 3, at: 3 });
        assert.equal(await s.deleteVolume('acc_a', 'v'), true);
      }));

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
  });
}
