/**
 * A tiny tar writer for a build's context: regular files and their folders, as a Blob made
 * of the headers and the files themselves (so the browser streams each file from disk when
 * the Blob is sent, and never holds the context in memory). POSIX ustar, with a pax
 * extended header (`path=`) for names that do not fit ustar's 100 + 155 bytes.
 */

/** One file of the archive. */
export interface TarFile {
  /** Relative path with `/` separators, e.g. `src/app.py`. */
  path: string;
  data: Blob;
  /** Permission bits; default 0o644. */
  mode?: number;
  /** Modification time, ms since the epoch; default now. */
  mtimeMs?: number;
}

const BLOCK = 512;
/** What ustar's size field holds (11 octal digits). */
const MAX_SIZE = 8 ** 11 - 1;
const enc = new TextEncoder();

/**
 * A path as the archive names it, or an error message: relative, `/`-separated, no empty,
 * `.` or `..` segment, no NUL. (A context must never name anything outside itself.)
 */
export function tarPath(path: string): string | { error: string } {
  const p = path.replace(/\\/g, '/');
  if (p.startsWith('/')) return { error: `${path}: an absolute path` };
  if (p.includes('\0')) return { error: `${path}: a NUL character` };
  const parts = p.split('/').filter((s, i, all) => !(s === '' && i === all.length - 1));
  if (parts.length === 0 || parts.some((s) => s === '' || s === '.' || s === '..'))
    return { error: `${path}: not a plain relative path` };
  return parts.join('/');
}

function octal(value: number, width: number): string {
  // width - 1 digits and a NUL, as GNU and BSD tar write them.
  return `${value.toString(8).padStart(width - 1, '0')}\0`;
}

function put(block: Uint8Array, offset: number, width: number, text: string | Uint8Array): void {
  const bytes = typeof text === 'string' ? enc.encode(text) : text;
  block.set(bytes.subarray(0, width), offset);
}

/** Splits a name into ustar's prefix and name fields, or null when it does not fit. */
function ustarName(name: Uint8Array): { prefix: Uint8Array; name: Uint8Array } | null {
  if (name.length <= 100) return { prefix: new Uint8Array(0), name };
  // The split must be at a '/': prefix up to 155 bytes, name up to 100.
  for (let i = Math.min(name.length - 1, 155); i > 0; i--) {
    if (name[i] !== 0x2f) continue;
    if (name.length - i - 1 > 100) return null;
    return { prefix: name.subarray(0, i), name: name.subarray(i + 1) };
  }
  return null;
}

function header(o: {
  name: Uint8Array;
  prefix?: Uint8Array;
  mode: number;
  size: number;
  mtime: number;
  type: string;
}): Uint8Array {
  const b = new Uint8Array(BLOCK);
  put(b, 0, 100, o.name);
  put(b, 100, 8, octal(o.mode & 0o7777, 8));
  put(b, 108, 8, octal(0, 8));
  put(b, 116, 8, octal(0, 8));
  put(b, 124, 12, octal(o.size, 12));
  put(b, 136, 12, octal(Math.max(0, Math.floor(o.mtime)), 12));
  put(b, 148, 8, '        ');
  put(b, 156, 1, o.type);
  put(b, 257, 6, 'ustar\0');
  put(b, 263, 2, '00');
  put(b, 265, 32, 'root');
  put(b, 297, 32, 'root');
  if (o.prefix) put(b, 345, 155, o.prefix);
  let sum = 0;
  for (const x of b) sum += x;
  put(b, 148, 8, `${sum.toString(8).padStart(6, '0')}\0 `);
  return b;
}

/** A pax record `"<len> path=<value>\n"`, whose length counts itself. */
function paxRecord(key: string, value: string): Uint8Array {
  const body = enc.encode(` ${key}=${value}\n`);
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len = String(len).length + body.length;
  return enc.encode(`${len} ${key}=${value}\n`);
}

function padding(size: number): Uint8Array {
  return new Uint8Array((BLOCK - (size % BLOCK)) % BLOCK);
}

/** The header blocks of one entry (a pax header first when the name needs it). */
function entryHeader(path: string, type: '0' | '5', mode: number, size: number, mtime: number): Uint8Array[] {
  const bytes = enc.encode(type === '5' ? `${path}/` : path);
  const split = ustarName(bytes);
  if (split) return [header({ ...split, mode, size, mtime, type })];
  const rec = paxRecord('path', type === '5' ? `${path}/` : path);
  const short = enc.encode(`PaxHeaders/${path.slice(-80)}`.replace(/[^\x20-\x7e]/g, '_')).subarray(0, 99);
  const tail = bytes.subarray(Math.max(0, bytes.length - 99));
  return [
    header({ name: short, mode: 0o644, size: rec.length, mtime, type: 'x' }),
    rec,
    padding(rec.length),
    header({ name: tail, mode, size, mtime, type }),
  ];
}

/**
 * The archive of `files` (each folder on their paths first, once, mode 0o755), ended by two
 * zero blocks. Throws an Error naming a path that is not plain and relative, or a path given
 * twice.
 */
export function tarBlob(files: TarFile[]): Blob {
  const parts: BlobPart[] = [];
  const dirs = new Set<string>();
  const seen = new Set<string>();
  const now = Date.now();
  for (const f of files) {
    const p = tarPath(f.path);
    if (typeof p !== 'string') throw new Error(p.error);
    if (seen.has(p)) throw new Error(`${p}: given twice`);
    seen.add(p);
    const mtime = (f.mtimeMs ?? now) / 1000;
    const segs = p.split('/');
    for (let i = 1; i < segs.length; i++) {
      const d = segs.slice(0, i).join('/');
      if (seen.has(d)) throw new Error(`${d}: both a file and a folder`);
      if (dirs.has(d)) continue;
      dirs.add(d);
      parts.push(...(entryHeader(d, '5', 0o755, 0, mtime) as BlobPart[]));
    }
    if (dirs.has(p)) throw new Error(`${p}: both a file and a folder`);
    if (f.data.size > MAX_SIZE) throw new Error(`${p}: larger than 8 GiB`);
    parts.push(...(entryHeader(p, '0', f.mode ?? 0o644, f.data.size, mtime) as BlobPart[]));
    parts.push(f.data, padding(f.data.size) as BlobPart);
  }
  parts.push(new Uint8Array(BLOCK * 2) as BlobPart);
  return new Blob(parts, { type: 'application/x-tar' });
}
