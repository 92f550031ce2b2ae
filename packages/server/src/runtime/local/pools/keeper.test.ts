/**
 * The pool keeper against fake networks and roots (no host changes): what a take hands out,
 * when and in which order the refill runs, and what close and drain leave.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { SandboxNet } from '../network/manager.js';
import type { PrepareOptions } from '../rootfs/roots.js';
import { POOL_REFILL_DELAY_MS, POOL_YIELD_MS, PoolKeeper, type PoolKeeperOptions } from './keeper.js';

/** A keeper on fakes that log every host change; `failRoots` makes root preparation fail. */
function fakeKeeper(over: Partial<PoolKeeperOptions> = {}, failRoots = false, addresses = Number.POSITIVE_INFINITY) {
  const log: string[] = [];
  let free = addresses;
  let running = 0;
  let overlap = false;
  const step = async <T>(entry: string, value: T): Promise<T> => {
    if (running++ > 0) overlap = true;
    await new Promise((r) => setTimeout(r, 2));
    running--;
    log.push(entry);
    return value;
  };
  const keeper: PoolKeeper = new PoolKeeper({
    nets: 2,
    roots: 1,
    network: {
      attach: (id: string) => {
        if (free <= 0) return Promise.reject(new Error('no free address'));
        free--; // taken at once, as the network manager does
        return step(`attach ${id}`, { id, address: '10.0.0.2', netnsPath: `/run/netns/${id}` } as SandboxNet);
      },
      detach: (id: string) => step(`detach ${id}`, undefined),
      hasFreeAddress: () => free > 0,
    },
    rootfs: {
      prepare: async (o: PrepareOptions) => {
        if (failRoots) throw new Error('no room');
        return step(`prepare ${o.id} ${o.lowerDir} ${o.rootDiskBytes} ${o.uidBase}`, {
          rootfs: `/roots/${o.id}/rootfs`,
          volumes: [],
        });
      },
      release: (id: string) => step(`release ${id}`, undefined),
    },
    allocSlot: () => {
      let s = 0;
      while (keeper.slots().includes(s)) s++;
      return s;
    },
    uidBase: (slot) => 1000 + slot * 10,
    ...over,
  });
  return { keeper, log, overlapped: () => overlap };
}

const kinds = (log: string[]) => log.map((l) => l.replace(/(netpool|rootpool)_[0-9a-f]{12}/g, '$1_*'));

test('a refill makes the networks first, then one root for the image and size last taken for', async () => {
  const { keeper, log, overlapped } = fakeKeeper();
  assert.equal(keeper.takeRoot('/img/a', 64), undefined);
  await keeper.refill();
  assert.deepEqual(kinds(log), ['attach netpool_*', 'attach netpool_*', 'prepare rootpool_* /img/a 64 1000']);
  assert.equal(overlapped(), false, 'one step at a time');
  const root = keeper.takeRoot('/img/a', 64);
  assert.match(root?.id ?? '', /^rootpool_[0-9a-f]{12}$/);
  assert.deepEqual({ slot: root?.slot, rootfs: root?.rootfs }, { slot: 0, rootfs: `/roots/${root?.id}/rootfs` });
  assert.match(keeper.takeNet()?.id ?? '', /^netpool_[0-9a-f]{12}$/);
  await keeper.close();
});

test('a take schedules one refill, POOL_REFILL_DELAY_MS later', async () => {
  const { keeper, log } = fakeKeeper({ roots: 0 });
  assert.equal(keeper.takeNet(), undefined);
  assert.equal(keeper.takeNet(), undefined);
  await new Promise((r) => setTimeout(r, POOL_REFILL_DELAY_MS / 2));
  assert.deepEqual(log, [], 'nothing before the delay');
  await new Promise((r) => setTimeout(r, POOL_REFILL_DELAY_MS * 2));
  await keeper.refill();
  assert.deepEqual(kinds(log), ['attach netpool_*', 'attach netpool_*']);
  await keeper.close();
});

test('roots prepared for another image or size are released; a preparing root holds its slot', async () => {
  const { keeper, log } = fakeKeeper({ nets: 0 });
  keeper.takeRoot('/img/a', 64);
  const filling = keeper.refill();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(keeper.slots(), [0], 'slot held while preparing');
  await filling;
  assert.deepEqual(keeper.slots(), [0]);
  assert.equal(keeper.takeRoot('/img/b', 64), undefined);
  await keeper.refill();
  assert.deepEqual(kinds(log), [
    'prepare rootpool_* /img/a 64 1000',
    'release rootpool_*',
    'prepare rootpool_* /img/b 64 1000',
  ]);
  assert.equal(keeper.takeRoot('/img/b', 128), undefined, 'same image, other size');
  await keeper.close();
});

test('a failed step ends the refill and leaves the pool short', async () => {
  const { keeper, log } = fakeKeeper({ nets: 1 }, true);
  keeper.takeRoot('/img/a', 64);
  await keeper.refill();
  assert.deepEqual(kinds(log), ['attach netpool_*']);
  assert.equal(keeper.takeRoot('/img/a', 64), undefined);
  assert.deepEqual(keeper.slots(), [], 'the failed root gave its slot back');
  await keeper.close();
});

test('a refill makes no network while no address is free, and counts the one being made as ready', async () => {
  const { keeper, log } = fakeKeeper({ nets: 2 }, false, 1);
  keeper.takeRoot('/img/a', 64);
  const filling = keeper.refill();
  await new Promise((r) => setImmediate(r));
  assert.equal(keeper.readyNets(), 1, 'the network being made holds the last address: a create can take it');
  await filling;
  // The second network found no address: no step was started, and the root was still made.
  assert.deepEqual(kinds(log), ['attach netpool_*', 'prepare rootpool_* /img/a 64 1000']);
  assert.equal(keeper.readyNets(), 1);
  assert.match(keeper.takeNet()?.id ?? '', /^netpool_/);
  assert.equal(keeper.readyNets(), 0);
  await keeper.close();
});

test('pooled ids are recognised by prefix, in pool order', () => {
  const { keeper } = fakeKeeper();
  assert.deepEqual(keeper.prefixes, ['netpool_', 'rootpool_', 'warm_']);
  assert.equal(keeper.owns('netpool_0123456789ab'), true);
  assert.equal(keeper.owns('rootpool_x'), true);
  assert.equal(keeper.owns('warm_0123456789ab'), true);
  assert.equal(keeper.owns('sbx_netpool_'), false);
});

test('close stops refilling and keeps what the pools hold; drain releases it', async () => {
  const { keeper, log } = fakeKeeper();
  keeper.takeRoot('/img/a', 64);
  await keeper.refill();
  const made = log.length;
  await keeper.close();
  keeper.takeNet();
  await keeper.refill();
  await new Promise((r) => setTimeout(r, POOL_REFILL_DELAY_MS * 2));
  assert.equal(log.length, made, 'nothing made after close');
  await keeper.drain();
  assert.deepEqual(kinds(log.slice(made)), ['detach netpool_*', 'release rootpool_*']);
});

test('sizes of 0 keep nothing', async () => {
  const { keeper, log } = fakeKeeper({ nets: 0, roots: 0 });
  keeper.takeRoot('/img/a', 64);
  await keeper.refill();
  assert.deepEqual(log, []);
  await keeper.close();
});

test('a refill with nothing to do leaves the keeper able to refill again (regression: it never did)', async () => {
  const { keeper, log } = fakeKeeper({ roots: 0 });
  await keeper.refill();
  assert.equal(log.length, 2, 'both networks made');
  await keeper.refill(); // nothing to do: ends at once
  keeper.takeNet();
  await new Promise((r) => setTimeout(r, POOL_REFILL_DELAY_MS * 3));
  await keeper.refill();
  assert.deepEqual(kinds(log), ['attach netpool_*', 'attach netpool_*', 'attach netpool_*'], 'the take was refilled');
  await keeper.close();
});

test('a refill waits while requests are in progress, but not for ever', async () => {
  let busy = true;
  const { keeper, log } = fakeKeeper({ roots: 0, busy: () => busy });
  const filling = keeper.refill();
  await new Promise((r) => setTimeout(r, POOL_YIELD_MS * 3));
  assert.deepEqual(log, [], 'nothing made while busy');
  await filling; // still busy: each step ran once POOL_MAX_YIELD_MS had passed
  assert.deepEqual(kinds(log), ['attach netpool_*', 'attach netpool_*']);
  busy = false;
  await keeper.close();
});
