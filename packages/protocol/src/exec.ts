import { Type, type Static } from 'typebox';
import { EnvMap } from './sandbox.js';
import { LIMITS } from './common.js';

/** Options of an exec; all optional. */
export const ExecOptionsSchema = Type.Object(
  {
    background: Type.Optional(Type.Boolean({ description: 'Default false. When true, answers at once with `pid`.' })),
    cwd: Type.Optional(Type.String({ minLength: 1, maxLength: 4096, pattern: '^[^\\u0000]+$' })),
    env: Type.Optional(EnvMap),
    timeoutMs: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: LIMITS.maxExecTimeoutMs,
        description: `Foreground only; default ${LIMITS.defaultExecTimeoutMs}; on expiry exitCode is 124.`,
      }),
    ),
  },
  { title: 'ExecOptions', additionalProperties: false },
);

/** The body of `POST /api/v1/sandboxes/{id}/exec`: runs `/bin/sh -c command`. */
export const ExecRequestSchema = Type.Object(
  {
    command: Type.String({
      minLength: 1,
      maxLength: LIMITS.maxArgBytes,
      pattern: '^[^\\u0000]+$',
      description: `At most ${LIMITS.maxArgBytes} bytes in UTF-8.`,
    }),
    options: Type.Optional(ExecOptionsSchema),
  },
  { title: 'ExecRequest', additionalProperties: false },
);
export type ExecRequest = Static<typeof ExecRequestSchema>;

/** The result of an exec. `truncated` appears only when output was cut; `pid` only for background. */
export const ExecResultSchema = Type.Object(
  {
    stdout: Type.String(),
    stderr: Type.String(),
    exitCode: Type.Integer(),
    success: Type.Boolean({ description: 'exitCode === 0.' }),
    truncated: Type.Optional(Type.Boolean()),
    pid: Type.Optional(Type.Integer()),
  },
  { title: 'ExecResult', additionalProperties: false },
);
export type ExecResult = Static<typeof ExecResultSchema>;
