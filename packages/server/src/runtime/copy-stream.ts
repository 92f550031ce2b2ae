/**
 * Copy streams: how image builds' COPY moves files into a sandbox (`DriverFiles.unpack`) and
 * out of one (`DriverFiles.pack`). A byte stream of entries, each one JSON header line
 *
 *   {"p":path,"t":"f"|"d"|"l","m":mode,"u":uid,"g":gid,"s":size,"l":target}\n
 *
 * followed by exactly `s` bytes of content for a file (`s` is 0 for a dir or a symlink, `l`
 * only for a symlink); the stream ends at EOF after a whole entry. Paths are relative to the
 * destination: never absolute, no empty, `.` or `..` segment, no NUL; `''` is the
 * destination dir itself (a dir entry only). Dirs come before what they hold. The sandbox's
 * agent writes and reads them (`/dev/sandboxd-agent file unpack|pack`, native/agent-files.h).
 */
import { SandboxdError } from '@sandboxd/protocol';
import type { CopyEntry } from '../builds/plan.js';

export type { CopyEntry } from '../builds/plan.js';

/** Longest header line taken (a path and a target of 4 KiB each, every byte escaped, fit). */
export const MAX_COPY_HEADER_BYTES = 128 * 1024;
/** Largest file size a header may give (2^53, JSON's exact integers). */
const MAX_SIZE = 2 ** 53;
const MAX_ID = 0xfffffffe;
const MAX_PATH_BYTES = 4095;
const MAX_NAME_BYTES = 255;
const TYPES = { f: 'file', d: 'dir', l: 'symlink' } as const;
const CODES = { file: 'f', dir: 'd', symlink: 'l' } as const;
const KEYS = new Set(['p', 't', 'm', 'u', 'g', 's', 'l']);
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The `validation` error of a bad entry: `which` is its path when known, else `#<n>` (1-based). */
function bad(which: string, why: string, details: Record<string, unknown> = {}): SandboxdError {
  return new SandboxdError('validation', `Bad copy stream entry ${which}: ${why}`, { entry: which, ...details });
}

/** What is wrong with `path` as the path of an entry of type `type`, or null. */
export function copyPathProblem(path: string, type: CopyEntry['type']): string | null {
  if (path === '') return type === 'dir' ? null : 'only a dir entry may name the destination itself ("")';
  if (path.includes('\0')) return 'the path holds a NUL';
  if (path.startsWith('/')) return 'the path is absolute';
  if (Buffer.byteLength(path) > MAX_PATH_BYTES) return `the path is over ${MAX_PATH_BYTES} bytes`;
  for (const seg of path.split('/')) {
    if (seg === '') return 'the path has an empty segment';
    if (seg === '.' || seg === '..') return `the path has a "${seg}" segment`;
    if (Buffer.byteLength(seg) > MAX_NAME_BYTES) return `a name in the path is over ${MAX_NAME_BYTES} bytes`;
  }
  return null;
}

function isWhole(n: unknown, max: number): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 && n <= max;
}

/** Checks an entry's fields (not its body); throws `validation` naming it. */
function checkEntry(e: CopyEntry, which: string): void {
  if (typeof e.path !== 'string') throw bad(which, 'the path must be a string');
  const problem = copyPathProblem(e.path, e.type);
  if (!(e.type in CODES)) throw bad(which, 'the type must be file, dir or symlink');
  if (problem) throw bad(which, problem, { path: e.path });
  if (!isWhole(e.mode, 0o7777)) throw bad(which, 'the mode must be a whole number up to 0o7777');
  if (!isWhole(e.uid, MAX_ID) || !isWhole(e.gid, MAX_ID))
    throw bad(which, `uid and gid must be whole numbers up to ${MAX_ID}`);
  if (!isWhole(e.size, MAX_SIZE)) throw bad(which, `the size must be a whole number up to ${MAX_SIZE}`);
  if (e.type !== 'file' && e.size !== 0) throw bad(which, 'only a file has a size');
  if (e.type === 'symlink') {
    if (typeof e.target !== 'string' || e.target === '' || e.target.includes('\0'))
      throw bad(which, 'a symlink needs a target without NUL');
    if (Buffer.byteLength(e.target) > MAX_PATH_BYTES) throw bad(which, `the target is over ${MAX_PATH_BYTES} bytes`);
  } else if (e.target !== undefined) throw bad(which, 'only a symlink has a target');
}

/** The header line of `e` (checked). */
export function copyHeader(e: CopyEntry): Buffer {
  checkEntry(e, e.path || '""');
  const h: Record<string, string | number> = {
    p: e.path,
    t: CODES[e.type],
    m: e.mode,
    u: e.uid,
    g: e.gid,
    s: e.size,
  };
  if (e.type === 'symlink') h.l = e.target!;
  return Buffer.from(`${JSON.stringify(h)}\n`);
}

/**
 * The copy stream of `entries`, in order. Each entry is checked (a bad one: `validation`
 * naming it); a file's body must give exactly `size` bytes (else `validation` naming it).
 * Chunks are yielded as they come (backpressure is the consumer's pull).
 */
export async function* encodeCopyStream(
  entries: AsyncIterable<CopyEntry> | Iterable<CopyEntry>,
): AsyncIterable<Buffer> {
  for await (const e of entries) {
    yield copyHeader(e);
    if (e.type !== 'file') continue;
    if (e.size > 0 && !e.body) throw bad(e.path, `a file of ${e.size} bytes needs a body`);
    let got = 0;
    if (e.body) {
      for await (const chunk of e.body()) {
        got += chunk.length;
        if (got > e.size) throw bad(e.path, `the body is longer than its size (${e.size} bytes)`);
        if (chunk.length) yield Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length);
      }
    }
    if (got !== e.size) throw bad(e.path, `the body gave ${got} of its ${e.size} bytes`);
  }
}

/** Parses one header line (without its newline) of entry number `index` (0-based). */
export function parseCopyHeader(line: string, index: number): CopyEntry {
  const num = `#${index + 1}`;
  let h: unknown;
  try {
    h = JSON.parse(line);
  } catch {
    throw bad(num, 'the header is not JSON');
  }
  if (typeof h !== 'object' || h === null || Array.isArray(h)) throw bad(num, 'the header must be a JSON object');
  const o = h as Record<string, unknown>;
  const which = typeof o.p === 'string' && o.p !== '' ? o.p : num;
  for (const k of Object.keys(o)) if (!KEYS.has(k)) throw bad(which, `unknown key "${k}"`);
  for (const k of ['p', 't', 'm', 'u', 'g', 's']) if (!(k in o)) throw bad(which, `the header has no "${k}"`);
  if (typeof o.p !== 'string') throw bad(num, '"p" must be a string');
  if (typeof o.t !== 'string' || !(o.t in TYPES)) throw bad(which, '"t" must be "f", "d" or "l"');
  if ('l' in o && typeof o.l !== 'string') throw bad(which, '"l" must be a string');
  const e: CopyEntry = {
    path: o.p,
    type: TYPES[o.t as keyof typeof TYPES],
    mode: o.m as number,
    uid: o.u as number,
    gid: o.g as number,
    size: o.s as number,
  };
  if ('l' in o) e.target = o.l as string;
  checkEntry(e, which);
  return e;
}

/**
 * A byte source read in pieces: `line()` up to a newline, `take(n)` exactly n bytes in
 * chunks; both see EOF as it comes.
 */
class ByteReader {
  private buf: Buffer = Buffer.alloc(0);
  private done = false;
  private readonly it: AsyncIterator<Uint8Array>;

  constructor(body: AsyncIterable<Uint8Array>) {
    this.it = body[Symbol.asyncIterator]();
  }

  private async more(): Promise<boolean> {
    if (this.done) return false;
    const n = await this.it.next();
    if (n.done) {
      this.done = true;
      return false;
    }
    const c = Buffer.from(n.value.buffer, n.value.byteOffset, n.value.length);
    this.buf = this.buf.length ? Buffer.concat([this.buf, c]) : c;
    return true;
  }

  /** The next line (without its newline); null at EOF before any byte; `partial` when EOF cut it. */
  async line(
    max: number,
  ): Promise<{ line: string } | null | { partial: true } | { tooLong: true } | { notUtf8: true }> {
    let scanned = 0;
    for (;;) {
      const nl = this.buf.indexOf(10, scanned);
      if (nl >= 0) {
        if (nl > max) return { tooLong: true };
        const bytes = this.buf.subarray(0, nl);
        this.buf = this.buf.subarray(nl + 1);
        try {
          return { line: UTF8.decode(bytes) };
        } catch {
          return { notUtf8: true };
        }
      }
      scanned = this.buf.length;
      if (scanned > max) return { tooLong: true };
      if (!(await this.more())) return scanned === 0 ? null : { partial: true };
    }
  }

  /** Exactly `n` bytes, in chunks; throws `short()` when the source ends first. */
  async *take(n: number, short: () => Error): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (this.buf.length === 0 && !(await this.more())) throw short();
      const k = Math.min(left, this.buf.length);
      const chunk = this.buf.subarray(0, k);
      this.buf = this.buf.subarray(k);
      left -= k;
      yield chunk;
    }
  }

  /** Gives the source back early (a consumer that stops). */
  async close(): Promise<void> {
    if (!this.done) {
      this.done = true;
      await this.it.return?.();
    }
  }
}

/**
 * The entries of copy stream `body`, in order, each checked as {@link encodeCopyStream}
 * checks them; a file's `body()` gives its bytes and may be called once, before the next
 * entry is asked for (a body not read is skipped). Errors are `validation` naming the
 * entry: a bad header, a bad path, a stream that ends inside a header or a file.
 */
export async function* decodeCopyStream(body: AsyncIterable<Uint8Array>): AsyncIterable<CopyEntry> {
  const r = new ByteReader(body);
  try {
    for (let index = 0; ; index++) {
      const l = await r.line(MAX_COPY_HEADER_BYTES);
      if (l === null) return;
      if ('partial' in l) throw bad(`#${index + 1}`, 'the stream ends inside a header');
      if ('tooLong' in l) throw bad(`#${index + 1}`, `the header is over ${MAX_COPY_HEADER_BYTES} bytes`);
      if ('notUtf8' in l) throw bad(`#${index + 1}`, 'the header is not UTF-8');
      const e = parseCopyHeader(l.line, index);
      if (e.type !== 'file') {
        yield e;
        continue;
      }
      const short = () => bad(e.path, `the stream ends inside this file (of ${e.size} bytes)`);
      // `chunks` is a generator: its iterator is itself, and what the consumer leaves of it
      // is read past before the next header (which follows the body).
      const chunks = r.take(e.size, short);
      const b = { state: 'unread' as 'unread' | 'reading' | 'read' };
      e.body = () => {
        if (b.state !== 'unread') throw new Error(`the body of copy stream entry ${e.path} was read already`);
        b.state = 'reading';
        return {
          [Symbol.asyncIterator]: () => ({
            next: async () => {
              const n = await chunks.next();
              if (n.done) b.state = 'read';
              return n;
            },
            return: async () => ({ done: true as const, value: undefined }),
          }),
        };
      };
      yield e;
      if (b.state !== 'read') for (let n = await chunks.next(); !n.done; n = await chunks.next());
      b.state = 'read';
    }
  } finally {
    await r.close();
  }
}
