import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { makeTestApp, type TestApp } from '../../test/app.js';

describe('Reaper', () => {
  let t: TestApp;
  before(async () => (t = await makeTestApp()));
  after(() => t.close());

  const setup = async () => {
    const { id } = await t.newAccount({ tokens: 1000 });
    return (await t.app.store.getAccount(id))!;
  };

  it('stops a sandbox once stopAt has passed, not before, and keeps volumes', async () => {
    const a = await setup();
    const s = await t.app.services.sandboxes.create(a, {
      image: 'local/busybox:latest',
      timeoutMs: 60_000,
      volumes: { '/v': 'keep' },
    });
    t.clock.advance(59_999);
    assert.deepEqual(await t.app.reaper.tick(), []);
    t.clock.advance(1);
    assert.deepEqual(await t.app.reaper.tick(), [s.id]);
    const r = await t.app.services.sandboxes.get(a.id, s.id);
    assert.equal(r.state, 'stopped');
    assert.equal(
      (await t.driver.inspect(s.id))?.state,
      'stopped',
      'runtime stopped it, keeping its root layer for a start',
    );
    assert.equal((await t.app.services.volumes.list(a.id)).length, 1);
    assert.equal(await t.app.store.balance(a.id), 999, 'a full-lifetime sandbox gets no refund');
  });

  it('purges stopped records after the retention period', async () => {
    const a = await setup();
    const s = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 0 });
    await t.app.reaper.tick();
    assert.equal((await t.app.services.sandboxes.get(a.id, s.id)).state, 'stopped');
    t.clock.advance(86_400_000 - 1);
    await t.app.reaper.tick();
    assert.ok(await t.app.store.getSandbox(s.id));
    t.clock.advance(20_000);
    await t.app.reaper.tick();
    assert.equal(await t.app.store.getSandbox(s.id), null);
  });

  it('reconcile: lost sandboxes become error with a refund; orphans are deleted; expired are stopped', async () => {
    const a = await setup();
    const lost = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 600_000 });
    const expired = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 60_000 });
    await t.driver.create({
      id: 'orphan_1',
      image: 'local/busybox:latest',
      env: {},
      volumes: [],
      limits: { memoryBytes: 1, cpus: 1, pids: 1, rootDiskBytes: 1 },
    });
    t.driver.lose(lost.id);
    t.clock.advance(60_000);
    const before = await t.app.store.balance(a.id);
    const rep = await t.app.reaper.reconcile();
    assert.deepEqual(rep.lost, [lost.id]);
    assert.deepEqual(rep.expired, [expired.id]);
    assert.deepEqual(rep.orphans, ['orphan_1']);
    assert.equal((await t.app.services.sandboxes.get(a.id, lost.id)).state, 'error');
    assert.equal(await t.app.store.balance(a.id), before + 9, 'lost after 1 minute of 10: 9 refunded');
    assert.equal(await t.driver.inspect('orphan_1'), null);
  });

  it('reconcile: a sandbox the runtime shows stopped while a lifecycle call is in flight (a pause to disk) is checked again once it is done, not taken for lost', async () => {
    const a = await setup();
    const sb = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 600_000 });
    const info = (t.driver as unknown as { sandboxes: Map<string, { info: { state: string } }> }).sandboxes.get(
      sb.id,
    )!.info;
    let release!: () => void;
    let midway!: () => void;
    const reached = new Promise<void>((r) => (midway = r));
    const call = t.app.services.sandboxes.exclusive(sb.id, async () => {
      info.state = 'stopped'; // mid-save: the runtime shows it stopped, the record says started
      midway();
      await new Promise<void>((r) => (release = r));
      info.state = 'running';
    });
    await reached;
    const pass = t.app.reaper.reconcile();
    setTimeout(() => release(), 50);
    await call;
    const rep = await pass;
    assert.deepEqual(rep.lost, []);
    assert.equal((await t.app.services.sandboxes.get(a.id, sb.id)).state, 'started');
    assert.equal((await t.driver.inspect(sb.id))?.state, 'running');
  });

  it('a delete while the database cannot be reached answers 503 before the runtime is touched; one the database cut short after the runtime is finished by reconcile', async () => {
    const a = await setup();
    const sb = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 600_000 });
    const store = t.app.store;
    const update = store.updateSandbox.bind(store);
    const down = () =>
      Promise.reject(new SandboxdError('unavailable', 'The database is unavailable; try again shortly'));
    /** The delete, with the store's updates as `updates` makes them: refused as unavailable. */
    const deleteWith = async (updates: typeof update) => {
      store.updateSandbox = updates;
      try {
        await assert.rejects(
          t.app.services.sandboxes.delete(a.id, sb.id),
          (e: SandboxdError) => e.kind === 'unavailable',
        );
      } finally {
        store.updateSandbox = update;
      }
    };
    // Down from the start: refused, nothing changed.
    await deleteWith(down);
    assert.equal((await t.driver.inspect(sb.id))?.state, 'running', 'the runtime was not touched');
    assert.equal((await store.getSandbox(sb.id))?.state, 'started');
    // Down after the intent was written: the runtime's part is done, the record's is not.
    let n = 0;
    await deleteWith((id, patch) => (n++ === 0 ? update(id, patch) : down()));
    assert.equal(await t.driver.inspect(sb.id), null, 'the runtime removed it');
    assert.equal((await store.getSandbox(sb.id))?.state, 'started', 'the record not yet');
    t.clock.advance(60_000);
    const before = await store.balance(a.id);
    const rep = await t.app.reaper.reconcile();
    assert.deepEqual(rep.lost, [], 'not taken for lost');
    assert.ok(rep.aligned.includes(sb.id));
    assert.equal(await store.getSandbox(sb.id), null, 'the delete finished: no record');
    assert.equal(await store.balance(a.id), before + 9, 'deleted after 1 minute of 10: 9 refunded');
  });

  it('reconcile: a record left creating by a create that is over becomes error with a full refund; one being created is left alone', async () => {
    const a = await setup();
    // A create in progress: the runtime holds it until released.
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const create = t.driver.create.bind(t.driver);
    t.driver.create = async (spec) => {
      await gate;
      return create(spec);
    };
    const inProgress = t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 60_000 });
    // A record no create stands behind (a crash, or a failed create the store could not record).
    const rec = await t.app.store.reserveSandbox(
      {
        id: 'sbx_aaaaaaaaaaaaaaaaaaaa',
        accountId: a.id,
        name: 'x-y-0001',
        image: 'i',
        region: 'local',
        env: {},
        volumes: [{ mountPath: '/v', name: 'made_by_it', sizeGb: 1 }],
        createdAt: t.clock.now(),
        state: 'creating',
        stopAt: t.clock.now() + 60_000,
        reservedMinutes: 0,
        endedAt: null,
        details: null,
      },
      { minutes: 1, concurrency: 5, volumes: [{ name: 'made_by_it', sizeGb: null }], newName: () => 'x-y-0002' },
    );
    try {
      for (let i = 0; i < 100 && (await t.app.store.listSandboxesByState(['creating'])).length < 2; i++)
        await new Promise((r) => setTimeout(r, 5));
      assert.equal((await t.app.store.listSandboxesByState(['creating'])).length, 2, 'both records exist');
      const before = await t.app.store.balance(a.id);
      const rep = await t.app.reaper.reconcile();
      assert.deepEqual(rep.abandoned, [rec.id]);
      assert.equal((await t.app.store.getSandbox(rec.id))!.state, 'error');
      assert.equal(await t.app.store.balance(a.id), before + 1);
      assert.equal(
        await t.app.store.getVolume(a.id, 'made_by_it'),
        null,
        'the volume it reserved but never made is forgotten',
      );
      assert.deepEqual((await t.app.reaper.reconcile({ startup: true })).abandoned, [], 'nothing left to abandon');
    } finally {
      release();
      t.driver.create = create;
    }
    assert.equal((await inProgress).state, 'started', 'the create in progress was left alone');
  });
});
