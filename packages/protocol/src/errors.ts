/**
 * The error kinds of sandboxd, each with a stable HTTP status. Every error body on the wire
 * carries its kind (`{code, kind, message, details?}`), so clients branch on `kind` rather
 * than on a status that several kinds share (404 `not_found` vs `template_not_found`) or on
 * message text. Server, SDK, CLI and console share this table; a kind without a status, or
 * an SDK class, fails to compile.
 */
export const ERROR_STATUS = {
  /** The request is malformed or fails validation; `details` lists each problem by field. */
  validation: 400,
  /** No, bad or revoked credentials. */
  unauthorized: 401,
  /** Not enough tokens for the requested lifetime. */
  tokens: 402,
  /** The account's limit of concurrently started sandboxes is reached. */
  concurrency: 403,
  /** The sandbox's user may not do this to a file; `details.path` names it. */
  permission: 403,
  /**
   * A plan quota other than concurrency would be passed: `maxPaused` (paused sandboxes) or
   * `snapshotBytes`; `details.quota` names it, `details.limit` gives its value.
   */
  quota: 403,
  /** No such resource for this account (another account's looks exactly the same). */
  not_found: 404,
  /** The image (template) of a create does not exist; `details.image` names it. */
  template_not_found: 404,
  /** The request (line, headers or body) did not arrive in time. */
  request_timeout: 408,
  /** The resource is in the wrong state for the operation, or conflicts with another. */
  conflict: 409,
  /**
   * The sandbox serves no code interpreter (nothing answers its port 49999: not made from
   * `local/code-interpreter`, or its server is down); `details.image` names the image to use.
   */
  no_code_interpreter: 409,
  /** The request body is over the limit. */
  payload_too_large: 413,
  /** Too many requests; `details.retryAfterMs` and `Retry-After` say when to retry. */
  rate_limited: 429,
  /** The `Range` of a download is outside the file; `Content-Range` gives its size. */
  range_not_satisfiable: 416,
  /** The request line and headers are over the limit. */
  headers_too_large: 431,
  /** The server failed; the message leaks no internals. */
  internal: 500,
  /**
   * sandboxd does not support this (yet): an E2B API path it does not serve, or a feature a
   * request of E2B's front door asks for that it cannot honour. The message names it.
   */
  unsupported: 501,
  /** The port proxy got no valid answer from the sandbox's port. */
  upstream: 502,
  /** The server is starting or shutting down. */
  unavailable: 503,
  /** The host has no room for more sandboxes (memory, disk, addresses, count), or a sandbox is at its share of a host resource (e.g. proxied connections); `Retry-After` says when to retry. */
  capacity: 503,
  /** The sandbox's port did not answer the port proxy in time. */
  upstream_timeout: 504,
  /** The server's data dir is out of space: no retry helps until space is freed. */
  insufficient_storage: 507,
  /** The sandbox's root disk or volume is full (its own cap); `details.path` names the file. */
  no_space: 507,
} as const satisfies Record<string, number>;

export type ErrorKind = keyof typeof ERROR_STATUS;

/** Every kind, in table order (for schemas and exhaustive tests). */
export const ERROR_KINDS = Object.keys(ERROR_STATUS) as ErrorKind[];

/** The wire shape of every error response: `code` is the HTTP status number. */
export interface ErrorBody {
  code: number;
  kind: ErrorKind;
  message: string;
  details?: unknown;
}

/** True when `s` is a kind of {@link ERROR_STATUS}. */
export function isErrorKind(s: unknown): s is ErrorKind {
  return typeof s === 'string' && Object.hasOwn(ERROR_STATUS, s);
}

/**
 * The ONE builder of error bodies: every error answer of the server (API, WebSocket
 * upgrades, the port proxy, fastify's own refusals) is made here.
 */
export function errorBody(kind: ErrorKind, message: string, details?: unknown): ErrorBody {
  const body: ErrorBody = { code: ERROR_STATUS[kind], kind, message };
  if (details !== undefined) body.details = details;
  return body;
}

/** An error with a kind from {@link ERROR_STATUS}; `details` goes to the client as is. */
export class SandboxdError extends Error {
  readonly kind: ErrorKind;
  readonly details: unknown;
  constructor(kind: ErrorKind, message: string, details?: unknown) {
    super(message);
    this.name = 'SandboxdError';
    this.kind = kind;
    this.details = details;
  }
  get status(): number {
    return ERROR_STATUS[this.kind];
  }
  toBody(): ErrorBody {
    return errorBody(this.kind, this.message, this.details);
  }
}

export function isSandboxdError(e: unknown): e is SandboxdError {
  return e instanceof SandboxdError;
}
