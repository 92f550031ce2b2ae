import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import {
  formatSecretKeys,
  loadSecretKeyring,
  newSecretKey,
  parseSecretKeys,
  readKeyFile,
  SecretDecryptError,
  SecretKeyring,
} from './secrets-crypto.js';

const VALUE = 'sk-live-0123456789abcdef';

describe('secrets crypto', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-secrets-crypto-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('round-trips; the text names its key, never shows the value, and differs each time', () => {
    const ring = new SecretKeyring([newSecretKey()]);
    const a = ring.encrypt('acc_1', 'OPENAI', VALUE);
    const b = ring.encrypt('acc_1', 'OPENAI', VALUE);
    assert.notEqual(a, b, 'a fresh IV each time');
    assert.equal(SecretKeyring.keyIdOf(a), ring.primaryId);
    assert.ok(!a.includes(VALUE) && !a.includes(Buffer.from(VALUE).toString('base64')));
    assert.equal(ring.decrypt('acc_1', 'OPENAI', a), VALUE);
  });

  it('the additional data binds account and name: a row moved elsewhere does not decrypt', () => {
    const ring = new SecretKeyring([newSecretKey()]);
    const ct = ring.encrypt('acc_1', 'OPENAI', VALUE);
    for (const [acc, name] of [
      ['acc_2', 'OPENAI'],
      ['acc_1', 'OTHER'],
      ['acc_1\0OPENAI', ''],
      ['acc_', '1\0OPENAI'],
    ])
      assert.throws(() => ring.decrypt(acc, name, ct), SecretDecryptError, `${acc}/${name}`);
  });

  it('a changed byte anywhere is refused, and the error carries no part of the value', () => {
    const ring = new SecretKeyring([newSecretKey()]);
    const ct = ring.encrypt('acc_1', 'A', VALUE);
    const [v, id, body] = ct.split('.');
    const raw = Buffer.from(body, 'base64url');
    for (let i = 0; i < raw.length; i += 3) {
      const t = Buffer.from(raw);
      t[i] ^= 1;
      assert.throws(
        () => ring.decrypt('acc_1', 'A', `${v}.${id}.${t.toString('base64url')}`),
        (e: Error) => e instanceof SecretDecryptError && !e.message.includes(VALUE),
      );
    }
    assert.throws(() => ring.decrypt('acc_1', 'A', `${v}.${id}.${body.slice(0, 10)}`), SecretDecryptError);
    assert.throws(() => ring.decrypt('acc_1', 'A', 'plain text'), SecretDecryptError);
    assert.throws(() => ring.decrypt('acc_1', 'A', `v2.${id}.${body}`), SecretDecryptError);
  });

  it('rotation: the first key encrypts, every key decrypts; an unknown key id is named', () => {
    const old = newSecretKey();
    const ringOld = new SecretKeyring([old]);
    const ct = ringOld.encrypt('acc', 'A', VALUE);
    const fresh = newSecretKey();
    const ring = new SecretKeyring([fresh, old]);
    assert.equal(ring.decrypt('acc', 'A', ct), VALUE);
    const again = ring.encrypt('acc', 'A', VALUE);
    assert.equal(SecretKeyring.keyIdOf(again), fresh.id);
    assert.throws(() => new SecretKeyring([fresh]).decrypt('acc', 'A', ct), new RegExp(`key ${old.id}`));
    // Same id, other key bytes: refused, not garbage.
    assert.throws(
      () => new SecretKeyring([{ id: old.id, key: fresh.key }]).decrypt('acc', 'A', ct),
      SecretDecryptError,
    );
  });

  it('key file format: comments, several keys in order, errors by line that never quote a key', () => {
    const a = newSecretKey();
    const b = newSecretKey();
    const text = formatSecretKeys([a, b]);
    assert.deepEqual(
      parseSecretKeys(text, 'f').map((k) => k.id),
      [a.id, b.id],
    );
    const bad = `${a.id} ${a.key.toString('base64').slice(0, 20)}`;
    assert.throws(
      () => parseSecretKeys(`# c\n\n${bad}\n`, 'f'),
      (e: Error) =>
        /f line 3: a key is the base64 of exactly 32 bytes/.test(e.message) && !e.message.includes(bad.split(' ')[1]),
    );
    assert.throws(
      () => parseSecretKeys(`${a.id} ${a.key.toString('base64')}\n${a.id} ${b.key.toString('base64')}`, 'f'),
      /twice/,
    );
    assert.throws(() => parseSecretKeys('bad/id AAAA', 'f'), /key id/);
    assert.throws(() => parseSecretKeys('# only a comment\n', 'f'), /no key/);
    // SANDBOXD_SECRETS_KEY: a bare key gets an id from its hash (stable).
    const env = parseSecretKeys(a.key.toString('base64'), 'SANDBOXD_SECRETS_KEY');
    assert.match(env[0].id, /^env-[0-9a-f]{8}$/);
    assert.equal(parseSecretKeys(` ${a.key.toString('base64')}\n`, 'x')[0].id, env[0].id);
  });

  it('the key file: made 0600 at the first load, read after, never through a symlink, refused when others may read it', () => {
    const src = { dataDir: dir };
    const first = loadSecretKeyring(src, { create: true });
    assert.equal(first.made, true);
    const path = join(dir, 'secrets.key');
    assert.equal(statSync(path).mode & 0o777, 0o600);
    const second = loadSecretKeyring(src, { create: true });
    assert.equal(second.made, false);
    assert.equal(second.keyring.primaryId, first.keyring.primaryId);
    assert.throws(() => loadSecretKeyring({ dataDir: join(dir, 'none') }, { create: false }), /does not exist/);

    const link = join(dir, 'link.key');
    symlinkSync(path, link);
    assert.throws(() => readKeyFile(link), /symbolic link/);
    assert.throws(() => loadSecretKeyring({ dataDir: dir, secretsKeyFile: link }, { create: true }), /symbolic link/);
    // A dangling link at the name is not followed to create a file either.
    const dangling = join(dir, 'dangling.key');
    symlinkSync(join(dir, 'target-never-made'), dangling);
    assert.throws(() => loadSecretKeyring({ dataDir: dir, secretsKeyFile: dangling }, { create: true }));
    assert.throws(() => statSync(join(dir, 'target-never-made')), /ENOENT/);

    const open = join(dir, 'open.key');
    writeFileSync(open, readFileSync(path));
    chmodSync(open, 0o644);
    assert.throws(() => readKeyFile(open), /chmod 600/);
    // SANDBOXD_SECRETS_KEY wins over any file.
    const k = newSecretKey().key.toString('base64');
    assert.match(loadSecretKeyring({ dataDir: dir, secretsKey: k }, { create: true }).keyring.primaryId, /^env-/);
  });
});
