/**
 * test/e2e/files.test.ts again, every sandbox in the gVisor tier (SANDBOXD_TEST_ISOLATION): the
 * second tier runs the e2e suites that matter most besides the driver conformance suite
 * (runtime/local/driver.test.ts) and test/e2e/isolation.test.ts.
 */
process.env.SANDBOXD_TEST_ISOLATION = 'gvisor';
await import('../files.test.js');
