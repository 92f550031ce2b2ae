/**
 * Secrets that never enter a sandbox (docs/secrets.md): an account's named values, encrypted
 * (`ciphertext`: `v1.<keyId>.<base64 iv|tag|data>`, services/secrets-crypto.ts; the key is
 * never in the database), and the audit trail of the injections the egress proxy made,
 * newest first by account, optionally of one sandbox or one secret. Numbered 12.
 */
export const sql = `
CREATE TABLE secrets (
  account_id TEXT NOT NULL REFERENCES accounts(id),
  name TEXT NOT NULL,
  ciphertext TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  version INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, name)
) WITHOUT ROWID;
CREATE TABLE secret_injections (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL,
  sandbox_id TEXT NOT NULL,
  secret TEXT NOT NULL,
  destination TEXT NOT NULL,
  method TEXT NOT NULL,
  status INTEGER,
  error TEXT,
  at INTEGER NOT NULL
);
CREATE INDEX secret_injections_account ON secret_injections (account_id, at DESC, id DESC);
CREATE INDEX secret_injections_sandbox ON secret_injections (account_id, sandbox_id, at DESC, id DESC);
CREATE INDEX secret_injections_secret ON secret_injections (account_id, secret, at DESC, id DESC);
`;
