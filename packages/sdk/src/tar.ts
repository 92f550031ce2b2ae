/**
 * A small tar writer (POSIX ustar, with pax extended headers for what ustar cannot hold:
 * names or link targets over 100 bytes or not ASCII, sizes of 8 GiB and more), for build
 * contexts. Files, directories and symlinks only. Runs anywhere (no node: modules): the
 * Node-only directory walk is in context-dir.ts.
 */

/** One entry of a tar: its path relative to the archive's root, `/`-separated. */
export interface TarEntry {
  /** `a/b.txt`; no leading `/` or `./`; a directory without its trailing `/`. */
  path: string;
  type: 'file' | 'dir' | 'symlink';
  /** Permission bits; default 0o644 for files and symlinks, 0o755 for directories. */
  mode?: number;
  /** Bytes of a file's content; taken from `body` when it is bytes. */
  size?: number;
  /** Modification time, ms since the epoch; default 0. */
  mtimeMs?: number;
  /** A symlink's target, stored as it is. */
  target?: string;
  /** A file's content: bytes, or a source of exactly `size` bytes read when the entry is written. */
  body?: Uint8Array | (() => AsyncIterable<Uint8Array>);
}

const BLOCK = 512;
const encoder = new TextEncoder();
/** Largest size an 11-digit octal field holds. */
const MAX_OCTAL_SIZE = 0o77777777777;

/** `n` as `width - 1` octal digits and a NUL, as ustar's numeric fields. */
function octal(out: Uint8Array, at: number, width: number, n: number): void {
  const s = Math.max(0, Math.floor(n))
    .toString(8)
    .padStart(width - 1, '0');
  out.set(encoder.encode(s.slice(-(width - 1))), at);
  out[at + width - 1] = 0;
}

function put(out: Uint8Array, at: number, max: number, s: string): void {
  const b = encoder.encode(s);
  out.set(b.subarray(0, max), at);
}

const asciiFits = (s: string, max: number) => s.length <= max && /^[\x20-\x7e]*$/.test(s);

/** One 512-byte header block. */
function header(
  name: string,
  typeflag: string,
  o: { mode: number; size: number; mtimeMs: number; linkname?: string },
): Uint8Array {
  const h = new Uint8Array(BLOCK);
  put(h, 0, 100, name);
  octal(h, 100, 8, o.mode & 0o7777);
  octal(h, 108, 8, 0); // uid: root, as Docker's client sends a context
  octal(h, 116, 8, 0); // gid
  octal(h, 124, 12, o.size);
  octal(h, 136, 12, o.mtimeMs / 1000);
  h.fill(0x20, 148, 156); // checksum field counts as spaces while summing
  h[156] = typeflag.charCodeAt(0);
  if (o.linkname) put(h, 157, 100, o.linkname);
  put(h, 257, 6, 'ustar');
  put(h, 263, 2, '00');
  put(h, 265, 32, 'root');
  put(h, 297, 32, 'root');
  let sum = 0;
  for (const b of h) sum += b;
  const cs = sum.toString(8).padStart(6, '0');
  put(h, 148, 6, cs);
  h[154] = 0;
  h[155] = 0x20;
  return h;
}

/** A pax record `LEN key=value\n`, LEN counting the whole record in bytes. */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  const n = encoder.encode(body).length;
  let len = n + String(n).length;
  if (String(len).length !== String(n).length) len = n + String(len).length;
  return `${len}${body}`;
}

function padding(size: number): Uint8Array | null {
  const rest = size % BLOCK;
  return rest === 0 ? null : new Uint8Array(BLOCK - rest);
}

/** Checks an entry's path: relative, no `..`, no empty segments. Throws TypeError. */
function checkPath(p: string): string {
  const path = p.replace(/^\.\//, '').replace(/\/+$/, '');
  if (path === '' || path.startsWith('/') || path.split('/').some((s) => s === '' || s === '.' || s === '..'))
    throw new TypeError(`tar entry path must be relative, without . or .. segments (got ${JSON.stringify(p)})`);
  return path;
}

/** The header blocks of an entry (a pax header first when ustar cannot hold it). */
export function entryHeader(e: TarEntry, size: number): Uint8Array[] {
  const path = checkPath(e.path);
  const name = e.type === 'dir' ? `${path}/` : path;
  const mode = e.mode ?? (e.type === 'dir' ? 0o755 : 0o644);
  const mtimeMs = e.mtimeMs ?? 0;
  const linkname = e.type === 'symlink' ? (e.target ?? '') : undefined;
  const records: string[] = [];
  if (!asciiFits(name, 100)) records.push(paxRecord('path', name));
  if (linkname !== undefined && !asciiFits(linkname, 100)) records.push(paxRecord('linkpath', linkname));
  if (size > MAX_OCTAL_SIZE) records.push(paxRecord('size', String(size)));
  const out: Uint8Array[] = [];
  if (records.length) {
    const pax = encoder.encode(records.join(''));
    const short = `PaxHeaders/${path.replace(/[^\x20-\x7e]/g, '_').slice(-80)}`;
    out.push(header(short, 'x', { mode: 0o644, size: pax.length, mtimeMs }));
    out.push(pax);
    const pad = padding(pax.length);
    if (pad) out.push(pad);
  }
  const type = e.type === 'file' ? '0' : e.type === 'dir' ? '5' : '2';
  const fit = (s: string) => (asciiFits(s, 100) ? s : s.replace(/[^\x20-\x7e]/g, '_').slice(-100));
  out.push(
    header(fit(name), type, {
      mode,
      size: size > MAX_OCTAL_SIZE ? 0 : size,
      mtimeMs,
      linkname: linkname === undefined ? undefined : fit(linkname),
    }),
  );
  return out;
}

/**
 * The tar of `entries`, as chunks: each entry's header(s), its content (exactly its size:
 * a source that gives more or fewer bytes throws), padding, and the two zero blocks that
 * end an archive. Entries are read one at a time, as the consumer pulls.
 */
export async function* tarChunks(entries: AsyncIterable<TarEntry> | Iterable<TarEntry>): AsyncGenerator<Uint8Array> {
  for await (const e of entries) {
    if (e.type !== 'file') {
      yield* entryHeader(e, 0);
      continue;
    }
    const body = e.body ?? new Uint8Array(0);
    const size = body instanceof Uint8Array ? body.byteLength : e.size;
    if (size === undefined || !Number.isSafeInteger(size) || size < 0)
      throw new TypeError(`tar entry ${e.path}: a file needs its size`);
    yield* entryHeader(e, size);
    if (body instanceof Uint8Array) {
      if (size > 0) yield body;
    } else {
      let n = 0;
      for await (const chunk of body()) {
        n += chunk.byteLength;
        if (n > size) throw new Error(`${e.path} grew while it was being packed (${size} bytes expected)`);
        if (chunk.byteLength) yield chunk;
      }
      if (n < size) throw new Error(`${e.path} shrank while it was being packed (${size} bytes expected, ${n} read)`);
    }
    const pad = padding(size);
    if (pad) yield pad;
  }
  yield new Uint8Array(BLOCK * 2);
}

/** The whole tar of `entries` in memory (small contexts: a Dockerfile and a few files). */
export async function tarBytes(entries: AsyncIterable<TarEntry> | Iterable<TarEntry>): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let n = 0;
  for await (const c of tarChunks(entries)) {
    parts.push(c);
    n += c.byteLength;
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}
