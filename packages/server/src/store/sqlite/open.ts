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
  cacheStatements(db);
  return db;
}

/**
 * Makes `db.prepare` return one statement per SQL text. Preparing costs more than running a
 * point query (~15 vs ~4 us here), and every API request runs a few (key, account, sandbox).
 * The texts are literals in the store (a few vary with a list's length), so the cache stays
 * small; past `max` texts, statements are prepared as before. No code here iterates a
 * statement (`.iterate()`) or switches its mode (`.pluck()`, `.raw()`), which a shared
 * statement would not allow.
 */
export function cacheStatements(db: Db, max = 256): void {
  const prepare = db.prepare.bind(db) as (sql: string) => Database.Statement;
  const cache = new Map<string, Database.Statement>();
  db.prepare = ((sql: string) => {
    let s = cache.get(sql);
    if (!s) {
      s = prepare(sql);
      if (cache.size < max) cache.set(sql, s);
    }
    return s;
  }) as Db['prepare'];
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
