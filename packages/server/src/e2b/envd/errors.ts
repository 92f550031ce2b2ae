import { ERROR_STATUS, type ErrorKind } from '@sandboxd/protocol';

/** sandboxd's kind for the statuses envd's HTTP paths answer with. */
const KIND_OF_STATUS: Record<number, ErrorKind> = {
  400: 'validation',
  401: 'unauthorized',
  403: 'permission',
  404: 'not_found',
  408: 'request_timeout',
  409: 'conflict',
  413: 'payload_too_large',
  416: 'range_not_satisfiable',
  429: 'rate_limited',
  500: 'internal',
  502: 'upstream',
  503: 'unavailable',
  504: 'upstream_timeout',
  507: 'no_space',
};

/**
 * The JSON of an error answer on envd's HTTP paths: envd's `{code, message}` (what E2B's SDKs
 * read), with sandboxd's `kind` as on every error sandboxd answers. `kind` defaults to the
 * status's; a status without one is answered as a 500.
 */
export function envdErrorBody(status: number, message: string, kind?: ErrorKind): { status: number; json: string } {
  const k = kind && ERROR_STATUS[kind] === status ? kind : KIND_OF_STATUS[status];
  if (!k) return envdErrorBody(500, message);
  return { status, json: JSON.stringify({ code: status, kind: k, message }) };
}
