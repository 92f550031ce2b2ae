import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, symlinkSync } from 'node:fs';
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
 *
 * A source's first line may be a comment `cc-flags: <link flags>` (seccomp-bpf.c's), and a
 * line that is only the comment `libc: musl` links it statically against musl (Debian's
 * musl-tools) instead of glibc. The helpers that start once or more per sandbox have that
 * line: a glibc program spends ~0.3 ms of CPU at every start on `cpuid` (each one a VM exit
 * on these machines, ~3.6 us) to size its caches and pick its string functions; a musl one
 * ~0.04 ms in all (docs/runtime.md, "Starting host programs").
 */
export function nativeBin(name: string): string {
  const src = join(NATIVE_SRC_DIR, `${name}.c`);
  const bin = join(NATIVE_BIN_DIR, name);
  if (existsSync(bin) && statSync(bin).mtimeMs >= newestSource(src)) return bin;
  mkdirSync(NATIVE_BIN_DIR, { recursive: true });
  const tmp = `${bin}.tmp${process.pid}`;
  const text = readFileSync(src, 'utf8');
  const flags = /^\/\* cc-flags: (.*) \*\//.exec(text)?.[1].trim().split(/\s+/) ?? [];
  const musl = linksMusl(text);
  const [cc, extra] = musl ? [muslCompiler(), ['-static', '-isystem', muslKernelHeaders()]] : ['cc', []];
  execFileSync(cc, ['-O2', '-Wall', '-Werror', '-I', NATIVE_SRC_DIR, ...extra, '-o', tmp, src, ...flags], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  renameSync(tmp, bin);
  return bin;
}

/** Whether helper source `text` has the line that links it against musl (see {@link nativeBin}). */
export function linksMusl(text: string): boolean {
  return /^\/\* libc: musl \*\/$/m.test(text);
}

/** `musl-gcc`, or a clear error naming the Debian package that has it. */
function muslCompiler(): string {
  try {
    execFileSync('musl-gcc', ['--version'], { stdio: 'ignore' });
  } catch {
    throw new Error("musl-gcc not found: install Debian's musl-tools package (npm run setup does)");
  }
  return 'musl-gcc';
}

/**
 * A folder of the kernel's own headers (`linux/`, `asm/`, `asm-generic/` from the host's
 * linux-libc-dev) for musl builds: musl-gcc leaves /usr/include out of the search path, and
 * these headers belong to no libc.
 */
function muslKernelHeaders(): string {
  const dir = join(NATIVE_BIN_DIR, '..', 'musl-include');
  const arch = execFileSync('cc', ['-print-multiarch'], { encoding: 'utf8' }).trim();
  const asm = existsSync(`/usr/include/${arch}/asm`) ? `/usr/include/${arch}/asm` : '/usr/include/asm';
  mkdirSync(dir, { recursive: true });
  for (const [link, target] of [
    ['linux', '/usr/include/linux'],
    ['asm-generic', '/usr/include/asm-generic'],
    ['asm', asm],
  ]) {
    try {
      symlinkSync(target, join(dir, link));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e; // made by an earlier or parallel build
    }
  }
  return dir;
}

/** Latest modification time (ms) of `src` and of every header in the native folder. */
function newestSource(src: string): number {
  const headers = readdirSync(NATIVE_SRC_DIR).filter((f) => f.endsWith('.h'));
  return Math.max(statSync(src).mtimeMs, ...headers.map((h) => statSync(join(NATIVE_SRC_DIR, h)).mtimeMs));
}
