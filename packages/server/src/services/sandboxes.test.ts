import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { makeTestApp, type TestApp } from '../../test/app.js';

describe('SandboxService', () => {
  let t: TestApp;
  before(async () => (t = await makeTestApp()));
  after(() => t.close());

  const account = async (tokens = 1000) => {
    const { id } = await t.newAccount({ tokens });
    return (await t.app.store.getAccount(id))!;
  };

  it('creates a started sandbox and debits ceil(timeoutMs/60000) tokens', async () => {
    const a = await account();
    const s = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 120_001 });
    assert.equal(s.state, 'started');
    assert.equal(s.stopAt - s.createdAt, 120_001);
    assert.equal(await t.app.store.balance(a.id), 997);
    assert.match(s.id, /^sbx_[a-z2-7]{20}$/);
    assert.match(s.name, /^[a-z]+-[a-z]+-\d{4}$/);
  });

  it('refunds and leaves no record when the image is unknown', async () => {
    const a = await account();
    await assert.rejects(
      t.app.services.sandboxes.create(a, { image: 'nope:1' }),
      (e: SandboxdError) => e.kind === 'template_not_found',
    );
    assert.equal(await t.app.store.balance(a.id), 1000);
    assert.equal((await t.app.services.sandboxes.list(a.id, {})).items.length, 0);
  });

  it('marks error and refunds when the runtime fails', async () => {
    const a = await account();
    t.driver.failNextCreate = new Error('boom: secret path /x');
    await assert.rejects(
      t.app.services.sandboxes.create(a, { image: 'local/busybox:latest' }),
      (e: SandboxdError) => e.kind === 'internal' && !e.message.includes('secret'),
    );
    assert.equal(await t.app.store.balance(a.id), 1000);
    const list = (await t.app.services.sandboxes.list(a.id, {})).items;
    assert.equal(list.length, 1);
    assert.equal(list[0].state, 'error');
  });

  it("an image whose ready check never passes: the create's 504 with its output, tokens refunded, no record left", async () => {
    const a = await account();
    t.driver.failNextCreate = new SandboxdError('upstream_timeout', 'The ready check did not pass within 2000 ms', {
      exitCode: 7,
      output: 'not-yet-ready\n',
    });
    await assert.rejects(
      t.app.services.sandboxes.create(a, { image: 'local/busybox:latest' }),
      (e: SandboxdError) => e.kind === 'upstream_timeout' && (e.details as { exitCode: number }).exitCode === 7,
    );
    assert.equal(await t.app.store.balance(a.id), 1000);
    assert.deepEqual((await t.app.services.sandboxes.list(a.id, {})).items, []);
  });

  it('a full disk during create: 507 saying so, tokens refunded, no record and no volume it made', async () => {
    const a = await account();
    t.driver.failNextCreate = Object.assign(
      new Error("ENOSPC: no space left on device, open '/data/sandboxes/x/state.json'"),
      { code: 'ENOSPC' },
    );
    await assert.rejects(
      t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', volumes: { '/v': 'fresh' } }),
      (e: SandboxdError) =>
        e.kind === 'insufficient_storage' &&
        e.status === 507 &&
        /out of storage/.test(e.message) &&
        !e.message.includes('/data'),
    );
    assert.equal(await t.app.store.balance(a.id), 1000);
    assert.deepEqual((await t.app.services.sandboxes.list(a.id, {})).items, []);
    assert.deepEqual(await t.app.services.volumes.list(a.id), [], 'the volume the create made is gone');
    assert.equal(
      (await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', volumes: { '/v': 'fresh' } })).state,
      'started',
      'works again',
    );
  });

  it('a failed create the store cannot record stays creating until the reconciler finishes it', async () => {
    const a = await account();
    const update = t.app.store.updateSandbox.bind(t.app.store);
    t.app.store.updateSandbox = async () => {
      throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    };
    try {
      await assert.rejects(
        t.app.services.sandboxes.create(a, { image: 'local/busybox:latest' }),
        (e: SandboxdError) => e.kind === 'insufficient_storage',
      );
    } finally {
      t.app.store.updateSandbox = update;
    }
    const left = (await t.app.store.listSandboxesByState(['creating'])).filter((r) => r.accountId === a.id);
    assert.equal(left.length, 1);
    assert.equal(
      t.driver.calls.filter((c) => c === `delete ${left[0].id}`).length,
      1,
      'the runtime side was undone at once',
    );
    assert.equal(await t.app.store.countLive(a.id), 1, 'it still counts until reconciled');
    assert.deepEqual((await t.app.reaper.reconcile()).abandoned, [left[0].id]);
    assert.equal(await t.app.store.balance(a.id), 1000, 'refunded');
    assert.equal(await t.app.store.countLive(a.id), 0);
    assert.equal(await t.app.store.getSandbox(left[0].id), null, 'refused for want of space: no record stays');
  });

  it('402 before 403, and 403 at the concurrency limit', async () => {
    const poor = await account(0);
    await assert.rejects(
      t.app.services.sandboxes.create(poor, { image: 'local/busybox:latest' }),
      (e: SandboxdError) => e.kind === 'tokens',
    );
    const a = await account();
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, () =>
        t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 60_000 }),
      ),
    );
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 5);
    assert.ok(results.every((r) => r.status === 'fulfilled' || (r.reason as SandboxdError).kind === 'concurrency'));
    assert.equal(await t.app.store.balance(a.id), 995);
  });

  it('rejects timeoutMs over the plan lifetime naming the maximum', async () => {
    const a = await account();
    await assert.rejects(
      t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 3_600_001 }),
      (e: SandboxdError) => e.kind === 'validation' && e.message.includes('3600000'),
    );
  });

  it('rejects bad mount paths and conflicting volume sizes', async () => {
    const a = await account();
    await assert.rejects(
      t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', volumes: { 'rel/x': 'v' } }),
      (e: SandboxdError) => e.kind === 'validation',
    );
    await assert.rejects(
      t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', volumes: { '/proc/x': 'v' } }),
      (e: SandboxdError) => e.kind === 'validation',
    );
    const s = await t.app.services.sandboxes.create(a, {
      image: 'local/busybox:latest',
      volumes: { '/data': { name: 'v', sizeGb: 3 } },
    });
    assert.equal(s.volumes[0].sizeGb, 3);
    const s2 = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', volumes: { '/data': 'v' } });
    assert.equal(s2.volumes[0].sizeGb, 3, 'the string form reuses the existing size');
    await assert.rejects(
      t.app.services.sandboxes.create(a, {
        image: 'local/busybox:latest',
        volumes: { '/data': { name: 'v', sizeGb: 4 } },
      }),
      (e: SandboxdError) => e.kind === 'conflict' && e.message.includes('3'),
    );
  });

  it('timeout: extends with a debit, reduces with a refund, 400 names the max, 409 when stopped', async () => {
    const a = await account();
    const s = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 600_000 });
    assert.equal(await t.app.store.balance(a.id), 990);
    t.clock.advance(120_000);
    const r = await t.app.services.timeout.set(a, { id: s.id, timeoutMs: 1_200_000 }); // lifetime 22 min
    assert.equal(r.stopAt, t.clock.now() + 1_200_000);
    assert.equal(await t.app.store.balance(a.id), 978);
    await t.app.services.timeout.set(a, { id: s.id, timeoutMs: 60_000 }); // lifetime 3 min
    assert.equal(await t.app.store.balance(a.id), 997);
    await assert.rejects(
      t.app.services.timeout.set(a, { id: s.id, timeoutMs: 3_600_000 }),
      (e: SandboxdError) => e.kind === 'validation' && e.message.includes(String(3_600_000 - 120_000)),
    );
    await t.app.services.timeout.set(a, { id: s.id, timeoutMs: 0 });
    assert.equal((await t.app.services.sandboxes.get(a.id, s.id)).state, 'stopped');
    assert.equal(await t.app.store.balance(a.id), 998, 'used 2 whole minutes');
    await assert.rejects(
      t.app.services.timeout.set(a, { id: s.id, timeoutMs: 1000 }),
      (e: SandboxdError) => e.kind === 'conflict',
    );
  });

  it('exec: foreground, background, env merge, 409 when stopped', async () => {
    const a = await account();
    const s = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', env: { A: 'one' } });
    assert.deepEqual(await t.app.services.exec.run(a.id, { sandboxId: s.id, command: 'echo hi $A' }), {
      stdout: 'hi one\n',
      stderr: '',
      exitCode: 0,
      success: true,
    });
    assert.equal(
      (await t.app.services.exec.run(a.id, { sandboxId: s.id, command: 'printenv A', options: { env: { A: 'two' } } }))
        .stdout,
      'two\n',
    );
    assert.equal((await t.app.services.exec.run(a.id, { sandboxId: s.id, command: 'exit 3' })).success, false);
    const bg = await t.app.services.exec.run(a.id, {
      sandboxId: s.id,
      command: 'sleep 100',
      options: { background: true },
    });
    assert.equal(typeof bg.pid, 'number');
    await t.app.services.sandboxes.delete(a.id, s.id);
    await assert.rejects(
      t.app.services.exec.run(a.id, { sandboxId: s.id, command: 'true' }),
      (e: SandboxdError) => e.kind === 'not_found',
    );
  });

  it("another account's sandbox is not found", async () => {
    const a = await account();
    const b = await account();
    const s = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest' });
    await assert.rejects(t.app.services.sandboxes.get(b.id, s.id), (e: SandboxdError) => e.kind === 'not_found');
    await assert.rejects(t.app.services.sandboxes.delete(b.id, s.id), (e: SandboxdError) => e.kind === 'not_found');
  });

  it('delete before stopAt refunds the unused whole minutes', async () => {
    const a = await account();
    const s = await t.app.services.sandboxes.create(a, { image: 'local/busybox:latest', timeoutMs: 600_000 });
    t.clock.advance(90_000);
    await t.app.services.sandboxes.delete(a.id, s.id);
    assert.equal(await t.app.store.balance(a.id), 998);
    assert.ok(t.driver.calls.includes(`delete ${s.id}`));
  });
});
