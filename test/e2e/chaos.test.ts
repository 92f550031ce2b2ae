/**
 * The chaos soak's short variant (test/soak/chaos.ts has the whole story; `npm run
 * test:soak` runs it for 10 minutes with every fault): the mixed workload held while a few
 * faults are injected in each topology, once each: kill -9 of the single server (SQLite), a
 * fork bomb, a sandbox eating its memory, the data dir's filesystem filled from outside;
 * then, on PostgreSQL with a runner and two api replicas, kill -9 of the runner and of
 * PostgreSQL. Every answer is a success or a clear refusal (4xx/503/507 in the error shape),
 * connection errors only inside a fault's window; every fault is recovered from; the
 * records, the runtime and the ledger agree afterwards; nothing of the run is left on the host.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RUNTIME } from './harness.js';

describe('chaos (short variant)', {
  skip: (RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local') || (process.getuid?.() !== 0 && 'needs root'),
  timeout: 600_000,
}, () => {
  it('a mixed workload through kill -9s, hostile sandboxes and a full disk: clear answers, recovery, records = runtime = ledger', async () => {
    const { runChaos, printChaos } = await import('../soak/chaos.js');
    const r = await runChaos({
      // Each fault once: a topology runs through its faults, then ends (its 1 s is over).
      singleS: 1,
      fleetS: 1,
      workers: 3,
      pool: 3,
      gapS: 2,
      fullHoldS: 3,
      singleFaults: ['server-kill', 'fork-bomb', 'memory-eat', 'host-disk-full'],
      fleetFaults: ['runner-kill', 'pg-kill'],
      fsMb: 512,
    });
    printChaos(r, (s) => console.log(s.replace(/^/gm, '# ')));
    assert.ok(r.requests > 100, `the workload ran (${r.requests} requests)`);
    assert.deepEqual(r.errors, {}, `errors:\n${r.errorSamples.join('\n')}`);
    assert.deepEqual(r.violations, []);
    const want = r.skipped.length ? 4 : 6;
    assert.equal(r.faults.length, want, 'every fault was injected');
    for (const f of r.faults) assert.notEqual(f.recoverS, null, `${f.topology} ${f.fault} recovered`);
  });
});
