import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import { FakeDriver } from '../runtime/fake/driver.js';
import type { RuntimeCapacity } from '../runtime/driver.js';
import { CapacityService } from './capacity.js';

const MiB = 2 ** 20;

/** A CapacityService over a fake driver whose `capacity()` calls are counted, a movable time and fixed counts. */
function setup(config: { maxSandboxes?: number; createMinFreeMb?: number; createMinMemoryMb?: number } = {}) {
  const driver = new FakeDriver();
  let calls = 0;
  let fail: Error | null = null;
  const measured = {
    capacity: async (): Promise<RuntimeCapacity> => {
      calls++;
      if (fail) throw fail;
      return driver.capacity();
    },
  };
  let now = 0;
  const counts = { live: 3 };
  const svc = new CapacityService(
    {
      driver: measured,
      store: { countAllLive: async () => counts.live },
      config: { maxSandboxes: 0, createMinFreeMb: 512, createMinMemoryMb: 256, ...config },
    },
    { now: () => now, cacheMs: 1000 },
  );
  return {
    svc,
    driver,
    counts,
    calls: () => calls,
    advance: (ms: number) => (now += ms),
    failWith: (e: Error | null) => (fail = e),
  };
}

const refusal = async (p: Promise<unknown>) => {
  let err: SandboxdError | undefined;
  await assert.rejects(p, (e: SandboxdError) => {
    err = e;
    return e.kind === 'capacity' && e.status === 503;
  });
  return err!;
};

describe('CapacityService', () => {
  it('lets a create through on a roomy host', async () => {
    const { svc } = setup();
    await svc.check();
  });

  it('refuses below the memory floor, then the disk floor, then with no address, naming each with its figures', async () => {
    const s = setup();
    s.driver.hostCapacity = { memoryAvailableBytes: 100 * MiB, diskFreeBytes: 300 * MiB, addressTotal: 0 };
    const mem = await refusal(s.svc.check());
    assert.deepEqual(mem.details, {
      resource: 'memory',
      retryAfterMs: 5000,
      availableBytes: 100 * MiB,
      floorBytes: 256 * MiB,
    });
    assert.equal(
      mem.message,
      'The host has no room for more sandboxes: memory is low (100 MiB available, the floor is 256 MiB: createMinMemoryMb); retry in 5 s',
    );
    assert.deepEqual((await s.svc.report()).full, ['memory', 'disk', 'addresses']);

    s.driver.hostCapacity.memoryAvailableBytes = 256 * MiB; // at the floor: enough
    s.svc.forget();
    const disk = await refusal(s.svc.check());
    assert.deepEqual(disk.details, {
      resource: 'disk',
      retryAfterMs: 5000,
      freeBytes: 300 * MiB,
      floorBytes: 512 * MiB,
    });
    assert.match(disk.message, /disk space is low \(300 MiB free on the data dir's file system, the floor is 512 MiB/);

    s.driver.hostCapacity.diskFreeBytes = 10 * 2 ** 30;
    s.svc.forget();
    const addr = await refusal(s.svc.check());
    assert.deepEqual(addr.details, { resource: 'addresses', retryAfterMs: 5000, free: 0, total: 0 });
    assert.match(addr.message, /no free sandbox network address/);

    s.driver.hostCapacity.addressTotal = 1;
    s.svc.forget();
    await s.svc.check();
  });

  it('floors of 0 are off; a figure the runtime cannot tell never refuses', async () => {
    const off = setup({ createMinFreeMb: 0, createMinMemoryMb: 0 });
    off.driver.hostCapacity = { memoryAvailableBytes: 0, diskFreeBytes: 0, addressTotal: 5 };
    await off.svc.check();
    const unknown = setup();
    unknown.driver.hostCapacity = { memoryAvailableBytes: null, diskFreeBytes: null, addressTotal: null };
    await unknown.svc.check();
    assert.deepEqual(await unknown.svc.report(), {
      sandboxes: { used: 3, max: null, free: null },
      memory: { availableBytes: null, floorBytes: 256 * MiB },
      disk: { freeBytes: null, floorBytes: 512 * MiB },
      addresses: null,
      full: [],
    });
  });

  it('measures the runtime at most once per cache period, however many ask at once', async () => {
    const s = setup();
    await Promise.all(Array.from({ length: 50 }, () => s.svc.check()));
    await s.svc.report();
    assert.equal(s.calls(), 1);
    s.advance(999);
    await s.svc.check();
    assert.equal(s.calls(), 1, 'still fresh');
    s.advance(1);
    await s.svc.check();
    assert.equal(s.calls(), 2, 'stale: measured again');
    s.svc.forget();
    await s.svc.check();
    assert.equal(s.calls(), 3, 'forgotten: measured again');
  });

  it('never refuses on a cached figure: room freed since the last measurement lets the create through', async () => {
    const s = setup();
    s.driver.hostCapacity.diskFreeBytes = 0;
    await refusal(s.svc.check());
    const calls = s.calls();
    s.driver.hostCapacity.diskFreeBytes = 600 * MiB; // freed within the cache period
    await s.svc.check();
    assert.equal(s.calls(), calls + 1, 'the refusal measured again');
    await s.svc.check();
    assert.equal(s.calls(), calls + 1, 'a fresh figure with room is kept');
  });

  it('a failed measurement is not kept: the next ask measures again', async () => {
    const s = setup();
    s.failWith(new Error('meminfo unreadable'));
    await assert.rejects(s.svc.check(), /meminfo unreadable/);
    s.failWith(null);
    await s.svc.check();
    assert.equal(s.calls(), 2);
  });

  it('reports live sandboxes (started and being created) against maxSandboxes', async () => {
    const s = setup({ maxSandboxes: 3 });
    const r = await s.svc.report();
    assert.deepEqual(r.sandboxes, { used: 3, max: 3, free: 0 });
    assert.deepEqual(r.full, ['sandboxes']);
    assert.deepEqual(r.addresses, { free: 65_533, total: 65_533 });
    assert.equal(r.memory.availableBytes, 16 * 2 ** 30);
    s.counts.live = 2;
    assert.deepEqual((await s.svc.report()).sandboxes, { used: 2, max: 3, free: 1 });
  });
});
