/**
 * A sandbox's files (`sandbox.files`): upload and download streamed, list, stat, mkdir,
 * move, remove and watch. Every operation runs inside the sandbox through its agent, as the
 * image's user unless `user` says otherwise (docs/files-and-processes.md).
 */
import { NotFoundError } from './errors.js';
import type { HttpClient } from './http.js';
import type { FileEntry, FileEvent } from './types.js';
import { uploadBody, type UploadData } from './upload.js';
import { FileWatcher, type FileWatchOptions } from './file-watch.js';

/** Options every files call takes. */
export interface FileCallOptions {
  /** Who the operation runs as: `root`, a uid, `uid:gid` or a user name of the sandbox. Default: the image's user. */
  user?: string;
  /** Aborts the request. */
  signal?: AbortSignal;
  /** Overrides the client's per-request timeout, ms (for `read` as text or bytes: reading the whole file). */
  timeoutMs?: number;
}

/** Options of {@link Files.write}. */
export interface FileWriteOptions extends FileCallOptions {
  /** Permission bits, as a number (`0o755`) or octal text (`'0755'`). Default: an existing file keeps its mode, a new one gets 0644. */
  mode?: number | string;
  /** The length in bytes of a stream `data`, sent as Content-Length (strings, bytes and Blobs have theirs). */
  size?: number;
}

/** Options of {@link Files.read}. */
export interface FileReadOptions extends FileCallOptions {
  /** `text` (UTF-8, the default), `bytes`, or `stream` (a web ReadableStream, read as it arrives). */
  format?: 'text' | 'bytes' | 'stream';
  /** Only bytes `start` to `end`, both included (as in `fs.createReadStream`); without `end`, to the end of the file. */
  range?: { start: number; end?: number };
}

/** Options of {@link Files.list}. */
export interface FileListOptions extends FileCallOptions {
  /** How many levels deep, 1 (the default) to 10. */
  depth?: number;
}

/** A directory listing; `truncated` is true when the server stopped at 10,000 entries. */
export type FileList = FileEntry[] & { truncated: boolean };

/** Default upload/download timeout: the request may take as long as the data does. */
const TRANSFER_TIMEOUT_MS = 60 * 60_000;

function octal(mode: number | string): string {
  if (typeof mode === 'string') return mode;
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777)
    throw new RangeError(`mode must be 0 to 0o7777 (got ${mode})`);
  return mode.toString(8).padStart(4, '0');
}

function rangeHeader(r: { start: number; end?: number }): string {
  const ok = (n: number | undefined) => n === undefined || (Number.isSafeInteger(n) && n >= 0);
  if (!ok(r.start) || !ok(r.end) || (r.end !== undefined && r.end < r.start))
    throw new RangeError('range needs integers 0 <= start <= end');
  return `bytes=${r.start}-${r.end ?? ''}`;
}

/** The files of one sandbox. Paths must be absolute. */
export class Files {
  constructor(
    private readonly http: HttpClient,
    private readonly sandboxId: string,
  ) {}

  private path(sub: string): string {
    return `/api/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/files${sub}`;
  }

  /**
   * Writes `data` to `path` (parents are created) and resolves with the new entry. The body
   * is streamed: a Node stream or Blob is never read into memory. The server writes beside
   * the target and renames over it, so a failed upload leaves the old file. Throws
   * InsufficientStorageError (507: the sandbox's disk is full), ValidationError,
   * ConflictError (sandbox not started), NotFoundError; a permission refusal is a 403.
   */
  async write(path: string, data: UploadData, opts: FileWriteOptions = {}): Promise<FileEntry> {
    const { body, size } = uploadBody(data, opts.size);
    const headers: Record<string, string> = {};
    if (size !== undefined && typeof body !== 'string' && !(body instanceof Uint8Array) && !isBlob(body))
      headers['content-length'] = String(size);
    const r = await this.http.request<{ entry: FileEntry }>('PUT', this.path('/content'), {
      query: { path, mode: opts.mode === undefined ? undefined : octal(opts.mode), user: opts.user },
      body,
      contentType: 'application/octet-stream',
      headers,
      timeoutMs: opts.timeoutMs ?? TRANSFER_TIMEOUT_MS,
      signal: opts.signal,
    });
    return r.entry;
  }

  /**
   * Reads a file: as UTF-8 text (default), bytes, or a stream that delivers the content as
   * it arrives (the timeout then covers only the start of the answer). `range` reads part
   * of it. Throws NotFoundError, ValidationError (a directory), SandboxdApiError with
   * status 416 for a range past the end.
   */
  read(path: string, opts?: FileReadOptions & { format?: 'text' }): Promise<string>;
  read(path: string, opts: FileReadOptions & { format: 'bytes' }): Promise<Uint8Array>;
  read(path: string, opts: FileReadOptions & { format: 'stream' }): Promise<ReadableStream<Uint8Array>>;
  read(path: string, opts?: FileReadOptions): Promise<string | Uint8Array | ReadableStream<Uint8Array>>;
  async read(path: string, opts: FileReadOptions = {}): Promise<string | Uint8Array | ReadableStream<Uint8Array>> {
    const req = {
      query: { path, user: opts.user },
      headers: { accept: '*/*', ...(opts.range ? { range: rangeHeader(opts.range) } : {}) },
      timeoutMs: opts.timeoutMs ?? (opts.format === 'stream' ? undefined : TRANSFER_TIMEOUT_MS),
      signal: opts.signal,
    };
    if (opts.format === 'stream') {
      const res = await this.http.open('GET', this.path('/content'), req);
      return res.body ?? new ReadableStream({ start: (c) => c.close() });
    }
    return this.http.call('GET', this.path('/content'), req, async (res) =>
      opts.format === 'bytes' ? new Uint8Array(await res.arrayBuffer()) : res.text(),
    );
  }

  /** The entries under a directory, `depth` levels deep (1 to 10). Throws NotFoundError, ValidationError (not a directory). */
  async list(path: string, opts: FileListOptions = {}): Promise<FileList> {
    const r = await this.http.request<{ entries: FileEntry[]; truncated?: boolean }>('GET', this.path(''), {
      query: { path, depth: opts.depth, user: opts.user },
      timeoutMs: opts.timeoutMs,
      signal: opts.signal,
    });
    return Object.assign(r.entries, { truncated: r.truncated === true });
  }

  /** One entry (a symlink is described itself, not followed). Throws NotFoundError. */
  async stat(path: string, opts: FileCallOptions = {}): Promise<FileEntry> {
    const r = await this.http.request<{ entry: FileEntry }>('GET', this.path('/stat'), {
      query: { path, user: opts.user },
      timeoutMs: opts.timeoutMs,
      signal: opts.signal,
    });
    return r.entry;
  }

  /**
   * True when `path` exists (a stat that answers). False on the 404 of a missing path (its
   * `details` name the path); the 404 of a missing sandbox is thrown as usual.
   */
  async exists(path: string, opts: FileCallOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, opts);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError && namesPath(e.details)) return false;
      throw e;
    }
  }

  /** Creates a directory and its parents; resolves with its entry. Throws ConflictError when `path` exists. */
  async mkdir(path: string, opts: FileCallOptions = {}): Promise<FileEntry> {
    const r = await this.http.request<{ entry: FileEntry }>('POST', this.path('/mkdir'), {
      query: { user: opts.user },
      json: { path },
      timeoutMs: opts.timeoutMs,
      signal: opts.signal,
    });
    return r.entry;
  }

  /** Moves or renames `from` to `to` (across mounts too); resolves with the entry of `to`. Throws ConflictError when `to` exists. */
  async move(from: string, to: string, opts: FileCallOptions = {}): Promise<FileEntry> {
    const r = await this.http.request<{ entry: FileEntry }>('POST', this.path('/move'), {
      query: { user: opts.user },
      json: { from, to },
      timeoutMs: opts.timeoutMs,
      signal: opts.signal,
    });
    return r.entry;
  }

  /** Removes a file, a symlink (not what it points to) or a directory with everything in it. Throws NotFoundError. */
  async remove(path: string, opts: FileCallOptions = {}): Promise<void> {
    await this.http.request('DELETE', this.path(''), {
      query: { path, user: opts.user },
      timeoutMs: opts.timeoutMs,
      signal: opts.signal,
    });
  }

  /**
   * Watches a directory (`recursive`: everything under it) and calls `onEvent` with each
   * change; resolves once watching. Throws NotFoundError, ValidationError (not a
   * directory), ConnectionError. Call `close()` on the watcher to stop.
   */
  watch(path: string, onEvent: (event: FileEvent) => void, opts: FileWatchOptions = {}): Promise<FileWatcher> {
    const url = this.http
      .url(this.path('/watch'), { path, recursive: opts.recursive ? 'true' : undefined, user: opts.user })
      .replace(/^http/i, 'ws');
    return FileWatcher.open(this.http, url, path, onEvent);
  }
}

function isBlob(x: unknown): boolean {
  return typeof Blob !== 'undefined' && x instanceof Blob;
}

function namesPath(details: unknown): boolean {
  return typeof details === 'object' && details !== null && typeof (details as { path?: unknown }).path === 'string';
}
