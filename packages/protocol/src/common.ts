import { Type, type Static } from 'typebox';
import { ERROR_KINDS } from './errors.js';

/** Limits of the wire contract that clients may rely on. */
export const LIMITS = {
  /** Default sandbox lifetime when `timeoutMs` is omitted. */
  defaultTimeoutMs: 600_000,
  /** Largest request body in bytes; larger bodies answer 413. */
  maxBodyBytes: 1_048_576,
  /** Largest serialized `metadata` of a tracked event, in bytes. */
  maxEventMetadataBytes: 8_192,
  /** Default foreground exec timeout. */
  defaultExecTimeoutMs: 60_000,
  /** Largest foreground exec timeout accepted in `options.timeoutMs`. */
  maxExecTimeoutMs: 3_600_000,
  /** Per-stream exec output cap; past it `truncated` is set. */
  maxExecOutputBytes: 1_048_576,
  /** Page size bounds of list operations. */
  maxPageSize: 1000,
  defaultPageSize: 100,
  /**
   * Largest `command`, and largest `NAME=value` environment entry, in UTF-8 bytes: Linux's
   * MAX_ARG_STRLEN (128 KiB) less the terminating NUL. Longer ones could never be exec'd.
   */
  maxArgBytes: 131_071,
  /** Largest number of volumes one sandbox may mount. */
  maxVolumesPerSandbox: 16,
  /** Largest number of `metadata` keys of a sandbox. */
  maxMetadataKeys: 50,
  /** Largest `metadata` of a sandbox: keys and values, UTF-8 bytes, in all. */
  maxMetadataBytes: 1024,
} as const;

/** Volume name rule of the spec: lowercase letters, digits and underscores, 1..30. */
export const VOLUME_NAME_PATTERN = '^[a-z0-9_]{1,30}$';
/** Sandbox id: `sbx_` + 20 lowercase base32 characters. */
export const SANDBOX_ID_PATTERN = '^sbx_[a-z2-7]{20}$';
/** Terminal id: `term_` + 16 lowercase base32 characters. */
export const TERMINAL_ID_PATTERN = '^term_[a-z2-7]{16}$';

/** An ISO 8601 UTC date-time string such as `2025-01-01T00:00:00.000Z`. */
export const DateTime = Type.String({ format: 'date-time' });

/** The error body of every non-2xx answer; `code` repeats the HTTP status. */
export const ErrorBodySchema = Type.Object(
  {
    code: Type.Integer({ description: 'HTTP status number.' }),
    kind: Type.Enum(ERROR_KINDS, {
      description:
        'What went wrong, stable across versions: branch on this, not on `code` (several kinds share a status) or `message`.',
    }),
    message: Type.String({ description: 'For people: what was wrong and, where it helps, what to do.' }),
    details: Type.Optional(Type.Unknown({ description: 'Structured detail; for 400, a list of {path, message}.' })),
  },
  { title: 'Error', additionalProperties: false },
);
export type ErrorBodyWire = Static<typeof ErrorBodySchema>;

/** One validation problem, as listed in the `details` of a 400 answer. */
export interface ValidationProblem {
  /** Where: `body`, `query`, `params` or `headers`. */
  in: string;
  /** JSON pointer into that part, e.g. `/volumes/~1data/sizeGb`; `` for the whole part. */
  path: string;
  message: string;
  /** Allowed values, when the field is an enum. */
  allowed?: unknown[];
}

/** `{ success: true }`, the answer of operations with nothing else to say. */
export const SuccessReply = Type.Object(
  { success: Type.Literal(true) },
  { title: 'Success', additionalProperties: false },
);

/** Paging query shared by list operations. */
export const PageQuery = {
  limit: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: LIMITS.maxPageSize,
      description: `Page size, default ${LIMITS.defaultPageSize}.`,
    }),
  ),
  cursor: Type.Optional(
    Type.String({ minLength: 1, maxLength: 200, description: 'Opaque; the `nextCursor` of the previous page.' }),
  ),
};
