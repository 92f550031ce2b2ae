/**
 * `sandboxd restore [--force] <dir>`: puts a backup of `sandboxd backup` in place for the
 * instance the config names (a fresh host, or an empty data dir). The backup is checked
 * whole (manifest, every hash) before anything is written; the database is put in place
 * last, so a restore cut short leaves no database (run it again with --force).
 */
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, realpathSync } from 'node:fs';
import { chmod, lstat, mkdir, open, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { loadConfig } from '../config.js';
import { acquireInstanceLock, type InstanceLock } from '../instance.js';
import { SECRETS_KEY_FILE } from '../services/secrets-crypto.js';
import { TempArea } from '../runtime/local/images/tmp.js';
import { MIGRATIONS } from '../store/migrations/index.js';
import {
  BACKUP_FORMAT,
  BACKUP_FORMAT_VERSION,
  compareVersions,
  hashFile,
  isMounted,
  MANIFEST,
  MANIFEST_SUM,
  type Manifest,
  runTool,
  safeRelative,
  sparseCopy,
  unsafeDirAbove,
  writableByOthers,
} from './backup-files.js';
import { RELEASE } from '../release.js';
import { type Command, UsageError } from './command.js';

const USAGE = `usage: sandboxd restore [--force] <dir>

Restores a backup made by \`sandboxd backup\` into the data dir (and image dir, database) that
the SANDBOXD_CONFIG / SANDBOXD_* settings name. The backup is checked whole (its manifest and
the sha256 of every file) before anything is written: a damaged one changes nothing.
  --force   restore into a data dir that is not empty: what the backup holds replaces what
            is there under the same names (database, volumes, files); nothing else is removed.
No server may run on the data dir meanwhile. See docs/backups.md.`;

/** A backup that fails its checks: nothing was written. */
export class BadBackupError extends Error {}

export const restore: Command = {
  summary: 'restore a backup of `sandboxd backup` into an empty data dir (a fresh host)',
  usage: USAGE,
  async run(args) {
    let force = false;
    const dirs: string[] = [];
    for (const a of args) {
      if (a === '--force' || a === '-f') force = true;
      else if (a.startsWith('-')) throw new UsageError(`unknown option "${a}"`);
      else dirs.push(a);
    }
    if (dirs.length !== 1)
      throw new UsageError(dirs.length ? `takes one directory (got ${dirs.length})` : 'names no directory');
    const dir = resolve(dirs[0]);
    if (!existsSync(join(dir, MANIFEST)) && existsSync(`${dir}.partial`))
      throw new UsageError(
        `${dir} does not exist; ${dir}.partial is a backup that never finished: it cannot be restored`,
      );
    if (!existsSync(dir)) throw new UsageError(`${dir} does not exist`);
    try {
      const m = await restoreBackup(dir, { force });
      const config = loadConfig();
      const lines = [
        `sandboxd restore: restored ${dir} (sandboxd ${m.version}, ${m.createdAt}) into ${config.dataDir}: ${m.volumes.length} volumes, ${m.images.length} snapshot images, ${m.files.length} files${m.database.kind === 'sqlite' ? ', the database' : ''}.`,
      ];
      if (m.database.kind === 'postgres')
        lines.push(
          `The database is PostgreSQL: restore ${m.database.dump ? `${join(dir, m.database.dump)} with pg_restore` : 'its own dump'} into SANDBOXD_DATABASE_URL's database before starting the server (docs/backups.md).`,
        );
      lines.push(
        'Start the server: sandboxes that ran when the backup was taken do not run here; it marks them error (reason "lost", unused minutes refunded).',
      );
      process.stdout.write(`${lines.join('\n')}\n`);
      return 0;
    } catch (e) {
      process.stderr.write(`sandboxd restore: ${(e as Error).message}\n`);
      return 1;
    }
  },
};

/** Checks the backup in `dir` whole: the manifest's own hash, its shape, and every file's size and sha256. */
export async function verifyBackup(dir: string): Promise<Manifest> {
  let text: string;
  let sum: string;
  try {
    text = await readFile(join(dir, MANIFEST), 'utf8');
    sum = await readFile(join(dir, MANIFEST_SUM), 'utf8');
  } catch (e) {
    throw new BadBackupError(
      `${dir} is not a sandboxd backup (${MANIFEST} or ${MANIFEST_SUM} missing: ${(e as Error).message})`,
    );
  }
  const want = /^([a-f0-9]{64}) {2}manifest\.json\n?$/.exec(sum)?.[1];
  if (!want) throw new BadBackupError(`${MANIFEST_SUM} is damaged`);
  if (createHash('sha256').update(text).digest('hex') !== want)
    throw new BadBackupError(`${MANIFEST} does not match ${MANIFEST_SUM}: the manifest is damaged`);
  let m: Manifest;
  try {
    m = JSON.parse(text) as Manifest;
  } catch {
    throw new BadBackupError(`${MANIFEST} is not JSON`);
  }
  if (m?.format !== BACKUP_FORMAT) throw new BadBackupError(`${MANIFEST} is not a sandboxd backup's manifest`);
  if (!Number.isInteger(m.formatVersion) || m.formatVersion > BACKUP_FORMAT_VERSION)
    throw new BadBackupError(
      `the backup's format (${m.formatVersion}) is newer than this sandboxd reads (${BACKUP_FORMAT_VERSION})`,
    );
  const latest = MIGRATIONS.at(-1)?.version ?? 0;
  if (m.schemaVersion !== null && (!Number.isInteger(m.schemaVersion) || m.schemaVersion > latest))
    throw new BadBackupError(
      `the backup's database schema (${m.schemaVersion}) is newer than this sandboxd's (${latest}): restore it with sandboxd ${m.version} or newer`,
    );
  const thisRelease = RELEASE;
  if (m.dataRelease != null) {
    const newer = typeof m.dataRelease === 'string' ? compareVersions(m.dataRelease, thisRelease) : null;
    if (newer === null) throw new BadBackupError(`${MANIFEST} names a bad release: ${JSON.stringify(m.dataRelease)}`);
    if (newer > 0)
      throw new BadBackupError(
        `the backup's data was last served by sandboxd ${m.dataRelease}; this is sandboxd ${thisRelease}, an older release: restore it with sandboxd ${m.dataRelease} or newer (downgrades are not supported)`,
      );
  }
  if (!['sqlite', 'postgres', 'none'].includes(m.database?.kind))
    throw new BadBackupError(`${MANIFEST} names no database kind`);
  if (!Array.isArray(m.contents) || !Array.isArray(m.volumes) || !Array.isArray(m.images) || !Array.isArray(m.files))
    throw new BadBackupError(`${MANIFEST} lacks its lists`);
  const listed = new Set<string>();
  for (const f of m.contents) {
    if (!safeRelative(f?.path) || !/^[a-f0-9]{64}$/.test(f.sha256) || !Number.isInteger(f.bytes))
      throw new BadBackupError(`${MANIFEST} names a bad entry: ${JSON.stringify(f)}`);
    listed.add(f.path);
  }
  for (const v of m.volumes)
    if (typeof v !== 'string' || !VOLUME_NAME_RE.test(v))
      throw new BadBackupError(`${MANIFEST} names a bad volume: ${JSON.stringify(v)}`);
  // The data dir's own files are top-level names: never a path into its subdirectories.
  for (const f of m.files)
    if (typeof f !== 'string' || !/^[^/\\\0]+$/.test(f) || f.startsWith('.'))
      throw new BadBackupError(`${MANIFEST} names a bad file of the data dir: ${JSON.stringify(f)}`);
  const need = [
    ...(m.database?.kind === 'sqlite' ? [m.database.file] : []),
    ...(m.database?.kind === 'postgres' && m.database.dump ? [m.database.dump] : []),
    ...m.volumes.map((v) => `volumes/${v}.img`),
    ...m.files.map((f) => `files/${f}`),
    ...(m.images.length ? ['images.tar'] : []),
  ];
  for (const p of need)
    if (!safeRelative(p) || !listed.has(p)) throw new BadBackupError(`${MANIFEST} names ${p} but lists no hash of it`);
  checkOwnership(dir);
  for (const f of m.contents) {
    checkInside(dir, f.path);
    let got: { sha256: string; bytes: number };
    try {
      got = await hashFile(join(dir, f.path));
    } catch (e) {
      throw new BadBackupError(`${f.path} is missing from the backup (${(e as NodeJS.ErrnoException).code})`);
    }
    if (got.bytes !== f.bytes)
      throw new BadBackupError(`${f.path} has ${got.bytes} bytes, the manifest says ${f.bytes}: damaged`);
    if (got.sha256 !== f.sha256)
      throw new BadBackupError(`${f.path} does not match its sha256 in the manifest: damaged`);
  }
  return m;
}

/**
 * The backup's SQLite database itself, not its manifest's word: its schema and its release
 * marker must not be newer than this sandboxd (a manifest edited to say otherwise would put
 * in place data this server then refuses, or misreads).
 */
function checkDatabase(file: string): void {
  let schema: number;
  let release: string | undefined;
  try {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      schema = db.pragma('user_version', { simple: true }) as number;
      try {
        release = (
          db.prepare("SELECT value FROM instance_meta WHERE key = 'release'").get() as { value: string } | undefined
        )?.value;
      } catch {
        /* no marker table: a release before it */
      }
    } finally {
      db.close();
    }
  } catch (e) {
    throw new BadBackupError(`the backup's database cannot be read: ${(e as Error).message}`);
  }
  const latest = MIGRATIONS.at(-1)?.version ?? 0;
  if (schema > latest)
    throw new BadBackupError(
      `the backup's database has schema ${schema}, newer than this sandboxd's (${latest}), whatever ${MANIFEST} says`,
    );
  if (release !== undefined) {
    const newer = compareVersions(release, RELEASE);
    if (newer === null || newer > 0)
      throw new BadBackupError(
        `the backup's database was last served by sandboxd ${release}; this is sandboxd ${RELEASE}: restore it with that release or newer (downgrades are not supported), whatever ${MANIFEST} says`,
      );
  }
}

const VOLUME_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/**
 * Refuses a backup that another user could change between its check and its copy (the
 * hashes are checked first, the files copied after): the backup dir must be owned by this
 * user or root and not writable by group or others, and so must each dir above it (one with
 * the sticky bit, like /tmp, excepted).
 */
function checkOwnership(dir: string): void {
  const unsafe = unsafeDirAbove(dir);
  if (unsafe)
    throw new BadBackupError(
      `${unsafe} can be written by another user: it could change the backup after its check; restore from a copy only root can write (chown -R root; chmod -R go-w)`,
    );
}

/**
 * Refuses a file of the backup that is not a regular file reached through real directories
 * (a symbolic link would make the restore read what it names, outside the backup), or that
 * another user could change.
 */
function checkInside(dir: string, path: string): void {
  let at = dir;
  const parts = path.split('/');
  for (const [i, part] of parts.entries()) {
    at = join(at, part);
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(at);
    } catch (e) {
      throw new BadBackupError(`${path} is missing from the backup (${(e as NodeJS.ErrnoException).code})`);
    }
    const last = i === parts.length - 1;
    if (last ? !st.isFile() : !st.isDirectory())
      throw new BadBackupError(
        `${parts.slice(0, i + 1).join('/')} in the backup is ${st.isSymbolicLink() ? 'a symbolic link' : `not a ${last ? 'regular file' : 'directory'}`}: a backup holds only files and dirs`,
      );
    if (writableByOthers(st, false))
      throw new BadBackupError(
        `${parts.slice(0, i + 1).join('/')} in the backup can be written by another user (owner uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)})`,
      );
  }
}

/** Verifies the backup in `dir`, then restores it for the configured instance. */
export async function restoreBackup(given: string, o: { force: boolean }): Promise<Manifest> {
  // Through links once (a `latest` link to a backup), then by that path only: a link changed
  // meanwhile cannot switch the backup between its check and its copy.
  const dir = realpathSync(given);
  const config = loadConfig();
  const m = await verifyBackup(dir);
  if (m.database.kind === 'sqlite' && config.databaseUrl)
    throw new Error(
      'the backup holds a SQLite database, but SANDBOXD_DATABASE_URL names a PostgreSQL one: unset it to restore this backup',
    );
  if (m.database.kind === 'postgres' && !config.databaseUrl)
    throw new Error(
      'the backup is of a PostgreSQL deployment: set SANDBOXD_DATABASE_URL to the database its dump was restored into',
    );
  if (m.database.kind === 'sqlite') checkDatabase(join(dir, m.database.file));
  const dataDir = config.dataDir;
  if (!o.force) {
    const there = existsSync(dataDir) ? readdirSync(dataDir) : [];
    if (there.length)
      throw new Error(
        `${dataDir} is not empty (${there.slice(0, 5).join(', ')}${there.length > 5 ? ', ...' : ''}): restore into an empty data dir, or pass --force`,
      );
    if (m.database.kind === 'sqlite' && existsSync(config.dbPath))
      throw new Error(`${config.dbPath} exists: restore into an empty data dir, or pass --force`);
  }
  await mkdir(dataDir, { recursive: true, mode: 0o711 });
  let lock: InstanceLock;
  try {
    lock = await acquireInstanceLock({ dataDir, role: 'restore' });
  } catch (e) {
    throw new Error(`${(e as Error).message}: a restore needs the server stopped`);
  }
  try {
    if (m.images.length) await restoreImages(dir, config.imageDir, lock.key, o.force);
    await restoreVolumes(dir, join(dataDir, 'volumes'), m.volumes);
    const uploads = m.contents.filter((f) => f.path.startsWith('builds/uploads/'));
    for (const f of uploads) await copyInto(join(dir, f.path), join(dataDir, f.path));
    // The secrets' key file goes where this config names it (default: the data dir).
    for (const f of m.files)
      await copyInto(join(dir, 'files', f), f === SECRETS_KEY_FILE ? config.secretsKeyFile : join(dataDir, f));
    if (m.database.kind === 'sqlite') {
      await mkdir(dirname(config.dbPath), { recursive: true });
      for (const s of ['-wal', '-shm', '-journal']) await rm(`${config.dbPath}${s}`, { force: true });
      await copyInto(join(dir, m.database.file), config.dbPath);
    }
  } finally {
    await lock.release();
  }
  return m;
}

/**
 * Extracts images.tar into a work dir of the image store, checks its refs against the image
 * dir (a ref there naming another image is refused without `force`), makes each snapshot
 * this instance's (`snapshot.instance`: the key of the new data dir), then moves each image
 * in (one already there, as in an image dir shared with the backed-up instance, is kept) and
 * then its ref.
 */
async function restoreImages(dir: string, imageDir: string, key: string, force: boolean): Promise<void> {
  for (const d of ['by-digest', 'refs']) await mkdir(join(imageDir, d), { recursive: true });
  await chmod(join(imageDir, 'by-digest'), 0o700);
  const tar = join(dir, 'images.tar');
  const tmp = new TempArea(join(imageDir, 'tmp'));
  const work = await tmp.make('restore');
  try {
    await runTool('tar', [
      '--extract',
      `--file=${tar}`,
      '--xattrs',
      '--xattrs-include=*',
      '--acls',
      '--numeric-owner',
      '--same-owner',
      '--same-permissions',
      `--directory=${work}`,
    ]);
    await checkExtracted(work);
    const refs = existsSync(join(work, 'refs')) ? (await readdir(join(work, 'refs'))).sort() : [];
    const entries: { file: string; digest: string }[] = [];
    for (const f of refs) {
      const e = JSON.parse(await readRegular(join(work, 'refs', f), `refs/${f}`)) as {
        ref?: unknown;
        digest?: unknown;
      };
      // Only snapshot refs, under their own names, naming an image of the backup or of this
      // image dir: a crafted backup cannot add or replace a ref every account pulls.
      if (
        typeof e.ref !== 'string' ||
        !e.ref.startsWith('snapshot/') ||
        `${createHash('sha256').update(e.ref).digest('hex')}.json` !== f ||
        typeof e.digest !== 'string' ||
        !/^sha256:[a-f0-9]{64}$/.test(e.digest) ||
        !(
          existsSync(join(work, 'by-digest', e.digest.slice(7))) ||
          existsSync(join(imageDir, 'by-digest', e.digest.slice(7)))
        )
      )
        throw new BadBackupError(`images.tar's refs/${f} is not a snapshot ref of an image in the backup`);
      const there = join(imageDir, 'refs', f);
      if (existsSync(there) && !force) {
        const have = JSON.parse(await readFile(there, 'utf8')) as { digest?: string };
        if (have.digest !== e.digest)
          throw new Error(`image ${e.ref} exists in ${imageDir} and names another image: pass --force to replace it`);
      }
      entries.push({ file: f, digest: e.digest });
    }
    for (const hex of existsSync(join(work, 'by-digest')) ? await readdir(join(work, 'by-digest')) : []) {
      const to = join(imageDir, 'by-digest', hex);
      if (existsSync(to)) continue; // the same image (snapshot digests are never reused)
      const recFile = join(work, 'by-digest', hex, 'image.json');
      const rec = JSON.parse(await readRegular(recFile, `by-digest/${hex}/image.json`)) as {
        snapshot?: { instance: string };
      };
      if (rec.snapshot) rec.snapshot.instance = key;
      await writeFile(recFile, JSON.stringify(rec));
      await rename(join(work, 'by-digest', hex), to);
    }
    for (const e of entries) await rename(join(work, 'refs', e.file), join(imageDir, 'refs', e.file));
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * What backup.ts writes into images.tar and nothing else, each entry a real directory or
 * file (a link there would be moved into the image dir and followed later): `by-digest/`
 * with a directory per image (its sha256), and `refs/` with `<sha256>.json` files.
 */
async function checkExtracted(work: string): Promise<void> {
  const bad = (what: string) =>
    new BadBackupError(
      `images.tar holds ${what}: only by-digest/<sha256>/ dirs and refs/<sha256>.json files belong there`,
    );
  for (const top of await readdir(work)) {
    if (top !== 'by-digest' && top !== 'refs') throw bad(JSON.stringify(top));
    if (!(await lstat(join(work, top))).isDirectory()) throw bad(`${top} that is not a directory`);
    for (const e of await readdir(join(work, top))) {
      const st = await lstat(join(work, top, e));
      const ok =
        top === 'by-digest'
          ? /^[a-f0-9]{64}$/.test(e) && st.isDirectory()
          : /^[a-f0-9]{64}\.json$/.test(e) && st.isFile();
      if (!ok) throw bad(`${top}/${JSON.stringify(e).slice(1, -1)}${st.isSymbolicLink() ? ' (a symbolic link)' : ''}`);
      if (top === 'by-digest') await readRegular(join(work, top, e, 'image.json'), `by-digest/${e}/image.json`);
    }
  }
}

/** The text of `path`, which must be a regular file (a link from a tar is never read or written through). */
async function readRegular(path: string, name: string): Promise<string> {
  const st = await lstat(path).catch(() => null);
  if (!st?.isFile()) throw new BadBackupError(`images.tar's ${name} is missing or not a regular file`);
  return readFile(path, 'utf8');
}

/** Each volume image into `<vdir>/<name>/volume.img` (made in a `.tmp-` dir, renamed into place). */
async function restoreVolumes(dir: string, vdir: string, names: string[]): Promise<void> {
  if (!names.length) return;
  await mkdir(vdir, { recursive: true });
  await chmod(vdir, 0o700);
  for (const name of names) {
    if (!VOLUME_NAME_RE.test(name)) throw new Error(`bad volume name in the manifest: ${name}`);
    const to = join(vdir, name);
    if (isMounted(join(to, 'mnt')))
      throw new Error(`volume ${name} is mounted at ${join(to, 'mnt')}: stop what uses it`);
    const tmp = join(vdir, `.tmp-restore-${name}`);
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { mode: 0o700 });
    await sparseCopy(join(dir, 'volumes', `${name}.img`), join(tmp, 'volume.img'));
    await mkdir(join(tmp, 'mnt'), { mode: 0o700 });
    await rm(to, { recursive: true, force: true });
    await rename(tmp, to);
  }
}

/** Copies a file into place: a temp file beside it (0600), synced, renamed over. */
async function copyInto(from: string, to: string): Promise<void> {
  await mkdir(dirname(to), { recursive: true, mode: 0o700 });
  const tmp = `${to}.restore-${process.pid}`;
  await rm(tmp, { force: true });
  await sparseCopy(from, tmp);
  await rename(tmp, to);
  const fh = await open(dirname(to), 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
