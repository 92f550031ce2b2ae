/**
 * `sandboxd backup <dir>`: a consistent copy of the instance that the config names (the same
 * SANDBOXD_CONFIG / SANDBOXD_* settings as its server), taken while it serves. What is copied
 * and how: backup-files.ts and docs/backups.md.
 */
import Database from 'better-sqlite3';
import { existsSync, lstatSync } from 'node:fs';
import { chmod, mkdir, open, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { loadConfig } from '../config.js';
import { instanceKey } from '../instance.js';
import { formatSecretKeys, readKeyFile, SECRETS_KEY_FILE } from '../services/secrets-crypto.js';
import { MIGRATIONS } from '../store/migrations/index.js';
import {
  BACKUP_FORMAT,
  BACKUP_FORMAT_VERSION,
  copyVolume,
  hashFile,
  instanceFiles,
  listFiles,
  MANIFEST,
  MANIFEST_SUM,
  type Manifest,
  onPath,
  runTool,
  thawAll,
  unsafeDirAbove,
} from './backup-files.js';
import { type Command, UsageError } from './command.js';
import { RELEASE } from '../release.js';

const USAGE = `usage: sandboxd backup <dir>

Copies the instance (its database by SQLite's online backup, volumes, snapshot and template
images, build uploads, the data dir's own files) into <dir>, which must not exist, while the
server serves. Written into <dir>.partial and renamed at the end. Settings come from the same
SANDBOXD_CONFIG / SANDBOXD_* variables as the server's. See docs/backups.md.`;

/** Marks a `<dir>.partial` as a backup's work (its pid inside), so a later run may remove it. */
const PARTIAL_MARK = '.sandboxd-backup-partial';
const VOLUME_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

export const backup: Command = {
  summary: 'copy the instance (database, volumes, snapshots, templates, secrets) while it serves',
  usage: USAGE,
  async run(args) {
    const dirs = args.filter((a) => !a.startsWith('-'));
    const opts = args.filter((a) => a.startsWith('-'));
    if (opts.length) throw new UsageError(`unknown option "${opts[0]}"`);
    if (dirs.length !== 1)
      throw new UsageError(dirs.length ? `takes one directory (got ${dirs.length})` : 'names no directory');
    const dir = resolve(dirs[0]);
    if (lstatSync(dir, { throwIfNoEntry: false }))
      throw new UsageError(`${dir} exists: a backup goes into a new directory`);
    if (!existsSync(dirname(dir))) throw new UsageError(`${dirname(dir)} does not exist`);
    const onSignal = (sig: NodeJS.Signals) => {
      thawAll();
      process.stderr.write(`sandboxd backup: ${sig}: stopped; ${dir}.partial is left unfinished\n`);
      process.exit(130);
    };
    process.on('SIGINT', onSignal).on('SIGTERM', onSignal);
    try {
      const m = await takeBackup(dir);
      const bytes = m.contents.reduce((n, f) => n + f.bytes, 0);
      process.stdout.write(
        `sandboxd backup: wrote ${dir}: ${describeDatabase(m)}, ${m.volumes.length} volumes (${m.volumesFrozen} frozen for their copy), ${m.images.length} snapshot images, ${m.files.length} files; ${(bytes / 2 ** 20).toFixed(1)} MiB\n`,
      );
      if (loadConfig().secretsKey)
        process.stderr.write(
          'sandboxd backup: note: the secrets key comes from SANDBOXD_SECRETS_KEY, which is not in the backup: keep it with the backup, or no secret can be read after a restore\n',
        );
      return 0;
    } catch (e) {
      process.stderr.write(`sandboxd backup: ${(e as Error).message}\n`);
      return 1;
    } finally {
      thawAll();
      process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    }
  },
};

function describeDatabase(m: Manifest): string {
  if (m.database.kind === 'sqlite') return `database (SQLite, schema ${m.schemaVersion})`;
  if (m.database.kind === 'none') return 'no database (a runner)';
  return m.database.dump ? 'database (pg_dump)' : 'database not included (PostgreSQL: see docs/backups.md)';
}

/** Writes the backup of the configured instance into `dir` (through `<dir>.partial`). */
export async function takeBackup(dir: string): Promise<Manifest> {
  const config = loadConfig();
  if (!existsSync(config.dataDir))
    throw new Error(`no data dir at ${config.dataDir} (SANDBOXD_DATA_DIR, or dataDir in SANDBOXD_CONFIG)`);
  if (config.role !== 'runner' && !config.databaseUrl && !existsSync(config.dbPath))
    throw new Error(`no database at ${config.dbPath}: is ${config.dataDir} a sandboxd data dir?`);
  // A link there (even one naming nothing yet) is not followed: the backup would land where it points.
  if (lstatSync(dir, { throwIfNoEntry: false })) throw new Error(`${dir} exists: a backup goes into a new directory`);
  // Secrets go in there: no other user may be able to rename or replace a dir on the way.
  const unsafe = unsafeDirAbove(dirname(dir), { stickyOk: true });
  if (unsafe)
    throw new Error(
      `${unsafe} can be written by another user, who could take the backup's secrets: write backups where only root can`,
    );
  const partial = `${dir}.partial`;
  await claimPartial(partial);
  const key = instanceKey(config.dataDir);

  // 1. The database first: everything after it is at least as new as its records.
  let schemaVersion: number | null = null;
  let dataRelease: string | null = null;
  let database: Manifest['database'];
  if (config.role === 'runner') {
    database = { kind: 'none' };
  } else if (config.databaseUrl) {
    database = { kind: 'postgres', dump: await pgDump(config.databaseUrl, join(partial, 'database.pgdump')) };
  } else {
    ({ schemaVersion, dataRelease } = await sqliteBackup(config.dbPath, join(partial, 'sandboxd.db')));
    database = { kind: 'sqlite', file: 'sandboxd.db' };
  }

  // 2. The data dir's own files (secrets of older versions, markers) and E2B uploads.
  const files = instanceFiles(config.dataDir, config.dbPath);
  await mkdir(join(partial, 'files'), { mode: 0o700 });
  for (const f of files) await copySmall(join(config.dataDir, f), join(partial, 'files', f));
  // The secrets' key file (docs/secrets.md) when SANDBOXD_SECRETS_KEY_FILE puts it outside the
  // data dir: carried as files/secrets.key (restore writes it where its config says).
  if (resolve(config.secretsKeyFile) !== join(config.dataDir, SECRETS_KEY_FILE) && !files.includes(SECRETS_KEY_FILE)) {
    const keys = readKeyFile(config.secretsKeyFile);
    if (keys) {
      await writeSynced(join(partial, 'files', SECRETS_KEY_FILE), formatSecretKeys(keys));
      files.push(SECRETS_KEY_FILE);
      files.sort();
    }
  }
  const uploads = join(config.dataDir, 'builds', 'uploads');
  if (existsSync(uploads))
    for (const f of await listFiles(uploads)) {
      if (basename(f).startsWith('.')) continue; // a temp file of an upload in progress
      const to = join(partial, 'builds', 'uploads', f);
      await mkdir(dirname(to), { recursive: true, mode: 0o700 });
      await copySmall(join(uploads, f), to).catch((e) => {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e; // removed meanwhile
      });
    }

  // 3. Snapshot images of this instance (snapshots, templates, build layers).
  const images = await snapshotImages(config.imageDir, key, join(partial, 'images.tar'));

  // 4. Volumes, each frozen while it is copied if a sandbox has it mounted.
  const volumes: string[] = [];
  let frozenCount = 0;
  const vdir = join(config.dataDir, 'volumes');
  if (existsSync(vdir)) {
    await mkdir(join(partial, 'volumes'), { mode: 0o700 });
    for (const name of (await readdir(vdir)).sort()) {
      const img = join(vdir, name, 'volume.img');
      if (!VOLUME_NAME_RE.test(name) || !existsSync(img)) continue;
      // The server makes each image a regular file: anything else (a link would carry the
      // file it names into the backup) is not copied.
      if (!lstatSync(img).isFile()) throw new Error(`${img} is not a regular file: not copying what it names`);
      try {
        const how = await copyVolume(img, join(vdir, name, 'mnt'), join(partial, 'volumes', `${name}.img`));
        if (how === 'frozen') frozenCount++;
      } catch (e) {
        if (!existsSync(img)) continue; // deleted meanwhile
        throw e;
      }
      volumes.push(name);
    }
  }

  // 5. The manifest, then the rename that makes the backup whole.
  const contents = [];
  for (const path of await listFiles(partial)) {
    if (path === PARTIAL_MARK) continue;
    await chmod(join(partial, path), 0o600);
    const fh = await open(join(partial, path), 'r');
    await fh.sync().finally(() => fh.close());
    contents.push({ path, ...(await hashFile(join(partial, path))) });
  }
  const manifest: Manifest = {
    format: BACKUP_FORMAT,
    formatVersion: BACKUP_FORMAT_VERSION,
    version: RELEASE,
    schemaVersion,
    dataRelease,
    createdAt: new Date().toISOString(),
    source: { dataDir: config.dataDir, imageDir: config.imageDir, instance: key, hostname: hostname() },
    database,
    volumes,
    volumesFrozen: frozenCount,
    images,
    files,
    contents,
  };
  const text = `${JSON.stringify(manifest, null, 2)}\n`;
  await writeSynced(join(partial, MANIFEST), text);
  const { createHash } = await import('node:crypto');
  await writeSynced(join(partial, MANIFEST_SUM), `${createHash('sha256').update(text).digest('hex')}  ${MANIFEST}\n`);
  await rm(join(partial, PARTIAL_MARK));
  await syncDirs(partial);
  await rename(partial, dir);
  await syncDir(dirname(dir));
  return manifest;
}

/** Makes `<dir>.partial` (0700), removing one a dead backup left. */
async function claimPartial(partial: string): Promise<void> {
  const st = lstatSync(partial, { throwIfNoEntry: false });
  // Another user's dir is not removed (root removing a tree its owner can change meanwhile).
  if (st && !st.isSymbolicLink() && st.uid !== (process.getuid?.() ?? 0))
    throw new Error(`${partial} exists and belongs to uid ${st.uid}: remove it yourself or choose another directory`);
  if (existsSync(partial)) {
    let pid = 0;
    try {
      pid = Number(await readFile(join(partial, PARTIAL_MARK), 'utf8'));
    } catch {
      throw new Error(`${partial} exists and is not an unfinished backup: remove it or choose another directory`);
    }
    if (pid && pid !== process.pid && alive(pid))
      throw new Error(`${partial} is being written by another backup (pid ${pid})`);
    await rm(partial, { recursive: true, force: true });
  }
  await mkdir(partial, { mode: 0o700 });
  await chmod(partial, 0o700);
  await writeFile(join(partial, PARTIAL_MARK), String(process.pid), { mode: 0o600 });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * SQLite's online backup of `dbPath` (read-only; the server goes on writing: WAL readers do
 * not block it). After a first step, the rest is copied in one step, so a write of the server
 * restarts it at most once. The copy is checked (`quick_check`). Returns its schema version
 * and the release its marker names (none before the marker existed).
 */
async function sqliteBackup(
  dbPath: string,
  to: string,
): Promise<{ schemaVersion: number; dataRelease: string | null }> {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    await db.backup(to, { progress: () => 2 ** 30 });
  } finally {
    db.close();
  }
  const copy = new Database(to, { fileMustExist: true });
  try {
    const ok = copy.pragma('quick_check', { simple: true });
    if (ok !== 'ok') throw new Error(`the database's copy failed its check: ${String(ok)}`);
    copy.pragma('journal_mode = DELETE'); // one file, no -wal beside it
    const version = copy.pragma('user_version', { simple: true }) as number;
    const latest = MIGRATIONS.at(-1)?.version ?? 0;
    if (version > latest)
      throw new Error(
        `the database's schema (${version}) is newer than this sandboxd's (${latest}): back up with the server's release`,
      );
    let dataRelease: string | null = null;
    try {
      const row = copy.prepare("SELECT value FROM instance_meta WHERE key = 'release'").get() as
        | { value: string }
        | undefined;
      dataRelease = row?.value ?? null;
    } catch {
      /* no marker table: a release before it */
    }
    return { schemaVersion: version, dataRelease };
  } finally {
    copy.close();
  }
}

/** pg_dump (custom format) of `url` into `to` when pg_dump is installed, else null (the operator dumps it). */
async function pgDump(url: string, to: string): Promise<string | null> {
  if (!onPath('pg_dump')) {
    process.stderr.write(
      'sandboxd backup: the database is PostgreSQL and pg_dump is not installed: back it up with pg_dump (docs/backups.md)\n',
    );
    return null;
  }
  const u = new URL(url);
  // libpq takes a password from the URL's user info and from its `password` parameter.
  const password = decodeURIComponent(u.password) || (u.searchParams.get('password') ?? '');
  u.password = '';
  u.searchParams.delete('password');
  // The password goes by environment, never on a command line others can read.
  await runTool('pg_dump', ['--format=custom', `--file=${to}`, `--dbname=${u.toString()}`], {
    env: { ...process.env, ...(password ? { PGPASSWORD: password } : {}) },
  });
  return 'database.pgdump';
}

/**
 * Tars the image store's snapshot images of instance `key` (ref `snapshot/...`, whose record
 * names this instance) with their ref files into `to`: hard links (a snapshot shares its
 * base's files), owners, modes, devices and xattrs kept. An image deleted while the tar reads
 * it makes the list be read again (at most 3 times). Returns the refs.
 */
async function snapshotImages(imageDir: string, key: string, to: string): Promise<string[]> {
  for (let attempt = 0; ; attempt++) {
    const picked = await pickSnapshots(imageDir, key);
    if (!picked.length) return [];
    const list = `${to}.list`;
    await writeFile(list, `${picked.flatMap((p) => [p.dir, p.refFile]).join('\0')}\0`, { mode: 0o600 });
    try {
      await runTool('tar', [
        '--create',
        `--file=${to}`,
        '--xattrs',
        '--xattrs-include=*',
        '--acls',
        '--numeric-owner',
        '--sparse',
        `--directory=${imageDir}`,
        '--null',
        `--files-from=${list}`,
      ]);
      return picked.map((p) => p.ref).sort();
    } catch (e) {
      await rm(to, { force: true });
      if (attempt >= 2) throw e;
    } finally {
      await rm(list, { force: true });
    }
  }
}

async function pickSnapshots(imageDir: string, key: string): Promise<{ ref: string; dir: string; refFile: string }[]> {
  const refs = join(imageDir, 'refs');
  if (!existsSync(refs)) return [];
  const out: { ref: string; dir: string; refFile: string }[] = [];
  for (const f of (await readdir(refs)).sort()) {
    if (!/^[a-f0-9]{64}\.json$/.test(f)) continue;
    try {
      const e = JSON.parse(await readFile(join(refs, f), 'utf8')) as { ref?: string; digest?: string };
      if (!e.ref?.startsWith('snapshot/') || !/^sha256:[a-f0-9]{64}$/.test(e.digest ?? '')) continue;
      const hex = e.digest!.slice(7);
      const rec = JSON.parse(await readFile(join(imageDir, 'by-digest', hex, 'image.json'), 'utf8')) as {
        snapshot?: { instance?: string; ref?: string };
      };
      if (rec.snapshot?.instance === key && rec.snapshot.ref === e.ref)
        out.push({ ref: e.ref, dir: `by-digest/${hex}`, refFile: `refs/${f}` });
    } catch {
      /* deleted meanwhile, or not a whole image: not a snapshot to keep */
    }
  }
  return out;
}

async function copySmall(from: string, to: string): Promise<void> {
  await writeSynced(to, await readFile(from));
}

async function writeSynced(path: string, data: string | Buffer): Promise<void> {
  const fh = await open(path, 'wx', 0o600);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** fsyncs `dir` and every directory below it. */
async function syncDirs(dir: string): Promise<void> {
  for (const e of await readdir(dir, { withFileTypes: true })) if (e.isDirectory()) await syncDirs(join(dir, e.name));
  await syncDir(dir);
}
