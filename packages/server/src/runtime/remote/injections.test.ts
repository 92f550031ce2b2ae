import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { INFLIGHT_MS, INJECTIONS_PER_TAKE, InjectionQueue, MAX_QUEUED_INJECTIONS } from './injections.js';

const ev = (at: number) => ({ sandboxId: 's', secret: 'A', destination: 'a.test:443', method: 'GET', status: 200, at });

describe('the runner injection queue', () => {
  it('hands out batches; an acknowledged batch is gone, one never acknowledged comes back after INFLIGHT_MS', () => {
    let now = 0;
    const q = new InjectionQueue(() => now);
    for (let i = 0; i < INJECTIONS_PER_TAKE + 3; i++) q.push(ev(i));
    const a = q.take();
    assert.equal(a.events.length, INJECTIONS_PER_TAKE);
    const b = q.take(); // a taker that never acknowledges `a`
    assert.deepEqual(
      b.events.map((e) => e.at),
      [INJECTIONS_PER_TAKE, INJECTIONS_PER_TAKE + 1, INJECTIONS_PER_TAKE + 2],
    );
    assert.deepEqual(q.take(b.batch).events, []);
    now += INFLIGHT_MS;
    const again = q.take();
    assert.equal(again.events[0].at, 0, 'the unacknowledged batch came back');
    assert.deepEqual(q.take(again.batch).events, []);
    now += INFLIGHT_MS;
    assert.deepEqual(q.take().events, [], 'an acknowledged batch never comes back');
  });

  it('is bounded: past MAX_QUEUED_INJECTIONS the oldest go, counted', () => {
    const q = new InjectionQueue();
    for (let i = 0; i < MAX_QUEUED_INJECTIONS + 7; i++) q.push(ev(i));
    const t = q.take();
    assert.equal(t.dropped, 7);
    assert.equal(t.events[0].at, 7);
  });
});
