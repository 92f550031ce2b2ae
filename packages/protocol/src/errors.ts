/**
 * The few error kinds of sandboxd, each with a stable HTTP status. Server, SDK, CLI and
 * console share this table; a kind without a status fails to compile.
 */
export const ERROR_STATUS = {
  validation: 400,
  unauthorized: 401,
  insufficient_tokens: 402,
  concurrency_limit: 403,
  not_found: 404,
  template_not_found: 404,
  conflict: 409,
  payload_too_large: 413,
  rate_limited: 429,
  internal: 500,
  unavailable: 503,
  /** The server's data dir is out of space: not the client's fault, and no retry helps until space is freed. */
  insufficient_storage: 507,
} as const satisfies Record<string, number>;

export type ErrorKind = keyof typeof ERROR_STATUS;

/** The wire shape of every error response: `code` is the HTTP status number. */
export interface ErrorBody {
  code: number;
  message: string;
  details?: unknown;
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
    return this.details === undefined
      ? { code: this.status, message: this.message }
      : { code: this.status, message: this.message, details: this.details };
  }
}

export function isSandboxdError(e: unknown): e is SandboxdError {
  return e instanceof SandboxdError;
}
