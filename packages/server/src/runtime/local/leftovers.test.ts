/** The background removal of leftovers, on a fake remover (no host changes). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Leftover, Leftovers } from './leftovers.js';

/** A remover whose removals finish only when the test says so. */
function gatedRemover() {
  const started: string[] = [];
  const gates = new Map<string, { resolve: () => void; reject: (e: Error) => void }>();
  let inFlight = 0;
  let maxInFlight = 0;
  const remove = (it: Leftover) => {
    started.push(it.id);
    maxInFlight = Math.max(maxInFlight, ++inFlight);
    return new Promise<void>((resolve, reject) => gates.set(it.id, { resolve, reject })).finally(() => inFlight--);
  };
  const finish = async (id: string, error?: string) => {
    const g = gates.get(id);
    assert.ok(g, `${id} was not started`);
    if (error) g.reject(new Error(error));
    else g.resolve();
    await new Promise((r) => setImmediate(r));
  };
  return { remove, started, finish, maxInFlight: () => maxInFlight };
}

const tick = () => new Promise((r) => setImmediate(r));
const items = (n: number): Leftover[] => Array.from({ length: n }, (_, i) => ({ id: `l${i}`, slot: i + 10 }));

test('removes at most `concurrency` at once, keeps each slot and id until its removal ends, reports counts', async () => {
  const r = gatedRemover();
  const l = new Leftovers(items(5), { concurrency: 2, remove: r.remove });
  await tick();
  assert.deepEqual(r.started, ['l0', 'l1']);
  assert.equal(l.pending(), 5);
  assert.deepEqual(l.slots(), [10, 11, 12, 13, 14]);
  await r.finish('l0');
  assert.deepEqual(r.started, ['l0', 'l1', 'l2']);
  assert.equal(l.has('l0'), false);
  assert.deepEqual(l.slots(), [11, 12, 13, 14]);
  await r.finish('l1', 'busy');
  await r.finish('l2');
  await r.finish('l3');
  await r.finish('l4');
  assert.equal(r.maxInFlight(), 2);
  assert.equal(l.pending(), 0);
  assert.deepEqual(await l.done, { cleaned: ['l0', 'l2', 'l3', 'l4'], failed: [{ id: 'l1', message: 'busy' }] });
});

test('nothing starts before `hold` settles; expedite starts one at once and passes its failure on', async () => {
  const r = gatedRemover();
  let release!: () => void;
  const hold = new Promise<void>((res) => {
    release = res;
  });
  const l = new Leftovers(items(3), { concurrency: 1, remove: r.remove, hold });
  await tick();
  assert.deepEqual(r.started, []);
  const waited = assert.rejects(l.expedite('l2'), /no/);
  await tick();
  assert.deepEqual(r.started, ['l2'], 'the expedited one starts despite the hold');
  await r.finish('l2', 'no');
  await waited;
  assert.deepEqual(r.started, ['l2'], 'the rest still waits for the hold');
  release();
  await tick();
  await tick();
  assert.deepEqual(r.started, ['l2', 'l0']);
  await r.finish('l0');
  await r.finish('l1');
  await l.expedite('l1'); // not a leftover any more: at once
  assert.equal((await l.done).cleaned.length, 2);
});

test('stop waits for the removals in progress and drops the queue; done settles', async () => {
  const r = gatedRemover();
  const l = new Leftovers(items(3), { concurrency: 1, remove: r.remove });
  await tick();
  const stopped = l.stop();
  await r.finish('l0');
  await stopped;
  assert.deepEqual(r.started, ['l0']);
  assert.equal(l.pending(), 0);
  assert.deepEqual(await l.done, { cleaned: ['l0'], failed: [] });
});

test('no leftovers: done at once', async () => {
  const l = new Leftovers([], { concurrency: 2, remove: async () => {} });
  assert.deepEqual(await l.done, { cleaned: [], failed: [] });
});
