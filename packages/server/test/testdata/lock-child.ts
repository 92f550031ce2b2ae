/**
 * Lock-test child: takes the instance lock of argv[2] (data dir) and argv[3] (bridge), prints
 * `locked`, then waits until killed.
 */
import { acquireInstanceLock } from '../../src/instance.js';

await acquireInstanceLock({ dataDir: process.argv[2], bridge: process.argv[3], role: 'server' });
process.stdout.write('locked\n');
setInterval(() => {}, 60_000);
