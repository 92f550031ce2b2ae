/**
 * Attacks on `sandboxd restore` with a crafted or tampered backup (docs/security.md,
 * "Operator surfaces"). manifest.sha256 is no signature: whoever writes a backup can make
 * every hash match. What restore must still hold: nothing is written outside the data dir
 * and the image dir, nothing in the backup makes it read outside the backup (links), a
 * backup another user can change after its check is refused, and images.tar brings only
 * snapshot images and their refs (never a ref every account pulls, never a link).
 * Needs no server; the images.tar cases run tar as root (--same-owner) and skip without it.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
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
import { dirname, join } from 'node:path';
import { after, afterEach, describe, it } from 'node:test';
import { BACKUP_FORMAT, BACKUP_FORMAT_VERSION, MANIFEST, MANIFEST_SUM, type Manifest } from './backup-files.js';
import { acquireInstanceLock } from '../instance.js';
import { openDatabase } from '../store/sqlite/open.js';
import { restoreBackup, verifyBackup } from './restore.js';

const ROOTLESS = process.getuid?.() !== 0;
const tmp = mkdtempSync(join(tmpdir(), 'sandboxd-restore-attack-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
const HEX = 'a'.repeat(64);
let n = 0;

/** One member of a hand-made tar: what GNU tar would never write, too (`../`, absolute names). */
interface Member {
  name: string;
  type?: 'file' | 'dir' | 'symlink' | 'hardlink';
  data?: string;
  link?: string;
  mode?: number;
}

/** A ustar archive of `members`, byte by byte (so that names tar itself refuses to write can be made). */
function tarOf(members: Member[]): Buffer {
  const blocks: Buffer[] = [];
  for (const m of members) {
    const h = Buffer.alloc(512);
    const put = (s: string, at: number, len: number) => h.write(s, at, len, 'utf8');
    const oct = (v: number, at: number, len: number) => put(`${v.toString(8).padStart(len - 1, '0')}\0`, at, len);
    const data = Buffer.from(m.data ?? '');
    const type = m.type ?? 'file';
    put(m.name, 0, 100);
    oct(m.mode ?? (type === 'dir' ? 0o755 : 0o644), 100, 8);
    oct(0, 108, 8);
    oct(0, 116, 8);
    oct(type === 'file' ? data.length : 0, 124, 12);
    oct(0, 136, 12);
    put('        ', 148, 8);
    put({ file: '0', hardlink: '1', symlink: '2', dir: '5' }[type], 156, 1);
    put(m.link ?? '', 157, 100);
    put('ustar\x0000', 257, 8);
    let sum = 0;
    for (const b of h) sum += b;
    put(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8);
    blocks.push(h);
    if (type === 'file') blocks.push(data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/** A snapshot image and its ref as backup.ts puts them in images.tar. */
function snapshotMembers(ref = `snapshot/acc_x/s1`, hex = HEX): Member[] {
  return [
    { name: 'by-digest/', type: 'dir' },
    { name: `by-digest/${hex}/`, type: 'dir' },
    { name: `by-digest/${hex}/image.json`, data: JSON.stringify({ snapshot: { instance: 'old', ref } }) },
    { name: `by-digest/${hex}/rootfs/`, type: 'dir' },
    { name: `by-digest/${hex}/rootfs/hello`, data: 'hi' },
    { name: 'refs/', type: 'dir' },
    { name: `refs/${sha(ref)}.json`, data: JSON.stringify({ ref, digest: `sha256:${hex}` }) },
  ];
}

/**
 * A backup dir (a runner's: no database) holding `files` (path to bytes), listed and hashed
 * in its manifest, `edit` applied to the manifest last.
 */
function backupOf(files: Record<string, string | Buffer>, edit: (m: Manifest) => void = () => {}): string {
  const dir = join(tmp, `backup${n++}`);
  mkdirSync(dir, { mode: 0o700 });
  const contents = [];
  for (const [path, data] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true, mode: 0o700 });
    writeFileSync(join(dir, path), data, { mode: 0o600 });
    contents.push({ path, bytes: Buffer.byteLength(data), sha256: sha(data) });
  }
  const m: Manifest = {
    format: BACKUP_FORMAT,
    formatVersion: BACKUP_FORMAT_VERSION,
    version: '0.1.0',
    schemaVersion: null,
    dataRelease: null,
    createdAt: new Date().toISOString(),
    source: { dataDir: '/d', imageDir: '/d/images', instance: '0123456789', hostname: 'h' },
    database: { kind: 'none' },
    volumes: [],
    volumesFrozen: 0,
    images: files['images.tar'] ? ['snapshot/acc_x/s1'] : [],
    files: Object.keys(files)
      .filter((p) => p.startsWith('files/'))
      .map((p) => p.slice(6)),
    contents,
  };
  edit(m);
  seal(dir, m);
  return dir;
}

function seal(dir: string, m: Manifest): void {
  const text = JSON.stringify(m);
  writeFileSync(join(dir, MANIFEST), text, { mode: 0o600 });
  writeFileSync(join(dir, MANIFEST_SUM), `${sha(text)}  ${MANIFEST}\n`, { mode: 0o600 });
}

/** A fresh, empty data dir (its image dir inside) that SANDBOXD_* names, and a victim file outside it. */
function target() {
  const dataDir = join(tmp, `data${n++}`);
  const imageDir = join(dataDir, 'images');
  process.env.SANDBOXD_DATA_DIR = dataDir;
  process.env.SANDBOXD_IMAGE_DIR = imageDir;
  const victim = join(tmp, `victim${n++}`);
  writeFileSync(victim, '{"secret":true}');
  return { dataDir, imageDir, victim };
}
/** Every path below `dir` (none when it does not exist). */
const tree = (dir: string): string[] =>
  existsSync(dir) ? (readdirSync(dir, { recursive: true }) as string[]).filter((p) => !p.startsWith('.')).sort() : [];

const saved = { ...process.env };
afterEach(() => {
  for (const k of ['SANDBOXD_DATA_DIR', 'SANDBOXD_IMAGE_DIR'])
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
});

describe('restore of a crafted manifest: names', () => {
  it("a data-dir file named with a path (files/volumes/...) is refused: files are the data dir's top-level names", async () => {
    const t = target();
    const dir = backupOf({ 'files/volumes/acc__v/volume.img': 'planted' });
    await assert.rejects(
      restoreBackup(dir, { force: false }),
      /names a bad file of the data dir: "volumes\/acc__v\/volume\.img"/,
    );
    assert.deepEqual(tree(t.dataDir), []);
  });

  it('a volume named with a path, .. or an absolute name is refused before anything is written', async () => {
    for (const v of ['acc/x', '../x', '/etc/x', '.hidden']) {
      const t = target();
      const dir = backupOf({ [`volumes/${v.replace(/^\//, '')}.img`]: 'img' }, (m) => m.volumes.push(v));
      await assert.rejects(verifyBackup(dir), /names a bad volume|names a bad entry|lists no hash/, v);
      await assert.rejects(
        restoreBackup(dir, { force: true }),
        /names a bad volume|names a bad entry|lists no hash/,
        v,
      );
      assert.deepEqual(tree(t.dataDir), [], v);
    }
  });

  it('manifest paths with ../ or absolute are refused (pinned)', async () => {
    for (const path of ['../escape', '/etc/passwd', 'files/../../escape', 'a/./b']) {
      const dir = backupOf({}, (m) => m.contents.push({ path, bytes: 0, sha256: sha('') }));
      await assert.rejects(verifyBackup(dir), /names a bad entry/, path);
    }
  });
});

describe('restore of a backup with links, or that another user can change', () => {
  it('a file of the backup that is a link (to a file outside it) is refused, even with a matching hash', async () => {
    const t = target();
    const dir = backupOf({ 'files/release': '{"secret":true}' });
    rmSync(join(dir, 'files', 'release'));
    symlinkSync(t.victim, join(dir, 'files', 'release'));
    await assert.rejects(restoreBackup(dir, { force: false }), /files\/release in the backup is a symbolic link/);
    assert.deepEqual(tree(t.dataDir), []);
  });

  it('a dir of the backup that is a link is refused', async () => {
    const t = target();
    const dir = backupOf({ 'files/release': 'x' });
    const elsewhere = join(tmp, `elsewhere${n++}`);
    mkdirSync(elsewhere, { mode: 0o700 });
    writeFileSync(join(elsewhere, 'release'), 'x', { mode: 0o600 });
    rmSync(join(dir, 'files'), { recursive: true });
    symlinkSync(elsewhere, join(dir, 'files'));
    await assert.rejects(restoreBackup(dir, { force: false }), /files in the backup is a symbolic link/);
    assert.deepEqual(tree(t.dataDir), []);
  });

  it('a backup dir, or a file in it, that group or others can write is refused (it could change after its check)', async () => {
    const t = target();
    const open = backupOf({ 'files/release': 'x' });
    chmodSync(open, 0o770);
    await assert.rejects(
      restoreBackup(open, { force: false }),
      /\(owner uid \d+, mode 770\) can be written by another user/,
    );
    const file = backupOf({ 'files/release': 'x' });
    chmodSync(join(file, 'files', 'release'), 0o666);
    await assert.rejects(
      restoreBackup(file, { force: false }),
      /files\/release in the backup can be written by another user/,
    );
    assert.deepEqual(tree(t.dataDir), []);
  });

  it('a backup named through a link (a `latest` link) is restored, read by its real path', async () => {
    const t = target();
    const dir = backupOf({ 'files/release': 'x' });
    const latest = join(tmp, `latest${n++}`);
    symlinkSync(dir, latest);
    await restoreBackup(latest, { force: false });
    assert.equal(readFileSync(join(t.dataDir, 'release'), 'utf8'), 'x');
  });

  it('a backup owned by another user is refused', { skip: ROOTLESS ? 'needs root (chown)' : false }, async () => {
    const t = target();
    const dir = backupOf({ 'files/release': 'x' });
    chownSync(dir, 12345, 12345);
    await assert.rejects(
      restoreBackup(dir, { force: false }),
      /\(owner uid 12345, mode 700\) can be written by another user/,
    );
    assert.deepEqual(tree(t.dataDir), []);
  });
});

describe('restore of a crafted images.tar', { skip: ROOTLESS ? 'needs root (tar --same-owner)' : false }, () => {
  const withTar = (members: Member[]) => backupOf({ 'images.tar': tarOf(members) });

  it("a well-formed snapshot is restored, made this instance's (the case the refusals below differ from)", async () => {
    const t = target();
    await restoreBackup(withTar(snapshotMembers()), { force: false });
    const rec = JSON.parse(readFileSync(join(t.imageDir, 'by-digest', HEX, 'image.json'), 'utf8'));
    assert.notEqual(rec.snapshot.instance, 'old');
    assert.equal(readFileSync(join(t.imageDir, 'by-digest', HEX, 'rootfs', 'hello'), 'utf8'), 'hi');
    assert.ok(existsSync(join(t.imageDir, 'refs', `${sha('snapshot/acc_x/s1')}.json`)));
    // What an image holds (setuid files, device nodes) stays out of host users' reach.
    assert.equal(statSync(join(t.imageDir, 'by-digest')).mode & 0o777, 0o700);
  });

  it('a ref that is not a snapshot (one every account pulls, e.g. debian) is refused; the image dir gets no ref', async () => {
    const t = target();
    const members = snapshotMembers('docker.io/library/debian:bookworm');
    await assert.rejects(
      restoreBackup(withTar(members), { force: true }),
      /refs\/[a-f0-9]{64}\.json is not a snapshot ref/,
    );
    assert.deepEqual(tree(join(t.imageDir, 'refs')), []);
    assert.deepEqual(tree(join(t.imageDir, 'by-digest')), []);
  });

  it('a ref under another name than its own, or naming no image, is refused', async () => {
    for (const members of [
      snapshotMembers().map((m) =>
        m.name.startsWith('refs/') && m.data ? { ...m, name: `refs/${'b'.repeat(64)}.json` } : m,
      ),
      snapshotMembers().filter((m) => !m.name.startsWith('by-digest')),
    ]) {
      const t = target();
      await assert.rejects(restoreBackup(withTar(members), { force: true }), /is not a snapshot ref/);
      assert.deepEqual(tree(join(t.imageDir, 'refs')), []);
    }
  });

  it("an image.json that is a link is neither read nor written through (the link's target is unchanged)", async () => {
    const t = target();
    writeFileSync(t.victim, '{"snapshot":{"instance":"theirs"}}'); // what the restore would rewrite
    const members = snapshotMembers().map((m) =>
      m.name.endsWith('image.json') ? { name: m.name, type: 'symlink' as const, link: t.victim } : m,
    );
    await assert.rejects(
      restoreBackup(withTar(members), { force: false }),
      /image\.json is missing or not a regular file/,
    );
    assert.equal(readFileSync(t.victim, 'utf8'), '{"snapshot":{"instance":"theirs"}}');
    assert.deepEqual(tree(join(t.imageDir, 'by-digest')), []);
  });

  it('an image dir that is a link (to a dir outside) is refused, not moved into the image dir', async () => {
    const t = target();
    const members: Member[] = [
      { name: 'by-digest/', type: 'dir' },
      { name: `by-digest/${HEX}`, type: 'symlink', link: tmp },
      ...snapshotMembers().filter((m) => m.name.startsWith('refs')),
    ];
    await assert.rejects(restoreBackup(withTar(members), { force: false }), /by-digest\/a{64} \(a symbolic link\)/);
    assert.deepEqual(tree(join(t.imageDir, 'by-digest')), []);
  });

  it('other top-level members (an absolute name, made relative by tar) are refused', async () => {
    const t = target();
    await assert.rejects(
      restoreBackup(withTar([...snapshotMembers(), { name: '/etc/cron.d/x', data: 'x' }]), { force: false }),
      /images\.tar holds "etc"/,
    );
    assert.deepEqual(tree(join(t.imageDir, 'by-digest')), []);
  });

  it('members with ../, and links then written through, never land outside (tar refuses them; the restore fails)', async () => {
    const t = target();
    const out = join(tmp, `outside${n++}`);
    mkdirSync(out);
    const members: Member[] = [
      ...snapshotMembers(),
      { name: '../../../../escape', data: 'x' },
      { name: `by-digest/${HEX}/rootfs/up`, type: 'symlink', link: out },
      { name: `by-digest/${HEX}/rootfs/up/planted`, data: 'x' },
      { name: `by-digest/${HEX}/rootfs/hard`, type: 'hardlink', link: t.victim },
    ];
    await assert.rejects(restoreBackup(withTar(members), { force: false }), /tar --extract failed/);
    assert.deepEqual(readdirSync(out), []);
    assert.equal(existsSync(join(dirname(tmp), 'escape')), false);
    assert.equal(statSync(t.victim).nlink, 1);
    assert.deepEqual(tree(join(t.imageDir, 'by-digest')), []);
  });
});

describe('restore trusts the database, not the manifest, for its release; and never runs beside a server', () => {
  /** A real SQLite database (every migration), its marker then set to `release`. */
  const database = (release: string): Buffer => {
    const file = join(tmp, `db${n++}.sqlite`);
    const db = openDatabase(file);
    db.prepare("UPDATE instance_meta SET value = ? WHERE key = 'release'").run(release);
    db.pragma('journal_mode = DELETE');
    db.close();
    return readFileSync(file);
  };
  const sqliteBackup = (db: Buffer) =>
    backupOf({ 'sandboxd.db': db }, (m) => {
      m.database = { kind: 'sqlite', file: 'sandboxd.db' };
      m.dataRelease = null; // the manifest says nothing of the release (or lies)
    });

  it('a database a newer release served is refused though its manifest names no release', async () => {
    const t = target();
    await assert.rejects(
      restoreBackup(sqliteBackup(database('99.0.0')), { force: false }),
      /database was last served by sandboxd 99\.0\.0; this is sandboxd .*whatever manifest\.json says/,
    );
    assert.deepEqual(tree(t.dataDir), []);
  });

  it("a restore while a server holds the data dir's lock is refused, writing nothing", async () => {
    const t = target();
    mkdirSync(t.dataDir);
    const lock = await acquireInstanceLock({ dataDir: t.dataDir, role: 'server' });
    try {
      const dir = backupOf({ 'files/release': 'x' });
      await assert.rejects(restoreBackup(dir, { force: true }), /a restore needs the server stopped/);
      assert.deepEqual(tree(t.dataDir), []);
    } finally {
      await lock.release();
    }
  });
});
