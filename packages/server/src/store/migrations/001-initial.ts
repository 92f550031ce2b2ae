/** The first schema. Times are epoch milliseconds (INTEGER). */
export const sql = `
CREATE TABLE accounts (
  id TEXT PRIMARY KEY,
  email TEXT NOT NULL UNIQUE COLLATE NOCASE,
  password_hash TEXT,
  plan TEXT NOT NULL,
  admin INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL
);
CREATE TABLE sessions (
  token_hash TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
);
CREATE TABLE login_links (
  token_hash TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  expires_at INTEGER NOT NULL,
  used_at INTEGER
);
CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  prefix TEXT NOT NULL,
  key_hash TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL,
  last_used_at INTEGER
);
CREATE INDEX api_keys_account ON api_keys(account_id, created_at);
CREATE TABLE sandboxes (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  name TEXT NOT NULL,
  image TEXT NOT NULL,
  region TEXT NOT NULL,
  env_json TEXT NOT NULL,
  volumes_json TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('creating', 'started', 'stopped', 'error')),
  stop_at INTEGER NOT NULL,
  reserved_minutes INTEGER NOT NULL,
  ended_at INTEGER,
  details_json TEXT,
  UNIQUE (account_id, name)
);
CREATE INDEX sandboxes_account_list ON sandboxes(account_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_state_stop ON sandboxes(state, stop_at);
CREATE TABLE volumes (
  account_id TEXT NOT NULL REFERENCES accounts(id),
  name TEXT NOT NULL,
  size_gb INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, name)
);
CREATE TABLE sandbox_mounts (
  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  account_id TEXT NOT NULL,
  volume_name TEXT NOT NULL,
  mount_path TEXT NOT NULL,
  PRIMARY KEY (sandbox_id, mount_path)
);
CREATE INDEX sandbox_mounts_volume ON sandbox_mounts(account_id, volume_name);
CREATE TABLE ledger (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  delta INTEGER NOT NULL,
  reason TEXT NOT NULL,
  sandbox_id TEXT,
  created_at INTEGER NOT NULL
);
CREATE INDEX ledger_account ON ledger(account_id, id);
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  event TEXT NOT NULL,
  metadata_json TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX events_account ON events(account_id, id);
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
`;
