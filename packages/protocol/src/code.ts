import { Type, type Static } from 'typebox';
import { LIMITS } from './common.js';
import { EnvMap } from './sandbox.js';

/**
 * The code interpreter of a sandbox (`/api/v1/sandboxes/{id}/code/...`): sandboxd's
 * authenticated relay to the in-sandbox server on port {@link CODE_INTERPRETER.port}, which
 * speaks E2B's code-interpreter protocol. Shapes here are sandboxd's (camelCase).
 */
export const CODE_INTERPRETER = {
  /** The port the in-sandbox code server listens on (E2B's). */
  port: 49999,
  /** The image whose sandboxes serve it. */
  image: 'local/code-interpreter',
  /** How long a run may last when the request does not say (E2B's SDK default). */
  defaultTimeoutMs: 300_000,
  /** The longest run a request may ask for. */
  maxTimeoutMs: LIMITS.maxExecTimeoutMs,
  /** The largest code a run may send, in bytes of UTF-8. */
  maxCodeBytes: 1024 * 1024,
} as const;

const Language = Type.String({
  minLength: 1,
  maxLength: 64,
  description:
    'The kernel language: `python` (default), `javascript`, `typescript`, `bash`, `r` where the image has it. Case-insensitive, as E2B normalises it.',
});

const contextId = (description?: string) =>
  Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_.-]+$', description });

/** The body of `POST .../code/execute`. */
export const CodeExecuteRequestSchema = Type.Object(
  {
    code: Type.String({
      maxLength: CODE_INTERPRETER.maxCodeBytes,
      description: 'The code to run in the context (one cell).',
    }),
    language: Type.Optional(Language),
    contextId: Type.Optional(contextId('Run in this context (not with `language`).')),
    /** Env vars for this run only, over the sandbox's own; undone after it. */
    envs: Type.Optional(EnvMap),
    timeoutMs: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: CODE_INTERPRETER.maxTimeoutMs,
        description: `Default ${CODE_INTERPRETER.defaultTimeoutMs}. Past it the run is interrupted and the stream ends with an error event named \`TimeoutError\`.`,
      }),
    ),
  },
  { title: 'CodeExecuteRequest', additionalProperties: false },
);
export type CodeExecuteRequest = Static<typeof CodeExecuteRequestSchema>;

/** A code context: one kernel with its own state. */
export const CodeContextSchema = Type.Object(
  {
    id: Type.String(),
    language: Type.String(),
    cwd: Type.String({ description: 'The working directory its runs start in.' }),
  },
  { title: 'CodeContext', additionalProperties: false },
);
export type CodeContext = Static<typeof CodeContextSchema>;

/** The answer of `GET .../code/contexts`. */
export const CodeContextListSchema = Type.Object(
  { contexts: Type.Array(CodeContextSchema) },
  { title: 'CodeContextList', additionalProperties: false },
);

/** The body of `POST .../code/contexts`; both optional. */
export const CodeContextCreateSchema = Type.Object(
  {
    language: Type.Optional(Language),
    cwd: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 4096,
        pattern: '^/[^\\u0000]*$',
        description: 'Absolute; default `/home/user`.',
      }),
    ),
  },
  { title: 'CodeContextCreate', additionalProperties: false },
);
export type CodeContextCreate = Static<typeof CodeContextCreateSchema>;

/** Path parameters of the routes of one context. */
export const CodeContextParamsSchema = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: 64 }), contextId: contextId() },
  { additionalProperties: false },
);

/**
 * One result of a run: every representation the kernel gave. `png`/`jpeg`/`pdf` are base64;
 * `json` and `data` (a DataFrame's) are objects; `chart` is E2B's chart (type, title,
 * elements ...); `extra` holds MIME types with no field of their own. `isMainResult` is true
 * for the value of the cell's last expression, false for display outputs.
 */
export const CodeResultSchema = Type.Object(
  {
    text: Type.Optional(Type.String()),
    html: Type.Optional(Type.String()),
    markdown: Type.Optional(Type.String()),
    svg: Type.Optional(Type.String()),
    png: Type.Optional(Type.String()),
    jpeg: Type.Optional(Type.String()),
    pdf: Type.Optional(Type.String()),
    latex: Type.Optional(Type.String()),
    json: Type.Optional(Type.Unknown()),
    javascript: Type.Optional(Type.String()),
    data: Type.Optional(Type.Unknown()),
    chart: Type.Optional(Type.Unknown()),
    extra: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    isMainResult: Type.Boolean(),
  },
  { title: 'CodeResult', additionalProperties: false },
);
export type CodeResult = Static<typeof CodeResultSchema>;

/** The events of a run's NDJSON stream, one JSON object a line. */
export type CodeEvent =
  | { type: 'stdout' | 'stderr'; text: string; timestamp: string }
  | { type: 'result'; result: CodeResult }
  | { type: 'error'; name: string; value: string; traceback: string }
  | { type: 'executionCount'; count: number }
  | { type: 'end' };
