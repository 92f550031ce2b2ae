/** Tracked processes in this process (`ProcessHost`, role `all`) over the local driver: the conformance suite. */
import { rmSync } from 'node:fs';
import { makeTestDriver } from '../../../test/local-driver.js';
import { ProcessHost } from '../processes/host.js';
import { runProcessConformance } from '../processes/conformance.js';
import type { LocalDriver } from './driver.js';

let made: { driver: LocalDriver; dataDir: string } | null = null;
runProcessConformance({
  name: 'ProcessHost over the local driver (crun)',
  image: 'local/busybox:latest',
  make: async () => {
    made = makeTestDriver('procs');
    await made.driver.init();
    await made.driver.recover();
    return { driver: made.driver, views: [ProcessHost.over(made.driver)] };
  },
  destroy: async () => {
    await made?.driver.destroyAll();
    if (made) rmSync(made.dataDir, { recursive: true, force: true });
    made = null;
  },
});
