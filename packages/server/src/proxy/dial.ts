import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { SandboxdError } from '@sandboxd/protocol';
import type { SandboxTargets } from './targets.js';

/** How long a connection to a sandbox port may take to open. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * Opens TCP connections to ports of running sandboxes the way the port proxy reaches them:
 * the target's address on the host's bridge (checked against the runtime's subnet by
 * {@link SandboxTargets}), or the runner's tunnel when sandboxes live on a runner. For the
 * server's own relays (the code interpreter), which check the caller's access themselves.
 * Rejects `conflict` when the sandbox is not running, `upstream` when nothing answers the
 * port (refused, reset, no usable address) or it does not connect in time.
 */
export function sandboxPortDialer(
  targets: Pick<SandboxTargets, 'resolve'>,
  tunnel?: (sandboxId: string, port: number) => Promise<Duplex>,
): (sandboxId: string, port: number) => Promise<Duplex> {
  return async (sandboxId, port) => {
    let address: string;
    try {
      address = (await targets.resolve(sandboxId)).address;
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'not_found')
        throw new SandboxdError('conflict', 'Sandbox is not running', { state: 'lost' });
      throw e;
    }
    if (tunnel) {
      try {
        return await tunnel(sandboxId, port);
      } catch (e) {
        throw new SandboxdError('upstream', `Port ${port} of the sandbox did not answer: ${(e as Error).message}`);
      }
    }
    const s = connect({ host: address, port, noDelay: true });
    return new Promise<Duplex>((resolve, reject) => {
      const fail = (why: string) => {
        s.destroy();
        reject(new SandboxdError('upstream', `Port ${port} of the sandbox did not answer: ${why}`));
      };
      const timer = setTimeout(() => fail('timed out'), CONNECT_TIMEOUT_MS);
      s.once('error', (e) => {
        clearTimeout(timer);
        fail(e.message);
      });
      s.once('connect', () => {
        clearTimeout(timer);
        s.removeAllListeners('error');
        s.on('error', () => {}); // the user's request reports it
        resolve(s);
      });
    });
  };
}
