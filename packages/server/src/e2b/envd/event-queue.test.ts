import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EventQueue } from './event-queue.js';

/** Pulls `n` events (or until the end). */
async function take<T>(it: AsyncGenerator<T>, n = Infinity): Promise<T[]> {
  const out: T[] = [];
  while (out.length < n) {
    const r = await it.next();
    if (r.done) break;
    out.push(r.value);
  }
  return out;
}

describe('EventQueue', () => {
  it('yields events in order, those pushed while waiting too, and ends after the last', async () => {
    const q = new EventQueue<string>();
    q.push('a');
    const it = q.events(new AbortController().signal);
    assert.deepEqual(await take(it, 1), ['a']);
    setTimeout(() => {
      q.push('b');
      q.push('c');
      q.end();
      q.push('ignored');
    }, 5);
    assert.deepEqual(await take(it), ['b', 'c']);
  });

  it('backpressure: push is false at the high-water mark; onDrained reports what is left as events are taken', async () => {
    const drained: number[] = [];
    const q = new EventQueue<string>({ highWater: 10, onDrained: (n) => drained.push(n) });
    assert.equal(q.push('start'), true);
    assert.equal(q.push('x', 6), true);
    assert.equal(q.push('y', 6), false);
    assert.equal(q.buffered, 12);
    const it = q.events(new AbortController().signal);
    assert.deepEqual(await take(it, 3), ['start', 'x', 'y']);
    assert.deepEqual(drained, [6, 0]);
  });

  it('a failure is thrown after the events queued before it', async () => {
    const q = new EventQueue<string>();
    q.push('a');
    q.fail(new Error('too slow'));
    const it = q.events(new AbortController().signal);
    assert.deepEqual(await take(it, 1), ['a']);
    await assert.rejects(it.next(), /too slow/);
  });

  it('an abort (client gone, deadline) ends a waiting stream with its reason at once', async () => {
    const q = new EventQueue<string>();
    const ac = new AbortController();
    const it = q.events(ac.signal);
    const next = it.next();
    ac.abort(new Error('deadline'));
    await assert.rejects(next, /deadline/);
    const gone = new AbortController();
    gone.abort(new Error('already'));
    await assert.rejects(q.events(gone.signal).next(), /already/);
  });

  it('sends a keep-alive after each interval of silence', async () => {
    const q = new EventQueue<string>();
    const it = q.events(new AbortController().signal, { intervalMs: 20, event: () => 'ping' });
    const t0 = Date.now();
    assert.deepEqual(await take(it, 2), ['ping', 'ping']);
    assert.ok(Date.now() - t0 >= 35);
    q.push('data');
    q.end();
    assert.deepEqual(await take(it), ['data']);
  });
});
