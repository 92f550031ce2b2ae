import { Type, type Static } from 'typebox';
import { ErrorBodySchema } from './common.js';

/**
 * Image builds (templates): a Dockerfile and a context, built step by step in sandboxes of
 * the account into the image `templates/<name>:<tag>`, private to the account (like
 * `snapshots/<name>`). See docs/templates.md.
 */

/** Public image prefix of an account's templates: `templates/<name>:<tag>`. */
export const TEMPLATE_IMAGE_PREFIX = 'templates/';
/** Template name rule: lowercase letters, digits, `_`, `.` and `-`, starting with a letter or digit, 1..63. */
export const TEMPLATE_NAME_PATTERN = '^[a-z0-9][a-z0-9_.-]{0,62}$';
/** Tag rule (Docker's): letters, digits, `_`, `.` and `-`, not starting with `.` or `-`, 1..128. */
export const TEMPLATE_TAG_PATTERN = '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$';
/** The tag when none is given. */
export const DEFAULT_TEMPLATE_TAG = 'latest';

/** Build states, in order; the last three are final. */
export const BUILD_STATES = ['queued', 'building', 'ready', 'error', 'cancelled'] as const;
export type BuildState = (typeof BUILD_STATES)[number];
export const FINAL_BUILD_STATES: readonly BuildState[] = ['ready', 'error', 'cancelled'];

/** Media type of a build's context: a tar stream, optionally gzip-compressed. */
export const BUILD_CONTEXT_MEDIA_TYPES = ['application/x-tar', 'application/gzip', 'application/x-gzip'] as const;

/**
 * Query of `POST /api/v1/images/builds`; the body is the context as a tar stream
 * (`Content-Type: application/x-tar`, or gzip). The Dockerfile is `dockerfile` inside the
 * context (default `Dockerfile`), or `dockerfileText` given inline (then the context may be
 * empty).
 */
export const BuildCreateQuerySchema = Type.Object(
  {
    name: Type.String({ pattern: TEMPLATE_NAME_PATTERN, description: 'Template name.' }),
    tag: Type.Optional(Type.String({ pattern: TEMPLATE_TAG_PATTERN, description: 'Default `latest`.' })),
    dockerfile: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 1024,
        description: 'Path of the Dockerfile in the context; default `Dockerfile`.',
      }),
    ),
    buildArgs: Type.Optional(
      Type.String({ maxLength: 65536, description: 'JSON object of `ARG` values, e.g. `{"VERSION":"1.2"}`.' }),
    ),
    allowDomains: Type.Optional(
      Type.String({
        maxLength: 8192,
        description:
          'Comma-separated domains (`*.example.com` allowed) RUN steps may reach; default: none. Bounded by the plan.',
      }),
    ),
    noCache: Type.Optional(Type.Boolean({ description: 'Run every step even when a cached result exists.' })),
  },
  { additionalProperties: false },
);
export type BuildCreateQuery = Static<typeof BuildCreateQuerySchema>;

/** Why a build failed: the step and Dockerfile line, the instruction, and the end of its output. */
export const BuildFailureSchema = Type.Object(
  {
    code: Type.Integer(),
    kind: ErrorBodySchema.properties.kind,
    message: Type.String(),
    details: Type.Optional(
      Type.Object(
        {
          step: Type.Optional(Type.Integer({ minimum: 1, description: 'Failing step, from 1.' })),
          line: Type.Optional(Type.Integer({ minimum: 1, description: 'Its line in the Dockerfile.' })),
          instruction: Type.Optional(Type.String({ description: 'The instruction as written.' })),
          exitCode: Type.Optional(Type.Integer()),
          output: Type.Optional(Type.String({ description: 'The last 4 KiB of its output.' })),
        },
        { additionalProperties: true },
      ),
    ),
  },
  { title: 'BuildFailure', additionalProperties: false },
);
export type BuildFailure = Static<typeof BuildFailureSchema>;

/** A build. */
export const BuildSchema = Type.Object(
  {
    id: Type.String({ description: '`bld_...`' }),
    name: Type.String(),
    tag: Type.String(),
    image: Type.String({ description: '`templates/<name>:<tag>`: what a create names once the build is ready.' }),
    state: Type.Enum([...BUILD_STATES]),
    createdAt: Type.String({ format: 'date-time' }),
    startedAt: Type.Optional(Type.String({ format: 'date-time' })),
    finishedAt: Type.Optional(Type.String({ format: 'date-time' })),
    steps: Type.Object(
      {
        total: Type.Integer({ minimum: 0 }),
        done: Type.Integer({ minimum: 0 }),
        cached: Type.Integer({ minimum: 0, description: 'Steps whose result came from the cache.' }),
      },
      { additionalProperties: false },
    ),
    digest: Type.Optional(Type.String({ description: 'Config digest of the image, once ready.' })),
    sizeBytes: Type.Optional(
      Type.Integer({ minimum: 0, description: 'What the image adds over its base, once ready.' }),
    ),
    error: Type.Optional(BuildFailureSchema),
  },
  { title: 'Build', additionalProperties: false },
);
export type Build = Static<typeof BuildSchema>;

export const BuildReplySchema = Type.Object(
  { build: BuildSchema },
  { title: 'BuildReply', additionalProperties: false },
);
export type BuildReply = Static<typeof BuildReplySchema>;

export const BuildListSchema = Type.Object(
  { count: Type.Integer({ minimum: 0 }), builds: Type.Array(BuildSchema) },
  { title: 'BuildList', additionalProperties: false },
);
export type BuildList = Static<typeof BuildListSchema>;

/** Query of `GET /api/v1/images/builds/{buildId}/logs`. */
export const BuildLogsQuerySchema = Type.Object(
  {
    offset: Type.Optional(
      Type.Integer({
        minimum: 0,
        description: 'First `seq` to send: resume after a dropped connection with the last seq + 1.',
      }),
    ),
    follow: Type.Optional(Type.Boolean({ description: 'Keep the stream open until the build ends.' })),
  },
  { additionalProperties: false },
);
export type BuildLogsQuery = Static<typeof BuildLogsQuerySchema>;

/**
 * One line of a build's log stream (NDJSON). `log` lines carry a `seq` (from 0, no gaps) to
 * resume from; a followed stream ends with exactly one `end` line (the build's final state).
 * `stream` is `system` for the builder's own lines (`Step 2/7 : RUN ...`, `CACHED`).
 */
export const BuildLogEventSchema = Type.Union(
  [
    Type.Object(
      {
        type: Type.Literal('log'),
        seq: Type.Integer({ minimum: 0 }),
        time: Type.String({ format: 'date-time' }),
        step: Type.Optional(Type.Integer({ minimum: 1 })),
        stream: Type.Enum(['stdout', 'stderr', 'system']),
        text: Type.String(),
      },
      { additionalProperties: false },
    ),
    Type.Object(
      { type: Type.Literal('end'), state: Type.Enum([...BUILD_STATES]), error: Type.Optional(BuildFailureSchema) },
      { additionalProperties: false },
    ),
  ],
  { title: 'BuildLogEvent' },
);
export type BuildLogEvent = Static<typeof BuildLogEventSchema>;

/** A ready template of the account. */
export const TemplateSchema = Type.Object(
  {
    name: Type.String(),
    tag: Type.String(),
    image: Type.String({ description: '`templates/<name>:<tag>`' }),
    digest: Type.String(),
    sizeBytes: Type.Integer({ minimum: 0 }),
    buildId: Type.String({ description: 'The build that made it.' }),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { title: 'Template', additionalProperties: false },
);
export type Template = Static<typeof TemplateSchema>;

export const TemplateListSchema = Type.Object(
  { count: Type.Integer({ minimum: 0 }), templates: Type.Array(TemplateSchema) },
  { title: 'TemplateList', additionalProperties: false },
);
export type TemplateList = Static<typeof TemplateListSchema>;
