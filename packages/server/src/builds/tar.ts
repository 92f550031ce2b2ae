import { Header } from 'tar';

/**
 * A streaming reader of tar headers that knows where each entry's data is: build contexts
 * (context.ts) are spooled once and their files read back by offset, never extracted. The
 * 512-byte header blocks are decoded by node-tar's `Header` (octal and base-256 numbers, the
 * ustar prefix, the checksum); this file adds what a header-by-header reader needs: GNU long
 * names and links (`L`, `K`), pax records (`x` for the next entry, `g` for all that follow:
 * path, linkpath, size, uid, gid, mode), data offsets and padding, with bounds on everything.
 */

export type TarEntryType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'char' | 'block' | 'fifo';

export interface TarEntry {
  /** As stored, long name and pax applied; not normalised. */
  path: string;
  type: TarEntryType;
  /** Permission bits (`& 0o7777`). */
  mode: number;
  uid: number;
  gid: number;
  /** Bytes of data (files; 0 for every other type). */
  size: number;
  /** Symlink target or hard link's target path, as stored. */
  linkpath: string;
  /** Offset of the data in the stream given to the parser. */
  dataOffset: number;
}

/** A malformed or unsupported archive; the message names the entry or the byte. */
export class TarError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TarError';
  }
}

export interface TarParserOptions {
  /** Called for each entry once its header is read (before its data). */
  onEntry: (e: TarEntry) => void;
  /** The entry's data as it passes (files only). */
  onData?: (chunk: Buffer) => void;
  /** After the last byte of a file's data (also for empty files). */
  onDataEnd?: () => void;
  /** Largest pax header data (default 1 MiB). */
  maxPaxBytes?: number;
  /** Largest GNU long name or link (default 64 KiB). */
  maxLongNameBytes?: number;
}

const BLOCK = 512;
const TYPES: Record<string, TarEntryType> = {
  '0': 'file',
  '': 'file',
  '7': 'file',
  '1': 'hardlink',
  '2': 'symlink',
  '3': 'char',
  '4': 'block',
  '5': 'dir',
  D: 'dir',
  '6': 'fifo',
};
/** Vendor types skipped whole (a volume label, Solaris ACLs, inode metadata). */
const SKIPPED = new Set(['V', 'A', 'I', 'E']);
/** The largest uid or gid a copy stream takes (runtime/copy-stream.ts). */
const MAX_ID = 0xffff_fffe;

interface PaxFields {
  path?: string;
  linkpath?: string;
  size?: number;
  uid?: number;
  gid?: number;
  mode?: number;
}

/**
 * Feed it the archive's bytes with {@link write}, then {@link end}. Throws {@link TarError}
 * from either. Stops reading at the end-of-archive block; what follows is ignored.
 */
export class TarParser {
  /** Bytes consumed so far. */
  offset = 0;
  /** Whether the end-of-archive block was seen. */
  done = false;
  private header = Buffer.alloc(BLOCK);
  private headerFill = 0;
  private state: 'header' | 'meta' | 'data' | 'skip' = 'header';
  /** Bytes left of the current data, meta or skip run. */
  private left = 0;
  private padAfter = 0;
  private meta: Buffer[] = [];
  private metaKind = '';
  private longPath: string | undefined;
  private longLink: string | undefined;
  private pax: PaxFields = {};
  private globalPax: PaxFields = {};
  private readonly maxPax: number;
  private readonly maxLong: number;

  constructor(private readonly o: TarParserOptions) {
    this.maxPax = o.maxPaxBytes ?? 1024 * 1024;
    this.maxLong = o.maxLongNameBytes ?? 64 * 1024;
  }

  write(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length && !this.done) {
      if (this.state === 'header') {
        const n = Math.min(BLOCK - this.headerFill, chunk.length - i);
        chunk.copy(this.header, this.headerFill, i, i + n);
        this.headerFill += n;
        i += n;
        this.offset += n;
        if (this.headerFill === BLOCK) {
          this.headerFill = 0;
          this.onHeader();
        }
        continue;
      }
      const n = Math.min(this.left, chunk.length - i);
      const part = chunk.subarray(i, i + n);
      if (this.state === 'data') this.o.onData?.(part);
      else if (this.state === 'meta') this.meta.push(Buffer.from(part));
      i += n;
      this.offset += n;
      this.left -= n;
      if (this.left === 0) this.endRun();
    }
    if (this.done) this.offset += chunk.length - i;
  }

  /** The stream ended: an error unless it ended between entries. */
  end(): void {
    if (this.done) return;
    if (this.state !== 'header' || this.headerFill !== 0) {
      throw new TarError(`the archive is truncated (it ends inside an entry at byte ${this.offset})`);
    }
    if (this.longPath !== undefined || this.longLink !== undefined || Object.keys(this.pax).length > 0) {
      throw new TarError('the archive is truncated (it ends after an extended header)');
    }
  }

  private onHeader(): void {
    const at = this.offset - BLOCK;
    if (this.header.every((b) => b === 0)) {
      this.done = true;
      return;
    }
    let h: Header;
    try {
      h = new Header(this.header);
    } catch {
      throw new TarError(`not a tar archive (unreadable header at byte ${at})`);
    }
    if (!h.cksumValid) {
      throw new TarError(
        at === 0 ? 'not a tar archive (bad header checksum)' : `corrupt tar header at byte ${at} (bad checksum)`,
      );
    }
    const code = h.typeKey === 'Unsupported' ? String.fromCharCode(this.header[156]) : h.typeKey;
    const rawSize = h.size;
    if (rawSize === undefined || !Number.isSafeInteger(rawSize) || rawSize < 0) {
      throw new TarError(`corrupt tar header at byte ${at} (bad size)`);
    }
    if (code === 'x' || code === 'g' || code === 'L' || code === 'K' || code === 'N') {
      const max = code === 'x' || code === 'g' ? this.maxPax : this.maxLong;
      if (rawSize > max) {
        throw new TarError(`tar extended header at byte ${at} is ${rawSize} bytes (at most ${max})`);
      }
      this.metaKind = code;
      this.startRun('meta', rawSize);
      return;
    }
    const type = TYPES[code];
    if (!type) {
      if (SKIPPED.has(code)) {
        this.startRun('skip', rawSize);
        return;
      }
      const what =
        code === 'S' ? 'sparse file' : code === 'M' ? 'multi-volume continuation' : `type ${JSON.stringify(code)}`;
      throw new TarError(`entry "${h.path ?? ''}" is a ${what}, which a build context cannot hold`);
    }
    const pax = { ...this.globalPax, ...this.pax };
    const path = pax.path ?? this.longPath ?? h.path ?? '';
    const linkpath = pax.linkpath ?? this.longLink ?? h.linkpath ?? '';
    this.pax = {};
    this.longPath = undefined;
    this.longLink = undefined;
    const size = pax.size ?? rawSize;
    const uid = pax.uid ?? h.uid ?? 0;
    const gid = pax.gid ?? h.gid ?? 0;
    const mode = pax.mode ?? h.mode ?? 0;
    for (const [k, v] of [
      ['uid', uid],
      ['gid', gid],
    ] as const) {
      if (!Number.isInteger(v) || v < 0 || v > MAX_ID) throw new TarError(`entry "${path}" has a bad ${k} (${v})`);
    }
    if (!Number.isInteger(mode) || mode < 0) throw new TarError(`entry "${path}" has a bad mode`);
    if (!Number.isSafeInteger(size) || size < 0) throw new TarError(`entry "${path}" has a bad size`);
    const hasData = type === 'file' || code === 'D';
    const entry: TarEntry = {
      path,
      type,
      mode: mode & 0o7777,
      uid,
      gid,
      size: type === 'file' ? size : 0,
      linkpath,
      dataOffset: this.offset,
    };
    this.o.onEntry(entry);
    if (type === 'file') {
      this.startRun('data', size);
    } else if (hasData) {
      this.startRun('skip', size);
    }
  }

  private startRun(state: 'meta' | 'data' | 'skip', size: number): void {
    const pad = (BLOCK - (size % BLOCK)) % BLOCK;
    this.state = state;
    // A skipped run skips its padding with it; data and meta runs are followed by theirs.
    this.left = state === 'skip' ? size + pad : size;
    this.padAfter = state === 'skip' ? 0 : pad;
    if (this.left === 0) this.endRun();
  }

  /** The data, meta or skipped run is complete: its padding follows (as a skip run). */
  private endRun(): void {
    const was = this.state;
    if (was === 'data') this.o.onDataEnd?.();
    if (was === 'meta') this.applyMeta();
    if (was !== 'skip' && this.padAfter > 0) {
      this.state = 'skip';
      this.left = this.padAfter;
      this.padAfter = 0;
      return;
    }
    this.state = 'header';
    this.left = 0;
    this.padAfter = 0;
  }

  private applyMeta(): void {
    const data = Buffer.concat(this.meta);
    this.meta = [];
    if (this.metaKind === 'L' || this.metaKind === 'N') this.longPath = cString(data);
    else if (this.metaKind === 'K') this.longLink = cString(data);
    else if (this.metaKind === 'x') this.pax = { ...this.pax, ...parsePax(data, this.offset) };
    else this.globalPax = { ...this.globalPax, ...parsePax(data, this.offset) };
  }
}

const cString = (b: Buffer): string => {
  const nul = b.indexOf(0);
  return (nul < 0 ? b : b.subarray(0, nul)).toString('utf8');
};

/** Pax records: `<length> <key>=<value>\n`, each length counting the whole record. */
function parsePax(data: Buffer, at: number): PaxFields {
  const out: PaxFields = {};
  let i = 0;
  while (i < data.length) {
    if (data[i] === 0) break;
    const sp = data.indexOf(0x20, i);
    const len = sp < 0 ? Number.NaN : Number(data.subarray(i, sp).toString('latin1'));
    if (!Number.isInteger(len) || len <= sp - i || i + len > data.length || data[i + len - 1] !== 0x0a) {
      throw new TarError(`corrupt pax header before byte ${at}`);
    }
    const rec = data.subarray(sp + 1, i + len - 1).toString('utf8');
    i += len;
    const eq = rec.indexOf('=');
    if (eq < 0) throw new TarError(`corrupt pax record "${rec.slice(0, 64)}" before byte ${at}`);
    const key = rec.slice(0, eq);
    const value = rec.slice(eq + 1);
    if (key.startsWith('GNU.sparse')) throw new TarError('sparse files (GNU.sparse pax records) are not supported');
    const num = () => {
      if (!/^\d+$/u.test(value)) throw new TarError(`pax record ${key}="${value.slice(0, 64)}" is not a number`);
      return Number(value);
    };
    switch (key) {
      case 'path':
        out.path = value;
        break;
      case 'linkpath':
        out.linkpath = value;
        break;
      case 'size':
        out.size = num();
        break;
      case 'uid':
        out.uid = num();
        break;
      case 'gid':
        out.gid = num();
        break;
      case 'mode':
        out.mode = Number.parseInt(value, 8);
        break;
    }
  }
  return out;
}
