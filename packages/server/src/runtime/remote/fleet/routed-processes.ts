import { SandboxdError } from '@sandboxd/protocol';
import type { DriverProcesses } from '../../processes/types.js';
import type { RunnerDriver } from './member.js';

/**
 * {@link DriverProcesses} whose every call runs on the tracked processes of the runner that
 * holds the sandbox (the processes and their readers live there): `on(id, fn)` finds that runner.
 */
export function routedProcesses(
  on: <T>(id: string, fn: (d: RunnerDriver) => Promise<T>) => Promise<T>,
): DriverProcesses {
  const p = <T>(id: string, fn: (p: DriverProcesses) => Promise<T>) =>
    on(id, (d) => {
      if (!d.processes) throw new SandboxdError('unsupported', 'This runner tracks no processes');
      return fn(d.processes);
    });
  return {
    start: (id, spec) => p(id, (x) => x.start(id, spec)),
    list: (id) => p(id, (x) => x.list(id)),
    get: (id, pid) => p(id, (x) => x.get(id, pid)),
    follow: (id, pid, follower, o) => p(id, (x) => x.follow(id, pid, follower, o)),
    writeStdin: (id, pid, body) => p(id, (x) => x.writeStdin(id, pid, body)),
    closeStdin: (id, pid) => p(id, (x) => x.closeStdin(id, pid)),
    signal: (id, pid, signal) => p(id, (x) => x.signal(id, pid, signal)),
    closeSandbox: (id) => p(id, (x) => x.closeSandbox(id)),
  };
}
