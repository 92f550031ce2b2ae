/** The warm pool against a fake start and release (no host changes): what a take hands out and what a refill does. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ResourceLimits } from '../../driver.js';
import { WarmPool } from './warm.js';

const L: ResourceLimits = { memoryBytes: 256 << 20, cpus: 1, pids: 128, rootDiskBytes: 1 << 30 };

function fakePool(size = 2, digest = () => 'sha256:a') {
  const log: string[] = [];
  const pool = new WarmPool({
    entries: [{ image: 'img:1', size }],
    limits: L,
    start: async (_cid, image, limits) => {
      log.push(`start ${image} ${limits.rootDiskBytes} ${limits.memoryBytes}`);
      return digest();
    },
    release: async (cid) => {
      log.push(`release ${cid.slice(0, 5)}`);
    },
  });
  const refill = async () => {
    for (let step = pool.refillStep(); step; step = pool.refillStep()) await step;
  };
  return { pool, log, refill };
}

test('a refill starts sandboxes up to the size; a take hands each out once, for its image and root disk cap only', async () => {
  const { pool, log, refill } = fakePool();
  await refill();
  assert.deepEqual(log, [
    `start img:1 ${L.rootDiskBytes} ${L.memoryBytes}`,
    `start img:1 ${L.rootDiskBytes} ${L.memoryBytes}`,
  ]);
  assert.deepEqual(pool.counts(), { 'img:1': 2 });
  const a = pool.take('img:1', 'sha256:a', L);
  const b = pool.take('img:1', 'sha256:a', L);
  assert.match(a ?? '', /^warm_[0-9a-f]{12}$/);
  assert.ok(b && b !== a, 'two takes, two sandboxes');
  assert.equal(pool.take('img:1', 'sha256:a', L), undefined, 'empty');
  assert.equal(pool.take('other:1', 'sha256:b', L), undefined, 'an image not pooled');
});

test('another root disk cap is not handed out; the pool then keeps that cap and releases the others', async () => {
  const { pool, log, refill } = fakePool();
  await refill();
  const big = { ...L, rootDiskBytes: 2 << 30, memoryBytes: 1 << 30 };
  assert.equal(pool.take('img:1', 'sha256:a', big), undefined);
  log.length = 0;
  await refill();
  assert.deepEqual(log, [
    'release warm_',
    'release warm_',
    `start img:1 ${big.rootDiskBytes} ${big.memoryBytes}`,
    `start img:1 ${big.rootDiskBytes} ${big.memoryBytes}`,
  ]);
  assert.ok(pool.take('img:1', 'sha256:a', big));
});

test('sandboxes of an older build of the image are released once a create resolves the new one', async () => {
  let d = 'sha256:a';
  const { pool, log, refill } = fakePool(1, () => d);
  await refill();
  d = 'sha256:b';
  assert.equal(pool.take('img:1', 'sha256:b', L), undefined, 'the pooled one runs the old build');
  log.length = 0;
  await refill();
  assert.deepEqual(log, ['release warm_', `start img:1 ${L.rootDiskBytes} ${L.memoryBytes}`]);
  assert.ok(pool.take('img:1', 'sha256:b', L));
});

test('a start that fails leaves the pool short, not counting it; drain releases what it holds', async () => {
  let fail = true;
  const released: string[] = [];
  const pool = new WarmPool({
    entries: [{ image: 'img:1', size: 1 }],
    limits: L,
    start: async () => {
      if (fail) throw new Error('no room');
      return 'sha256:a';
    },
    release: async (cid) => {
      released.push(cid);
    },
  });
  await assert.rejects(pool.refillStep()!, /no room/);
  assert.deepEqual(pool.counts(), { 'img:1': 0 });
  fail = false;
  await pool.refillStep();
  assert.equal(pool.refillStep(), null, 'full');
  await pool.drain();
  assert.equal(released.length, 1);
  assert.deepEqual(pool.counts(), { 'img:1': 0 });
});

test('sizes of 0 pool nothing', () => {
  const pool = new WarmPool({
    entries: [{ image: 'img:1', size: 0 }],
    limits: L,
    start: async () => 'x',
    release: async () => {},
  });
  assert.equal(pool.enabled, false);
  assert.equal(pool.refillStep(), null);
});
