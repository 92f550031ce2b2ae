import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { checkFilledBalances, OLD_LEDGER_VALUES, runStoreConformance } from '../conformance.js';
import Database from 'better-sqlite3';
import { MIGRATIONS } from '../migrations/index.js';
import { cacheStatements, openDatabase } from './open.js';
import { SqliteStore } from './store.js';

const pairDirs: string[] = [];
after(() => {
  for (const d of pairDirs) rmSync(d, { recursive: true, force: true });
});

runStoreConformance({
  name: 'sqlite',
  make: async () => new SqliteStore(':memory:'),
  // Two handles on one WAL file: what two processes on one data dir would see.
  makePair: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sbx-store-pair-'));
    pairDirs.push(dir);
    const path = join(dir, 'db.sqlite');
    return [new SqliteStore(path), new SqliteStore(path)];
  },
});

/**
 * Makes a database file migrated up to `version`, runs `seed` in it, then hands a
 * SqliteStore over it (which applies every later migration) to `check`; the file goes after.
 */
async function fromOlderDatabase(version: number, seed: string, check: (s: SqliteStore) => Promise<void>) {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-store-'));
  try {
    const path = join(dir, 'db.sqlite');
    const old = openDatabase(path, { migrations: MIGRATIONS.filter((m) => m.version <= version) });
    old.exec(seed);
    old.close();
    const s = new SqliteStore(path);
    try {
      await check(s);
    } finally {
      await s.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('SqliteStore', () => {
  it('persists across reopen (file database, WAL)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sbx-store-'));
    try {
      const path = join(dir, 'db.sqlite');
      const s1 = new SqliteStore(path);
      await s1.createAccount(
        { id: 'acc_b', email: 'b@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
        { tokens: 5, reason: 'signup' },
      );
      await s1.close();
      const s2 = new SqliteStore(path);
      assert.equal(await s2.balance('acc_b'), 5);
      await s2.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an older database gains the E2B columns; its sandboxes have no template nor metadata', async () => {
    await fromOlderDatabase(
      3,
      `INSERT INTO accounts (id, email, password_hash, plan, admin, created_at) VALUES ('a', 'a@x', NULL, 'FREE', 0, 0);
        INSERT INTO sandboxes (id, account_id, name, image, region, env_json, volumes_json, created_at, state, stop_at, reserved_minutes)
        VALUES ('s1', 'a', 'n', 'img', 'local', '{}', '[]', 1, 'started', 2, 1);`,
      async (s) => {
        const r = await s.getSandbox('s1');
        assert.ok(r && r.template === undefined && r.metadata === undefined);
      },
    );
  });

  it('migration 13: an older sandbox reads as a container that is not paused to disk', async () => {
    await fromOlderDatabase(
      12,
      `INSERT INTO accounts (id, email, password_hash, plan, admin, created_at) VALUES ('a', 'a@x', NULL, 'FREE', 0, 0);
        INSERT INTO sandboxes (id, account_id, name, image, region, env_json, volumes_json, created_at, state, stop_at, reserved_minutes)
        VALUES ('s1', 'a', 'n', 'img', 'local', '{}', '[]', 1, 'paused', 2, 1);`,
      async (s) => {
        const r = await s.getSandbox('s1');
        assert.ok(r);
        assert.deepEqual([r.state, r.isolation, r.pausedMemory], ['paused', undefined, undefined]);
      },
    );
  });

  it("migration 9 fills each account's balance from its ledger, and every later ledger row moves it", async () => {
    await fromOlderDatabase(
      8,
      `INSERT INTO accounts (id, email, password_hash, plan, admin, created_at) VALUES ('a', 'a@x', NULL, 'FREE', 0, 0);
        INSERT INTO accounts (id, email, password_hash, plan, admin, created_at) VALUES ('b', 'b@x', NULL, 'FREE', 0, 0);
        INSERT INTO ledger (account_id, delta, reason, sandbox_id, created_at) VALUES ${OLD_LEDGER_VALUES};`,
      async (s) => {
        await checkFilledBalances(s);
      },
    );
  });

  it('migration 5 rebuilds the sandboxes table for the new states and keeps every record and mount', async () => {
    await fromOlderDatabase(
      4,
      `INSERT INTO accounts (id, email, password_hash, plan, admin, created_at) VALUES ('a', 'a@x', NULL, 'FREE', 0, 0);
        INSERT INTO volumes (account_id, name, size_gb, created_at) VALUES ('a', 'v', 1, 1);
        INSERT INTO sandboxes (id, account_id, name, image, region, env_json, volumes_json, created_at, state, stop_at, reserved_minutes, ports_public, metadata_json)
        VALUES ('s1', 'a', 'n', 'img', 'local', '{}', '[{"mountPath":"/v","name":"v","sizeGb":1}]', 1, 'started', 2, 1, 0, '{"k":"v"}');
        INSERT INTO sandbox_mounts (sandbox_id, account_id, volume_name, mount_path) VALUES ('s1', 'a', 'v', '/v');`,
      async (s) => {
        const r = await s.getSandbox('s1');
        assert.ok(r);
        assert.deepEqual(
          [r.state, r.portsPublic, r.metadata, r.onTimeout, r.runStartedAt],
          ['started', false, { k: 'v' }, undefined, undefined],
        );
        assert.deepEqual((await s.listVolumes('a'))[0].mountedBy, ['s1'], 'the mount survived the rebuild');
        const paused = await s.updateSandbox('s1', { state: 'paused', expiresAt: 99, at: 3 });
        assert.equal(paused.state, 'paused');
        assert.deepEqual((await s.listVolumes('a'))[0].mountedBy, ['s1'], 'a paused sandbox still holds its volumes');
        assert.deepEqual(
          (await s.listPausedExpired(99)).map((x) => x.id),
          ['s1'],
        );
      },
    );
  });

  it('prepares each SQL text once, up to the cap; shared statements run with fresh arguments', () => {
    const db = openDatabase(':memory:');
    try {
      const sql = 'SELECT COUNT(*) AS n FROM accounts WHERE id = ?';
      assert.equal(db.prepare(sql), db.prepare(sql));
      assert.notEqual(db.prepare(sql), db.prepare(`${sql} `));
      db.prepare(
        "INSERT INTO accounts (id, email, password_hash, plan, admin, created_at) VALUES ('a', 'a@x', NULL, 'FREE', 0, 0)",
      ).run();
      assert.deepEqual([db.prepare(sql).get('a'), db.prepare(sql).get('b')], [{ n: 1 }, { n: 0 }]);
    } finally {
      db.close();
    }
    const small = new Database(':memory:');
    try {
      cacheStatements(small, 1);
      assert.equal(small.prepare('SELECT 1'), small.prepare('SELECT 1'));
      assert.notEqual(small.prepare('SELECT 2'), small.prepare('SELECT 2'), 'past the cap, statements are not kept');
    } finally {
      small.close();
    }
  });
});
