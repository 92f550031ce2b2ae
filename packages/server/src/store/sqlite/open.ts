import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { MIGRATIONS, type Migration } from '../migrations/index.js';

export type Db = Database.Database;

/**
 * Opens (creating if needed) the SQLite file at `path` (or `:memory:`) with WAL,
 * synchronous=NORMAL (an answered write is in the WAL before the reply, so it survives a
 * kill -9 of the server; only an OS crash or power cut can drop the last commits, which is
 * the price of not blocking the event loop on an fsync per commit), foreign keys on,
 * and applies pending migrations, each in its own transaction.
 */
export function openDatabase(path: string, opts: { migrations?: readonly Migration[] } = {}): Db {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  migrate(db, opts.migrations ?? MIGRATIONS);
  return db;
}

function migrate(db: Db, migrations: readonly Migration[]): void {
  const current = db.pragma('user_version', { simple: true }) as number;
  const latest = migrations.at(-1)?.version ?? 0;
  if (current > latest) throw new Error(`database schema version ${current} is newer than this server (${latest})`);
  for (const m of migrations) {
    if (m.version <= current) continue;
    db.transaction(() => {
      db.exec(m.sql);
      db.pragma(`user_version = ${m.version}`);
    }).immediate();
  }
}
