/**
 * `node --import tsx test/e2e/teardown-local-cli.ts <dataDir>`: {@link teardownLocal} of a
 * server's data dir as a program of its own, so that it runs where that server ran (a fake
 * host's namespaces: `FakeHost.wrap`), seeing that server's mounts and networks.
 */
import { teardownLocal } from './local-runtime.js';

const [dataDir] = process.argv.slice(2);
if (!dataDir) {
  console.error('usage: teardown-local-cli.ts <dataDir>');
  process.exit(2);
}
await teardownLocal(dataDir);
