/**
 * Crash-test child of image builds: an app on a local driver of the given options and data
 * dir starts a build whose second step sleeps, prints `running <accountId> <buildId>` once
 * that step runs in its sandbox, and waits to be killed with SIGKILL.
 * argv: <json LocalDriverOptions> <data dir>
 */
import pino from 'pino';
import { buildApp } from '../../src/app.js';
import { LocalDriver } from '../../src/runtime/local/driver.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { buildConfig, newBuildAccount, plan, run, stage } from '../builds.js';

const options = JSON.parse(process.argv[2]);
const config = buildConfig(process.argv[3], options);
const app = await buildApp({
  config,
  driver: new LocalDriver(options),
  store: new SqliteStore(config.dbPath),
  logger: pino({ level: 'silent' }),
});
await app.start();
const account = await newBuildAccount(app.store);
const b = await app.services.builds.start(
  account,
  plan(stage('local/busybox:latest', [run('echo first > /first'), run('echo started; sleep 300')])),
  { name: 'crashed', tag: 'latest', source: 'dockerfile' },
);
for await (const e of app.services.builds.logs(account.id, b.id, { follow: true })) {
  if (e.type === 'log' && e.text === 'started') break;
}
process.stdout.write(`running ${account.id} ${b.id}\n`);
await new Promise(() => {});
