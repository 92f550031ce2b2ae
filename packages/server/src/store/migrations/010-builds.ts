/**
 * Image builds (templates): builds with their plan while they wait or run, their logs (one
 * row per line, `seq` from 0 per build), the cache's layers (an image of the runtime per
 * account and step key), templates (`templates/<name>:<tag>`: a row naming a layer's image)
 * and the file tars E2B clients upload. Numbered 10.
 */
export const sql = `
CREATE TABLE builds (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  name TEXT NOT NULL,
  tag TEXT NOT NULL,
  extra_tags_json TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('queued', 'building', 'ready', 'error', 'cancelled')),
  source TEXT NOT NULL CHECK (source IN ('dockerfile', 'e2b')),
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER,
  steps_total INTEGER NOT NULL DEFAULT 0,
  steps_done INTEGER NOT NULL DEFAULT 0,
  steps_cached INTEGER NOT NULL DEFAULT 0,
  digest TEXT,
  size_bytes INTEGER,
  error_json TEXT,
  plan_json TEXT,
  allow_domains_json TEXT,
  no_cache INTEGER NOT NULL DEFAULT 0,
  holder TEXT,
  log_lines INTEGER NOT NULL DEFAULT 0,
  log_bytes INTEGER NOT NULL DEFAULT 0,
  log_cut INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX builds_account ON builds (account_id, created_at DESC, id DESC);
CREATE INDEX builds_state ON builds (state, created_at);
CREATE TABLE build_logs (
  build_id TEXT NOT NULL REFERENCES builds(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  time INTEGER NOT NULL,
  step INTEGER,
  stream TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr', 'system')),
  text TEXT NOT NULL,
  PRIMARY KEY (build_id, seq)
) WITHOUT ROWID;
CREATE TABLE build_layers (
  account_id TEXT NOT NULL REFERENCES accounts(id),
  key TEXT NOT NULL,
  driver_ref TEXT NOT NULL,
  parent_key TEXT,
  size_bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  last_used_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, key)
) WITHOUT ROWID;
CREATE INDEX build_layers_lru ON build_layers (account_id, last_used_at);
CREATE TABLE templates (
  account_id TEXT NOT NULL REFERENCES accounts(id),
  name TEXT NOT NULL,
  tag TEXT NOT NULL,
  driver_ref TEXT NOT NULL,
  digest TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  build_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, name, tag)
) WITHOUT ROWID;
CREATE TABLE build_uploads (
  account_id TEXT NOT NULL REFERENCES accounts(id),
  hash TEXT NOT NULL,
  path TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, hash)
) WITHOUT ROWID;
`;
