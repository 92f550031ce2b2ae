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
   * own mode and owner) under directory `dest` (made, with missing parents, 0755 root), as
   * the sandbox's root. Entry paths are relative and never hold `..`; symlinks are made as
   * symlinks, never followed on the way in. Resolves with the entries and file bytes written.
   */
  unpack?(id: string, dest: string, body: AsyncIterable<Uint8Array>): Promise<{ entries: number; bytes: number }>;
  /**
   * Image builds' `COPY --from`: `path` (a file, a symlink or a whole tree, not followed past
   * `path` itself when `follow`) as a copy stream, entry paths relative to `path` (a file's:
   * its own name), as the sandbox's root. `not_found` for a missing path.
   */
  pack?(id: string, path: string, o?: { follow?: boolean }): Promise<Readable>;
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
