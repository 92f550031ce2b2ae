import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { keyringProblem } from '../services/secrets.js';
import { loadSecretKeyring, readKeyFile, SecretKeyring } from '../services/secrets-crypto.js';
import { SqliteStore } from '../store/sqlite/store.js';
import { secretsKey, writeKeyFile } from './secrets-key.js';

describe('sandboxd secrets-key', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-secrets-key-'));
  const saved = { ...process.env };
  const quiet = process.stdout.write;
  before(() => {
    for (const k of Object.keys(process.env)) if (k.startsWith('SANDBOXD_')) delete process.env[k];
    process.env.SANDBOXD_DATA_DIR = dir;
    process.stdout.write = (() => true) as typeof process.stdout.write;
  });
  after(() => {
    process.stdout.write = quiet;
    process.env = saved;
    rmSync(dir, { recursive: true, force: true });
  });

  it('add puts a new key first; rewrap re-encrypts every secret with it; then the old key can go; after a lost key, forget-unreadable', async () => {
    const keyFile = join(dir, 'secrets.key');
    assert.equal(await secretsKey.run(['add']), 1, 'no key file yet: a server makes it');
    const first = loadSecretKeyring({ dataDir: dir }, { create: true }).keyring;
    const store = new SqliteStore(join(dir, 'sandboxd.db'));
    await store.createAccount(
      { id: 'acc', email: 'a@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
      { tokens: 0, reason: 'signup' },
    );
    const values: Record<string, string> = { A: 'value-a', B: 'value-b', C: 'value-c' };
    for (const [name, value] of Object.entries(values))
      await store.createSecret(
        {
          accountId: 'acc',
          name,
          ciphertext: first.encrypt('acc', name, value),
          description: '',
          version: 1,
          createdAt: 1,
          updatedAt: 1,
        },
        10,
      );
    assert.equal(await keyringProblem(store, first), null);
    await store.close();

    assert.equal(await secretsKey.run(['add']), 0);
    const keys = readKeyFile(keyFile);
    assert.equal(keys?.length, 2);
    assert.equal(keys?.[1].id, first.primaryId, 'the old key stays, second');
    assert.equal(statSync(keyFile).mode & 0o777, 0o600);
    const ring = new SecretKeyring(keys ?? []);

    assert.equal(await secretsKey.run(['list']), 0);
    assert.equal(await secretsKey.run(['rewrap']), 0);
    assert.equal(await secretsKey.run(['rewrap']), 0, 'again: nothing to do');
    const after = new SqliteStore(join(dir, 'sandboxd.db'));
    try {
      const rows = await after.listAllSecrets();
      assert.equal(rows.length, 3);
      // Only the new key now: every secret, and the replicas' check value, decrypts.
      writeKeyFile(keyFile, [ring.keys[0]]);
      const only = new SecretKeyring(readKeyFile(keyFile) ?? []);
      for (const r of rows) {
        assert.equal(SecretKeyring.keyIdOf(r.ciphertext), only.primaryId);
        assert.equal(only.decrypt('acc', r.name, r.ciphertext), values[r.name]);
        assert.equal(r.version, 1, 'a re-encryption is no new value');
      }
      assert.equal(await keyringProblem(after, only), null);
      assert.notEqual(await keyringProblem(after, first), null, 'the old key alone no longer reads them');
      assert.ok(!readFileSync(keyFile, 'utf8').includes(first.keys[0].key.toString('base64')));
    } finally {
      await after.close();
    }
    // A lost key: the server's new one does not read the database; forget-unreadable drops
    // what no key reads and makes the new key the database's.
    rmSync(keyFile);
    const lost = loadSecretKeyring({ dataDir: dir }, { create: true }).keyring;
    const db = new SqliteStore(join(dir, 'sandboxd.db'));
    try {
      assert.notEqual(await keyringProblem(db, lost), null);
    } finally {
      await db.close();
    }
    await assert.rejects(secretsKey.run(['forget-unreadable']), /--yes/);
    assert.equal(await secretsKey.run(['forget-unreadable', '--yes']), 0);
    const fresh = new SqliteStore(join(dir, 'sandboxd.db'));
    try {
      assert.deepEqual(await fresh.listAllSecrets(), []);
      assert.equal(await keyringProblem(fresh, lost), null, 'the new key serves');
    } finally {
      await fresh.close();
    }
    await assert.rejects(secretsKey.run(['nope']), /unknown subcommand/);
    await assert.rejects(secretsKey.run([]), /names no subcommand/);
  });
});
