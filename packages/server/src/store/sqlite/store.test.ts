import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { runStoreConformance } from '../conformance.js';
import { SqliteStore } from './store.js';

runStoreConformance({ name: 'sqlite', make: async () => new SqliteStore(':memory:') });

describe('SqliteStore', () => {
  it('persists across reopen (file database, WAL)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sbx-store-'));
    try {
      const path = join(dir, 'db.sqlite');
      const s1 = new SqliteStore(path);
      await s1.createAccount({ id: 'acc_b', email: 'b@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 }, { tokens: 5, reason: 'signup' });
      s1.close();
      const s2 = new SqliteStore(path);
      assert.equal(await s2.balance('acc_b'), 5);
      s2.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
