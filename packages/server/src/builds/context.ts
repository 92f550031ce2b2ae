import { createHash, randomUUID } from 'node:crypto';
import { type FileHandle, mkdir, open, rm } from 'node:fs/promises';
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { SandboxdError } from '@sandboxd/protocol';
import { Header } from 'tar';
import { DockerIgnore, hasWildcards, PatternError, segmentMatcher } from './globs.js';
import type { CopyEntry } from './plan.js';
import { type TarEntry, TarError, TarParser } from './tar.js';

/**
 * A build context: the tar stream a build was given, spooled once to a file (gzip inflated on
 * the way) and indexed, never extracted to the host: every read goes to the spool by offset,
 * paths and symlinks resolve in the index, clamped to the context's root. `.dockerignore`
 * (Docker's rules, globs.ts) hides what it excludes from every COPY; the builder can still read
 * the Dockerfile and the ignore file themselves with {@link BuildContext.readFile}.
 *
 * Entries: files, directories and symlinks; hard links become files with their target's
 * content; devices and FIFOs are skipped. Absolute paths, paths leaving the root (`..` after
 * normalisation), entries under a file or through a symlink, and hard links to anything but an
 * earlier file are refused with a `validation` error naming the entry.
 */

export interface BuildContextOptions {
  /** Folder of the spool files (made if missing). */
  spoolDir: string;
  /** Most bytes of the (inflated) tar stream: more is `payload_too_large`. */
  maxBytes: number;
  /** Most entries of the archive. */
  maxEntries: number;
  /** Apply the context's `.dockerignore` (default true; false for E2B's uploaded file sets). */
  dockerignore?: boolean;
}

export interface SelectOptions {
  /** Owner of everything copied (`--chown`, resolved by the caller); default root (0:0), never the tar's. */
  owner?: { uid: number; gid: number };
  /** Mode of every copied file and directory (`--chmod`). */
  chmod?: number;
  /** ADD: a source that is a tar archive (plain or gzip) is extracted into `dest`. */
  add?: boolean;
}

export interface Selection {
  /** Absolute directory the entries are relative to (what `files.unpack` gets). */
  dest: string;
  /** Dirs before what they hold; a path appears once. */
  entries: CopyEntry[];
  /**
   * Mode and owner Docker gives to `dest` and its missing parents when this copy makes them
   * (`--chown` and `--chmod` apply to created directories; existing ones keep theirs).
   */
  destDir: { mode: number; uid: number; gid: number };
  /** sha256 (hex) over every entry's path, type, mode, owner, size and content (or target), and `dest`: the cache keys on it. */
  hash: string;
}

/** Longest path and path segment accepted in an archive. */
const MAX_PATH_BYTES = 4095;
const MAX_SEGMENT_BYTES = 255;
/** Symlinks followed at most while resolving one path (Linux's ELOOP limit). */
const MAX_SYMLINK_HOPS = 40;
const READ_CHUNK = 64 * 1024;
/** Largest `.dockerignore` read. */
const MAX_DOCKERIGNORE_BYTES = 1024 * 1024;

interface Node {
  name: string;
  type: 'file' | 'dir' | 'symlink';
  mode: number;
  uid: number;
  gid: number;
  /** Files: data size and offset in `spool`, content sha256 (hex). */
  size: number;
  offset: number;
  sha256: string;
  /** Symlinks: the target as stored. */
  target: string;
  children?: Map<string, Node>;
  /** Not excluded by `.dockerignore` (or a directory holding something that is not). */
  visible: boolean;
  /** A directory made because a path went through it, not (yet) declared by an entry of its own. */
  implied?: boolean;
}

const newDir = (name: string, mode = 0o755, uid = 0, gid = 0): Node => ({
  name,
  type: 'dir',
  mode,
  uid,
  gid,
  size: 0,
  offset: 0,
  sha256: '',
  target: '',
  children: new Map(),
  visible: true,
});

const invalid = (message: string, details?: Record<string, unknown>) =>
  new SandboxdError('validation', message, details);

/** `raw` (a tar entry's path) as a clean relative path (`''` for the root), or why not. */
function entryPath(raw: string): string | { problem: string } {
  if (raw.startsWith('/')) return { problem: 'is an absolute path' };
  if (raw.includes('\0')) return { problem: 'holds a NUL byte' };
  const n = posix.normalize(raw === '' ? '.' : raw).replace(/\/+$/u, '');
  if (n === '..' || n.startsWith('../')) return { problem: 'leaves the context (..)' };
  if (Buffer.byteLength(n) > MAX_PATH_BYTES) return { problem: `is longer than ${MAX_PATH_BYTES} bytes` };
  if (n.split('/').some((s) => Buffer.byteLength(s) > MAX_SEGMENT_BYTES)) {
    return { problem: `has a name longer than ${MAX_SEGMENT_BYTES} bytes` };
  }
  return n === '.' ? '' : n;
}

/** Reads `size` bytes at `offset` of `fh` in chunks. */
async function* readRange(fh: () => FileHandle, offset: number, size: number): AsyncGenerator<Uint8Array> {
  let pos = offset;
  let left = size;
  while (left > 0) {
    const buf = Buffer.allocUnsafe(Math.min(READ_CHUNK, left));
    const { bytesRead } = await fh().read(buf, 0, buf.length, pos);
    if (bytesRead === 0) throw new Error('build context spool ended early');
    pos += bytesRead;
    left -= bytesRead;
    yield buf.subarray(0, bytesRead);
  }
}

/** Yields `first`, then the rest of `it`. */
async function* prepend(first: Buffer[], it: AsyncIterator<Uint8Array>): AsyncGenerator<Buffer> {
  let done = false;
  try {
    for (const b of first) yield b;
    for (;;) {
      const r = await it.next();
      if (r.done) {
        done = true;
        return;
      }
      yield Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength);
    }
  } finally {
    // Stopped early (a refusal): let the source release what it holds.
    if (!done) await it.return?.();
  }
}

/**
 * Spools a (possibly gzip) stream into `path` while `onChunk` sees the inflated bytes; at
 * most `maxBytes` of them. Returns the inflated length.
 */
async function spool(
  body: AsyncIterable<Uint8Array>,
  fh: FileHandle,
  maxBytes: number,
  onChunk: (b: Buffer) => void,
): Promise<number> {
  const it = body[Symbol.asyncIterator]();
  const head: Buffer[] = [];
  let headLen = 0;
  while (headLen < 2) {
    const r = await it.next();
    if (r.done) break;
    const b = Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength);
    head.push(b);
    headLen += b.length;
  }
  const first = Buffer.concat(head);
  const gzip = first.length >= 2 && first[0] === 0x1f && first[1] === 0x8b;
  let total = 0;
  const sink = async (source: AsyncIterable<Buffer>) => {
    for await (const chunk of source) {
      total += chunk.length;
      if (total > maxBytes) {
        throw new SandboxdError('payload_too_large', `the build context is over ${maxBytes} bytes (as a tar)`, {
          limit: maxBytes,
        });
      }
      onChunk(chunk);
      let off = 0;
      while (off < chunk.length) {
        const { bytesWritten } = await fh.write(chunk, off, chunk.length - off);
        off += bytesWritten;
      }
    }
  };
  const source = Readable.from(prepend(first.length > 0 ? [first] : [], it));
  try {
    if (gzip) await pipeline(source, createGunzip(), sink);
    else await pipeline(source, sink);
  } catch (e) {
    if (e instanceof SandboxdError || e instanceof TarError) throw e;
    const code = (e as NodeJS.ErrnoException).code ?? '';
    if (code.startsWith('Z_')) throw invalid(`the build context is not valid gzip: ${(e as Error).message}`);
    throw e;
  }
  return total;
}

/** An archive ADD extracts: its entries, and where their data is. */
interface Archive {
  entries: { path: string; e: TarEntry; sha?: string }[];
  /** The file holding the (inflated) archive, and the offset its tar starts at. */
  fh: () => FileHandle;
}

export class BuildContext {
  private readonly root: Node = newDir('');
  private fh: FileHandle | null = null;
  private readonly extraFiles: { fh: FileHandle; path: string }[] = [];
  private closed = false;
  private entryCount = 0;
  /** Directories made for paths through them and not declared (count towards `maxEntries` too). */
  private impliedDirs = 0;
  private byteCount = 0;
  private readonly archives = new Map<Node, Promise<Archive | null>>();

  private constructor(
    private readonly spoolPath: string | null,
    private readonly o: BuildContextOptions | null,
  ) {}

  /** A context with nothing in it (an inline Dockerfile that copies nothing from the context). */
  static empty(): BuildContext {
    return new BuildContext(null, null);
  }

  /**
   * Spools and indexes a context tar stream (gzip detected by its magic). Throws `validation`
   * for a malformed archive or a refused entry (named), `payload_too_large` past `maxBytes`;
   * nothing is left in `spoolDir` then.
   */
  static async open(body: AsyncIterable<Uint8Array>, o: BuildContextOptions): Promise<BuildContext> {
    await mkdir(o.spoolDir, { recursive: true });
    const path = posix.join(o.spoolDir, `context-${randomUUID()}.tar`);
    const ctx = new BuildContext(path, o);
    const fh = await open(path, 'wx+', 0o600);
    ctx.fh = fh;
    try {
      let current: { node: Node; hash: ReturnType<typeof createHash> } | null = null;
      const parser = new TarParser({
        onEntry: (e) => {
          current = null;
          const node = ctx.add(e);
          if (node?.type === 'file' && e.type === 'file') current = { node, hash: createHash('sha256') };
        },
        onData: (chunk) => current?.hash.update(chunk),
        onDataEnd: () => {
          if (current) current.node.sha256 = current.hash.digest('hex');
          current = null;
        },
      });
      ctx.byteCount = await spool(body, fh, o.maxBytes, (chunk) => parser.write(chunk));
      parser.end();
      if (o.dockerignore !== false) await ctx.applyDockerignore();
      return ctx;
    } catch (e) {
      await ctx.close();
      if (e instanceof TarError) throw invalid(`the build context is not a valid tar archive: ${e.message}`);
      throw e;
    }
  }

  /** Entries of the archive (refused or skipped ones included) and its bytes. */
  get stats(): { entries: number; bytes: number } {
    return { entries: this.entryCount, bytes: this.byteCount };
  }

  /** Adds one archive entry to the index; null when it is skipped (devices, FIFOs, the root). */
  private add(e: TarEntry): Node | null {
    const o = this.o!;
    this.entryCount++;
    if (this.entryCount > o.maxEntries) {
      throw invalid(`the build context has more than ${o.maxEntries} entries`, { limit: o.maxEntries });
    }
    const p = entryPath(e.path);
    if (typeof p !== 'string') throw invalid(`build context entry "${e.path}" ${p.problem}`, { entry: e.path });
    if (e.type === 'char' || e.type === 'block' || e.type === 'fifo') return null;
    if (p === '') {
      if (e.type !== 'dir')
        throw invalid(`build context entry "${e.path}" is the root but not a directory`, { entry: e.path });
      return null;
    }
    const parts = p.split('/');
    const name = parts.pop()!;
    let dir = this.root;
    for (let i = 0; i < parts.length; i++) {
      let next = dir.children!.get(parts[i]);
      if (!next) {
        // Implied directories are nodes too: bounded with the entries, else a few entries with
        // deep paths would make millions of them.
        if (this.entryCount + ++this.impliedDirs > o.maxEntries) {
          throw invalid(
            `the build context has more than ${o.maxEntries} entries (counting the directories its paths go through)`,
            { limit: o.maxEntries },
          );
        }
        next = newDir(parts[i]);
        next.implied = true;
        dir.children!.set(parts[i], next);
      } else if (next.type !== 'dir') {
        const what = next.type === 'symlink' ? 'a symlink' : 'a file';
        throw invalid(`build context entry "${e.path}" is under ${parts.slice(0, i + 1).join('/')}, which is ${what}`, {
          entry: e.path,
        });
      }
      dir = next;
    }
    const existing = dir.children!.get(name);
    let node: Node;
    if (e.type === 'dir') {
      if (existing?.type === 'dir') {
        if (existing.implied) {
          existing.implied = false;
          this.impliedDirs--;
        }
        existing.mode = e.mode;
        existing.uid = e.uid;
        existing.gid = e.gid;
        return existing;
      }
      node = newDir(name, e.mode, e.uid, e.gid);
    } else if (e.type === 'hardlink') {
      const target = entryPath(e.linkpath);
      const t = typeof target === 'string' ? this.lookup(target) : undefined;
      if (t?.type !== 'file') {
        throw invalid(
          `build context entry "${e.path}" is a hard link to "${e.linkpath}", which is not a file before it`,
          {
            entry: e.path,
          },
        );
      }
      node = { ...t, name, children: undefined };
    } else {
      node = {
        name,
        type: e.type === 'symlink' ? 'symlink' : 'file',
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        size: e.type === 'file' ? e.size : 0,
        offset: e.dataOffset,
        sha256: e.type === 'file' && e.size === 0 ? createHash('sha256').digest('hex') : '',
        target: e.type === 'symlink' ? e.linkpath : '',
        visible: true,
      };
    }
    dir.children!.set(name, node);
    return node;
  }

  /** The node at exactly `path` (no symlinks followed), hidden ones included. */
  private lookup(path: string): Node | undefined {
    let n: Node | undefined = this.root;
    if (path === '') return n;
    for (const s of path.split('/')) {
      n = n?.type === 'dir' ? n.children!.get(s) : undefined;
      if (!n) return undefined;
    }
    return n;
  }

  /**
   * Resolves `path` (relative to the root) in the index, following symlinks (the last one
   * too when `follow`), `..` and absolute targets clamped to the root. `all`: hidden entries
   * count (the builder's reads); else only what `.dockerignore` leaves.
   */
  private resolve(
    path: string,
    o: { follow: boolean; all: boolean },
  ): { node: Node; real: string } | { missing: true; loop?: boolean } {
    const queue = path.split('/');
    const real: Node[] = [];
    const names: string[] = [];
    let hops = 0;
    let node = this.root;
    for (let i = 0; i < queue.length; i++) {
      const seg = queue[i];
      if (seg === '' || seg === '.') continue;
      if (seg === '..') {
        real.pop();
        names.pop();
        node = real.at(-1) ?? this.root;
        continue;
      }
      if (node.type !== 'dir') return { missing: true };
      const child = node.children!.get(seg);
      if (!child || (!o.all && !child.visible)) return { missing: true };
      const more = queue.slice(i + 1).some((s) => s !== '' && s !== '.');
      if (child.type === 'symlink' && (more || o.follow)) {
        if (++hops > MAX_SYMLINK_HOPS) return { missing: true, loop: true };
        if (child.target.startsWith('/')) {
          real.length = 0;
          names.length = 0;
          node = this.root;
        }
        queue.splice(i + 1, 0, ...child.target.split('/'));
        continue;
      }
      real.push(child);
      names.push(seg);
      node = child;
    }
    return { node, real: names.join('/') };
  }

  /** Whether `path` is a file or directory of the context (symlinks followed; `.dockerignore` aside). */
  has(path: string): boolean {
    const r = this.resolve(path, { follow: true, all: true });
    return 'node' in r && r.node.type !== 'symlink';
  }

  /**
   * The content of file `path` (symlinks followed, inside the context only; `.dockerignore`
   * aside: this is the builder's read of the Dockerfile and the ignore file). `validation`
   * when missing, not a file, or over `max` bytes.
   */
  async readFile(path: string, max: number): Promise<Buffer> {
    const r = this.resolve(path, { follow: true, all: true });
    if (!('node' in r)) {
      throw invalid(
        r.loop
          ? `${path}: too many levels of symbolic links in the build context`
          : `the build context has no file ${path}`,
        { path },
      );
    }
    if (r.node.type !== 'file') throw invalid(`${path} in the build context is not a file`, { path });
    if (r.node.size > max) throw invalid(`${path} is over ${max} bytes`, { path, limit: max });
    const chunks: Uint8Array[] = [];
    for await (const c of this.body(r.node.offset, r.node.size)) chunks.push(c);
    return Buffer.concat(chunks);
  }

  private body(offset: number, size: number): AsyncGenerator<Uint8Array> {
    return readRange(
      () => {
        if (!this.fh || this.closed) throw new Error('the build context is closed');
        return this.fh;
      },
      offset,
      size,
    );
  }

  private async applyDockerignore(): Promise<void> {
    const r = this.resolve('.dockerignore', { follow: true, all: true });
    if (!('node' in r) || r.node.type !== 'file') return;
    const text = (await this.readFile('.dockerignore', MAX_DOCKERIGNORE_BYTES)).toString('utf8');
    let ignore: DockerIgnore;
    try {
      ignore = DockerIgnore.parse(text);
    } catch (e) {
      if (e instanceof PatternError) throw invalid(e.message, { path: '.dockerignore' });
      throw e;
    }
    if (ignore.empty) return;
    const mark = (dir: Node, prefix: string, parentInfo: boolean[]): boolean => {
      let any = false;
      for (const child of dir.children!.values()) {
        const p = prefix === '' ? child.name : `${prefix}/${child.name}`;
        const info = ignore.matchInfo(p, parentInfo);
        const kept = !ignore.excluded(info);
        const below = child.type === 'dir' ? mark(child, p, info) : false;
        child.visible = kept || below;
        any ||= child.visible;
      }
      return any;
    };
    mark(this.root, '', ignore.matchInfo('', null));
  }

  /**
   * What `COPY <sources>... <dest>` (or ADD) writes, with Docker's semantics:
   * - a directory source copies its contents (the directory itself is not copied);
   * - a file goes into `dest` when `dest` ends with `/` or there are several sources or glob
   *   matches (entries relative to `dest`), else it is written as the file `dest` (`dest` of
   *   the result is then its parent; when `dest` is an existing directory in the layer,
   *   Docker copies into it: call again with `dest + '/'`);
   * - sources are relative to the context (`..` and a leading `/` cannot leave it); globs
   *   (`*`, `?`, `[...]`, Go's filepath.Match) match per path segment; a source that is or
   *   passes through a symlink is resolved in the context (targets clamped to its root);
   *   symlinks inside copied trees are copied as symlinks;
   * - a source that does not exist (or that `.dockerignore` excludes) is a `validation` error
   *   naming it; a glob may match nothing, but not every source may come out empty;
   * - owner `o.owner` (default root, not the tar's), mode `o.chmod` or the tar's;
   * - `o.add`: a source file that is a tar archive (plain or gzip) is extracted into `dest`,
   *   keeping the archive's owners unless `o.owner` is given.
   * `dest` must be absolute.
   */
  async select(sources: string[], dest: string, o: SelectOptions = {}): Promise<Selection> {
    if (!dest.startsWith('/')) throw invalid(`COPY destination "${dest}" is not absolute`, { dest });
    if (sources.length === 0) throw invalid('COPY failed: no source files were specified', { sources });
    const owner = o.owner ?? { uid: 0, gid: 0 };
    const destIsDir = dest.endsWith('/');
    const destClean = posix.normalize(dest).replace(/(.)\/+$/u, '$1');
    const matches: { name: string; node: Node; src: string }[] = [];
    for (const src of sources) {
      const joined = posix.join('/', src).slice(1).replace(/\/+$/u, '');
      if (hasWildcards(joined)) {
        for (const m of this.glob(src, joined)) matches.push({ ...m, src });
        continue;
      }
      const r = this.resolve(joined, { follow: true, all: false });
      if (!('node' in r)) {
        throw invalid(
          r.loop
            ? `COPY failed: ${src}: too many levels of symbolic links in the build context`
            : `COPY failed: file not found in build context or excluded by .dockerignore: ${src}`,
          { source: src },
        );
      }
      matches.push({ name: posix.basename(joined), node: r.node, src });
    }
    if (matches.length === 0) {
      throw invalid(
        `COPY failed: no source files were specified (nothing in the build context matches ${sources.join(' ')})`,
        {
          sources,
        },
      );
    }
    const multi = sources.length > 1 || matches.length > 1;
    const archives = await Promise.all(
      matches.map((m) => (o.add && m.node.type === 'file' ? this.archiveOf(m.node, m.src) : null)),
    );
    const single = !multi && !destIsDir && matches[0].node.type === 'file' && !archives[0];
    const root = single ? posix.dirname(destClean) : destClean;
    const out = new EntryMap(owner, this.o!.maxEntries);
    matches.forEach((m, i) => {
      const archive = archives[i];
      if (archive) {
        for (const a of archive.entries) out.put(this.archiveEntry(a, archive, o), m.src);
      } else if (m.node.type === 'dir') {
        this.walk(m.node, '', o, owner, out, m.src);
      } else {
        out.put(this.fileEntry(m.node, single ? posix.basename(destClean) : m.name, o, owner), m.src);
      }
    });
    const entries = out.list();
    const destDir = { mode: o.chmod ?? 0o755, uid: owner.uid, gid: owner.gid };
    return { dest: root, entries, destDir, hash: selectionHash(root, destDir, out.digests, entries) };
  }

  /** BuildKit's wildcard resolution: the literal leading segments followed (symlinks too), then each pattern segment matched without following symlinks. */
  private glob(src: string, joined: string): { name: string; node: Node }[] {
    const segs = joined.split('/');
    const firstWild = segs.findIndex((s) => hasWildcards(s));
    const base = this.resolve(segs.slice(0, firstWild).join('/'), { follow: true, all: false });
    if (!('node' in base) || base.node.type !== 'dir') return [];
    let matchers: RegExp[];
    try {
      matchers = segs.slice(firstWild).map((s) => segmentMatcher(s));
    } catch (e) {
      if (e instanceof PatternError) throw invalid(`COPY source ${src}: ${e.message}`, { source: src });
      throw e;
    }
    const out: { name: string; node: Node; path: string }[] = [];
    const walk = (dir: Node, dirPath: string, depth: number) => {
      const names = [...dir.children!.keys()].sort();
      for (const name of names) {
        const child = dir.children!.get(name)!;
        if (!child.visible || !matchers[depth].test(name)) continue;
        const path = dirPath === '' ? name : `${dirPath}/${name}`;
        if (depth === matchers.length - 1) {
          out.push({ name, node: child, path });
        } else if (child.type === 'dir') {
          walk(child, path, depth + 1);
        }
      }
    };
    walk(base.node, base.real, 0);
    // A matched symlink is followed, as a named source is (it must lead somewhere).
    return out.map((m) => {
      if (m.node.type !== 'symlink') return m;
      const r = this.resolve(m.path, { follow: true, all: false });
      if (!('node' in r)) {
        throw invalid(
          `COPY failed: ${src} matches the symlink ${m.path}, which leads to nothing in the build context`,
          {
            source: src,
          },
        );
      }
      return { name: m.name, node: r.node };
    });
  }

  private walk(
    dir: Node,
    prefix: string,
    o: SelectOptions,
    owner: { uid: number; gid: number },
    out: EntryMap,
    src: string,
  ) {
    const names = [...dir.children!.keys()].sort();
    for (const name of names) {
      const child = dir.children!.get(name)!;
      if (!child.visible) continue;
      const path = prefix === '' ? name : `${prefix}/${name}`;
      if (child.type === 'dir') {
        out.put({ path, type: 'dir', mode: o.chmod ?? child.mode, uid: owner.uid, gid: owner.gid, size: 0 }, src);
        this.walk(child, path, o, owner, out, src);
      } else if (child.type === 'symlink') {
        out.put(
          { path, type: 'symlink', mode: 0o777, uid: owner.uid, gid: owner.gid, size: 0, target: child.target },
          src,
        );
      } else {
        out.put(this.fileEntry(child, path, o, owner), src);
      }
    }
  }

  private fileEntry(node: Node, path: string, o: SelectOptions, owner: { uid: number; gid: number }): Digested {
    const { offset, size } = node;
    return {
      path,
      type: 'file',
      mode: o.chmod ?? node.mode,
      uid: owner.uid,
      gid: owner.gid,
      size,
      body: () => this.body(offset, size),
      digest: node.sha256,
    };
  }

  private archiveEntry(a: Archive['entries'][number], archive: Archive, o: SelectOptions): Digested {
    const { e } = a;
    const uid = o.owner?.uid ?? e.uid;
    const gid = o.owner?.gid ?? e.gid;
    const base = { path: a.path, uid, gid, size: 0 };
    if (e.type === 'dir') return { ...base, type: 'dir', mode: o.chmod ?? e.mode };
    if (e.type === 'symlink') return { ...base, type: 'symlink', mode: 0o777, target: e.linkpath };
    const { dataOffset, size } = e;
    return {
      ...base,
      type: 'file',
      mode: o.chmod ?? e.mode,
      size,
      body: () => readRange(archive.fh, dataOffset, size),
      digest: a.sha ?? '',
    };
  }

  /** The archive inside context file `node` (plain or gzip tar), or null when it is not one. Read once. */
  private archiveOf(node: Node, src: string): Promise<Archive | null> {
    let p = this.archives.get(node);
    if (!p) {
      p = this.readArchive(node, src);
      this.archives.set(node, p);
    }
    return p;
  }

  private async readArchive(node: Node, src: string): Promise<Archive | null> {
    const head: Buffer[] = [];
    for await (const c of this.body(node.offset, Math.min(node.size, 512))) head.push(Buffer.from(c));
    const first = Buffer.concat(head);
    const gzip = first.length >= 2 && first[0] === 0x1f && first[1] === 0x8b;
    if (!gzip && !isTarHeader(first)) return null;
    const o = this.o!;
    const entries: Archive['entries'] = [];
    const files = new Map<string, { e: TarEntry; sha?: string }>();
    let current: { hash: ReturnType<typeof createHash>; rec: { sha?: string } } | null = null;
    let count = 0;
    let checked = !gzip;
    let headBytes: Buffer[] = [];
    const fail = (why: string) => invalid(`ADD ${src}: the archive ${why}`, { source: src });
    const parser = new TarParser({
      onEntry: (e) => {
        current = null;
        if (++count > o.maxEntries) throw fail(`has more than ${o.maxEntries} entries`);
        const p = entryPath(e.path);
        if (typeof p !== 'string') throw fail(`entry "${e.path}" ${p.problem}`);
        if (p === '' || e.type === 'char' || e.type === 'block' || e.type === 'fifo') return;
        if (e.type === 'hardlink') {
          const t = entryPath(e.linkpath);
          const target = typeof t === 'string' ? files.get(t) : undefined;
          if (!target) throw fail(`entry "${e.path}" is a hard link to "${e.linkpath}", which is not a file before it`);
          const copy = { path: p, e: { ...target.e, path: e.path }, sha: target.sha };
          entries.push(copy);
          files.set(p, copy);
          return;
        }
        const rec: { path: string; e: TarEntry; sha?: string } = { path: p, e };
        entries.push(rec);
        if (e.type === 'file') {
          files.set(p, rec);
          current = { hash: createHash('sha256'), rec };
          if (e.size === 0) rec.sha = createHash('sha256').digest('hex');
        }
      },
      onData: (chunk) => current?.hash.update(chunk),
      onDataEnd: () => {
        if (current) current.rec.sha = current.hash.digest('hex');
        current = null;
      },
    });
    let fh: () => FileHandle;
    try {
      if (!gzip) {
        // Offsets in the archive are offsets in the context's spool past the file's start.
        const base = node.offset;
        for await (const c of this.body(node.offset, node.size)) parser.write(Buffer.from(c));
        for (const e of entries) e.e = { ...e.e, dataOffset: e.e.dataOffset + base };
        fh = () => {
          if (!this.fh || this.closed) throw new Error('the build context is closed');
          return this.fh;
        };
      } else {
        // Inflated into a spool of its own, so bodies are read by offset as well.
        const path = posix.join(o.spoolDir, `archive-${randomUUID()}.tar`);
        const handle = await open(path, 'wx+', 0o600);
        this.extraFiles.push({ fh: handle, path });
        let headLen = 0;
        try {
          await spool(this.body(node.offset, node.size), handle, o.maxBytes, (chunk) => {
            if (!checked) {
              headBytes.push(chunk);
              headLen += chunk.length;
              if (headLen < 512) return;
              checked = true;
              const h = Buffer.concat(headBytes);
              headBytes = [];
              if (!isTarHeader(h)) throw new NotAnArchive();
              parser.write(h);
              return;
            }
            parser.write(chunk);
          });
        } catch (e) {
          if (e instanceof NotAnArchive) return null;
          if (e instanceof SandboxdError && e.kind === 'validation' && !checked) return null;
          throw e;
        }
        if (!checked) return null;
        fh = () => {
          if (this.closed) throw new Error('the build context is closed');
          return handle;
        };
      }
      parser.end();
    } catch (e) {
      if (e instanceof TarError) throw fail(`is not a valid tar archive: ${e.message}`);
      if (e instanceof SandboxdError && e.kind === 'payload_too_large') {
        throw new SandboxdError('payload_too_large', `ADD ${src}: the archive is over ${o.maxBytes} bytes inflated`, {
          source: src,
          limit: o.maxBytes,
        });
      }
      throw e;
    }
    return { entries, fh };
  }

  /** Closes and removes the spool files; bodies fail afterwards. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const files = [...this.extraFiles];
    if (this.fh && this.spoolPath) files.push({ fh: this.fh, path: this.spoolPath });
    this.fh = null;
    for (const f of files) {
      await f.fh.close().catch(() => {});
      await rm(f.path, { force: true });
    }
  }
}

class NotAnArchive extends Error {}

/** A valid, non-empty tar header block (what makes a file an archive for ADD). */
function isTarHeader(b: Buffer): boolean {
  if (b.length < 512 || b.subarray(0, 512).every((x) => x === 0)) return false;
  try {
    return new Header(b.subarray(0, 512)).cksumValid;
  } catch {
    return false;
  }
}

/** A copy entry and what its content hashes to (files). */
type Digested = CopyEntry & { digest?: string };

/** Entries by path: directories merge (the first one's metadata stays), files replace, a file and a directory at one path conflict. Missing parents are added. */
class EntryMap {
  private readonly map = new Map<string, CopyEntry>();
  /** Parents added because an entry needed them (an archive's own entry for one replaces its metadata). */
  private readonly implied = new Set<string>();
  readonly digests = new Map<string, string>();

  constructor(
    private readonly owner: { uid: number; gid: number },
    /** Most entries of a copy, the parents it adds included (an archive's deep paths imply many). */
    private readonly max: number,
  ) {}

  put(e: Digested, src: string): void {
    const parts = e.path.split('/');
    for (let i = 1; i < parts.length; i++) {
      const parent = parts.slice(0, i).join('/');
      const had = this.map.get(parent);
      if (!had) {
        this.room(src);
        this.map.set(parent, {
          path: parent,
          type: 'dir',
          mode: 0o755,
          uid: this.owner.uid,
          gid: this.owner.gid,
          size: 0,
        });
        this.implied.add(parent);
      } else if (had.type !== 'dir') {
        throw conflict(parent, src);
      }
    }
    const { digest, ...entry } = e;
    const had = this.map.get(e.path);
    if (had && (had.type === 'dir') !== (e.type === 'dir')) throw conflict(e.path, src);
    if (had?.type === 'dir' && !this.implied.has(e.path)) return;
    if (!had) this.room(src);
    this.implied.delete(e.path);
    this.map.set(e.path, entry);
    if (digest !== undefined) this.digests.set(e.path, digest);
  }

  list(): CopyEntry[] {
    return [...this.map.values()];
  }

  /** Throws `validation` when one more entry would pass {@link max}. */
  private room(src: string): void {
    if (this.map.size >= this.max)
      throw invalid(`COPY failed: ${src} makes more than ${this.max} entries (counting the directories it implies)`, {
        source: src,
        limit: this.max,
      });
  }
}

const conflict = (path: string, src: string) =>
  invalid(`COPY failed: ${path} would be both a directory and a file (from ${src})`, { path, source: src });

function selectionHash(
  dest: string,
  destDir: Selection['destDir'],
  digests: Map<string, string>,
  entries: CopyEntry[],
): string {
  const h = createHash('sha256');
  h.update(`sandboxd-copy-v1\n${JSON.stringify([dest, destDir.mode, destDir.uid, destDir.gid])}\n`);
  for (const e of entries) {
    const content = e.type === 'file' ? (digests.get(e.path) ?? '') : e.type === 'symlink' ? (e.target ?? '') : '';
    h.update(`${JSON.stringify([e.path, e.type, e.mode, e.uid, e.gid, e.size, content])}\n`);
  }
  return h.digest('hex');
}
