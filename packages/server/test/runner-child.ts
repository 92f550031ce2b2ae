/**
 * A runner in a child process for tests that kill it: a test LocalDriver (own bridge,
 * subnet, cgroup folder) behind a RunnerServer on loopback. Prints one JSON line
 * `{url, options}` on stdout once it listens; the parent uses `options` to remove what the
 * driver left after the kill. Env: RUNNER_TOKEN, RUNNER_TAG.
 */
import pino from 'pino';
import { RunnerServer } from '../src/runner/server.js';
import { ProcessHost } from '../src/runtime/processes/host.js';
import { TerminalHost } from '../src/runtime/terminals/host.js';
import { makeTestDriver } from './local-driver.js';

const { driver, options, dataDir } = makeTestDriver(process.env.RUNNER_TAG ?? 'rchild');
await driver.init();
const recovered = await driver.recover();
const server = new RunnerServer({
  driver,
  terminals: new TerminalHost({ execTty: (id, o) => driver.execTty(id, o), log: pino({ level: 'warn' }) }),
  processes: ProcessHost.over(driver),
  token: process.env.RUNNER_TOKEN ?? '',
  nodeName: 'child',
  tls: null,
  log: pino({ level: 'warn' }),
});
server.recovered = recovered;
const url = await server.listen('127.0.0.1', 0);
process.stdout.write(`${JSON.stringify({ url, options, dataDir })}\n`);
