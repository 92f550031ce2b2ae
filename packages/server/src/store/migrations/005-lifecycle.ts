/**
 * The lifecycle of turn 2: states `paused` and `starting` (the old CHECK constraint is
 * replaced by rebuilding the table, with its mounts kept aside: dropping the old table
 * cascades to them), `onTimeout`, the start of the current run (billing and lifetime count
 * from it), a paused sandbox's deletion time; and the accounts' snapshots.
 */
export const sql = `
CREATE TABLE sandbox_mounts_keep AS SELECT * FROM sandbox_mounts;
CREATE TABLE sandboxes_next (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  name TEXT NOT NULL,
  image TEXT NOT NULL,
  region TEXT NOT NULL,
  env_json TEXT NOT NULL,
  volumes_json TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('creating', 'started', 'paused', 'stopped', 'starting', 'error')),
  stop_at INTEGER NOT NULL,
  reserved_minutes INTEGER NOT NULL,
  ended_at INTEGER,
  details_json TEXT,
  ports_public INTEGER NOT NULL DEFAULT 1 CHECK (ports_public IN (0, 1)),
  template TEXT,
  metadata_json TEXT,
  on_timeout TEXT NOT NULL DEFAULT 'stop' CHECK (on_timeout IN ('stop', 'pause')),
  run_started_at INTEGER,
  expires_at INTEGER,
  UNIQUE (account_id, name)
);
INSERT INTO sandboxes_next (id, account_id, name, image, region, env_json, volumes_json, created_at, state, stop_at,
  reserved_minutes, ended_at, details_json, ports_public, template, metadata_json)
  SELECT id, account_id, name, image, region, env_json, volumes_json, created_at, state, stop_at,
  reserved_minutes, ended_at, details_json, ports_public, template, metadata_json FROM sandboxes;
DROP TABLE sandboxes;
ALTER TABLE sandboxes_next RENAME TO sandboxes;
CREATE INDEX sandboxes_account_list ON sandboxes(account_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_state_stop ON sandboxes(state, stop_at);
CREATE INDEX sandboxes_state_expires ON sandboxes(state, expires_at);
INSERT INTO sandbox_mounts SELECT * FROM sandbox_mounts_keep;
DROP TABLE sandbox_mounts_keep;
CREATE TABLE snapshots (
  account_id TEXT NOT NULL REFERENCES accounts(id),
  name TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('creating', 'ready')),
  size_bytes INTEGER NOT NULL,
  base_image TEXT NOT NULL,
  sandbox_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, name)
);
`;
