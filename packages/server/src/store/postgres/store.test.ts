import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { pgBinDir, startPostgres, type TestPostgres } from '../../../test/postgres.js';
import { runStoreConformance } from '../conformance.js';
import { migrate, PG_MIGRATIONS } from './migrations.js';
import type { PgDatabase } from './schema.js';
import { PostgresStore } from './store.js';

/*
 * The store conformance suite on a real PostgreSQL: one server for this file, started in
 * a temp dir by test/postgres.ts and stopped after it; a fresh database per test.
 */

const bin = pgBinDir();
if (!bin) {
  it('PostgreSQL store', { skip: 'no PostgreSQL binaries under /usr/lib/postgresql: run scripts/setup.sh --test' });
} else {
  let server: TestPostgres;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server?.stop();
  });

  runStoreConformance({
    name: 'postgres',
    make: async () => PostgresStore.open(await server.createDatabase()),
    // Two pools on one database: two replicas. Opened at once, so both race to migrate it.
    makePair: async () => {
      const url = await server.createDatabase();
      const [a, b] = await Promise.all([PostgresStore.open(url), PostgresStore.open(url)]);
      return [a, b];
    },
  });

  describe('PostgresStore', () => {
    it('starts a server for the tests (pg_ctl -w start)', (t) => {
      assert.ok(server.port > 0);
      t.diagnostic(`PostgreSQL from ${bin} started in ${Math.round(server.startMs)} ms`);
    });

    it('migrates once when several replicas start at once; reopening changes nothing', async () => {
      const url = await server.createDatabase();
      const stores = await Promise.all(Array.from({ length: 4 }, () => PostgresStore.open(url)));
      await Promise.all(stores.map((s) => s.close()));
      const again = await PostgresStore.open(url);
      await again.close();
      const db = rawDb(url);
      try {
        const rows = await sql<{
          version: number;
          name: string;
        }>`SELECT version, name FROM schema_version ORDER BY version`.execute(db);
        assert.deepEqual(
          rows.rows,
          PG_MIGRATIONS.map((m) => ({ version: m.version, name: m.name })),
        );
      } finally {
        await db.destroy();
      }
    });

    it('refuses a database whose schema is newer than this server', async () => {
      const url = await server.createDatabase();
      const db = rawDb(url);
      try {
        await migrate(db);
        await sql`INSERT INTO schema_version (version, name) VALUES (999, 'future')`.execute(db);
      } finally {
        await db.destroy();
      }
      await assert.rejects(PostgresStore.open(url), /schema version 999 is newer than this server/);
    });

    it('a step that fails leaves the database at the previous version', async () => {
      const url = await server.createDatabase();
      const db = rawDb(url);
      try {
        await assert.rejects(
          migrate(db, [...PG_MIGRATIONS, { version: 2, name: 'broken', sql: 'CREATE TABLE meta (x int);' }]),
          /already exists/,
        );
        const v = await sql<{ v: number }>`SELECT max(version) AS v FROM schema_version`.execute(db);
        assert.equal(v.rows[0].v, 1);
      } finally {
        await db.destroy();
      }
    });

    it('an unreachable database is an error at open, with nothing left open', async () => {
      const url = `postgres://postgres@127.0.0.1:${server.port}/no_such_database`;
      await assert.rejects(PostgresStore.open(url), /no_such_database/);
    });

    it('close is idempotent', async () => {
      const s = await PostgresStore.open(await server.createDatabase());
      await s.close();
      await s.close();
    });
  });
}

function rawDb(url: string): Kysely<PgDatabase> {
  return new Kysely<PgDatabase>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 2 }) }),
  });
}
