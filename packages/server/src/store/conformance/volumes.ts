/** The store conformance suite's part on volumes, their placement on runners, and snapshots. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import { rec, snapshotRecord as snap, type StoreTarget, storeRunner } from './support.js';

/** Registers what every Store must do with volumes (sizes, mounts, placement) and snapshots. */
export function runVolumeConformance(target: StoreTarget): void {
  const withStore = storeRunner(target);

  describe(`Store conformance, volumes and snapshots: ${target.name}`, () => {
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

    it('snapshots: begin once per name, quota on begin and finish, listed newest first, deleted', () =>
      withStore(async (s) => {
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
  });
}
