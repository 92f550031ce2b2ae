import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Folder with the C sources of sandboxd's small native helpers. */
export const NATIVE_SRC_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '../../../native');
/** Where compiled helpers go (git-ignored). */
export const NATIVE_BIN_DIR = resolve(NATIVE_SRC_DIR, '../../../build/bin');

/**
 * Path of the compiled native helper `name` (from `packages/server/native/<name>.c` and the
 * headers beside it), compiling it first when missing or older than its source or any
 * `native/*.h`. Synchronous: called at set-up and at driver init, never on a hot path.
 * Throws when the compiler fails.
 */
export function nativeBin(name: string): string {
  const src = join(NATIVE_SRC_DIR, `${name}.c`);
  const bin = join(NATIVE_BIN_DIR, name);
  if (existsSync(bin) && statSync(bin).mtimeMs >= newestSource(src)) return bin;
  mkdirSync(NATIVE_BIN_DIR, { recursive: true });
  const tmp = `${bin}.tmp${process.pid}`;
  // Link flags a helper needs sit in its first line: /* cc-flags: -lseccomp */
  const flags = /^\/\* cc-flags: (.*) \*\//.exec(readFileSync(src, 'utf8'))?.[1].trim().split(/\s+/) ?? [];
  execFileSync('cc', ['-O2', '-Wall', '-Werror', '-I', NATIVE_SRC_DIR, '-o', tmp, src, ...flags], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  renameSync(tmp, bin);
  return bin;
}

/** Latest modification time (ms) of `src` and of every header in the native folder. */
function newestSource(src: string): number {
  const headers = readdirSync(NATIVE_SRC_DIR).filter((f) => f.endsWith('.h'));
  return Math.max(statSync(src).mtimeMs, ...headers.map((h) => statSync(join(NATIVE_SRC_DIR, h)).mtimeMs));
}
