/**
 * Fixed-window rate-limit counters (`Counters` in store.ts), shared by every server on this
 * database. No index on reset_at: every hit writes it, while expired rows are purged by a
 * scan once a minute.
 */
export const sql = `
CREATE TABLE rate_counters (
  key TEXT PRIMARY KEY,
  count INTEGER NOT NULL,
  reset_at INTEGER NOT NULL
) WITHOUT ROWID;
`;
