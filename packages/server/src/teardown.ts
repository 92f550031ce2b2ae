/**
 * `npm run teardown`: removes this instance (the one `npm start` with the same config and
 * environment runs) from the host: its sandboxes (containers, processes, roots, loop
 * devices, networks), the bridge, its route and nft table, its cgroup folder and run dir;
 * volumes are unmounted. The database and the volumes' files stay: a later `npm start`
 * finds the sandboxes stopped and the volumes as they were. Refused while the instance
 * runs (its lock).
 */
import { buildApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';
import { acquireInstanceLock, InstanceLockedError } from './instance.js';

async function main(): Promise<void> {
  const config = loadConfig();
  const lock = await acquireInstanceLock({
    dataDir: config.dataDir,
    bridge: config.runtime === 'local' ? config.bridge : undefined,
    role: 'teardown',
  });
  const app = await buildApp({ config });
  const { stopped } = await app.removeFromHost();
  await lock.release();
  process.stdout.write(
    `sandboxd teardown: removed the instance on data dir ${config.dataDir} from this host (${stopped} running sandboxes stopped); the database and the volumes' files stay\n`,
  );
}

main().then(
  () => process.exit(0),
  (e) => {
    const plain = e instanceof ConfigError || e instanceof InstanceLockedError;
    process.stderr.write(`sandboxd teardown: ${plain ? e.message : ((e as Error).stack ?? String(e))}\n`);
    process.exit(1);
  },
);
