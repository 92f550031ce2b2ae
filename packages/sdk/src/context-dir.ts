/**
 * A directory as the entries of a build context's tar (Node only): files, directories and
 * symlinks (as symlinks: never followed), in name order, each file read when its entry is
 * written. `.dockerignore` is not applied here: the server applies it.
 *
 * node:fs comes from `process.getBuiltinModule` (Node 20.16+), like node-transport.ts, so
 * the SDK has no import of node: modules that a browser bundler would have to resolve.
 */
import type { TarEntry } from './tar.js';

// What is used of node:fs, typed here: the SDK compiles without Node's types.
interface Stats {
  mode: number;
  size: number;
  mtimeMs: number;
  isFile(): boolean;
  isDirectory(): boolean;
  isSymbolicLink(): boolean;
}
interface FileHandle {
  read(buffer: Uint8Array, offset: number, length: number, position: number | null): Promise<{ bytesRead: number }>;
  close(): Promise<void>;
}
interface FsPromises {
  lstat(path: string): Promise<Stats>;
  stat(path: string): Promise<Stats>;
  readdir(path: string): Promise<string[]>;
  readlink(path: string): Promise<string>;
  open(path: string, flags: string): Promise<FileHandle>;
}

const CHUNK = 256 * 1024;

/** node:fs/promises, or a TypeError saying where directories can be packed. */
function fsPromises(): FsPromises {
  const getBuiltin = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process
    ?.getBuiltinModule;
  const fs = typeof getBuiltin === 'function' ? (getBuiltin('node:fs') as { promises?: FsPromises }) : undefined;
  if (!fs?.promises)
    throw new TypeError(
      'A context given as a directory path needs Node.js 20.16 or newer; elsewhere pass the tar (bytes or a stream) or a map of files',
    );
  return fs.promises;
}

/** Reads exactly what is there of `path` from its start, in chunks (the tar writer checks the size). */
async function* fileChunks(fs: FsPromises, path: string): AsyncGenerator<Uint8Array> {
  const fh = await fs.open(path, 'r');
  try {
    for (;;) {
      const buf = new Uint8Array(CHUNK);
      const { bytesRead } = await fh.read(buf, 0, CHUNK, null);
      if (bytesRead === 0) return;
      yield bytesRead === CHUNK ? buf : buf.subarray(0, bytesRead);
    }
  } finally {
    await fh.close();
  }
}

/** Throws unless `dir` is a directory (checked before a build is sent). */
export async function checkContextDir(dir: string): Promise<void> {
  const fs = fsPromises();
  let st: Stats;
  try {
    st = await fs.stat(dir);
  } catch (e) {
    throw new Error(`Cannot read the build context ${dir}: ${(e as { code?: string }).code ?? String(e)}`);
  }
  if (!st.isDirectory()) throw new Error(`The build context ${dir} is not a directory`);
}

/**
 * The entries of `dir`'s tree, relative to it: a directory before what it holds, names in
 * code-unit order. Sockets, FIFOs and devices are left out. An unreadable entry throws,
 * naming its path.
 */
export async function* directoryEntries(dir: string): AsyncGenerator<TarEntry> {
  const fs = fsPromises();
  const root = dir.replace(/\/+$/, '') || '/';
  const join = (rel: string) => (root === '/' ? `/${rel}` : `${root}/${rel}`);
  const fail = (rel: string, e: unknown): never => {
    throw new Error(`Cannot pack ${join(rel)}: ${(e as { code?: string }).code ?? String(e)}`);
  };
  async function* walk(rel: string): AsyncGenerator<TarEntry> {
    let names: string[];
    try {
      names = await fs.readdir(rel === '' ? root : join(rel));
    } catch (e) {
      return fail(rel, e);
    }
    names.sort();
    for (const name of names) {
      const p = rel === '' ? name : `${rel}/${name}`;
      let st: Stats;
      try {
        st = await fs.lstat(join(p));
      } catch (e) {
        return fail(p, e);
      }
      const mode = st.mode & 0o7777;
      if (st.isSymbolicLink()) {
        let target: string;
        try {
          target = await fs.readlink(join(p));
        } catch (e) {
          return fail(p, e);
        }
        yield { path: p, type: 'symlink', mode, mtimeMs: st.mtimeMs, target };
      } else if (st.isDirectory()) {
        yield { path: p, type: 'dir', mode, mtimeMs: st.mtimeMs };
        yield* walk(p);
      } else if (st.isFile()) {
        const full = join(p);
        yield {
          path: p,
          type: 'file',
          mode,
          mtimeMs: st.mtimeMs,
          size: st.size,
          body: () =>
            (async function* () {
              try {
                yield* fileChunks(fs, full);
              } catch (e) {
                fail(p, e);
              }
            })(),
        };
      }
    }
  }
  yield* walk('');
}
