/**
 * `packages/sdk/dist/`: the SDK as a self-contained npm package, for projects outside this
 * repo and for plain `node` inside it (the workspace package's `default` export points here).
 *
 * - index.js: one ES module for Node 20+ and browsers (esbuild; the protocol's error table
 *   is bundled, the schemas are not; `ws` stays a dynamic import on the Node path only).
 * - *.d.ts: declarations, with the protocol-derived types of types.ts expanded into plain
 *   object types, so the package needs neither `@sandboxd/protocol` nor `typebox`.
 * - package.json (no dependencies; `ws` an optional peer) and README.md.
 *
 * {@link ensureSdkDist} builds only when the inputs changed: a fingerprint of them is kept
 * in `dist/.sandboxd-stamp` (left out of the package by its `files`). A build goes to a
 * temporary folder renamed into place, so processes starting at once (servers of a test
 * run, `npm start` beside a test) never see half a package.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The SDK package's folder. */
export const SDK_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the built package lives. */
export const SDK_DIST = join(SDK_DIR, 'dist');
const SRC = join(SDK_DIR, 'src');
const REPO = resolve(SDK_DIR, '../..');
const STAMP = '.sandboxd-stamp';

/** What {@link ensureSdkDist} did. */
export interface SdkDist {
  dir: string;
  /** False when the existing build was current. */
  built: boolean;
}

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)],
  );
}

/**
 * A hash of every input of the build: the SDK's and the protocol's sources (tests aside),
 * the SDK's package.json and README, this script, and the lock file (esbuild, typescript
 * and typebox versions shape the output).
 */
export function sdkFingerprint(): string {
  const h = createHash('sha256');
  const files = [SRC, join(REPO, 'packages/protocol/src'), join(SDK_DIR, 'scripts')]
    .flatMap(walk)
    .filter((f) => !f.endsWith('.test.ts'));
  files.push(join(SDK_DIR, 'package.json'), join(SDK_DIR, 'README.md'), join(REPO, 'package-lock.json'));
  for (const f of files.sort()) {
    let body: Buffer;
    try {
      body = readFileSync(f);
    } catch {
      continue; // no lock file in a copy without one: the sources still decide
    }
    h.update(relative(REPO, f)).update('\0').update(body).update('\0');
  }
  return h.digest('hex').slice(0, 20);
}

function stampOf(dir: string): string | null {
  try {
    return readFileSync(join(dir, STAMP), 'utf8').trim();
  } catch {
    return null;
  }
}

/**
 * Builds `dist/` when it is missing or was built from other inputs (always with `force`).
 * Throws when the build fails; a failed build leaves the previous `dist/` as it was.
 */
export async function ensureSdkDist(opts: { force?: boolean; log?: (msg: string) => void } = {}): Promise<SdkDist> {
  const stamp = sdkFingerprint();
  if (!opts.force && stampOf(SDK_DIST) === stamp) return { dir: SDK_DIST, built: false };
  const tmp = join(SDK_DIR, `.dist-${process.pid}-${randomBytes(4).toString('hex')}`);
  try {
    // Loaded here so that a start with a current build never loads esbuild and typescript.
    const { buildSdkInto } = await import('./build-steps.js');
    const size = await buildSdkInto(tmp, SRC);
    writeFileSync(join(tmp, STAMP), `${stamp}\n`);
    putInPlace(tmp, stamp, !!opts.force);
    opts.log?.(`built ${relative(process.cwd(), SDK_DIST) || SDK_DIST} (index.js ${(size / 1024).toFixed(1)} KiB)`);
    return { dir: SDK_DIST, built: true };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** Renames `tmp` to dist/, replacing an older build; another process's build of the same inputs is kept. */
function putInPlace(tmp: string, stamp: string, force: boolean): void {
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      renameSync(tmp, SDK_DIST);
      return;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw e;
    }
    if (!force && stampOf(SDK_DIST) === stamp) return;
    const old = join(SDK_DIR, `.dist-old-${process.pid}-${randomBytes(4).toString('hex')}`);
    try {
      renameSync(SDK_DIST, old);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    rmSync(old, { recursive: true, force: true });
  }
  throw new Error(`could not put the SDK build in place at ${SDK_DIST} (other builds kept replacing it)`);
}
