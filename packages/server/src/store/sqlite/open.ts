import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { RELEASE } from '../../release.js';
import { MIGRATIONS, type Migration } from '../migrations/index.js';
import { RELEASE_KEY, RELEASE_SINCE_KEY, refuseNewer } from '../release-marker.js';

export type Db = Database.Database;

/**
 * Opens (creating if needed) the SQLite file at `path` (or `:memory:`) with WAL,
 * synchronous=NORMAL (an answered write is in the WAL before the reply, so it survives a
 * kill -9 of the server; only an OS crash or power cut can drop the last commits, which is
 * the price of not blocking the event loop on an fsync per commit), foreign keys on,
 * and applies pending migrations, each in its own transaction; then records `release` as the
 * release that last served it (`instance_meta`, once the migrations have made it). A file that
 * a newer release has served (a newer schema, or a newer release in its marker) is refused with
 * a {@link DowngradeError} before anything is written, and closed.
 */
export function openDatabase(
  path: string,
  opts: { migrations?: readonly Migration[]; release?: string; clock?: () => number } = {},
): Db {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  try {
    db.pragma('busy_timeout = 5000');
    const migrations = opts.migrations ?? MIGRATIONS;
    const release = opts.release ?? RELEASE;
    refuseNewer({
      where: path === ':memory:' ? 'the database' : `the database ${path}`,
      release: markedRelease(db),
      schema: db.pragma('user_version', { simple: true }) as number,
      thisRelease: release,
      thisSchema: migrations.at(-1)?.version ?? 0,
    });
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    migrate(db, migrations);
    mark(db, release, (opts.clock ?? Date.now)());
  } catch (e) {
    db.close();
    throw e;
  }
  cacheStatements(db);
  return db;
}

/** The release in the file's marker, if it has one (schema 11 and later, once served). */
function markedRelease(db: Db): string | undefined {
  const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'instance_meta'").get();
  if (!table) return undefined;
  const row = db.prepare('SELECT value FROM instance_meta WHERE key = ?').get(RELEASE_KEY) as
    | { value: string }
    | undefined;
  return row?.value;
}

/** Records `release` as the one serving the file (when the migrations made the marker's table). */
function mark(db: Db, release: string, now: number): void {
  const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'instance_meta'").get();
  if (!table || markedRelease(db) === release) return;
  const set = db.prepare(
    'INSERT INTO instance_meta (key, value, updated_at) VALUES (?, ?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at',
  );
  db.transaction(() => {
    set.run(RELEASE_KEY, release, now);
    set.run(RELEASE_SINCE_KEY, String(now), now);
  }).immediate();
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
  for (const m of migrations) {
    if (m.version <= current) continue;
    db.transaction(() => {
      db.exec(m.sql);
      db.pragma(`user_version = ${m.version}`);
    }).immediate();
  }
}
