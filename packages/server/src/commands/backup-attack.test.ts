/**
 * Attacks on `sandboxd backup` (docs/security.md, "Operator surfaces"): links in the data
 * dir (a data-dir file, an upload, an uploads dir, a volume image) must not carry what they
 * name into the backup; links planted at the backup's path or its `.partial` must not be
 * written through; the backup is 0700 with 0600 files whatever the umask. Needs no root or
 * server (SQLite, no volume mounted).
 */
import assert from 'node:assert/strict';
import {
  chmodSync,
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { after, afterEach, describe, it } from 'node:test';
import { openDatabase } from '../store/sqlite/open.js';
import { takeBackup } from './backup.js';

const tmp = mkdtempSync(join(tmpdir(), 'sandboxd-backup-attack-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const saved = { ...process.env };
afterEach(() => {
  for (const k of ['SANDBOXD_DATA_DIR', 'SANDBOXD_IMAGE_DIR', 'SANDBOXD_DATABASE_URL', 'PATH', 'FAKE_PG_DUMP_LOG'])
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
});

/** A data dir with a database, one real upload and one data-dir file; SANDBOXD_* name it. */
function dataDir(): { dir: string; victim: string; outside: string } {
  const dir = join(tmp, `data${n++}`);
  mkdirSync(join(dir, 'builds', 'uploads', 'acc_1'), { recursive: true });
  openDatabase(join(dir, 'sandboxd.db')).close();
  writeFileSync(join(dir, 'proxy-link.key'), 'key');
  writeFileSync(join(dir, 'builds', 'uploads', 'acc_1', 'h1'), 'upload');
  const victim = join(tmp, `victim${n++}`);
  writeFileSync(victim, 'SECRET-OUTSIDE-THE-DATA-DIR');
  const outside = join(tmp, `outside${n++}`);
  mkdirSync(outside);
  writeFileSync(join(outside, 'other'), 'SECRET-OUTSIDE-THE-DATA-DIR');
  process.env.SANDBOXD_DATA_DIR = dir;
  process.env.SANDBOXD_IMAGE_DIR = join(dir, 'images');
  return { dir, victim, outside };
}
/** Every file below `dir` holds none of `secret`. */
const noneHolds = (dir: string, secret: string) => {
  for (const f of readdirSync(dir, { recursive: true }) as string[]) {
    const p = join(dir, f);
    if (lstatSync(p).isFile()) assert.ok(!readFileSync(p, 'utf8').includes(secret), `${f} holds ${secret}`);
  }
};

describe('sandboxd backup: links in the data dir and at the backup path', () => {
  it('links in the data dir (a top-level file, an upload, an uploads dir) are not followed into the backup', async () => {
    const d = dataDir();
    symlinkSync(d.victim, join(d.dir, 'secret.key'));
    symlinkSync(d.victim, join(d.dir, 'builds', 'uploads', 'acc_1', 'h2'));
    symlinkSync(d.outside, join(d.dir, 'builds', 'uploads', 'acc_2'));
    const out = join(tmp, `bk${n++}`);
    const m = await takeBackup(out);
    assert.deepEqual(m.files, ['proxy-link.key']);
    assert.deepEqual(
      m.contents.map((f) => f.path),
      ['builds/uploads/acc_1/h1', 'files/proxy-link.key', 'sandboxd.db'],
    );
    noneHolds(out, 'SECRET-OUTSIDE');
  });

  it('a volume image that is a link is refused, not copied', async () => {
    const d = dataDir();
    mkdirSync(join(d.dir, 'volumes', 'acc_1__v', 'mnt'), { recursive: true });
    symlinkSync(d.victim, join(d.dir, 'volumes', 'acc_1__v', 'volume.img'));
    const out = join(tmp, `bk${n++}`);
    await assert.rejects(takeBackup(out), /volume\.img is not a regular file: not copying what it names/);
    assert.equal(existsSync(out), false);
    noneHolds(`${out}.partial`, 'SECRET-OUTSIDE');
  });

  it('the backup is 0700 and its files 0600 under umask 0', async () => {
    dataDir();
    const out = join(tmp, `bk${n++}`);
    const old = process.umask(0);
    try {
      await takeBackup(out);
    } finally {
      process.umask(old);
    }
    assert.equal(statSync(out).mode & 0o777, 0o700);
    for (const f of readdirSync(out, { recursive: true }) as string[]) {
      const st = lstatSync(join(out, f));
      assert.equal(st.mode & 0o777, st.isDirectory() ? 0o700 : 0o600, f);
    }
  });

  it("a link planted at <dir>.partial (another user's dir, marked as a dead backup's) is removed, not written through", async () => {
    dataDir();
    const theirs = join(tmp, `theirs${n++}`);
    mkdirSync(theirs);
    writeFileSync(join(theirs, '.sandboxd-backup-partial'), '2147483646');
    writeFileSync(join(theirs, 'keep'), 'theirs');
    const out = join(tmp, `bk${n++}`);
    symlinkSync(theirs, `${out}.partial`);
    await takeBackup(out);
    assert.deepEqual(readdirSync(theirs).sort(), ['.sandboxd-backup-partial', 'keep'], 'their dir is untouched');
    assert.ok(lstatSync(out).isDirectory() && !lstatSync(out).isSymbolicLink());
    assert.equal(statSync(out).mode & 0o777, 0o700);
  });

  it('a dangling link planted at <dir> (naming where the backup would land) is not followed', async () => {
    dataDir();
    const landing = join(tmp, `landing${n++}`);
    const out = join(tmp, `bk${n++}`);
    symlinkSync(landing, out);
    await assert.rejects(takeBackup(out), /bk\d+ exists: a backup goes into a new directory/);
    assert.equal(existsSync(landing), false);
    assert.equal(existsSync(`${out}.partial`), false, 'refused before any work');
    assert.ok(lstatSync(out).isSymbolicLink());
  });
});

describe("sandboxd backup of a PostgreSQL deployment: the password never on pg_dump's command line", () => {
  it('neither from the user info nor from a password= parameter (others read command lines in /proc)', async () => {
    for (const url of [
      'postgres://sandboxd:s3cret-info@127.0.0.1:5432/sandboxd',
      'postgres://sandboxd@127.0.0.1:5432/sandboxd?sslmode=disable&password=s3cret-param',
    ]) {
      const d = dataDir();
      const bin = join(tmp, `bin${n++}`);
      mkdirSync(bin);
      const log = join(bin, 'log');
      // A pg_dump that writes its dump and records its arguments and PGPASSWORD.
      writeFileSync(
        join(bin, 'pg_dump'),
        '#!/bin/sh\nprintf \'%s\\n\' "$@" > "$FAKE_PG_DUMP_LOG"\necho "PGPASSWORD=$PGPASSWORD" >> "$FAKE_PG_DUMP_LOG"\nfor a; do case $a in --file=*) echo dump > "$(echo "$a" | cut -d= -f2-)";; esac; done\n',
        { mode: 0o755 },
      );
      process.env.PATH = `${bin}${delimiter}${saved.PATH ?? ''}`;
      process.env.FAKE_PG_DUMP_LOG = log;
      process.env.SANDBOXD_DATABASE_URL = url;
      rmSync(join(d.dir, 'sandboxd.db'));
      const m = await takeBackup(join(tmp, `bk${n++}`));
      assert.deepEqual(m.database, { kind: 'postgres', dump: 'database.pgdump' });
      const seen = readFileSync(log, 'utf8');
      const args = seen.split('\n').filter((l) => l.startsWith('--'));
      assert.ok(
        args.some((a) => a.startsWith('--dbname=postgres://sandboxd@127.0.0.1')),
        seen,
      );
      assert.ok(!args.join(' ').includes('s3cret'), `the password is on the command line: ${args.join(' ')}`);
      assert.match(seen, /PGPASSWORD=s3cret-(info|param)/);
    }
  });
});

describe('sandboxd backup: where it is written', () => {
  it('a dir on the way that others can write (no sticky bit) is refused before anything is written', async () => {
    dataDir();
    const shared = join(tmp, `shared${n++}`);
    mkdirSync(shared);
    chmodSync(shared, 0o777);
    await assert.rejects(
      takeBackup(join(shared, 'bk')),
      /shared\d+ \(owner uid \d+, mode 777\) can be written by another user, who could take the backup's secrets/,
    );
    assert.deepEqual(readdirSync(shared), []);
    chmodSync(shared, 0o1777); // sticky, like /tmp: others cannot rename what is not theirs
    await takeBackup(join(shared, 'bk'));
    assert.equal(statSync(join(shared, 'bk')).mode & 0o777, 0o700);
  });

  it("another user's <dir>.partial (even marked as a dead backup's) is not removed", {
    skip: process.getuid?.() !== 0 ? 'needs root (chown)' : false,
  }, async () => {
    dataDir();
    const out = join(tmp, `bk${n++}`);
    mkdirSync(`${out}.partial`);
    writeFileSync(join(`${out}.partial`, '.sandboxd-backup-partial'), '2147483646');
    chownSync(`${out}.partial`, 12345, 12345);
    await assert.rejects(takeBackup(out), /\.partial exists and belongs to uid 12345: remove it yourself/);
    assert.deepEqual(readdirSync(`${out}.partial`), ['.sandboxd-backup-partial']);
  });
});
