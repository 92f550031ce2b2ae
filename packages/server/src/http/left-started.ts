import { SandboxdError } from '@sandboxd/protocol';
import type { FastifyRequest } from 'fastify';
import { wireState } from '../domain/sandbox.js';
import type { HttpDeps } from './deps.js';

/**
 * The sandbox a request works inside is about: its commands, files, processes, terminals
 * and code contexts (not its lifecycle calls, whose own errors say what happened).
 */
const SANDBOX_PATH = /^\/api\/v1\/sandboxes\/([^/?]+)\/(?:exec|files|processes|terminals|code)(?:[/?]|$)/;

/**
 * An internal error of a request about one sandbox (a command, a file operation, a terminal)
 * that failed because the sandbox left `started` while it ran (a pause to disk ends the
 * processes a request talks to; a stop or a delete ends them all) is a 409 naming the state
 * it is in now, as the same request made a moment later gets: not a 500. Found by waiting for
 * the sandbox's lifecycle operation in flight (its exclusive lock) and reading its record.
 * Any other error, or a sandbox still started, is returned as it is.
 */
export async function leftStarted(
  deps: Pick<HttpDeps, 'services'>,
  err: unknown,
  req: FastifyRequest,
): Promise<unknown> {
  if (!(err instanceof SandboxdError) || err.kind !== 'internal' || !req.principal) return err;
  const raw = SANDBOX_PATH.exec(req.url)?.[1];
  if (!raw) return err;
  const id = decodeURIComponent(raw);
  const { sandboxes } = deps.services;
  const now = await sandboxes.exclusive(id, () => sandboxes.get(req.principal!.account.id, id)).catch(() => null);
  if (!now || now.state === 'started') return err;
  return new SandboxdError('conflict', `Sandbox is ${wireState(now.state)}: it left "started" while the request ran`, {
    state: wireState(now.state),
  });
}
