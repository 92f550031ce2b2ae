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
  mkdir(id: string, path: string, o?: FileUser): Promise<FileEntry>;
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
    o?: FileUser & { mode?: string; length?: number; signal?: AbortSignal },
  ): Promise<FileEntry>;
  /** Starts an inotify watch; resolves once it is set up. */
  watch(id: string, path: string, o: FileUser & { recursive: boolean }): Promise<FileWatch>;
  /** Who file operations run as for `o.user`: names from the sandbox's /etc/passwd and /etc/group. */
  whoami(id: string, o?: FileUser): Promise<FileUserInfo>;
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
