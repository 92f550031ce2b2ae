import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runCounterConformance } from './conformance.js';
import { MemoryCounters } from './memory-counters.js';

runCounterConformance({ name: 'memory', make: async () => new MemoryCounters() });

describe('MemoryCounters', () => {
  it('never holds more than maxKeys; the least recently hit goes first', async () => {
    const c = new MemoryCounters(3);
    await c.hitCounter('hot', 1000, 0);
    for (let i = 0; i < 10; i++) {
      await c.hitCounter(`cold${i}`, 1000, 0);
      assert.equal((await c.hitCounter('hot', 1000, 0)).count, i + 2, 'a key in use keeps its count');
    }
    assert.equal(c.size, 3);
    for (let i = 0; i < 1000; i++) await c.hitCounter(`flood${i}`, 1000, 0);
    assert.equal(c.size, 3, 'bounded under a flood of new keys');
  });

  it('ended windows are dropped when read or purged', async () => {
    const c = new MemoryCounters();
    for (let i = 0; i < 100; i++) await c.hitCounter(`k${i}`, 10, 0);
    assert.equal(await c.readCounter('k0', 10), null);
    assert.equal(c.size, 99);
    assert.equal(await c.purgeCounters(10), 99);
    assert.equal(c.size, 0);
  });
});
