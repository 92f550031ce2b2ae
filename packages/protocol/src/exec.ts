import { Type, type Static } from 'typebox';
import { EnvMap } from './sandbox.js';
import { LIMITS } from './common.js';

/** A user inside the sandbox: `root`, a numeric `uid` or `uid:gid`, or a name from its /etc/passwd. */
export const UserName = Type.String({
  minLength: 1,
  maxLength: 64,
  pattern: '^([a-z_][a-z0-9_.-]*\\$?|[0-9]+(:[0-9]+)?)$',
  description: "`root`, a numeric `uid` or `uid:gid`, or a user name from the sandbox's /etc/passwd.",
});

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
        description: `Foreground default ${LIMITS.defaultExecTimeoutMs}; streamed and background: none unless given. On expiry the process tree is killed and exitCode is 124.`,
      }),
    ),
    stream: Type.Optional(
      Type.Boolean({
        description:
          'Answer `application/x-ndjson`: `start`, then `stdout`/`stderr` chunks as produced, then `exit`. The process goes on if the client drops.',
      }),
    ),
    user: Type.Optional(UserName),
    stdin: Type.Optional(
      Type.Boolean({ description: 'stdin is a pipe fed by `POST .../processes/{pid}/stdin` (else /dev/null).' }),
    ),
    tag: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 256,
        pattern: '^[^\\u0000]+$',
        description: 'A label shown in the process list.',
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
