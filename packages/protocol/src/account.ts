import { Type, type Static } from 'typebox';
import { DateTime, PageQuery } from './common.js';
import { ISOLATIONS } from './sandbox.js';

/** Plan name, as configured (e.g. `FREE`, `PRO`). */
export const PlanName = Type.String({ pattern: '^[A-Z][A-Z0-9_]{0,31}$' });

/** Per-plan limits as the account answer shows them. */
export const PlanLimitsSchema = Type.Object(
  {
    maxLifetimeMs: Type.Integer(),
    concurrency: Type.Integer(),
    memoryBytes: Type.Integer(),
    cpus: Type.Number(),
    pids: Type.Integer(),
    rootDiskBytes: Type.Integer(),
    maxPaused: Type.Integer({ description: 'Paused sandboxes the account may keep.' }),
    pausedRetentionMs: Type.Integer({ description: 'A paused sandbox is deleted this long after it paused.' }),
    snapshotBytes: Type.Integer({ description: 'Bytes all snapshots of the account may add on disk.' }),
    isolations: Type.Array(Type.Enum([...ISOLATIONS]), {
      description: 'The isolation tiers its sandboxes may ask for (`/healthz` lists those the host offers).',
    }),
    defaultIsolation: Type.Enum([...ISOLATIONS], { description: 'The tier of a create that names none.' }),
  },
  { title: 'PlanLimits', additionalProperties: false },
);

/** `GET /api/v1/account`: who you are, plan, token balance, limits and current usage. */
export const AccountSchema = Type.Object(
  {
    id: Type.String(),
    email: Type.String(),
    plan: PlanName,
    admin: Type.Boolean(),
    createdAt: DateTime,
    balance: Type.Integer({ description: 'Tokens; the sum of the ledger.' }),
    limits: PlanLimitsSchema,
    usage: Type.Object(
      {
        startedSandboxes: Type.Integer(),
        pausedSandboxes: Type.Integer(),
        volumes: Type.Integer(),
        snapshotBytes: Type.Integer(),
      },
      { additionalProperties: false },
    ),
  },
  { title: 'Account', additionalProperties: false },
);
export type Account = Static<typeof AccountSchema>;

/** One ledger row: a debit (negative) or credit (positive) of tokens. */
export const LedgerEntrySchema = Type.Object(
  {
    id: Type.Integer(),
    delta: Type.Integer(),
    reason: Type.String(),
    sandboxId: Type.Union([Type.String(), Type.Null()]),
    createdAt: DateTime,
  },
  { title: 'LedgerEntry', additionalProperties: false },
);
/** Query of `GET /api/v1/account/ledger`. */
export const LedgerQuerySchema = Type.Object({ ...PageQuery }, { additionalProperties: false });
/** A page of ledger rows, newest first. */
export const LedgerPageSchema = Type.Object(
  { entries: Type.Array(LedgerEntrySchema), nextCursor: Type.Optional(Type.String()) },
  { title: 'LedgerPage', additionalProperties: false },
);
export type LedgerPage = Static<typeof LedgerPageSchema>;

/** The body of `POST /api/v1/keys`. */
export const KeyCreateSchema = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 100 }) },
  { title: 'KeyCreate', additionalProperties: false },
);
/** An API key as listed: never the key itself. */
export const KeySchema = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    prefix: Type.String(),
    createdAt: DateTime,
    lastUsedAt: Type.Union([DateTime, Type.Null()]),
  },
  { title: 'ApiKey', additionalProperties: false },
);
/** The answer of key creation (201); `key` is shown this once. */
export const KeyCreatedSchema = Type.Object(
  { id: Type.String(), name: Type.String(), prefix: Type.String(), createdAt: DateTime, key: Type.String() },
  { title: 'ApiKeyCreated', additionalProperties: false },
);
export const KeyListSchema = Type.Object(
  { keys: Type.Array(KeySchema) },
  { title: 'ApiKeyList', additionalProperties: false },
);
export const KeyParamsSchema = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
);
export type KeyCreated = Static<typeof KeyCreatedSchema>;
export type ApiKey = Static<typeof KeySchema>;

/** A volume of the account. */
export const VolumeSchema = Type.Object(
  {
    name: Type.String(),
    sizeGb: Type.Integer(),
    createdAt: DateTime,
    mountedBy: Type.Array(Type.String(), { description: 'Ids of running sandboxes that mount it.' }),
  },
  { title: 'Volume', additionalProperties: false },
);
export const VolumeListSchema = Type.Object(
  { volumes: Type.Array(VolumeSchema) },
  { title: 'VolumeList', additionalProperties: false },
);
export const VolumeParamsSchema = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
);
export type Volume = Static<typeof VolumeSchema>;
