import type { Readable } from 'node:stream';
import type { FileEntry, FileEvent } from '@sandboxd/protocol';

/**
 * File operations inside a sandbox, done by the sandbox's own agent as the sandbox's user
 * (or `user`): paths and symlinks resolve in the sandbox's mount namespace, never on the
 * host. Paths are absolute (callers validate). Errors are `SandboxdError`s:
 * `not_found` (missing path), `validation` (wrong type, e.g. the content of a directory),
 * `conflict` (exists), `no_space` (the sandbox's disk or volume cap), `permission`, each
 * with `details.path`; `not_found` / `conflict` for a sandbox that is unknown / not running
 * as for every driver call.
 */
export interface DriverFiles {
  stat(id: string, path: string, o?: FileUser): Promise<FileEntry>;
  /** The directory's contents, `depth` levels deep, at most `max` entries (then `truncated`). */
  list(id: string, path: string, o: FileUser & { depth: number; max?: number }): Promise<FileList>;
  /** Creates parents; `conflict` when `path` exists. */
  mkdir(id: string, path: string, o?: FileUser & ParentsAsRoot): Promise<FileEntry>;
  /** `conflict` when `to` exists; across mounts: copy, then remove. */
  move(id: string, from: string, to: string, o?: FileUser): Promise<FileEntry>;
  /** Directories recursively; a symlink is removed, not followed. */
  remove(id: string, path: string, o?: FileUser): Promise<void>;
  /**
   * Opens `path` for reading; `range` is an HTTP byte range's spec (`a-b`, `a-`, `-n`).
   * The body errors (never ends cleanly) when the file came out shorter than announced.
   */
  read(id: string, path: string, o?: FileUser & { range?: string }): Promise<FileRead>;
  /**
   * Writes `body` to a temporary file beside `path` and renames it over `path` once all of
   * it is written (`length`, when given, must match). On any failure (no space, `signal`
   * aborted, body error) nothing is left and the call rejects.
   */
  write(
    id: string,
    path: string,
    body: AsyncIterable<Uint8Array>,
    o?: FileUser & ParentsAsRoot & { mode?: string; length?: number; signal?: AbortSignal; metadata?: FileMetadata },
  ): Promise<FileEntry>;
  /** Starts an inotify watch; resolves once it is set up. */
  watch(id: string, path: string, o: FileUser & { recursive: boolean }): Promise<FileWatch>;
  /** Who file operations run as for `o.user`: names from the sandbox's /etc/passwd and /etc/group. */
  whoami(id: string, o?: FileUser): Promise<FileUserInfo>;
  /**
   * Image builds' COPY: unpacks a copy stream (runtime/copy-stream.ts: entries with their
   * own mode and owner) under directory `dest` (absolute; made, with missing parents, 0755
   * root's; it may be reached through symlinks), as the sandbox's root. Entry paths are
   * relative and never hold `..`; nothing below `dest` is followed on the way in (a symlink
   * above an entry is refused). A dir merges into an existing one (its mode applied once
   * what it holds is written); a file is written beside and renamed over what is there (a
   * file or a symlink), exactly its size, so a failure leaves nothing of it; a symlink is
   * made as a symlink. Resolves with the entries and file bytes written. Throws `validation`
   * (a bad stream, naming the entry; a stream that ends inside a file), `conflict` (an entry
   * whose type clashes: a file or symlink where a dir is, a dir where a non-dir is, a
   * symlink above an entry), `no_space`, each with `details.path`. Entries before the
   * failing one stay written (the caller discards the sandbox).
   */
  unpack(id: string, dest: string, body: AsyncIterable<Uint8Array>): Promise<{ entries: number; bytes: number }>;
  /**
   * Image builds' `COPY --from`: `path` as a copy stream, as the sandbox's root: a dir as
   * `''` (itself) then what is below it (pre-order, sorted by name per dir; symlinks never
   * followed; a dir of another file system listed but not entered; sockets, FIFOs and
   * devices left out); a file or a symlink as one entry of its own name. `follow`: `path`
   * itself is followed when it is a symlink. Rejects `not_found` for a missing path,
   * `validation` for a path of another type or a name that is not UTF-8; the stream errors
   * (never ends cleanly) when the copy fails midway.
   */
  pack(id: string, path: string, o?: { follow?: boolean }): Promise<Readable>;
}

export interface FileUserInfo {
  /** User name, else the uid in decimal. */
  user: string;
  uid: number;
  gid: number;
  /** Group name, else the gid in decimal. */
  group: string;
  /** Home directory from /etc/passwd; `/` when the user has no entry there. */
  home: string;
}

export interface FileUser {
  user?: string;
}

/**
 * User-defined metadata of a file: its `user.e2b.<key>` extended attributes (E2B's envd file
 * metadata). Keys are HTTP token characters, values printable ASCII. Entries carry it (as
 * `metadata`, beside {@link FileEntry}'s fields) when the file has any; sandboxd's own API
 * leaves it out of its answers.
 */
export type FileMetadata = Record<string, string>;
/** A {@link FileEntry} with the file's metadata, when it has some. */
export type FileEntryWithMetadata = FileEntry & { metadata?: FileMetadata };

export interface ParentsAsRoot {
  /**
   * Missing directories above `path` (for mkdir, and `path` itself) are made by the sandbox's
   * root and handed to the user (0755, its uid:gid), as E2B's envd makes them, when the user
   * can search every existing directory on the way (else `permission`); the rest of the
   * operation still runs as the user. No effect for root.
   */
  parentsAsRoot?: boolean;
}

export interface FileList {
  entries: FileEntry[];
  truncated: boolean;
}

export type FileRead =
  | { unsatisfiable: false; size: number; start: number; end: number; body: Readable }
  | { unsatisfiable: true; size: number };

export interface FileWatch {
  /** Events, in order. */
  onEvent(listener: (e: FileEvent | { type: 'overflow' }) => void): void;
  /** Called once when the watch ended (closed, the watched path went away, the sandbox stopped). */
  onEnd(listener: () => void): void;
  close(): void;
}
