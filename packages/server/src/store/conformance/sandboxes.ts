/** The store conformance suite's part on sandbox records: reservations, updates, listings, the reaper's queries. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import { rec, type StoreTarget, storeRunner } from './support.js';

/** Registers what every Store must do with sandbox records. */
export function runSandboxConformance(target: StoreTarget): void {
  const withStore = storeRunner(target);

  describe(`Store conformance, sandboxes: ${target.name}`, () => {
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

    it('keeps the isolation tier, and where a paused sandbox keeps its memory while it stays paused', () =>
      withStore(async (s) => {
        const r = await s.reserveSandbox(
          { ...rec('s1', 'acc_a', 1), isolation: 'gvisor' },
          { minutes: 1, concurrency: 5, volumes: [], newName: () => 'x' },
        );
        assert.equal(r.isolation, 'gvisor');
        await s.reserveSandbox(rec('s2', 'acc_a', 2), {
          minutes: 1,
          concurrency: 5,
          volumes: [],
          newName: () => 'y',
        });
        assert.equal((await s.getSandbox('s2'))?.isolation, undefined, 'a container: absent');
        await s.updateSandbox('s1', { state: 'started', at: 2 });
        const paused = await s.updateSandbox('s1', { state: 'paused', pausedMemory: 'disk', at: 3 });
        assert.equal(paused.pausedMemory, 'disk');
        assert.deepEqual(await s.getSandbox('s1'), paused);
        const kept = await s.updateSandbox('s1', { expiresAt: 99, at: 4 });
        assert.equal(kept.pausedMemory, 'disk', 'an update that leaves it paused keeps it');
        assert.equal((await s.getSandbox('s1'))?.pausedMemory, 'disk');
        const resumed = await s.updateSandbox('s1', { state: 'started', expiresAt: null, at: 5 });
        assert.equal(resumed.pausedMemory, undefined, 'leaving paused clears it');
        assert.deepEqual(await s.getSandbox('s1'), resumed);
        assert.equal(resumed.isolation, 'gvisor');
        await s.updateSandbox('s1', { state: 'paused', pausedMemory: 'ram', at: 6 });
        assert.equal((await s.getSandbox('s1'))?.pausedMemory, 'ram');
        const stopped = await s.updateSandbox('s1', { state: 'stopped', endedAt: 7, at: 7 });
        assert.equal(stopped.pausedMemory, undefined);
        assert.equal((await s.getSandbox('s1'))?.pausedMemory, undefined);
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
  });
}
