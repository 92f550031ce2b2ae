import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { makeTestApp } from '../../../test/app.js';
import { pgBinDir, withTestPostgres } from '../../../test/postgres.js';
import { RELEASE } from '../../release.js';
import { DowngradeError } from '../release-marker.js';
import { checkFilledBalances, OLD_LEDGER_VALUES, runStoreConformance } from '../conformance.js';
import { migrate, PG_MIGRATIONS } from './migrations.js';
import type { PgDatabase } from './schema.js';
import { PostgresStore } from './store.js';

/*
 * The store conformance suite on a real PostgreSQL: one server for this file, started in
 * a temp dir by test/postgres.ts and stopped after it; a fresh database per test.
 */

withTestPostgres('PostgreSQL store', (server) => {
  runStoreConformance({
    name: 'postgres',
    // A fresh schema per test (a fresh database costs ~250 ms each).
    make: async () => PostgresStore.open(await server().createSchema()),
    // Two pools on one database: two replicas. Opened at once, so both race to migrate it.
    makePair: async () => {
      const url = await server().createSchema();
      const [a, b] = await Promise.all([PostgresStore.open(url), PostgresStore.open(url)]);
      return [a, b];
    },
  });

  describe('PostgresStore', () => {
    it('starts a server for the tests (pg_ctl -w start)', (t) => {
      assert.ok(server().port > 0);
      t.diagnostic(`PostgreSQL from ${pgBinDir()} started in ${Math.round(server().startMs)} ms`);
    });

    it('migrates once when several replicas start at once; reopening changes nothing', async () => {
      const url = await server().createDatabase();
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
      const url = await server().createSchema();
      const db = rawDb(url);
      try {
        await migrate(db);
        await sql`INSERT INTO schema_version (version, name) VALUES (999, 'future')`.execute(db);
      } finally {
        await db.destroy();
      }
      await assert.rejects(PostgresStore.open(url), /schema version 999 is newer than this server/);
    });

    it("records the release serving it; refuses a newer release's database, changing nothing", async () => {
      const url = await server().createSchema();
      const db = rawDb(url);
      const meta = async () =>
        (await sql<{ key: string; value: string }>`SELECT key, value FROM instance_meta ORDER BY key`.execute(db)).rows;
      try {
        // 0.1.0's schema (6, no marker), then this release's start.
        await migrate(
          db,
          PG_MIGRATIONS.filter((m) => m.version <= 6),
        );
        await (await PostgresStore.open(url)).close();
        assert.deepEqual(
          (await meta()).find((r) => r.key === 'release'),
          { key: 'release', value: RELEASE },
        );
        const before = await meta();
        // An older release of this schema: refused, naming both.
        await assert.rejects(migrate(db, PG_MIGRATIONS, { release: '0.0.1' }), (e: Error) => {
          assert.ok(e instanceof DowngradeError);
          assert.match(
            e.message,
            new RegExp(`last served by sandboxd ${RELEASE.replaceAll('.', '\\.')}; this is sandboxd 0\\.0\\.1`),
          );
          assert.match(e.message, /restore the backup taken before the upgrade/);
          return true;
        });
        // A newer release's marker: this release is refused.
        await sql`UPDATE instance_meta SET value = '99.0.0' WHERE key = 'release'`.execute(db);
        await assert.rejects(PostgresStore.open(url), /last served by sandboxd 99\.0\.0; this is sandboxd/);
        assert.deepEqual(
          (await meta()).map((r) => (r.key === 'release' ? { ...r, value: RELEASE } : r)),
          before,
        );
      } finally {
        await db.destroy();
      }
    });

    it('a step that fails leaves the database at the previous version', async () => {
      const url = await server().createSchema();
      const db = rawDb(url);
      try {
        const last = PG_MIGRATIONS.at(-1)?.version ?? 0;
        await assert.rejects(
          migrate(db, [...PG_MIGRATIONS, { version: last + 1, name: 'broken', sql: 'CREATE TABLE meta (x int);' }]),
          /already exists/,
        );
        const v = await sql<{ v: number }>`SELECT max(version) AS v FROM schema_version`.execute(db);
        assert.equal(v.rows[0].v, last);
      } finally {
        await db.destroy();
      }
    });

    it('an unreachable database is an error at open, with nothing left open', async () => {
      const url = `postgres://postgres@127.0.0.1:${server().port}/no_such_database`;
      await assert.rejects(PostgresStore.open(url), /no_such_database/);
    });

    it('two apps on one database (SANDBOXD_DATABASE_URL) act as replicas: one account, one limit, every record seen by both', async () => {
      const databaseUrl = await server().createSchema();
      // One runtime behind both (what runners will be): only the database is shared here.
      const a = await makeTestApp({ databaseUrl, warmPool: [] });
      const b = await makeTestApp({ databaseUrl, warmPool: [] }, { driver: a.driver });
      try {
        const acct = await a.newAccount();
        const creates = await Promise.all(
          Array.from({ length: 12 }, (_, i) =>
            (i % 2 ? a : b).req({
              method: 'POST',
              url: '/api/v1/sandboxes',
              key: acct.key,
              payload: { image: 'local/busybox:latest' },
            }),
          ),
        );
        const codes = creates.map((r) => r.statusCode).sort();
        assert.deepEqual(codes, [...Array(5).fill(201), ...Array(7).fill(403)], 'FREE allows 5 at once');
        const made = creates.filter((r) => r.statusCode === 201).map((r) => r.json().sandbox.id as string);
        for (const [i, id] of made.entries()) {
          const got = await (i % 2 ? b : a).req({ method: 'GET', url: `/api/v1/sandboxes/${id}`, key: acct.key });
          assert.equal(got.statusCode, 200, `${id}: ${got.body}`);
        }
        const [ba, bb] = await Promise.all(
          [a, b].map(async (t) => (await t.req({ method: 'GET', url: '/api/v1/account', key: acct.key })).json()),
        );
        assert.equal(ba.balance, bb.balance, 'one ledger');
      } finally {
        await a.close();
        await b.close();
      }
    });

    it("migration 5 fills each account's balance from its ledger, and every later ledger row moves it", async () => {
      const url = await server().createSchema();
      const db = rawDb(url);
      try {
        await migrate(
          db,
          PG_MIGRATIONS.filter((m) => m.version <= 4),
        );
        await sql`INSERT INTO accounts (id, email, password_hash, plan, admin, created_at) VALUES
          ('a', 'a@x', NULL, 'FREE', false, 0), ('b', 'b@x', NULL, 'FREE', false, 0)`.execute(db);
        await sql
          .raw(`INSERT INTO ledger (account_id, delta, reason, sandbox_id, created_at) VALUES ${OLD_LEDGER_VALUES}`)
          .execute(db);
      } finally {
        await db.destroy();
      }
      const s = await PostgresStore.open(url);
      try {
        await checkFilledBalances(s);
      } finally {
        await s.close();
      }
    });

    it('close is idempotent', async () => {
      const s = await PostgresStore.open(await server().createSchema());
      await s.close();
      await s.close();
    });
  });
});

function rawDb(url: string): Kysely<PgDatabase> {
  return new Kysely<PgDatabase>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 2 }) }),
  });
}
