/**
 * scripts/run-tests.sh, the runner of npm test: every test a file registers runs and reaches
 * the report (node's --test-force-exit lost some, silently), a file whose process stays alive
 * after its tests fails instead of hanging the run, and a file whose report arrives incomplete
 * fails the run even when its process exited 0. The report check's own rules are tested on
 * made-up event streams.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { FileDurations, ReportCheck, type ReportEvent } from '../../scripts/test-report-check.js';

const ROOT = resolve(import.meta.dirname, '../..');
const dir = mkdtempSync(join(tmpdir(), 'sbxd-run-tests-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Writes test file `name` with `body` (ES module) in the temporary folder; returns its path. */
function fixture(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, body);
  return path;
}

/** Runs scripts/run-tests.sh on `files` as npm test does, with `extraEnv`. */
function runTests(files: string[], extraEnv: Record<string, string> = {}) {
  // A test process's NODE_TEST_CONTEXT would make the nested runner report to this one.
  const { NODE_TEST_CONTEXT: _, ...inherited } = process.env;
  const env = { ...inherited, ...extraEnv };
  const r = spawnSync('bash', ['scripts/run-tests.sh', ...files], {
    cwd: ROOT,
    encoding: 'utf8',
    env,
    timeout: 300_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  return { status: r.status, stdout: r.stdout, tail: `${r.stdout.slice(-3000)}\n${r.stderr.slice(-2000)}` };
}

describe('scripts/run-tests.sh', () => {
  it('a file whose report outgrows a pipe is reported whole', () => {
    // 2000 quick tests write their report faster than the runner reads it: under
    // --test-force-exit, 4 runs of 5 lost the last 4 to 43 and passed.
    const file = fixture(
      'many.test.mjs',
      `import { describe, it } from 'node:test';
for (let s = 0; s < 20; s++) {
  describe(\`suite \${s}\`, () => {
    for (let i = 0; i < 100; i++) it(\`test \${i} of suite \${s}, named at length to fill the pipe sooner\`, () => {});
  });
}
`,
    );
    for (let run = 0; run < 3; run++) {
      const r = runTests([file]);
      assert.equal(r.status, 0, r.tail);
      assert.match(r.stdout, /^ℹ tests 2000$/m, r.tail);
      assert.match(r.stdout, /^ℹ pass 2000$/m, r.tail);
      assert.match(r.stdout.slice(-300), /\nℹ duration_ms [\d.]+\n$/, 'the run ends with node’s summary');
    }
  });

  it('runs the tests a file registers after an await (--test-force-exit ended it after the first)', () => {
    const file = fixture(
      'late.test.mjs',
      `import { describe, it, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
test('first', () => {});
await sleep(200);
test('after a top-level await', () => {});
describe('async describe', async () => {
  it('before its await', () => {});
  await sleep(100);
  it('after its await', () => {});
});
`,
    );
    const r = runTests([file]);
    assert.equal(r.status, 0, r.tail);
    assert.match(r.stdout, /^ℹ pass 4$/m, r.tail);
  });

  it('ends and fails a file whose process stays alive after its tests, saying what holds it', () => {
    const hang = fixture(
      'hang.test.mjs',
      `import { test } from 'node:test';
test('leaves a timer running', () => { setInterval(() => {}, 1000); });
`,
    );
    const r = runTests([hang], { SANDBOXD_TEST_EXIT_GRACE_MS: '500' });
    assert.equal(r.status, 1, r.tail);
    assert.match(r.stdout, /^ℹ fail 1$/m, r.tail);
    assert.ok(r.stdout.includes(`test-watchdog: ${hang} is still running 500 ms after its tests ended`), r.tail);
    assert.match(r.stdout, /active: [^)]*Timeout/, r.tail);
  });

  it('fails the run when a file’s process ends before its report does, though it exits 0', () => {
    const cut = fixture(
      'cut.test.mjs',
      `import { test } from 'node:test';
test('one', () => {});
test('ends its process', () => { process.exit(0); });
test('never runs', () => {});
`,
    );
    const whole = fixture('whole.test.mjs', `import { test } from 'node:test';\ntest('one', () => {});\n`);
    const r = runTests([cut, whole]);
    assert.equal(r.status, 1, r.tail);
    assert.match(r.stdout, /^ℹ fail 0$/m, 'node’s runner alone counts no failure');
    assert.ok(r.stdout.includes(`${cut}: reported no test and no summary`), r.tail);
    assert.ok(!r.stdout.includes(`${whole}:`), r.tail);
    assert.match(r.stdout, /^report check: 2 files, 1 tests, 1 incomplete$/m, r.tail);
  });
});

describe('the report check (scripts/test-report-check.ts)', () => {
  const FILE = '/r/a.test.ts';
  /** The runner's own events for FILE, then `inner` (the events of FILE's process). */
  const run = (inner: ReportEvent[]): string[] => {
    const check = new ReportCheck();
    check.add({ type: 'test:enqueue', data: { file: FILE, nesting: 0 } });
    for (const e of inner) check.add(e);
    return check.verdict();
  };
  const test = (type: 'test:pass' | 'test:fail', suite = false): ReportEvent => ({
    type,
    data: { file: '/r/conformance.ts', entryFile: FILE, nesting: 1, details: { type: suite ? 'suite' : 'test' } },
  });
  const summary = (tests: number): ReportEvent => ({
    type: 'test:summary',
    data: { file: FILE, entryFile: FILE, counts: { tests } },
  });

  it('passes a file whose tests (suites aside) match its own count, wherever the tests are defined', () => {
    assert.deepEqual(run([test('test:pass'), test('test:fail'), test('test:pass', true), summary(2)]), [
      'report check: 1 files, 2 tests, 0 incomplete',
    ]);
  });

  it('flags a file that reported fewer tests than its process counted', () => {
    assert.deepEqual(run([test('test:pass'), summary(3)]), [
      `${FILE}: 1 of the 3 tests its process ran reached the runner`,
      'report check: 1 files, 1 tests, 1 incomplete',
    ]);
  });

  it('flags a file whose report has no summary, with tests or without', () => {
    assert.deepEqual(run([test('test:pass')]), [
      `${FILE}: its report stopped after 1 tests, before its summary (its process ended early)`,
      'report check: 1 files, 1 tests, 1 incomplete',
    ]);
    assert.match(run([])[0], /reported no test and no summary/);
  });

  it('ignores the runner’s own summary of the run and its verdict on a file', () => {
    const check = new ReportCheck();
    check.add({ type: 'test:fail', data: { file: FILE, nesting: 0, details: { type: 'test' } } });
    check.add({ type: 'test:summary', data: { counts: { tests: 7 } } });
    assert.deepEqual(check.verdict(), ['report check: 0 files, 0 tests, 0 incomplete']);
  });
});

describe('the file durations (scripts/test-report-check.ts, FileDurations)', () => {
  it("times each file from the runner taking it up to its process's summary, start-up included", () => {
    const d = new FileDurations();
    const take = (file: string): ReportEvent => ({ type: 'test:dequeue', data: { file, nesting: 0 } });
    const end = (file: string): ReportEvent => ({
      type: 'test:summary',
      data: { file, entryFile: file, counts: { tests: 1 } },
    });
    assert.equal(d.add(take('/r/a.test.ts'), 1000), null);
    // A test inside the file (its process's own dequeue, with entryFile) starts nothing.
    assert.equal(
      d.add({ type: 'test:dequeue', data: { file: '/r/a.test.ts', entryFile: '/r/a.test.ts', nesting: 0 } }, 1500),
      null,
    );
    assert.equal(d.add(take('/r/b.test.ts'), 2000), null);
    assert.equal(d.add(end('/r/a.test.ts'), 13_400), 'duration\t12.4\t/r/a.test.ts');
    assert.equal(d.add(end('/r/b.test.ts'), 2600), 'duration\t0.6\t/r/b.test.ts');
    // The runner's summary of the whole run names no file.
    assert.equal(d.add({ type: 'test:summary', data: { counts: { tests: 2 } } }, 3000), null);
  });
});
