import { SandboxdError } from '@sandboxd/protocol';
import { type SandboxRecord, wireState } from '../domain/sandbox.js';

/** Throws `conflict` unless the sandbox is started and not past its stopAt (`now`). */
export function assertStarted(r: Pick<SandboxRecord, 'state' | 'stopAt'>, now: number): void {
  if (r.state !== 'started' || r.stopAt <= now)
    throw new SandboxdError('conflict', `Sandbox is ${r.state === 'started' ? 'stopping' : wireState(r.state)}`, {
      state: wireState(r.state),
    });
}

/**
 * Runs a driver call on a sandbox checked started: an unknown sandbox there (it went since
 * the check) is `conflict`. A `not_found` about a path inside the sandbox (`details.path`)
 * stays as it is.
 */
export async function whileRunning<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (e instanceof SandboxdError && e.kind === 'not_found' && !aboutPath(e.details))
      throw new SandboxdError('conflict', 'Sandbox is not running', { state: 'lost' });
    throw e;
  }
}

function aboutPath(details: unknown): boolean {
  return typeof details === 'object' && details !== null && 'path' in details;
}
