import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { RunnerStatus } from '../runtime/remote/fleet/status.js';
import { readiness } from './readiness.js';

const runner = (state: RunnerStatus['state']): RunnerStatus => ({
  node: 'n',
  url: 'http://10.0.0.1:8090',
  state,
  sandboxes: 0,
  memoryAvailableBytes: null,
  diskFreeBytes: null,
  addresses: null,
  full: [],
});

/** A store whose ping is settled by hand; counts the queries. */
function store() {
  const s = {
    queries: 0,
    settle: (_ok: boolean) => {},
    ping: () => {
      s.queries++;
      return new Promise<void>((resolve, reject) => {
        s.settle = (ok) => (ok ? resolve() : reject(new Error('database down')));
      });
    },
  };
  return s;
}

describe('readiness (/readyz)', () => {
  it('not ready before start-up is done or once shutdown began, whatever the database says', async () => {
    let started = false;
    const ready = readiness({ started: () => started, store: { ping: async () => {} }, runners: null });
    assert.equal(await ready(), false);
    started = true;
    assert.equal(await ready(), true);
    started = false;
    assert.equal(await ready(), false);
  });

  it('role api: ready only while at least one runner answers', async () => {
    let runners: RunnerStatus[] = [];
    const ready = readiness({ started: () => true, store: { ping: async () => {} }, runners: () => runners });
    assert.equal(await ready(), false, 'no runner');
    runners = [runner('down'), runner('removed')];
    assert.equal(await ready(), false, 'none up');
    runners = [runner('down'), runner('up')];
    assert.equal(await ready(), true);
  });

  it('a database that fails is not ready; one that hangs is not ready after the timeout, with one query at a time', async () => {
    const s = store();
    const ready = readiness({ started: () => true, store: s, runners: null, timeoutMs: 20 });
    const first = ready();
    s.settle(false);
    assert.equal(await first, false);
    // Hangs: each check gives up after its timeout, and they share the one pending query.
    assert.equal(await ready(), false);
    assert.equal(await ready(), false);
    assert.equal(s.queries, 2, 'the failed query, then one pending for both checks');
    s.settle(true);
    await new Promise((r) => setImmediate(r));
    const again = ready();
    s.settle(true);
    assert.equal(await again, true);
    assert.equal(s.queries, 3);
  });
});
