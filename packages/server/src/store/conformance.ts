import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import type { SandboxRecord } from '../domain/sandbox.js';
import type { Counters, Store } from './store.js';

/** What the suite needs: a fresh, empty store per test. */
export interface StoreTarget {
  name: string;
  make: () => Promise<Store>;
  /**
   * Two stores on one fresh, empty database, each with its own connections: what two
   * server processes (replicas) sharing the database see.
   */
  makePair: () => Promise<[Store, Store]>;
}

/**
 * The balance migration tests of both stores: the ledger an older database holds (account
 * `a`: rows summing to 95; account `b`: none), as SQL VALUES of
 * `(account_id, delta, reason, sandbox_id, created_at)`, and what the migrated store must
 * show of it ({@link checkFilledBalances}).
 */
export const OLD_LEDGER_VALUES =
  "('a', 100, 'signup', NULL, 1), ('a', -7, 'sandbox.create', 's1', 2), ('a', 2, 'sandbox.refund', 's1', 3)";

/** Balances filled from {@link OLD_LEDGER_VALUES}, then moved by every later ledger row. */
export async function checkFilledBalances(s: Store): Promise<void> {
  assert.equal(await s.balance('a'), 95);
  assert.equal(await s.balance('b'), 0);
  await s.addLedger({ accountId: 'a', delta: -5, reason: 'sandbox.extend', sandboxId: 's1', createdAt: 4 });
  await s.addLedger({ accountId: 'b', delta: 3, reason: 'admin.grant', sandboxId: null, createdAt: 5 });
  assert.equal(await s.balance('a'), 90);
  assert.equal(await s.balance('b'), 3);
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
export function runCounterConformance(target: {
  name: string;
  make: () => Promise<Counters & { close(): void | Promise<void> }>;
}) {
  async function withCounters(fn: (c: Counters) => Promise<void>) {
    const c = await target.make();
    try {
      await fn(c);
    } finally {
      await c.close();
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
      await s.close();
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

    it('update with remove: the refund row is written and the record and its mounts are gone, in one step', () =>
      withStore(async (s) => {
        await s.reserveSandbox(
          { ...rec('s1', 'acc_a', 1), volumes: [{ mountPath: '/data', name: 'v1', sizeGb: 1 }] },
          { minutes: 3, concurrency: 5, volumes: [{ name: 'v1', sizeGb: 1 }], newName: () => 'x' },
        );
        assert.equal(await s.balance('acc_a'), 7);
        await assert.rejects(
          s.updateSandbox('s1', { state: 'error', ledgerDelta: 3, expectStates: ['started'], remove: true, at: 6 }),
          (e: SandboxdError) => e.kind === 'conflict',
        );
        assert.ok(await s.getSandbox('s1'), 'a refused update removes nothing');
        await s.updateSandbox('s1', {
          state: 'error',
          ledgerDelta: 3,
          ledgerReason: 'sandbox.refund',
          expectStates: ['creating'],
          remove: true,
          at: 6,
        });
        assert.equal(await s.getSandbox('s1'), null);
        assert.equal(await s.balance('acc_a'), 10);
        assert.equal(await s.countLive('acc_a'), 0);
        assert.deepEqual(
          (await s.listVolumes('acc_a')).map((v) => [v.name, v.mountedBy]),
          [['v1', []]],
        );
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

    it('placement: a sandbox and the volumes it mounts are recorded on one runner, never moved', () =>
      withStore(async (s) => {
        const vols = (names: string[]) => names.map((name, i) => ({ mountPath: `/m${i}`, name, sizeGb: 1 }));
        const res = (names: string[]) => ({
          minutes: 1,
          concurrency: 10,
          volumes: names.map((name) => ({ name, sizeGb: null })),
          newName: () => 'x',
        });
        await s.reserveSandbox({ ...rec('s1', 'acc_a', 1), volumes: vols(['v1', 'v2']) }, res(['v1', 'v2']));
        assert.equal((await s.getSandbox('s1'))?.runner, undefined, 'not placed yet');
        assert.equal((await s.getVolume('acc_a', 'v1'))?.runner, undefined);
        await s.placeSandbox('s1', 'node-a');
        await s.placeSandbox('s1', 'node-a'); // again on the same runner: nothing changes
        assert.equal((await s.getSandbox('s1'))?.runner, 'node-a');
        assert.deepEqual(
          (await s.listVolumes('acc_a')).map((v) => [v.name, v.runner]),
          [
            ['v1', 'node-a'],
            ['v2', 'node-a'],
          ],
        );
        await assert.rejects(s.placeSandbox('s1', 'node-b'), (e: SandboxdError) => e.kind === 'conflict');
        // A sandbox naming a volume of node-a and a new one cannot go to node-b; nothing is written.
        await s.reserveSandbox({ ...rec('s2', 'acc_a', 2), volumes: vols(['v1', 'v3']) }, res(['v1', 'v3']));
        await assert.rejects(s.placeSandbox('s2', 'node-b'), (e: SandboxdError) => {
          assert.equal(e.kind, 'conflict');
          assert.deepEqual(e.details, { volume: 'v1', runner: 'node-a' });
          return true;
        });
        assert.equal((await s.getSandbox('s2'))?.runner, undefined);
        assert.equal((await s.getVolume('acc_a', 'v3'))?.runner, undefined);
        await s.placeSandbox('s2', 'node-a');
        assert.equal((await s.getVolume('acc_a', 'v3'))?.runner, 'node-a');
        // The runner stays through state changes; a volume re-created keeps the runner given.
        const started = await s.updateSandbox('s2', { state: 'started', at: 3 });
        assert.equal(started.runner, 'node-a');
        assert.equal((await s.getSandbox('s2'))?.runner, 'node-a');
        assert.deepEqual((await s.listSandboxesByState(['creating', 'started'])).map((r) => [r.id, r.runner]).sort(), [
          ['s1', 'node-a'],
          ['s2', 'node-a'],
        ]);
        await s.createVolume({ accountId: 'acc_a', name: 'v9', sizeGb: 1, createdAt: 4, runner: 'node-c' });
        assert.equal((await s.getVolume('acc_a', 'v9'))?.runner, 'node-c');
        await assert.rejects(s.placeSandbox('nope', 'node-a'), (e: SandboxdError) => e.kind === 'not_found');
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

    it('keeps every field of a record, env and label key order included', () =>
      withStore(async (s) => {
        const env = { Z: '1', A: '2', MIDDLE_LONG_NAME: 'x y', b: '' };
        const labels = { zeta: '1', alpha: '2' };
        const r = await s.reserveSandbox(
          {
            ...rec('s1', 'acc_a', 1),
            env,
            metadata: labels,
            portsPublic: false,
            onTimeout: 'pause',
            runStartedAt: 1,
            expiresAt: null,
            network: { egress: 'none' },
          },
          { minutes: 2, concurrency: 5, volumes: [], newName: () => 'x' },
        );
        assert.equal(r.state, 'creating');
        assert.equal(r.reservedMinutes, 2);
        const got = await s.getSandbox('s1');
        assert.deepEqual(got, r);
        assert.equal(JSON.stringify(got?.env), JSON.stringify(env), 'env keys in their order');
        assert.equal(JSON.stringify(got?.metadata), JSON.stringify(labels), 'labels in their order');
        assert.equal(got?.portsPublic, false);
        assert.equal(got?.onTimeout, 'pause');
        assert.equal(got?.runStartedAt, 1);
        const big = 2 ** 42 + 7; // epoch-ms sized numbers come back as numbers
        const u = await s.updateSandbox('s1', {
          state: 'started',
          stopAt: big,
          details: { why: 'x', n: 1 },
          at: 2,
        });
        assert.equal(u.stopAt, big);
        assert.deepEqual(await s.getSandbox('s1'), u);
        const paused = await s.updateSandbox('s1', { state: 'paused', expiresAt: big + 1, at: 3 });
        assert.equal(paused.expiresAt, big + 1);
        const resumed = await s.updateSandbox('s1', {
          state: 'started',
          expiresAt: null,
          runStartedAt: 10,
          reservedMinutes: 7,
          ledgerDelta: -3,
          ledgerReason: 'sandbox.resume',
          at: 10,
        });
        assert.deepEqual([resumed.expiresAt, resumed.runStartedAt, resumed.reservedMinutes], [null, 10, 7]);
        assert.deepEqual(await s.getSandbox('s1'), resumed);
        // The network setting: kept as given (rule order included), replaced by an update alone.
        const allow = { egress: { allow: ['pypi.org', '*.npmjs.org', '203.0.113.0/24'] } };
        const ruled = await s.updateSandbox('s1', { network: allow, at: 11 });
        assert.deepEqual(ruled.network, allow);
        assert.deepEqual((await s.getSandbox('s1'))?.network, allow);
        const moved = await s.updateSandbox('s1', { stopAt: big + 2, at: 12 });
        assert.deepEqual(moved.network, allow, 'an update without network keeps it');
        const open = await s.updateSandbox('s1', { network: { egress: 'internet' }, at: 13 });
        assert.deepEqual((await s.getSandbox('s1'))?.network, { egress: 'internet' });
        assert.deepEqual(open.network, { egress: 'internet' });
        const [row] = (await s.listLedger('acc_a', { limit: 1 })).items;
        assert.deepEqual([row.delta, row.reason, row.sandboxId, row.createdAt], [-3, 'sandbox.resume', 's1', 10]);
        const stopped = await s.updateSandbox('s1', {
          state: 'stopped',
          endedAt: 11,
          details: null,
          ledgerDelta: 1,
          at: 11,
        });
        assert.deepEqual([stopped.endedAt, stopped.details, stopped.reservedMinutes], [11, null, 6]);
        assert.equal((await s.listLedger('acc_a', { limit: 1 })).items[0].reason, 'sandbox.refund');
        assert.equal(await s.balance('acc_a'), 10 - 2 - 3 + 1);
      }));

    it('update limits: concurrency and maxSandboxes on entering a slot, maxPaused on pausing', () =>
      withStore(async (s) => {
        const r = { minutes: 1, concurrency: 5, volumes: [], newName: () => 'x' };
        for (const id of ['s1', 's2', 's3']) {
          await s.reserveSandbox(rec(id, 'acc_a', 1), r);
          await s.updateSandbox(id, { state: 'started', at: 2 });
        }
        await s.updateSandbox('s1', { state: 'paused', at: 3, limits: { maxPaused: 1 } });
        await assert.rejects(
          s.updateSandbox('s2', { state: 'paused', at: 3, limits: { maxPaused: 1 } }),
          (e: SandboxdError) => e.kind === 'quota' && (e.details as { quota: string }).quota === 'maxPaused',
        );
        assert.equal(await s.countPaused('acc_a'), 1);
        assert.equal(await s.countLive('acc_a'), 2, 'a paused sandbox takes no concurrency slot');
        assert.equal(await s.countAllLive(), 3, 'but holds host resources');
        await assert.rejects(
          s.updateSandbox('s1', { state: 'started', at: 4, limits: { concurrency: 2 } }),
          (e: SandboxdError) => e.kind === 'concurrency',
        );
        assert.equal((await s.getSandbox('s1'))?.state, 'paused', 'nothing written');
        await s.updateSandbox('s1', { state: 'started', at: 4, limits: { concurrency: 3, maxSandboxes: 3 } });
        await s.updateSandbox('s3', { state: 'stopped', endedAt: 5, at: 5 });
        await s.updateSandbox('s2', { state: 'stopped', endedAt: 5, at: 5 });
        await s.reserveSandbox(rec('s4', 'acc_a', 6), r);
        await s.reserveSandbox(rec('s5', 'acc_a', 6), r);
        await assert.rejects(
          s.updateSandbox('s3', { state: 'starting', at: 7, limits: { concurrency: 5, maxSandboxes: 3 } }),
          (e: SandboxdError) => e.kind === 'capacity',
        );
        await s.updateSandbox('s3', { state: 'starting', at: 7, limits: { concurrency: 5, maxSandboxes: 4 } });
        assert.deepEqual(await s.countByState(), {
          creating: 2,
          started: 1,
          paused: 0,
          stopped: 1,
          starting: 1,
          error: 0,
        });
      }));

    it('reaper queries: expired, paused past retention, ended, purge; delete frees the mounts', () =>
      withStore(async (s) => {
        const r = { minutes: 1, concurrency: 9, volumes: [], newName: () => 'x' };
        for (const id of ['s1', 's2', 's3', 's4', 's5']) await s.reserveSandbox(rec(id, 'acc_a', 1), r);
        for (const id of ['s1', 's2', 's3', 's4']) await s.updateSandbox(id, { state: 'started', stopAt: 100, at: 2 });
        await s.updateSandbox('s2', { stopAt: 50, at: 2 });
        assert.deepEqual(
          (await s.listExpired(99)).map((x) => x.id),
          ['s2'],
        );
        assert.deepEqual((await s.listExpired(100)).map((x) => x.id).sort(), ['s1', 's2', 's3', 's4']);
        await s.updateSandbox('s3', { state: 'paused', expiresAt: 500, at: 3 });
        assert.deepEqual(await s.listPausedExpired(499), []);
        assert.deepEqual(
          (await s.listPausedExpired(500)).map((x) => x.id),
          ['s3'],
        );
        await s.updateSandbox('s1', { state: 'stopped', endedAt: 20, at: 20 });
        await s.updateSandbox('s2', { state: 'error', endedAt: 10, at: 10 });
        assert.deepEqual(
          (await s.listEnded(21, 10)).map((x) => x.id),
          ['s2', 's1'],
        );
        assert.deepEqual(
          (await s.listEnded(21, 1)).map((x) => x.id),
          ['s2'],
        );
        assert.deepEqual(await s.listEnded(10, 10), []);
        assert.deepEqual((await s.listSandboxesByState(['stopped', 'error'])).map((x) => x.id).sort(), ['s1', 's2']);
        assert.deepEqual(await s.listSandboxesByState([]), []);
        // What the reaper's purge does: the ended ones before a cutoff, each deleted.
        for (const x of await s.listEnded(15, 10)) await s.deleteSandbox(x.id);
        assert.equal(await s.getSandbox('s2'), null);
        assert.deepEqual(
          (await s.listEnded(21, 10)).map((x) => x.id),
          ['s1'],
        );
        await s.deleteSandbox('s4');
        await s.deleteSandbox('s4');
        assert.equal(await s.getSandbox('s4'), null);
        assert.equal((await s.listLedger('acc_a', { limit: 100 })).items.length, 6, 'ledger rows stay');
        const v = { ...rec('s6', 'acc_a', 7), volumes: [{ mountPath: '/d', name: 'v', sizeGb: 1 }] };
        await s.reserveSandbox(v, { ...r, volumes: [{ name: 'v', sizeGb: null }] });
        assert.equal((await s.getSandbox('s6'))?.volumes[0].sizeGb, 1, 'a missing volume without a size gets 1 GB');
        await assert.rejects(s.deleteVolume('acc_a', 'v'), (e: SandboxdError) => e.kind === 'conflict');
        await s.deleteSandbox('s6');
        assert.equal(await s.deleteVolume('acc_a', 'v'), true);
        assert.equal(await s.deleteVolume('acc_a', 'v'), false);
      }));

    it('volumes: created explicitly once, found, listed by name; an existing size is taken when none is asked', () =>
      withStore(async (s) => {
        await s.createVolume({ accountId: 'acc_a', name: 'b', sizeGb: 3, createdAt: 5 });
        await s.createVolume({ accountId: 'acc_a', name: 'b', sizeGb: 9, createdAt: 6 }); // exists: kept as is
        await s.createVolume({ accountId: 'acc_a', name: 'a', sizeGb: 1, createdAt: 7 });
        assert.deepEqual(await s.getVolume('acc_a', 'b'), { accountId: 'acc_a', name: 'b', sizeGb: 3, createdAt: 5 });
        assert.equal(await s.getVolume('acc_a', 'zz'), null);
        const r = await s.reserveSandbox(
          { ...rec('s1', 'acc_a', 1), volumes: [{ mountPath: '/b', name: 'b', sizeGb: 1 }] },
          { minutes: 1, concurrency: 5, volumes: [{ name: 'b', sizeGb: null }], newName: () => 'x' },
        );
        assert.equal(r.volumes[0].sizeGb, 3);
        assert.deepEqual(
          (await s.listVolumes('acc_a')).map((v) => [v.name, v.sizeGb, v.mountedBy]),
          [
            ['a', 1, []],
            ['b', 3, ['s1']],
          ],
        );
      }));

    it('lists by metadata: only sandboxes whose labels hold every pair', () =>
      withStore(async (s) => {
        const r = { minutes: 1, concurrency: 9, volumes: [], newName: () => 'x' };
        await s.reserveSandbox({ ...rec('s1', 'acc_a', 1), metadata: { team: 'a', env: 'prod' } }, r);
        await s.reserveSandbox({ ...rec('s2', 'acc_a', 2), metadata: { team: 'a', env: 'dev', 'k=&/ü': 'v&=ü' } }, r);
        await s.reserveSandbox({ ...rec('s3', 'acc_a', 3), metadata: { team: 'b' } }, r);
        await s.reserveSandbox(rec('s4', 'acc_a', 4), r);
        const ids = async (metadata?: Record<string, string>) =>
          (await s.listSandboxes('acc_a', { states: ['creating'], limit: 10, metadata })).items.map((x) => x.id);
        assert.deepEqual(await ids(), ['s4', 's3', 's2', 's1']);
        assert.deepEqual(await ids({}), ['s4', 's3', 's2', 's1']);
        assert.deepEqual(await ids({ team: 'a' }), ['s2', 's1']);
        assert.deepEqual(await ids({ team: 'a', env: 'prod' }), ['s1']);
        assert.deepEqual(await ids({ team: 'a', env: 'test' }), []);
        assert.deepEqual(await ids({ 'k=&/ü': 'v&=ü' }), ['s2']);
        assert.deepEqual(await ids({ team: '' }), []);
        const p1 = await s.listSandboxes('acc_a', { states: ['creating'], limit: 1, metadata: { team: 'a' } });
        const p2 = await s.listSandboxes('acc_a', {
          states: ['creating'],
          limit: 1,
          metadata: { team: 'a' },
          cursor: p1.nextCursor,
        });
        assert.deepEqual(
          [...p1.items, ...p2.items].map((x) => x.id),
          ['s2', 's1'],
        );
        assert.equal(p2.nextCursor, undefined);
        assert.deepEqual((await s.listSandboxes('acc_other', { states: ['creating'], limit: 10 })).items, []);
      }));

    it('snapshots: begin once per name, quota on begin and finish, listed newest first, deleted', () =>
      withStore(async (s) => {
        const snap = (name: string, createdAt: number) => ({
          accountId: 'acc_a',
          name,
          state: 'creating' as const,
          sizeBytes: 0,
          baseImage: 'img',
          sandboxId: 's1',
          createdAt,
        });
        await s.beginSnapshot(snap('one', 1), 100);
        await assert.rejects(s.beginSnapshot(snap('one', 2), 100), (e: SandboxdError) => e.kind === 'conflict');
        assert.deepEqual(await s.getSnapshot('acc_a', 'one'), snap('one', 1));
        assert.equal(await s.snapshotBytes('acc_a'), 0, 'creating ones count nothing');
        const ready = await s.finishSnapshot('acc_a', 'one', 60, 100);
        assert.deepEqual(ready, { ...snap('one', 1), state: 'ready', sizeBytes: 60 });
        await s.beginSnapshot(snap('two', 3), 100);
        await assert.rejects(s.finishSnapshot('acc_a', 'two', 41, 100), (e: SandboxdError) => {
          assert.equal(e.kind, 'quota');
          assert.deepEqual(e.details, { quota: 'snapshotBytes', limit: 100, used: 60, sizeBytes: 41 });
          return true;
        });
        assert.equal((await s.getSnapshot('acc_a', 'two'))?.state, 'creating', 'left for the caller to remove');
        await s.finishSnapshot('acc_a', 'two', 40, 100);
        assert.equal(await s.snapshotBytes('acc_a'), 100);
        await assert.rejects(s.beginSnapshot(snap('three', 4), 100), (e: SandboxdError) => e.kind === 'quota');
        await assert.rejects(s.finishSnapshot('acc_a', 'nope', 1, 100), (e: SandboxdError) => e.kind === 'not_found');
        const big = 5 * 2 ** 40; // bytes past 2^32 stay exact
        await s.beginSnapshot(snap('big', 5), 2 * big);
        await s.finishSnapshot('acc_a', 'big', big, 2 * big);
        assert.equal(await s.snapshotBytes('acc_a'), big + 100);
        assert.deepEqual(
          (await s.listSnapshots('acc_a')).map((x) => x.name),
          ['big', 'two', 'one'],
        );
        assert.deepEqual(await s.listSnapshots('acc_other'), []);
        assert.equal((await s.listAllSnapshots()).length, 3);
        assert.equal(await s.deleteSnapshot('acc_a', 'two'), true);
        assert.equal(await s.deleteSnapshot('acc_a', 'two'), false);
        assert.equal(await s.getSnapshot('acc_a', 'two'), null);
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

  /** Two stores on one database ("two replicas"), each given `tokens` in acc_a. */
  async function withPair(tokens: number, fn: (a: Store, b: Store) => Promise<void>) {
    const [a, b] = await target.makePair();
    try {
      await a.createAccount(
        { id: 'acc_a', email: 'a@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
        { tokens, reason: 'signup' },
      );
      await fn(a, b);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  }
  const outcomes = (rs: PromiseSettledResult<unknown>[]) => {
    const out: Record<string, number> = {};
    for (const r of rs) {
      const k = r.status === 'fulfilled' ? 'ok' : ((r.reason as SandboxdError).kind ?? String(r.reason));
      out[k] = (out[k] ?? 0) + 1;
    }
    return out;
  };

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
        const snap = (name: string) => ({
          accountId: 'acc_a',
          name,
          state: 'creating' as const,
          sizeBytes: 0,
          baseImage: 'img',
          sandboxId: 's1',
          createdAt: 1,
        });
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
