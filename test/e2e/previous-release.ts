/**
 * The previous landed release, built from git history for the upgrade test: the release
 * before this one in deploy/releases.json, at its recorded commit, extracted by `git archive`
 * and set up by its own steps, cached under `.sandboxd-test/releases/<version>-<commit>/`
 * (a build is complete once its `.built` stamp is written; a half-made one is made again).
 *
 * Its npm dependencies: when its package-lock.json differs from this tree's only in the
 * workspace packages' own versions (the release bump), the installed packages are the very
 * ones the lockfile pins, so its `node_modules` is a folder of links to this checkout's
 * installed packages, except `@sandboxd/*`, which link to its own `packages/` (as npm's
 * workspace links do). Otherwise `npm ci --prefer-offline` installs its own. Its native
 * helpers and SDK bundle are made by its own set-up step (`scripts/prepare-host.ts
 * --no-images`: nativeBin of each helper, the SDK's dist) into its own tree.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');
export const RELEASES_FILE = join(ROOT, 'deploy/releases.json');

export interface ReleaseEntry {
  version: string;
  commit: string | null;
  date: string | null;
  schema: { sqlite: number; postgres: number };
}

export interface PreviousRelease extends ReleaseEntry {
  commit: string;
  /** Its checkout, ready to serve (`node --import tsx packages/server/src/main.ts` there). */
  root: string;
  /** How its npm dependencies were had: `linked` (same lockfile but for versions) or `npm ci`. */
  deps: 'linked' | 'npm ci';
  /** Whether this call built it (false: from the cache). */
  built: boolean;
}

/** deploy/releases.json's releases, oldest first. */
export function releases(): ReleaseEntry[] {
  return (JSON.parse(readFileSync(RELEASES_FILE, 'utf8')) as { releases: ReleaseEntry[] }).releases;
}

/** This tree's release (packages/server/package.json). */
export function thisRelease(): string {
  return (JSON.parse(readFileSync(join(ROOT, 'packages/server/package.json'), 'utf8')) as { version: string }).version;
}

/** The release before this one in deploy/releases.json; throws if the file does not say. */
export function previousEntry(): ReleaseEntry & { commit: string } {
  const all = releases();
  const i = all.findIndex((r) => r.version === thisRelease());
  if (i < 1)
    throw new Error(`deploy/releases.json has no release before ${thisRelease()} (this release must be listed last)`);
  const prev = all[i - 1];
  if (!prev.commit) throw new Error(`deploy/releases.json: release ${prev.version} has no commit`);
  return prev as ReleaseEntry & { commit: string };
}

/**
 * Throws, saying exactly why, when this repository lacks `commit` (a shallow clone, or a
 * history without it): the upgrade test needs the previous release's sources.
 */
export function requireCommit(commit: string, version: string): void {
  const has = spawnSync('git', ['-C', ROOT, 'cat-file', '-e', `${commit}^{commit}`]).status === 0;
  if (has) return;
  const shallow = spawnSync('git', ['-C', ROOT, 'rev-parse', '--is-shallow-repository'], {
    encoding: 'utf8',
  }).stdout.trim();
  throw new Error(
    `this repository has no commit ${commit} (release ${version}, deploy/releases.json)` +
      (shallow === 'true'
        ? ': it is a shallow clone; run `git fetch --unshallow`'
        : ': fetch the history that has it') +
      ' so that the upgrade test can build the previous release',
  );
}

/** A lockfile with the workspace packages' own versions (and their links to each other) left out. */
function lockWithoutReleaseVersions(text: string): string {
  const lock = JSON.parse(text) as { packages: Record<string, Record<string, unknown>> };
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(lock.packages)) {
    const e = { ...v };
    if (k.startsWith('packages/') || k === '') {
      delete e.version;
      for (const field of ['dependencies', 'devDependencies', 'peerDependencies']) {
        const deps = e[field] as Record<string, string> | undefined;
        if (deps)
          e[field] = Object.fromEntries(
            Object.entries(deps).map(([n, r]) => [n, n.startsWith('@sandboxd/') ? '(workspace)' : r]),
          );
      }
    }
    out[k] = e;
  }
  return JSON.stringify(out);
}

/** `dir/node_modules`: links to this checkout's installed packages, `@sandboxd/*` to `dir`'s own. */
function linkDependencies(dir: string): void {
  const from = realpathSync(join(ROOT, 'node_modules'));
  const to = join(dir, 'node_modules');
  mkdirSync(to);
  for (const name of readdirSync(from)) {
    if (name === '@sandboxd') {
      mkdirSync(join(to, name));
      for (const p of readdirSync(join(from, name))) {
        const target = realpathSync(join(from, name, p)); // <root>/packages/<folder>
        const folder = target.slice(target.lastIndexOf('/') + 1);
        if (!existsSync(join(dir, 'packages', folder))) continue; // a package the previous release had not
        symlinkSync(join('../../packages', folder), join(to, name, p));
      }
    } else symlinkSync(join(from, name), join(to, name));
  }
}

/** Runs `argv` in `cwd` to its end; throws with its output when it fails. */
function run(argv: string[], cwd: string): void {
  const r = spawnSync(argv[0], argv.slice(1), { cwd, encoding: 'utf8', timeout: 600_000, maxBuffer: 64 << 20 });
  if (r.status !== 0)
    throw new Error(`${argv.join(' ')} (in ${cwd}) failed (${r.status ?? r.signal}): ${r.stderr || r.stdout}`);
}

/** The previous release, built (or found in the cache) and ready to serve. */
export function buildPreviousRelease(): PreviousRelease {
  const prev = previousEntry();
  requireCommit(prev.commit, prev.version);
  const cache = join(ROOT, '.sandboxd-test/releases');
  const dir = join(cache, `${prev.version}-${prev.commit.slice(0, 12)}`);
  const stamp = join(dir, '.built');
  if (existsSync(stamp)) {
    const { deps } = JSON.parse(readFileSync(stamp, 'utf8')) as { deps: PreviousRelease['deps'] };
    return { ...prev, root: dir, deps, built: false };
  }
  rmSync(dir, { recursive: true, force: true });
  const tmp = `${dir}.tmp${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  try {
    // Its files as committed (mtimes: the commit's time).
    run(
      [
        'bash',
        '-o',
        'pipefail',
        '-c',
        'git -C "$0" archive --format=tar "$1" | tar -x -C "$2"',
        ROOT,
        prev.commit,
        tmp,
      ],
      ROOT,
    );
    const sameLock =
      lockWithoutReleaseVersions(readFileSync(join(tmp, 'package-lock.json'), 'utf8')) ===
      lockWithoutReleaseVersions(readFileSync(join(ROOT, 'package-lock.json'), 'utf8'));
    const nested = readdirSync(join(ROOT, 'packages')).some((p) =>
      existsSync(join(ROOT, 'packages', p, 'node_modules')),
    );
    const deps: PreviousRelease['deps'] = sameLock && !nested ? 'linked' : 'npm ci';
    if (deps === 'linked') linkDependencies(tmp);
    else run(['npm', 'ci', '--prefer-offline', '--no-audit', '--no-fund'], tmp);
    // Its own set-up step: native helpers (its sources, its build/), the SDK's dist.
    run([process.execPath, '--import', 'tsx', 'scripts/prepare-host.ts', '--no-images'], tmp);
    writeFileSync(join(tmp, '.built'), JSON.stringify({ deps, at: new Date().toISOString() }));
    renameSync(tmp, dir);
    return { ...prev, root: dir, deps, built: true };
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
}

/** `git log -1` of `commit`, for the test's diagnostics. */
export function describeCommit(commit: string): string {
  return execFileSync('git', ['-C', ROOT, 'log', '-1', '--format=%h %cs %s', commit], { encoding: 'utf8' })
    .trim()
    .slice(0, 120);
}
