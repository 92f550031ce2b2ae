/**
 * Preloaded (`--import`) into every process of a test run (scripts/run-tests.sh); acts only in
 * a test file's process (node's runner sets NODE_TEST_CONTEXT there). A file's process that is
 * still alive SANDBOXD_TEST_EXIT_GRACE_MS (default 30000) after its tests and root `after`
 * hooks began to end (a server, socket, timer or child left open; a hook that never returns)
 * is ended with exit code 1: the runner reports the file failed, with this process's reason on
 * its stderr, instead of waiting for ever. (The hooks begin once the tests registered so far
 * are over: a file that registers more after an await, which none here does, has the grace
 * period to finish them.)
 *
 * This replaces node's --test-force-exit, which ended the process at once and lost tests
 * silently: it exits with process.exit() before the runner has read the end of the report
 * from the pipe (store.test.ts reported 20 to 39 of its 42 tests, exit 0; nodejs/node#64833),
 * and it ends a file that registers tests after an await once the tests known so far are over.
 */
import { writeSync } from 'node:fs';

if (process.env.NODE_TEST_CONTEXT) {
  const grace = Number(process.env.SANDBOXD_TEST_EXIT_GRACE_MS ?? 30_000);
  if (!(grace > 0)) throw new Error(`SANDBOXD_TEST_EXIT_GRACE_MS must be a number of ms above 0, not ${grace}`);
  const { after } = await import('node:test');
  // Registered before the file's own root hooks: runs first, so a hook that hangs is bounded too.
  after(() => {
    setTimeout(() => {
      const alive = process.getActiveResourcesInfo().join(', ');
      try {
        // Synchronous: process.exit() drops what is queued for a pipe.
        writeSync(
          2,
          `test-watchdog: ${process.argv[1]} is still running ${grace} ms after its tests ended (active: ${alive}); ending it\n`,
        );
      } finally {
        process.exit(1);
      }
    }, grace).unref();
  });
}
