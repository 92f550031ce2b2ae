import { Code, ConnectError, createContextKey, type HandlerContext } from '@connectrpc/connect';
import { type ErrorKind, SandboxdError } from '@sandboxd/protocol';
import type { SandboxRecord } from '../../domain/sandbox.js';

/**
 * What the envd door established about an in-sandbox request before any handler runs: the
 * sandbox (live, and the access token matched), its account, and the user the call asks
 * for. Handlers act through sandboxd's services as that account, so an E2B call can do
 * exactly what the same account can do through sandboxd's own API.
 */
export interface EnvdCall {
  accountId: string;
  sandbox: SandboxRecord;
  /**
   * The user named by the call: with the access token, `Authorization: Basic <user>:`;
   * with a signed URL, only the user it was signed for. Undefined: the default.
   */
  user: string | undefined;
  /** The template's default user for calls that name none (`user` for `base`); unset: the image's. */
  defaultUser: string | undefined;
  /**
   * Set when the call came with a signed `/files` URL instead of the access token: the
   * one path and operation it grants (the user is {@link user}).
   */
  signed?: { path: string; operation: 'read' | 'write' };
}

/** The user a call runs as: the one it names, else the template's default, else the image's (undefined). */
export function userOf(call: EnvdCall): string | undefined {
  return call.user ?? call.defaultUser;
}

export const envdCallKey = createContextKey<EnvdCall | null>(null, { description: 'envd call' });

/** The door's findings for a Connect handler; the door never lets a request through without them. */
export function envdCall(ctx: HandlerContext): EnvdCall {
  const call = ctx.values.get(envdCallKey);
  if (!call) throw new ConnectError('no sandbox for this request', Code.Unauthenticated);
  return call;
}

/** Connect's code for each sandboxd error kind. */
const CODE_OF: Record<ErrorKind, Code> = {
  validation: Code.InvalidArgument,
  unauthorized: Code.Unauthenticated,
  tokens: Code.ResourceExhausted,
  concurrency: Code.ResourceExhausted,
  quota: Code.ResourceExhausted,
  permission: Code.PermissionDenied,
  not_found: Code.NotFound,
  template_not_found: Code.NotFound,
  request_timeout: Code.DeadlineExceeded,
  conflict: Code.FailedPrecondition,
  no_code_interpreter: Code.FailedPrecondition,
  payload_too_large: Code.ResourceExhausted,
  rate_limited: Code.ResourceExhausted,
  range_not_satisfiable: Code.OutOfRange,
  headers_too_large: Code.ResourceExhausted,
  internal: Code.Internal,
  unsupported: Code.Unimplemented,
  upstream: Code.Unavailable,
  unavailable: Code.Unavailable,
  capacity: Code.Unavailable,
  upstream_timeout: Code.DeadlineExceeded,
  insufficient_storage: Code.ResourceExhausted,
  no_space: Code.ResourceExhausted,
};

/** A service error as the Connect error E2B's SDK maps to its own classes; others pass through. */
export function toConnectError(e: unknown): unknown {
  if (e instanceof ConnectError) return e;
  if (e instanceof SandboxdError) return new ConnectError(e.message, CODE_OF[e.kind]);
  return e;
}

/** Runs `fn`, turning sandboxd's errors into Connect's. */
export async function connectErrors<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw toConnectError(e);
  }
}
