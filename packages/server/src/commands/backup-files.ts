/**
 * What `sandboxd backup` and `sandboxd restore` share: the backup's layout and manifest, its
 * hashes, the sparse copy of a volume image (frozen with fsfreeze while mounted), the tar of
 * the instance's snapshot images, and which files of the data dir are the instance's.
 *
 * A backup is a directory (0700, files 0600):
 *
 *   manifest.json          {@link Manifest}: versions, time, what is in it, sha256 of each file
 *   manifest.sha256        sha256 of manifest.json (a damaged manifest is refused too)
 *   sandboxd.db            the SQLite database (SQLite's online backup), absent on PostgreSQL
 *   database.pgdump        PostgreSQL: pg_dump's custom format, when pg_dump was found
 *   files/<name>           the data dir's top-level files (instance secrets, release marker)
 *   builds/uploads/...     E2B template uploads
 *   volumes/<name>.img     each volume's ext4 image (sparse)
 *   images.tar             the instance's snapshot images (snapshots, templates, build layers)
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, lstatSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { open, readdir, rm } from 'node:fs/promises';
import { dirname, isAbsolute, join, normalize, relative } from 'node:path';
import { compareReleases } from '../store/release-marker.js';

/** `manifest.json`'s `format`. */
export const BACKUP_FORMAT = 'sandboxd-backup';
export const BACKUP_FORMAT_VERSION = 1;
export const MANIFEST = 'manifest.json';
export const MANIFEST_SUM = 'manifest.sha256';

export interface ManifestFile {
  /** Relative to the backup dir, `/`-separated. */
  path: string;
  bytes: number;
  sha256: string;
}

export interface Manifest {
  format: typeof BACKUP_FORMAT;
  formatVersion: number;
  /** Release of the sandboxd that made it (packages/server/package.json). */
  version: string;
  /** The database's schema version (SQLite `user_version`; on PostgreSQL, null). */
  schemaVersion: number | null;
  /**
   * The release that last served the data (the SQLite database's marker, `instance_meta`
   * `release`), null when it has none (older releases, PostgreSQL): a restore refuses data a
   * newer release than itself has served, as the server does.
   */
  dataRelease: string | null;
  createdAt: string;
  /** Where it came from (for the operator's eyes only; restore uses its own config). */
  source: { dataDir: string; imageDir: string; instance: string; hostname: string };
  /** `none`: a runner's (its records are in the API's database, backed up where that runs). */
  database: { kind: 'sqlite'; file: string } | { kind: 'postgres'; dump: string | null } | { kind: 'none' };
  /** Volume names (the driver's: `<accountId>__<name>`), each `volumes/<name>.img`. */
  volumes: string[];
  /** How many of them a sandbox had mounted: frozen (fsfreeze) while they were copied. */
  volumesFrozen: number;
  /** Snapshot refs in images.tar (snapshots, templates' images, build layers). */
  images: string[];
  /** Top-level files of the data dir, each `files/<name>`. */
  files: string[];
  /** Every file of the backup but the manifest's own two. */
  contents: ManifestFile[];
}

/** `a` < `b` (negative), equal (0) or newer (positive), by `major.minor.patch`; null when either is not one. */
export function compareVersions(a: string, b: string): number | null {
  try {
    return compareReleases(a, b);
  } catch {
    return null;
  }
}

/** sha256 (hex) and size of a file, read as a stream. */
export function hashFile(path: string): Promise<{ sha256: string; bytes: number }> {
  return new Promise((resolve, reject) => {
    const h = createHash('sha256');
    let bytes = 0;
    createReadStream(path, { highWaterMark: 1 << 20 })
      .on('data', (b) => {
        bytes += (b as Buffer).length;
        h.update(b as Buffer);
      })
      .on('error', reject)
      .on('end', () => resolve({ sha256: h.digest('hex'), bytes }));
  });
}

/** Every regular file below `dir`, relative and `/`-separated, sorted. */
export async function listFiles(dir: string, under = ''): Promise<string[]> {
  const out: string[] = [];
  for (const e of (await readdir(join(dir, under), { withFileTypes: true })).sort((a, b) =>
    a.name < b.name ? -1 : 1,
  )) {
    const rel = under ? `${under}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...(await listFiles(dir, rel)));
    else if (e.isFile()) out.push(rel);
  }
  return out;
}

/** A manifest path that stays inside the backup (relative, normalised, no `..`). */
export function safeRelative(p: unknown): p is string {
  if (typeof p !== 'string' || !p || p === '.' || p.includes('\0') || p.includes('\\') || isAbsolute(p)) return false;
  const n = normalize(p);
  return n === p && !n.startsWith('../') && n !== '..' && !n.split('/').includes('..');
}

/**
 * The data dir's own top-level files that a backup carries (`files/<name>`): regular files
 * whose name does not start with `.`, other than the database's (`db`, its `-wal`, `-shm`,
 * `-journal`) and logs (`*.log`). Today: a port-link key file of an older version, and any
 * release marker the server keeps there.
 */
export function instanceFiles(dataDir: string, dbPath: string): string[] {
  const db = relative(dataDir, dbPath);
  const skip = new Set([db, `${db}-wal`, `${db}-shm`, `${db}-journal`]);
  return readdirSync(dataDir, { withFileTypes: true })
    .filter((e) => e.isFile() && !e.name.startsWith('.') && !e.name.endsWith('.log') && !skip.has(e.name))
    .map((e) => e.name)
    .sort();
}

/** Runs a program to its end; rejects with its stderr (and exit) when it fails. */
export function runTool(file: string, args: string[], opts: { env?: NodeJS.ProcessEnv } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'], env: opts.env ?? process.env });
    let out = '';
    let err = '';
    p.stdout.on('data', (b) => {
      if (out.length < 1 << 20) out += b;
    });
    p.stderr.on('data', (b) => {
      if (err.length < 1 << 16) err += b;
    });
    p.on('error', reject);
    p.on('close', (code, signal) => {
      if (code === 0) resolve(out);
      else reject(new Error(`${file} ${args[0] ?? ''} failed (${signal ?? `exit ${code}`}): ${err.trim()}`));
    });
  });
}

/** Whether `name` is a program on PATH. */
export function onPath(name: string): boolean {
  return (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':').some((d) => d && existsSync(join(d, name)));
}

/** The mount point `mnt` as this process sees it in /proc/self/mountinfo. */
export function isMounted(mnt: string): boolean {
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const p = line.split(' ')[4];
    if (p && p.replace(/\\(\d{3})/g, (_s, o: string) => String.fromCharCode(parseInt(o, 8))) === mnt) return true;
  }
  return false;
}

/** Mount points frozen by this process now, so a signal can thaw them before it exits. */
export const frozen = new Set<string>();

/** Thaws whatever this process froze (synchronously: called from signal handlers too). */
export function thawAll(): void {
  for (const m of frozen) {
    spawnSync('fsfreeze', ['--unfreeze', m], { stdio: 'ignore' });
    frozen.delete(m);
  }
}

/**
 * Copies `src` to `dst` (created 0600, mode `wx`) keeping holes: blocks of zeros are not
 * written, and the file is cut to `src`'s size at the end. Synced before it returns.
 */
export async function sparseCopy(src: string, dst: string): Promise<number> {
  const from = await open(src, 'r');
  const to = await open(dst, 'wx', 0o600).catch(async (e) => {
    await from.close();
    throw e;
  });
  try {
    const size = (await from.stat()).size;
    const buf = Buffer.alloc(1 << 20);
    const zero = Buffer.alloc(1 << 20);
    let pos = 0;
    while (pos < size) {
      const { bytesRead } = await from.read(buf, 0, buf.length, pos);
      if (bytesRead === 0) break;
      const chunk = buf.subarray(0, bytesRead);
      if (!chunk.equals(zero.subarray(0, bytesRead))) await to.write(chunk, 0, bytesRead, pos);
      pos += bytesRead;
    }
    await to.truncate(pos);
    await to.sync();
    return pos;
  } finally {
    await from.close();
    await to.close();
  }
}

/**
 * A consistent copy of volume image `img` whose host mount point is `mnt`. Mounted (a
 * sandbox uses it): the file system is frozen (`fsfreeze`: its dirty data reaches the image
 * and writes wait) for the copy and thawed after, whatever happens. It is frozen and thawed
 * through a descriptor of the mount held open meanwhile (`/proc/<pid>/fd/<n>`), so the
 * mount cannot go away under the freeze (an unmount meanwhile is busy; the server keeps such
 * a volume mounted for its next use) and the thaw always reaches it. Not mounted: copied,
 * and copied again (at most 3 times) if it changed or got mounted meanwhile.
 */
export async function copyVolume(img: string, mnt: string, dst: string): Promise<'frozen' | 'idle'> {
  for (let attempt = 0; attempt < 3; attempt++) {
    if (isMounted(mnt)) {
      const held = await open(mnt, 'r').catch(() => undefined);
      if (!held) continue;
      try {
        // Opened after an unmount, the descriptor is the empty dir below: copy it idle.
        if ((await held.stat()).dev !== statSync(dirname(mnt)).dev) {
          const fd = `/proc/${process.pid}/fd/${held.fd}`;
          await runTool('fsfreeze', ['--freeze', fd]);
          frozen.add(fd);
          try {
            await sparseCopy(img, dst);
          } finally {
            frozen.delete(fd);
            await runTool('fsfreeze', ['--unfreeze', fd]);
          }
          return 'frozen';
        }
      } finally {
        await held.close();
      }
    }
    const before = statSync(img, { bigint: true });
    await sparseCopy(img, dst);
    const after = statSync(img, { bigint: true });
    if (!isMounted(mnt) && before.mtimeNs === after.mtimeNs && before.size === after.size) return 'idle';
    await rm(dst, { force: true });
  }
  throw new Error(
    `volume image ${img} kept changing while it was copied, and no mount of it is visible here: run sandboxd backup in the server's mount namespace`,
  );
}

/** Whether `st` may have been written by someone else than this user and root (group or others' write bit, or another owner). */
export function writableByOthers(st: { uid: number; mode: number }, sticky: boolean): boolean {
  const me = process.getuid?.() ?? 0;
  if (st.uid !== me && st.uid !== 0) return true;
  return (st.mode & 0o022) !== 0 && !(sticky && (st.mode & 0o1000) !== 0);
}

/**
 * The first of `dir` and the dirs above it (`dir` need not exist yet) that another user could
 * change, described (`<path> (owner uid N, mode M)`), or null when only this user and root
 * can. A dir above with the sticky bit (like /tmp) is fine, and `dir` itself with `stickyOk`:
 * others cannot rename or remove what is not theirs there.
 */
export function unsafeDirAbove(dir: string, o: { stickyOk?: boolean } = {}): string | null {
  let d = dir;
  for (let i = 0; i < 64; i++) {
    const st = lstatSync(d, { throwIfNoEntry: false });
    if (st && writableByOthers(st, o.stickyOk || d !== dir))
      return `${d} (owner uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)})`;
    if (d === dirname(d)) return null;
    d = dirname(d);
  }
  return null;
}
