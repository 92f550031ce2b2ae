/**
 * The parts of backup and restore that need neither root nor a server: manifest paths, the
 * data dir's own files, the sparse copy, and the whole-backup check before a restore (the
 * real backup and restore: test/e2e/backup.test.ts).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import {
  BACKUP_FORMAT,
  BACKUP_FORMAT_VERSION,
  instanceFiles,
  MANIFEST,
  MANIFEST_SUM,
  type Manifest,
  safeRelative,
  sparseCopy,
} from './backup-files.js';
import { MIGRATIONS } from '../store/migrations/index.js';
import { openDatabase } from '../store/sqlite/open.js';
import { takeBackup } from './backup.js';
import { restoreBackup, verifyBackup } from './restore.js';

const tmp = mkdtempSync(join(tmpdir(), 'sandboxd-backup-unit-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

describe('backup files', () => {
  it('manifest paths stay inside the backup', () => {
    for (const ok of ['sandboxd.db', 'volumes/a__data.img', 'builds/uploads/acc_1/abc'])
      assert.ok(safeRelative(ok), ok);
    for (const bad of ['', '.', '/etc/passwd', '../x', 'a/../../b', 'a/..', './a', 'a//b', 'a\\b', 'a\0b', 3, null])
      assert.equal(safeRelative(bad), false, String(bad));
  });

  it("the data dir's own files: top-level regular files but the database's, logs and dot-files", () => {
    const d = join(tmp, 'data');
    mkdirSync(join(d, 'volumes'), { recursive: true });
    for (const f of ['sandboxd.db', 'sandboxd.db-wal', 'sandboxd.db-shm', 'proxy-link.key', 'release', '.e2e-slot'])
      writeFileSync(join(d, f), 'x');
    writeFileSync(join(d, 'server-1.stderr.log'), 'x');
    assert.deepEqual(instanceFiles(d, join(d, 'sandboxd.db')), ['proxy-link.key', 'release']);
    assert.deepEqual(instanceFiles(d, '/elsewhere/sandboxd.db'), [
      'proxy-link.key',
      'release',
      'sandboxd.db',
      'sandboxd.db-shm',
      'sandboxd.db-wal',
    ]);
  });

  it('the sparse copy has the same bytes and keeps the holes', async () => {
    const src = join(tmp, 'sparse.img');
    const data = Buffer.alloc(3 << 20, 7);
    writeFileSync(src, '');
    const fh = await import('node:fs/promises').then((f) => f.open(src, 'r+'));
    await fh.write(data, 0, data.length, 16 << 20);
    await fh.truncate(64 << 20);
    await fh.close();
    const dst = join(tmp, 'copy.img');
    assert.equal(await sparseCopy(src, dst), 64 << 20);
    assert.equal(sha(readFileSync(dst)), sha(readFileSync(src)));
    assert.ok(statSync(dst).blocks * 512 < 8 << 20, 'holes stay holes');
    assert.equal(statSync(dst).mode & 0o777, 0o600);
    await assert.rejects(sparseCopy(src, dst), /EEXIST/, 'never over an existing file');
  });
});

describe('verifyBackup: the whole backup is checked before a restore writes anything', () => {
  const make = (edit: (m: Manifest) => void = () => {}): string => {
    const dir = mkdtempSync(join(tmp, 'b-'));
    mkdirSync(join(dir, 'files'));
    writeFileSync(join(dir, 'files', 'release'), 'hello');
    writeFileSync(join(dir, 'sandboxd.db'), 'db bytes');
    const m: Manifest = {
      format: BACKUP_FORMAT,
      formatVersion: BACKUP_FORMAT_VERSION,
      version: '0.1.0',
      schemaVersion: 1,
      dataRelease: '0.1.0',
      createdAt: new Date().toISOString(),
      source: { dataDir: '/d', imageDir: '/d/images', instance: '0123456789', hostname: 'h' },
      database: { kind: 'sqlite', file: 'sandboxd.db' },
      volumes: [],
      volumesFrozen: 0,
      images: [],
      files: ['release'],
      contents: [
        { path: 'files/release', bytes: 5, sha256: sha('hello') },
        { path: 'sandboxd.db', bytes: 8, sha256: sha('db bytes') },
      ],
    };
    edit(m);
    const text = JSON.stringify(m);
    writeFileSync(join(dir, MANIFEST), text);
    writeFileSync(join(dir, MANIFEST_SUM), `${sha(text)}  ${MANIFEST}\n`);
    return dir;
  };

  it('accepts a whole backup', async () => {
    assert.equal((await verifyBackup(make())).files[0], 'release');
  });

  it('refuses a changed file, a missing one, a changed manifest, and what is not a backup', async () => {
    const changed = make();
    writeFileSync(join(changed, 'files', 'release'), 'hellO');
    await assert.rejects(verifyBackup(changed), /files\/release does not match its sha256 in the manifest: damaged/);
    const short = make();
    writeFileSync(join(short, 'sandboxd.db'), 'db');
    await assert.rejects(verifyBackup(short), /sandboxd\.db has 2 bytes, the manifest says 8: damaged/);
    const gone = make();
    rmSync(join(gone, 'sandboxd.db'));
    await assert.rejects(verifyBackup(gone), /sandboxd\.db is missing from the backup/);
    const manifest = make();
    writeFileSync(join(manifest, MANIFEST), readFileSync(join(manifest, MANIFEST), 'utf8').replace('0.1.0', '0.1.1'));
    await assert.rejects(verifyBackup(manifest), /the manifest is damaged/);
    await assert.rejects(verifyBackup(tmp), /is not a sandboxd backup/);
  });

  it('refuses paths out of the backup, unlisted parts, newer formats, schemas and data releases', async () => {
    await assert.rejects(
      verifyBackup(make((m) => m.contents.push({ path: '../escape', bytes: 0, sha256: sha('') }))),
      /names a bad entry/,
    );
    await assert.rejects(
      verifyBackup(make((m) => m.volumes.push('acc__v'))),
      /names volumes\/acc__v\.img but lists no hash/,
    );
    await assert.rejects(verifyBackup(make((m) => (m.formatVersion = 99))), /format \(99\) is newer/);
    await assert.rejects(
      verifyBackup(make((m) => (m.schemaVersion = 9999))),
      /schema \(9999\) is newer than this sandboxd's/,
    );
    await assert.rejects(
      verifyBackup(make((m) => (m.dataRelease = '99.0.0'))),
      /last served by sandboxd 99\.0\.0; this is sandboxd .*, an older release/,
    );
    await assert.rejects(verifyBackup(make((m) => (m.dataRelease = 'x'))), /names a bad release/);
  });
});

describe('takeBackup and restoreBackup of an instance without volumes or images (no root)', () => {
  const env = (dataDir: string) => {
    process.env.SANDBOXD_DATA_DIR = dataDir;
    process.env.SANDBOXD_IMAGE_DIR = join(dataDir, 'images');
  };
  const saved = { ...process.env };
  after(() => {
    for (const k of Object.keys(process.env)) if (k.startsWith('SANDBOXD_') && !(k in saved)) delete process.env[k];
  });

  it('copies the database, uploads and files through <dir>.partial; restores them; --force over a used dir', async () => {
    const src = join(tmp, 'src');
    mkdirSync(join(src, 'builds', 'uploads', 'acc_1'), { recursive: true });
    const db = openDatabase(join(src, 'sandboxd.db'));
    db.exec("CREATE TABLE probe (v TEXT); INSERT INTO probe VALUES ('kept')");
    writeFileSync(join(src, 'proxy-link.key'), 'ab'.repeat(32));
    writeFileSync(join(src, 'builds', 'uploads', 'acc_1', 'h1'), 'upload');
    const out = join(tmp, 'bk');
    // A dead backup's leftover is removed; a .partial that is not a backup's is refused.
    mkdirSync(`${out}.partial`);
    env(src);
    await assert.rejects(takeBackup(out), /is not an unfinished backup/);
    writeFileSync(join(`${out}.partial`, '.sandboxd-backup-partial'), '2147483646');
    const m = await takeBackup(out); // while the database is open and written to
    db.exec("INSERT INTO probe VALUES ('after')");
    db.close();
    assert.equal(existsSync(`${out}.partial`), false);
    assert.deepEqual(m.files, ['proxy-link.key']);
    assert.deepEqual(
      m.contents.map((f) => f.path),
      ['builds/uploads/acc_1/h1', 'files/proxy-link.key', 'sandboxd.db'],
    );
    assert.equal(m.schemaVersion, MIGRATIONS.at(-1)?.version);

    const dst = join(tmp, 'dst');
    env(dst);
    await restoreBackup(out, { force: false });
    const back = openDatabase(join(dst, 'sandboxd.db'));
    assert.deepEqual(back.prepare('SELECT v FROM probe').all(), [{ v: 'kept' }]);
    back.close();
    assert.equal(readFileSync(join(dst, 'proxy-link.key'), 'utf8'), 'ab'.repeat(32));
    assert.equal(readFileSync(join(dst, 'builds', 'uploads', 'acc_1', 'h1'), 'utf8'), 'upload');
    await assert.rejects(restoreBackup(out, { force: false }), /is not empty .*pass --force/);
    writeFileSync(join(dst, 'proxy-link.key'), 'changed');
    await restoreBackup(out, { force: true });
    assert.equal(readFileSync(join(dst, 'proxy-link.key'), 'utf8'), 'ab'.repeat(32));
  });
});
