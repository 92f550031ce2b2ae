import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { runStoreConformance } from '../conformance.js';
import Database from 'better-sqlite3';
import { cacheStatements, openDatabase } from './open.js';
import { SqliteStore } from './store.js';

runStoreConformance({ name: 'sqlite', make: async () => new SqliteStore(':memory:') });

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
      s1.close();
      const s2 = new SqliteStore(path);
      assert.equal(await s2.balance('acc_b'), 5);
      s2.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
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
