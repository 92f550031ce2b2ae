/**
 * Facts about the instance as a whole, one row per key: `release` (the release of sandboxd
 * that last served this data) and `release_since` (when, epoch ms, it first did); a server
 * refuses data a newer release has served (store/release-marker.ts). Numbered 11.
 */
export const sql = `
CREATE TABLE instance_meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;
`;
