import { type Kysely, sql } from 'kysely';
import { RELEASE } from '../../release.js';
import { RELEASE_KEY, RELEASE_SINCE_KEY, refuseNewer } from '../release-marker.js';
import type { PgDatabase } from './schema.js';

/** A PostgreSQL schema step; recorded in `schema_version` once applied. */
export interface PgMigration {
  version: number;
  name: string;
  sql: string;
}

/**
 * The first PostgreSQL schema: the SQLite schema as of its migration 5, in PostgreSQL's
 * dialect. Times are epoch milliseconds (BIGINT, read back as JS numbers); documents
 * (`env`, `volumes`, `details`, `metadata`, events' metadata) are `json`, which keeps the
 * caller's key order (`jsonb` would reorder keys); the metadata filter casts to `jsonb` for
 * `@>`. Keys and names compare byte-wise (`COLLATE "C"`), as in SQLite, so list order and
 * cursors do not depend on the database's locale. Emails are unique case-insensitively.
 */
const initial = `
CREATE TABLE accounts (
  id TEXT COLLATE "C" PRIMARY KEY,
  email TEXT NOT NULL,
  password_hash TEXT,
  plan TEXT NOT NULL,
  admin BOOLEAN NOT NULL DEFAULT false,
  created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX accounts_email ON accounts (lower(email));
CREATE TABLE sessions (
  token_hash TEXT PRIMARY KEY,
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_expires ON sessions (expires_at);
CREATE TABLE login_links (
  token_hash TEXT PRIMARY KEY,
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  expires_at BIGINT NOT NULL,
  used_at BIGINT
);
CREATE TABLE api_keys (
  id TEXT COLLATE "C" PRIMARY KEY,
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  prefix TEXT NOT NULL,
  key_hash TEXT NOT NULL UNIQUE,
  created_at BIGINT NOT NULL,
  last_used_at BIGINT
);
CREATE INDEX api_keys_account ON api_keys (account_id, created_at);
CREATE TABLE sandboxes (
  id TEXT COLLATE "C" PRIMARY KEY,
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  name TEXT COLLATE "C" NOT NULL,
  image TEXT NOT NULL,
  region TEXT NOT NULL,
  env_json JSON NOT NULL,
  volumes_json JSON NOT NULL,
  created_at BIGINT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('creating', 'started', 'paused', 'stopped', 'starting', 'error')),
  stop_at BIGINT NOT NULL,
  reserved_minutes BIGINT NOT NULL,
  ended_at BIGINT,
  details_json JSON,
  ports_public BOOLEAN NOT NULL DEFAULT true,
  template TEXT,
  metadata_json JSON,
  on_timeout TEXT NOT NULL DEFAULT 'stop' CHECK (on_timeout IN ('stop', 'pause')),
  run_started_at BIGINT,
  expires_at BIGINT,
  UNIQUE (account_id, name)
);
CREATE INDEX sandboxes_account_list ON sandboxes (account_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_state_stop ON sandboxes (state, stop_at);
CREATE INDEX sandboxes_state_expires ON sandboxes (state, expires_at);
CREATE INDEX sandboxes_state_ended ON sandboxes (state, ended_at);
CREATE TABLE volumes (
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  name TEXT COLLATE "C" NOT NULL,
  size_gb INTEGER NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (account_id, name)
);
CREATE TABLE sandbox_mounts (
  sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  account_id TEXT COLLATE "C" NOT NULL,
  volume_name TEXT COLLATE "C" NOT NULL,
  mount_path TEXT NOT NULL,
  PRIMARY KEY (sandbox_id, mount_path)
);
CREATE INDEX sandbox_mounts_volume ON sandbox_mounts (account_id, volume_name);
CREATE TABLE ledger (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  delta BIGINT NOT NULL,
  reason TEXT NOT NULL,
  sandbox_id TEXT,
  created_at BIGINT NOT NULL
);
CREATE INDEX ledger_account ON ledger (account_id, id);
CREATE TABLE events (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  event TEXT NOT NULL,
  metadata_json JSON NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE INDEX events_account ON events (account_id, id);
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE rate_counters (
  key TEXT PRIMARY KEY,
  count BIGINT NOT NULL,
  reset_at BIGINT NOT NULL
);
CREATE TABLE snapshots (
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  name TEXT COLLATE "C" NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('creating', 'ready')),
  size_bytes BIGINT NOT NULL,
  base_image TEXT NOT NULL,
  sandbox_id TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (account_id, name)
);
`;

/** A sandbox's network settings (`{egress}`); as SQLite's migration 8. Numbered 4: 3 is another change's. */
const sandboxNetwork = `
ALTER TABLE sandboxes ADD COLUMN network_json JSON;
`;

/** Named leases (the reaper's: one replica reaps at a time); as SQLite's migration 6. */
const leases = `
CREATE TABLE leases (
  name TEXT PRIMARY KEY,
  holder TEXT NOT NULL,
  expires_at BIGINT NOT NULL
);
`;

/** The runner (node name) each sandbox and volume lives on; as SQLite's migration 7. */
const runners = `
ALTER TABLE sandboxes ADD COLUMN runner TEXT;
ALTER TABLE volumes ADD COLUMN runner TEXT;
`;

/** Each account's balance, kept with its ledger by a trigger; as SQLite's migration 9. */
const accountBalance = `
ALTER TABLE accounts ADD COLUMN balance BIGINT NOT NULL DEFAULT 0;
UPDATE accounts a SET balance = COALESCE((SELECT SUM(delta) FROM ledger l WHERE l.account_id = a.id), 0);
CREATE FUNCTION sandboxd_ledger_balance() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE accounts SET balance = balance + NEW.delta WHERE id = NEW.account_id;
  RETURN NULL;
END
$$;
CREATE TRIGGER ledger_balance AFTER INSERT ON ledger FOR EACH ROW EXECUTE FUNCTION sandboxd_ledger_balance();
`;

/**
 * Image builds: builds, their logs, the cache's layers, templates and E2B's uploads; as
 * SQLite's migration 10. `plan_json` keeps the caller's key order (`json`).
 */
const builds = `
CREATE TABLE builds (
  id TEXT COLLATE "C" PRIMARY KEY,
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  name TEXT COLLATE "C" NOT NULL,
  tag TEXT COLLATE "C" NOT NULL,
  extra_tags_json JSON NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('queued', 'building', 'ready', 'error', 'cancelled')),
  source TEXT NOT NULL CHECK (source IN ('dockerfile', 'e2b')),
  created_at BIGINT NOT NULL,
  started_at BIGINT,
  finished_at BIGINT,
  steps_total INTEGER NOT NULL DEFAULT 0,
  steps_done INTEGER NOT NULL DEFAULT 0,
  steps_cached INTEGER NOT NULL DEFAULT 0,
  digest TEXT,
  size_bytes BIGINT,
  error_json JSON,
  plan_json JSON,
  allow_domains_json JSON,
  no_cache BOOLEAN NOT NULL DEFAULT false,
  holder TEXT,
  log_lines INTEGER NOT NULL DEFAULT 0,
  log_bytes BIGINT NOT NULL DEFAULT 0,
  log_cut BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX builds_account ON builds (account_id, created_at DESC, id DESC);
CREATE INDEX builds_state ON builds (state, created_at);
CREATE TABLE build_logs (
  build_id TEXT COLLATE "C" NOT NULL REFERENCES builds(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  time BIGINT NOT NULL,
  step INTEGER,
  stream TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr', 'system')),
  text TEXT NOT NULL,
  PRIMARY KEY (build_id, seq)
);
CREATE TABLE build_layers (
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  key TEXT COLLATE "C" NOT NULL,
  driver_ref TEXT NOT NULL,
  parent_key TEXT,
  size_bytes BIGINT NOT NULL,
  created_at BIGINT NOT NULL,
  last_used_at BIGINT NOT NULL,
  PRIMARY KEY (account_id, key)
);
CREATE INDEX build_layers_lru ON build_layers (account_id, last_used_at);
CREATE TABLE templates (
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  name TEXT COLLATE "C" NOT NULL,
  tag TEXT COLLATE "C" NOT NULL,
  driver_ref TEXT NOT NULL,
  digest TEXT NOT NULL,
  size_bytes BIGINT NOT NULL,
  build_id TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (account_id, name, tag)
);
CREATE TABLE build_uploads (
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  hash TEXT COLLATE "C" NOT NULL,
  path TEXT NOT NULL,
  size_bytes BIGINT NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (account_id, hash)
);
`;

/** The release marker (store/release-marker.ts), as SQLite's migration 11. */
const instanceMeta = `
CREATE TABLE instance_meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  updated_at BIGINT NOT NULL
);
`;

/** Secrets and their audit trail (store/migrations/012-secrets.ts), as SQLite's migration 12. */
const secrets = `
CREATE TABLE secrets (
  account_id TEXT COLLATE "C" NOT NULL REFERENCES accounts(id),
  name TEXT COLLATE "C" NOT NULL,
  ciphertext TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  version INTEGER NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (account_id, name)
);
CREATE TABLE secret_injections (
  id TEXT COLLATE "C" PRIMARY KEY,
  account_id TEXT COLLATE "C" NOT NULL,
  sandbox_id TEXT COLLATE "C" NOT NULL,
  secret TEXT COLLATE "C" NOT NULL,
  destination TEXT NOT NULL,
  method TEXT NOT NULL,
  status INTEGER,
  error TEXT,
  at BIGINT NOT NULL
);
CREATE INDEX secret_injections_account ON secret_injections (account_id, at DESC, id DESC);
CREATE INDEX secret_injections_sandbox ON secret_injections (account_id, sandbox_id, at DESC, id DESC);
CREATE INDEX secret_injections_secret ON secret_injections (account_id, secret, at DESC, id DESC);
`;

/** Isolation tiers (store/migrations/013-isolation.ts), as SQLite's migration 13. */
const isolation = `
ALTER TABLE sandboxes ADD COLUMN isolation TEXT NOT NULL DEFAULT 'container' CHECK (isolation IN ('container', 'gvisor'));
ALTER TABLE sandboxes ADD COLUMN paused_memory TEXT CHECK (paused_memory IN ('ram', 'disk'));
`;

/** Every PostgreSQL migration, in order. Append only; never edit an applied one. */
export const PG_MIGRATIONS: readonly PgMigration[] = [
  { version: 1, name: 'initial', sql: initial },
  { version: 2, name: 'leases', sql: leases },
  { version: 3, name: 'runners', sql: runners },
  { version: 4, name: 'sandbox-network', sql: sandboxNetwork },
  { version: 5, name: 'account-balance', sql: accountBalance },
  { version: 6, name: 'builds', sql: builds },
  { version: 7, name: 'instance-meta', sql: instanceMeta },
  { version: 8, name: 'secrets', sql: secrets },
  { version: 9, name: 'isolation', sql: isolation },
];

/**
 * The advisory lock keys of sandboxd (two-int form: this class and an object): the
 * migrations' lock (session-level, held while migrating) and the host-wide lock that
 * serializes decisions on `maxSandboxes` (transaction-level).
 */
export const LOCK_CLASS = 0x5bd0;
export const LOCK_MIGRATE = 1;
export const LOCK_HOST = 2;

/**
 * Applies the pending migrations once, whichever process gets here first: on one
 * connection it takes the session advisory lock `(LOCK_CLASS, LOCK_MIGRATE)` (the others
 * wait on it), creates `schema_version` if missing, and applies each newer step in its own
 * transaction together with its `schema_version` row, then records `release` as the release
 * that last served it (`instance_meta`). A database a newer release has served (a newer
 * schema, or a newer release in its marker) is refused with a `DowngradeError` before any
 * change. Returns the version the database is at.
 */
export async function migrate(
  db: Kysely<PgDatabase>,
  migrations: readonly PgMigration[] = PG_MIGRATIONS,
  opts: { release?: string; where?: string; clock?: () => number } = {},
) {
  const release = opts.release ?? RELEASE;
  return db.connection().execute(async (conn) => {
    await sql`SELECT pg_advisory_lock(${LOCK_CLASS}, ${LOCK_MIGRATE})`.execute(conn);
    try {
      await sql`CREATE TABLE IF NOT EXISTS schema_version (
        version INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
      )`.execute(conn);
      const row = await sql<{ v: number | null }>`SELECT max(version) AS v FROM schema_version`.execute(conn);
      const current = row.rows[0]?.v ?? 0;
      const latest = migrations.at(-1)?.version ?? 0;
      const hasMeta = async () =>
        (await sql<{ t: string | null }>`SELECT to_regclass('instance_meta')::text AS t`.execute(conn)).rows[0]?.t !=
        null;
      const marked = async () =>
        (await hasMeta())
          ? (await sql<{ value: string }>`SELECT value FROM instance_meta WHERE key = ${RELEASE_KEY}`.execute(conn))
              .rows[0]?.value
          : undefined;
      refuseNewer({
        where: opts.where ?? 'the PostgreSQL database',
        release: await marked(),
        schema: current,
        thisRelease: release,
        thisSchema: latest,
      });
      for (const m of migrations) {
        if (m.version <= current) continue;
        await conn.transaction().execute(async (trx) => {
          await sql.raw(m.sql).execute(trx);
          await sql`INSERT INTO schema_version (version, name) VALUES (${m.version}, ${m.name})`.execute(trx);
        });
      }
      if ((await hasMeta()) && (await marked()) !== release) {
        const now = (opts.clock ?? Date.now)();
        await conn.transaction().execute(async (trx) => {
          for (const [key, value] of [
            [RELEASE_KEY, release],
            [RELEASE_SINCE_KEY, String(now)],
          ])
            await sql`INSERT INTO instance_meta (key, value, updated_at) VALUES (${key}, ${value}, ${now})
              ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`.execute(trx);
        });
      }
      return Math.max(current, latest);
    } finally {
      await sql`SELECT pg_advisory_unlock(${LOCK_CLASS}, ${LOCK_MIGRATE})`.execute(conn);
    }
  });
}
