import { SandboxdError } from '@sandboxd/protocol';
import type { DriverTerminals } from '../../terminals/types.js';
import type { RunnerDriver } from './member.js';

/**
 * {@link DriverTerminals} whose every call runs on the terminals of the runner that holds
 * the sandbox (its PTYs and their clients live there): `on(id, fn)` finds that runner.
 */
export function routedTerminals(
  on: <T>(id: string, fn: (d: RunnerDriver) => Promise<T>) => Promise<T>,
): DriverTerminals {
  const t = <T>(id: string, fn: (t: DriverTerminals) => Promise<T>) =>
    on(id, (d) => {
      if (!d.terminals) throw new SandboxdError('unsupported', 'This runner holds no terminals');
      return fn(d.terminals);
    });
  return {
    create: (id, spec) => t(id, (x) => x.create(id, spec)),
    list: (id) => t(id, (x) => x.list(id)),
    get: (id, terminalId) => t(id, (x) => x.get(id, terminalId)),
    delete: (id, terminalId, reason) => t(id, (x) => x.delete(id, terminalId, reason)),
    input: (id, terminalId, data) => t(id, (x) => x.input(id, terminalId, data)),
    resize: (id, terminalId, cols, rows) => t(id, (x) => x.resize(id, terminalId, cols, rows)),
    signal: (id, terminalId, signal) => t(id, (x) => x.signal(id, terminalId, signal)),
    attach: (id, terminalId, client, opts) => t(id, (x) => x.attach(id, terminalId, client, opts)),
    closeSandbox: (id, reason) => t(id, (x) => x.closeSandbox(id, reason)),
  };
}
