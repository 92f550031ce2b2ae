/**
 * Named leases (`Leases` in store.ts): the reaper's, so that of the servers sharing a
 * database one reaps at a time. One row per name, taken and renewed by one upsert.
 */
export const sql = `
CREATE TABLE leases (
  name TEXT PRIMARY KEY,
  holder TEXT NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
`;
