import { Type, type Static } from 'typebox';
import { DateTime, LIMITS, PageQuery, SANDBOX_ID_PATTERN, VOLUME_NAME_PATTERN } from './common.js';
import { SandboxNetworkSchema } from './network.js';

/** Sandbox lifecycle states visible on the wire. */
export const SANDBOX_STATES = ['started', 'paused', 'stopped', 'error'] as const;
export type SandboxState = (typeof SANDBOX_STATES)[number];

/** What happens at `stopAt`: `stop` (the default) or `pause`. */
export const ON_TIMEOUT = ['stop', 'pause'] as const;
export type OnTimeout = (typeof ON_TIMEOUT)[number];

/**
 * Isolation tiers: `container` (Linux namespaces, seccomp and cgroups around the host's
 * kernel, crun) and `gvisor` (a user-space kernel, gVisor's runsc, between the sandbox and
 * the host's kernel). The plan lists the tiers an account may use and its default.
 */
export const ISOLATIONS = ['container', 'gvisor'] as const;
export type Isolation = (typeof ISOLATIONS)[number];

/**
 * Where a pause keeps a sandbox's memory: `ram` (frozen in place, the default for
 * containers and the only choice there) or `disk` (gVisor: checkpointed to disk, no RAM
 * held, survives a restart of the server or the host).
 */
export const PAUSE_MEMORY = ['ram', 'disk'] as const;
export type PauseMemory = (typeof PAUSE_MEMORY)[number];

/** Caller's labels: string to string, at most 50 keys and 1 KiB (keys and values, UTF-8) in all. */
export const MetadataMap = Type.Record(
  Type.String({ minLength: 1, maxLength: 256 }),
  Type.String({ maxLength: 1024 }),
  {
    additionalProperties: false,
    maxProperties: LIMITS.maxMetadataKeys,
    title: 'Metadata',
    description: `String to string; at most ${LIMITS.maxMetadataKeys} keys and ${LIMITS.maxMetadataBytes} bytes (keys and values, UTF-8) in all.`,
  },
);

/**
 * A sandbox as every response carries it; all fields but `expiresAt` are always present.
 * `stopAt` is when a started sandbox stops (or pauses, with `onTimeout: "pause"`); for a
 * paused or stopped one, when it paused or stopped.
 */
export const SandboxSchema = Type.Object(
  {
    id: Type.String({ pattern: SANDBOX_ID_PATTERN }),
    name: Type.String(),
    state: Type.Enum([...SANDBOX_STATES]),
    region: Type.String(),
    image: Type.String(),
    createdAt: DateTime,
    stopAt: DateTime,
    publicAccessUrlTemplate: Type.String({ description: 'Contains the literal `{{PORT}}`.' }),
    metadata: MetadataMap,
    onTimeout: Type.Enum([...ON_TIMEOUT]),
    expiresAt: Type.Optional(
      Type.String({
        format: 'date-time',
        description:
          "Paused, stopped or error: when the sandbox and what it kept (memory, root layer) are deleted (the plan's `pausedRetentionMs` after a pause; 24 hours after a stop).",
      }),
    ),
    network: Type.Optional(SandboxNetworkSchema),
    isolation: Type.Enum([...ISOLATIONS], {
      description: '`container` (namespaces, seccomp, cgroups: crun) or `gvisor` (a user-space kernel: runsc).',
    }),
    pausedMemory: Type.Optional(
      Type.Enum([...PAUSE_MEMORY], {
        description:
          'Paused only: where its memory is kept, `ram` (frozen in place) or `disk` (gVisor: checkpointed, no RAM held).',
      }),
    ),
  },
  { title: 'Sandbox', additionalProperties: false },
);
export type Sandbox = Static<typeof SandboxSchema>;

/** A volume name: `^[a-z0-9_]{1,30}$`. */
export const VolumeName = Type.String({ pattern: VOLUME_NAME_PATTERN, title: 'VolumeName' });

/** Object form of a volume specification. */
export const VolumeObjectSpec = Type.Object(
  {
    name: VolumeName,
    sizeGb: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100,
        description: 'Default 1 for a new volume; an existing volume keeps its size.',
      }),
    ),
  },
  { title: 'VolumeObjectSpec', additionalProperties: false },
);

/** A volume specification: a name, or `{name, sizeGb}`. */
export const VolumeSpec = Type.Union([VolumeName, VolumeObjectSpec], { title: 'VolumeSpec' });
export type VolumeSpecWire = Static<typeof VolumeSpec>;

/** Environment variables: string to string; names hold no `=` or NUL; each `NAME=value` at most 131,071 UTF-8 bytes. */
export const EnvMap = Type.Record(
  Type.String({ pattern: '^[^=\\u0000]{1,256}$' }),
  Type.String({ pattern: '^[^\\u0000]*$', maxLength: LIMITS.maxArgBytes }),
  {
    additionalProperties: false,
    maxProperties: 256,
    title: 'EnvMap',
  },
);

/** Mount path (absolute) to volume specification. */
export const VolumeMap = Type.Record(Type.String({ pattern: '^/[^\\u0000]{0,255}$' }), VolumeSpec, {
  additionalProperties: false,
  maxProperties: LIMITS.maxVolumesPerSandbox,
  title: 'VolumeMap',
});

/**
 * Beyond the spec: who may reach the sandbox's ports through `publicAccessUrlTemplate`.
 * Public by default; with `public: false` a request needs the owner's API key in
 * `X-Sandboxd-Key` or a link from `POST /api/v1/sandboxes/{id}/ports/{port}/link`.
 */
export const PortsOptions = Type.Object(
  { public: Type.Optional(Type.Boolean({ description: 'Default true: anyone with the URL reaches the ports.' })) },
  { title: 'PortsOptions', additionalProperties: false },
);

/** The body of `POST /api/v1/sandboxes`. */
export const SandboxCreateSchema = Type.Object(
  {
    image: Type.String({ minLength: 1, maxLength: 512 }),
    timeoutMs: Type.Optional(
      Type.Integer({ minimum: 0, description: `Default ${LIMITS.defaultTimeoutMs}; at most the plan's lifetime.` }),
    ),
    env: Type.Optional(EnvMap),
    volumes: Type.Optional(VolumeMap),
    ports: Type.Optional(PortsOptions),
    metadata: Type.Optional(MetadataMap),
    onTimeout: Type.Optional(
      Type.Enum([...ON_TIMEOUT], {
        description: 'At `stopAt`: `stop` (default; the root layer is kept for `start`) or `pause`.',
      }),
    ),
    network: Type.Optional(SandboxNetworkSchema),
    isolation: Type.Optional(
      Type.Enum([...ISOLATIONS], {
        description:
          "`container` or `gvisor`; default the plan's `defaultIsolation`. 403 `quota` when the plan does not allow it, 400 when the host does not offer it.",
      }),
    ),
  },
  { title: 'SandboxCreate', additionalProperties: false },
);
export type SandboxCreate = Static<typeof SandboxCreateSchema>;

/** `{ sandbox }`, the answer of create (201) and get. */
export const SandboxReplySchema = Type.Object(
  { sandbox: SandboxSchema },
  { title: 'SandboxReply', additionalProperties: false },
);
export type SandboxReply = Static<typeof SandboxReplySchema>;

/**
 * Query of `GET /api/v1/sandboxes`; `metadata.<key>=<value>` (repeatable) keeps the
 * sandboxes whose metadata has every such pair.
 */
export const SandboxListQuerySchema = Type.Object(
  { state: Type.Optional(Type.Enum(['started', 'paused', 'stopped', 'error'])), ...PageQuery },
  {
    additionalProperties: false,
    patternProperties: { '^metadata\\..+$': Type.String({ maxLength: 1024 }) },
  },
);
export type SandboxListQuery = Static<typeof SandboxListQuerySchema> & { [metadataKey: `metadata.${string}`]: string };

/** A page of sandboxes, newest first; `count` is the number in this page. */
export const SandboxListSchema = Type.Object(
  {
    count: Type.Integer({ minimum: 0 }),
    sandboxes: Type.Array(SandboxSchema),
    nextCursor: Type.Optional(Type.String({ description: 'Present when more remain.' })),
  },
  { title: 'SandboxList', additionalProperties: false },
);
export type SandboxList = Static<typeof SandboxListSchema>;

/** The `{id}` path parameter of sandbox operations. */
export const SandboxParamsSchema = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
);

/** The body of `PATCH /api/v1/sandboxes/{id}/timeout`; counted from now. */
export const TimeoutRequestSchema = Type.Object(
  { timeoutMs: Type.Integer({ minimum: 0, description: 'stopAt = now + timeoutMs; 0 stops at once.' }) },
  { title: 'TimeoutRequest', additionalProperties: false },
);
export type TimeoutRequest = Static<typeof TimeoutRequestSchema>;

/** The answer of the timeout update. */
export const TimeoutReplySchema = Type.Object(
  { id: Type.String(), stopAt: DateTime },
  { title: 'TimeoutReply', additionalProperties: false },
);
export type TimeoutReply = Static<typeof TimeoutReplySchema>;

/** Path parameters of `POST /api/v1/sandboxes/{id}/ports/{port}/link`. */
export const PortLinkParamsSchema = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: 64 }), port: Type.Integer({ minimum: 1, maximum: 65535 }) },
  { additionalProperties: false },
);

/** Body of the port link request; `{}` (or no body) takes the default lifetime. */
export const PortLinkRequestSchema = Type.Object(
  {
    expiresInMs: Type.Optional(
      Type.Integer({
        minimum: 1000,
        maximum: 604_800_000,
        description: 'Lifetime of the link; default 3600000 (1 hour), at most 7 days.',
      }),
    ),
  },
  { title: 'PortLinkRequest', additionalProperties: false },
);
export type PortLinkRequest = Static<typeof PortLinkRequestSchema>;

/** A signed link to one port of a sandbox: opening it sets a cookie for that host, then redirects. */
export const PortLinkReplySchema = Type.Object(
  { url: Type.String(), expiresAt: DateTime },
  { title: 'PortLink', additionalProperties: false },
);
export type PortLinkReply = Static<typeof PortLinkReplySchema>;

/** The optional body of `POST .../resume` and `POST .../start`. */
export const SandboxRunRequestSchema = Type.Object(
  {
    timeoutMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        description: `New lifetime counted from now; default ${LIMITS.defaultTimeoutMs}, at most the plan's lifetime.`,
      }),
    ),
  },
  { title: 'SandboxRunRequest', additionalProperties: false },
);
export type SandboxRunRequest = Static<typeof SandboxRunRequestSchema>;

/**
 * The optional body of `POST .../pause`: `{memory: "disk"}` (gVisor sandboxes) checkpoints
 * the sandbox to disk instead of freezing it in RAM. No body, or `{}`: `ram`.
 */
export const PauseRequestSchema = Type.Object(
  {
    memory: Type.Optional(
      Type.Enum([...PAUSE_MEMORY], {
        description:
          'Default `ram` (frozen in place). `disk`: gVisor only (400 on a container sandbox): every process and its memory checkpointed to disk, no RAM held (open terminals end); `resume` restores it.',
      }),
    ),
  },
  { title: 'PauseRequest', additionalProperties: false },
);
export type PauseRequest = Static<typeof PauseRequestSchema>;

/** Most sandboxes one fork call makes. */
export const MAX_FORK_COUNT = 10;

/** The body of `POST /api/v1/sandboxes/{id}/fork`. */
export const ForkRequestSchema = Type.Object(
  {
    count: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_FORK_COUNT,
        description: `How many sandboxes to make from the source's memory and files; default 1, at most ${MAX_FORK_COUNT}.`,
      }),
    ),
  },
  { title: 'ForkRequest', additionalProperties: false },
);
export type ForkRequest = Static<typeof ForkRequestSchema>;

/** The answer of fork (201): the new sandboxes, started, in the order of their names' `-fork-<n>`. */
export const ForkReplySchema = Type.Object(
  { sandboxes: Type.Array(SandboxSchema) },
  { title: 'ForkReply', additionalProperties: false },
);
export type ForkReply = Static<typeof ForkReplySchema>;

/** Snapshot name rule: lowercase letters, digits, `_`, `.` and `-`, starting with a letter or digit, 1..63. */
export const SNAPSHOT_NAME_PATTERN = '^[a-z0-9][a-z0-9_.-]{0,62}$';
/** The image reference prefix of snapshots: `snapshots/<name>`. */
export const SNAPSHOT_IMAGE_PREFIX = 'snapshots/';

/** The body of `POST /api/v1/sandboxes/{id}/snapshot`. */
export const SnapshotCreateSchema = Type.Object(
  { name: Type.String({ pattern: SNAPSHOT_NAME_PATTERN, title: 'SnapshotName' }) },
  { title: 'SnapshotCreate', additionalProperties: false },
);
export type SnapshotCreate = Static<typeof SnapshotCreateSchema>;

/** A snapshot: an image private to the account, usable as `image` in create. */
export const SnapshotSchema = Type.Object(
  {
    name: Type.String({ pattern: SNAPSHOT_NAME_PATTERN }),
    image: Type.String({ description: '`snapshots/<name>`: what create takes as `image`.' }),
    sizeBytes: Type.Integer({
      minimum: 0,
      description: "What it adds on disk over its base image; counted against the plan's `snapshotBytes`.",
    }),
    baseImage: Type.String({ description: 'The image of the sandbox it was taken from.' }),
    sandboxId: Type.String({ description: 'The sandbox it was taken from (which may be gone).' }),
    createdAt: DateTime,
  },
  { title: 'Snapshot', additionalProperties: false },
);
export type Snapshot = Static<typeof SnapshotSchema>;

/** `GET /api/v1/snapshots`: every snapshot of the account, newest first. */
export const SnapshotListSchema = Type.Object(
  { count: Type.Integer({ minimum: 0 }), snapshots: Type.Array(SnapshotSchema) },
  { title: 'SnapshotList', additionalProperties: false },
);
export type SnapshotList = Static<typeof SnapshotListSchema>;

/** The `{name}` path parameter of snapshot operations. */
export const SnapshotParamsSchema = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
);
