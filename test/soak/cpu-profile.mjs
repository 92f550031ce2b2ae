// Preloaded into the server by `load.ts --cpu-profile DIR` (NODE_OPTIONS=--import): the first
// SIGUSR2 starts V8's CPU profiler, the second writes DIR/server-<pid>-<n>.cpuprofile (open it
// in Chrome DevTools or summarise it with test/soak/profile-summary.ts). `--cpu-prof` itself
// is refused in NODE_OPTIONS and would profile the whole life of the process.
import { Session } from 'node:inspector';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.env.SOAK_PROFILE_DIR;
if (dir) {
  const session = new Session();
  session.connect();
  let on = false;
  let n = 0;
  process.on('SIGUSR2', () => {
    if (!on) {
      session.post('Profiler.enable', () =>
        session.post('Profiler.setSamplingInterval', { interval: 500 }, () => session.post('Profiler.start')),
      );
      on = true;
      return;
    }
    session.post('Profiler.stop', (err, r) => {
      if (!err) writeFileSync(join(dir, `server-${process.pid}-${n++}.cpuprofile`), JSON.stringify(r.profile));
    });
    on = false;
  });
}
