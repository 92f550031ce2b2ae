/**
 * Preloaded (`--import`) into every process of a test run (scripts/run-tests.sh): this
 * process's stdout and stderr write synchronously, even when they are pipes.
 *
 * Why: under `--test-force-exit`, node's test runner ends a test file's process with
 * `process.exit()` once that process has handed its whole report to stdout. The report goes to
 * the runner through a pipe; on Linux a write to a full pipe (64 KiB unread) is queued in
 * libuv, and `process.exit()` drops the queue. What the runner had not read yet (the last
 * tests of the file and its summary) was lost while the file still passed (its process exited
 * 0): packages/server/src/store/sqlite/store.test.ts reported 20 to 39 of its 42 tests
 * (nodejs/node#64833). A blocking write returns once the runner has read it, so nothing is
 * left queued when the process exits. scripts/test-report-check.ts fails the run if a report
 * still arrives incomplete (say, a node release without `setBlocking`).
 */
interface StdioHandle {
  setBlocking?: (blocking: boolean) => number;
}

for (const stream of [process.stdout, process.stderr]) {
  // A pipe or a terminal has a libuv handle; a file is written synchronously already.
  (stream as unknown as { _handle?: StdioHandle })._handle?.setBlocking?.(true);
}
