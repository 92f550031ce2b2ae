/**
 * The load suite, short (issue 8; the full one is `npm run test:soak`): 20 sandboxes, execs
 * at ~50/s for 10 s spread across them (open loop), 5 terminals streaming numbered lines at
 * once, on the real server and runtime. Asserts correctness only: no errors of any kind,
 * every exec that was sent answered with its own output, every terminal got every line in
 * order, and the host left as found. The figures (rate, latency, memory) are printed, never
 * asserted: they follow the machine.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, it } from 'node:test';

const IMAGE_DIR = process.env.SANDBOXD_TEST_IMAGE_DIR ?? resolve(import.meta.dirname, '../../.sandboxd-test/images');

function unavailable(): string | null {
  if ((process.env.SANDBOXD_E2E_RUNTIME ?? 'fake') !== 'local')
    return 'needs SANDBOXD_E2E_RUNTIME=local (npm test sets it)';
  if (process.getuid?.() !== 0) return 'the local runtime needs root';
  try {
    execFileSync('crun', ['--version'], { stdio: 'ignore' });
  } catch {
    return 'crun is not installed (npm run setup)';
  }
  if (!existsSync(resolve(IMAGE_DIR, 'refs'))) return `no image cache at ${IMAGE_DIR} (npm run setup)`;
  return null;
}

describe('load, short: 20 sandboxes, ~50 exec/s for 10 s, 5 terminals streaming', {
  skip: unavailable() ?? false,
}, () => {
  it('answers every exec with its output, streams every terminal line, leaves the host as found', {
    timeout: 120_000,
  }, async () => {
    const { runLoad, printResult } = await import('../soak/load.js');
    const r = await runLoad({
      sandboxes: 20,
      rate: 50,
      durationS: 10,
      terminals: 5,
      termLinesPerS: 20,
      createParallel: 4,
      sampleEveryS: 2,
    });
    printResult(r);

    assert.deepEqual(r.errors, {}, `errors: ${r.errorSamples.join('; ')}`);
    assert.equal(r.create.failed, 0);
    assert.equal(r.delete.failed, 0);
    assert.ok(r.execs.started > 0, 'no exec was sent');
    assert.equal(r.execs.ok, r.execs.started, 'every exec sent is answered 200 with exit 0 and its own output');
    assert.equal(r.terminals.count, 5);
    assert.equal(r.terminals.ok, 5, JSON.stringify(r.terminals.failures));
    assert.equal(r.terminals.linesOk, r.terminals.linesExpected);
    assert.ok(r.terminals.bytes >= r.terminals.linesExpected * 40, 'each line is 40+ bytes');
    assert.deepEqual(r.host.leaks, []);
    assert.deepEqual(r.host.leftProcesses, []);
  });
});
