/**
 * Typed errors rebuilt from the server's error body `{code, message, details?}` and the
 * protocol's error-kind table, so a kind without a class fails to compile.
 */
import { ERROR_KINDS, ERROR_STATUS, isErrorKind } from '@sandboxd/protocol/errors';
import type { ErrorKind } from './types.js';

/** What an error is about: a server error kind, or a failure to get any answer. */
export type SandboxdErrorKind = ErrorKind | 'connection' | 'timeout' | 'unknown';

/** Base of every error the SDK throws for a failed call. */
export class SandboxdApiError extends Error {
  /** HTTP status; 0 when no answer arrived (connection failure or timeout). */
  readonly status: number;
  /** The `code` of the error body (the HTTP status number), or 0. */
  readonly code: number;
  /** The `details` of the error body, as sent. */
  readonly details: unknown;
  readonly kind: SandboxdErrorKind;
  /** How long the server asked to wait before a retry (Retry-After), when it said. */
  retryAfterMs?: number;
  constructor(
    message: string,
    o: { status: number; code?: number; details?: unknown; kind?: SandboxdErrorKind; cause?: unknown },
  ) {
    super(message, o.cause === undefined ? undefined : { cause: o.cause });
    this.name = new.target.name;
    this.status = o.status;
    this.code = o.code ?? o.status;
    this.details = o.details;
    this.kind = o.kind ?? 'unknown';
  }
}

/** One field problem of a 400 answer. */
export interface ValidationProblem {
  in: string;
  path: string;
  message: string;
  allowed?: unknown[];
}

/** 400: the request was malformed or failed validation; `problems` lists each field. */
export class ValidationError extends SandboxdApiError {
  get problems(): ValidationProblem[] {
    return Array.isArray(this.details) ? (this.details as ValidationProblem[]) : [];
  }
}
/** 401: no, bad or revoked credentials. */
export class AuthenticationError extends SandboxdApiError {}
/** 402: not enough tokens for the requested lifetime. */
export class InsufficientTokensError extends SandboxdApiError {}
/** 403: the account's concurrency limit of started sandboxes is reached. */
export class ConcurrencyLimitError extends SandboxdApiError {}
/** 403: another plan quota would be passed (`maxPaused`, `snapshotBytes`); `details.quota` names it. */
export class QuotaExceededError extends SandboxdApiError {}
/** 403: the sandbox's user may not do this to the file; `details.path` names it. */
export class PermissionError extends SandboxdApiError {}
/** 404: the resource does not exist (or belongs to another account). */
export class NotFoundError extends SandboxdApiError {}
/** 404 on create: the image (template) does not exist; `details.image` names it. */
export class TemplateNotFoundError extends NotFoundError {}
/** 409: wrong state (e.g. the sandbox is stopped) or a conflicting resource. */
export class ConflictError extends SandboxdApiError {}
/** 409: the sandbox serves no code interpreter; create it from `details.image` (`local/code-interpreter`). */
export class NoCodeInterpreterError extends ConflictError {}
/** 413: the request body is too large. */
export class PayloadTooLargeError extends SandboxdApiError {}
/** 416: the range of a download is outside the file. */
export class RangeNotSatisfiableError extends SandboxdApiError {}
/** 429: rate limited; `retryAfterMs` when the server said. */
export class RateLimitError extends SandboxdApiError {}
/** 408 or 431: the request took too long to arrive, or its headers were too large. */
export class BadRequestError extends SandboxdApiError {}
/** 5xx: the server failed; the message leaks no internals. */
export class ServerError extends SandboxdApiError {}
/** 501: the server does not support this operation or feature (yet); the message names it. */
export class UnsupportedError extends SandboxdApiError {}
/** 503: the server is starting or shutting down. */
export class ServiceUnavailableError extends ServerError {}
/** 503: the host has no room for more sandboxes now; `retryAfterMs` says when to try again. */
export class CapacityError extends ServiceUnavailableError {}
/** 507: the server is out of storage; it refuses work that needs disk space until space is freed. */
export class InsufficientStorageError extends ServerError {}
/** 507: the sandbox's root disk or volume is full (its cap); nothing half-written was kept. */
export class NoSpaceError extends ServerError {}
/** 502 or 504 from the port proxy: the sandbox's port gave no valid answer, or none in time. */
export class UpstreamError extends ServerError {}
/** No answer: the server could not be reached or the connection broke. */
export class ConnectionError extends SandboxdApiError {}
/** No answer within the request timeout. */
export class RequestTimeoutError extends ConnectionError {}

type ErrorClass = new (message: string, o: ConstructorParameters<typeof SandboxdApiError>[1]) => SandboxdApiError;

const CLASS_BY_KIND: Record<ErrorKind, ErrorClass> = {
  validation: ValidationError,
  unauthorized: AuthenticationError,
  tokens: InsufficientTokensError,
  concurrency: ConcurrencyLimitError,
  quota: QuotaExceededError,
  permission: PermissionError,
  not_found: NotFoundError,
  template_not_found: TemplateNotFoundError,
  request_timeout: BadRequestError,
  conflict: ConflictError,
  no_code_interpreter: NoCodeInterpreterError,
  payload_too_large: PayloadTooLargeError,
  range_not_satisfiable: RangeNotSatisfiableError,
  rate_limited: RateLimitError,
  headers_too_large: BadRequestError,
  internal: ServerError,
  unsupported: UnsupportedError,
  upstream: UpstreamError,
  unavailable: ServiceUnavailableError,
  capacity: CapacityError,
  upstream_timeout: UpstreamError,
  insufficient_storage: InsufficientStorageError,
  no_space: NoSpaceError,
};

/**
 * The kind of an error answer: the body's `kind` when it names one this SDK knows; otherwise
 * (an answer that is not a sandboxd error body, e.g. from a proxy in front, or a kind newer
 * than this SDK) the first kind of the status, so a 404 is a NotFoundError and a 5xx a ServerError.
 */
function kindOf(status: number, kind: unknown): ErrorKind | undefined {
  if (isErrorKind(kind)) return kind;
  return ERROR_KINDS.find((k) => ERROR_STATUS[k] === status);
}

/**
 * The typed error of an error answer. `body` is the parsed JSON (or anything else: then a
 * message is made from the status). Unknown 5xx become ServerError, other unknown statuses
 * SandboxdApiError.
 */
export function errorFromResponse(
  status: number,
  body: unknown,
  opts: { statusText?: string; retryAfter?: string | null } = {},
): SandboxdApiError {
  const b = (typeof body === 'object' && body !== null ? body : {}) as {
    code?: unknown;
    kind?: unknown;
    message?: unknown;
    details?: unknown;
  };
  const message =
    typeof b.message === 'string' && b.message !== ''
      ? b.message
      : `HTTP ${status}${opts.statusText ? ` ${opts.statusText}` : ''}`;
  const code = typeof b.code === 'number' ? b.code : status;
  const kind = kindOf(status, b.kind);
  const Cls = kind ? CLASS_BY_KIND[kind] : status >= 500 ? ServerError : SandboxdApiError;
  const err = new Cls(message, {
    status,
    code,
    details: b.details,
    kind: kind ?? (status >= 500 ? 'internal' : 'unknown'),
  });
  if (opts.retryAfter) {
    const s = Number(opts.retryAfter);
    if (Number.isFinite(s) && s >= 0) err.retryAfterMs = s * 1000;
  }
  return err;
}
