import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Counters } from '../store.js';

/**
 * Registers the behaviour every {@link Counters} must show (the Store's, and the memory
 * counters of the rate limits): fixed windows, atomic under concurrent hits.
 */
export function runCounterConformance(target: {
  name: string;
  make: () => Promise<Counters & { close(): void | Promise<void> }>;
}) {
  async function withCounters(fn: (c: Counters) => Promise<void>) {
    const c = await target.make();
    try {
      await fn(c);
    } finally {
      await c.close();
    }
  }

  describe(`Counters conformance: ${target.name}`, () => {
    it('counts within a fixed window, restarts after its end, keys apart', () =>
      withCounters(async (c) => {
        assert.deepEqual(await c.hitCounter('a', 1000, 10_000), { count: 1, resetAt: 11_000 });
        assert.deepEqual(await c.hitCounter('a', 1000, 10_500), { count: 2, resetAt: 11_000 }, 'the end does not move');
        assert.deepEqual(await c.hitCounter('b', 500, 10_500), { count: 1, resetAt: 11_000 });
        assert.deepEqual(await c.hitCounter('a', 1000, 10_999), { count: 3, resetAt: 11_000 });
        assert.deepEqual(await c.hitCounter('a', 1000, 11_000), { count: 1, resetAt: 12_000 }, 'a new window');
        assert.deepEqual(await c.hitCounter('b', 500, 11_000), { count: 1, resetAt: 11_500 });
      }));

    it('read changes nothing and sees only a live window; delete forgets', () =>
      withCounters(async (c) => {
        assert.equal(await c.readCounter('k', 0), null);
        await c.hitCounter('k', 100, 0);
        await c.hitCounter('k', 100, 1);
        assert.deepEqual(await c.readCounter('k', 50), { count: 2, resetAt: 100 });
        assert.deepEqual(await c.readCounter('k', 50), { count: 2, resetAt: 100 });
        assert.equal(await c.readCounter('k', 100), null, 'ended');
        await c.deleteCounter('k');
        assert.equal(await c.readCounter('k', 50), null);
        await c.deleteCounter('never-seen');
        assert.deepEqual(await c.hitCounter('k', 100, 60), { count: 1, resetAt: 160 });
      }));

    it('release takes back one event of the window it names only: never below 0, never a new window', () =>
      withCounters(async (c) => {
        await c.releaseCounter('none', 100);
        assert.equal(await c.readCounter('none', 0), null, 'no window made');
        await c.hitCounter('r', 100, 0);
        await c.hitCounter('r', 100, 1);
        await c.releaseCounter('r', 100);
        assert.deepEqual(await c.readCounter('r', 3), { count: 1, resetAt: 100 }, 'the end does not move');
        await c.releaseCounter('r', 100);
        await c.releaseCounter('r', 100);
        assert.deepEqual(await c.readCounter('r', 5), { count: 0, resetAt: 100 }, 'not below 0');
        assert.deepEqual(await c.hitCounter('r', 100, 6), { count: 1, resetAt: 100 });
        assert.deepEqual(
          await c.hitCounter('r', 100, 100),
          { count: 1, resetAt: 200 },
          'an ended window is left alone',
        );
        // A reservation counted in the window that ended gives nothing back to the new one.
        await c.releaseCounter('r', 100);
        assert.deepEqual(await c.readCounter('r', 150), { count: 1, resetAt: 200 }, 'another window is left alone');
        await Promise.all(Array.from({ length: 20 }, () => c.hitCounter('both', 1000, 0)));
        await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            i % 2 ? c.releaseCounter('both', 1000) : c.hitCounter('both', 1000, 1),
          ),
        );
        assert.deepEqual(await c.readCounter('both', 2), { count: 20, resetAt: 1000 }, 'concurrent hits and releases');
      }));

    it('purge removes ended windows only', () =>
      withCounters(async (c) => {
        await c.hitCounter('old1', 100, 0);
        await c.hitCounter('old2', 200, 0);
        await c.hitCounter('live', 1000, 0);
        assert.equal(await c.purgeCounters(200), 2);
        assert.equal(await c.purgeCounters(200), 0);
        assert.deepEqual(await c.readCounter('live', 200), { count: 1, resetAt: 1000 });
        assert.equal(await c.readCounter('old2', 150), null, 'gone, not just ended');
      }));

    it('concurrent hits on one key each get their own count', () =>
      withCounters(async (c) => {
        const counts = await Promise.all(Array.from({ length: 50 }, () => c.hitCounter('hot', 60_000, 5)));
        assert.deepEqual(
          counts.map((w) => w.count).sort((x, y) => x - y),
          Array.from({ length: 50 }, (_, i) => i + 1),
        );
        assert.ok(counts.every((w) => w.resetAt === 60_005));
      }));
  });
}
