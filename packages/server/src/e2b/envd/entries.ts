import { posix } from 'node:path';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { type FileEntry, type FileEvent, SandboxdError } from '@sandboxd/protocol';
import type { FileEntryWithMetadata } from '../../runtime/files.js';
import { underHome } from '../../services/login.js';
import {
  type EntryInfo,
  EntryInfoSchema,
  EventType,
  type FilesystemEventSchema,
  FileType,
} from './gen/filesystem_pb.js';

/**
 * Pure mappings between sandboxd's file model and envd's: entries, permission strings,
 * events, and envd's path resolution (relative paths and `~` against the user's home).
 */

const FILE_TYPE: Record<FileEntry['type'], FileType> = {
  file: FileType.FILE,
  dir: FileType.DIRECTORY,
  symlink: FileType.SYMLINK,
  // Sockets, pipes, devices: envd reports no type for them and E2B's SDK skips them in lists.
  other: FileType.UNSPECIFIED,
};

const EVENT_TYPE: Record<FileEvent['type'], EventType> = {
  create: EventType.CREATE,
  write: EventType.WRITE,
  remove: EventType.REMOVE,
  rename: EventType.RENAME,
  chmod: EventType.CHMOD,
};

/**
 * `ls`-like permissions as envd gives them (Go's `FileMode.String()`): type letters in Go's
 * order (`d` directory, `L` symlink, `u` setuid, `g` setgid, `t` sticky, `?` anything else
 * that is not a regular file), `-` when there are none, then `rwxrwxrwx` with `-` for unset
 * bits. `-rw-r--r--`, `drwxr-xr-x`, `dtrwxrwxrwx` (/tmp), `Lrwxrwxrwx`.
 */
export function permissionsString(type: FileEntry['type'], mode: number): string {
  let kind = '';
  if (type === 'dir') kind += 'd';
  if (type === 'symlink') kind += 'L';
  if (mode & 0o4000) kind += 'u';
  if (mode & 0o2000) kind += 'g';
  if (mode & 0o1000) kind += 't';
  if (type === 'other') kind += '?';
  let bits = '';
  for (let i = 8; i >= 0; i--) bits += mode & (1 << i) ? 'rwx'[(8 - i) % 3] : '-';
  return (kind || '-') + bits;
}

/**
 * envd's `EntryInfo` of an entry: `mode` holds the permission bits only (as envd's), a
 * relative symlink target is made absolute against the link's directory (envd gives the
 * resolved target; sandboxd resolves one level, without following the target further).
 */
export function toEntryInfo(e: FileEntryWithMetadata): EntryInfo {
  const target =
    e.symlinkTarget === undefined || e.symlinkTarget.startsWith('/')
      ? e.symlinkTarget
      : posix.join(posix.dirname(e.path), e.symlinkTarget);
  const ms = Date.parse(e.modifiedAt);
  return create(EntryInfoSchema, {
    name: e.name,
    type: FILE_TYPE[e.type] ?? FileType.UNSPECIFIED,
    path: e.path,
    size: BigInt(e.size),
    mode: e.mode & 0o777,
    permissions: permissionsString(e.type, e.mode),
    owner: e.owner,
    group: e.group,
    modifiedTime: Number.isFinite(ms) ? timestampFromMs(ms) : undefined,
    symlinkTarget: target,
    metadata: e.metadata ?? {},
  });
}

/**
 * envd's event for a watch event of the file tool: its name is relative to the watched
 * directory (`.` for the directory itself), as envd's; null for what envd has no event for
 * (an overflow of the kernel's queue, a path outside the root).
 */
export function toFilesystemEvent(
  root: string,
  e: FileEvent | { type: 'overflow' },
  includeEntry: boolean,
): MessageInitShape<typeof FilesystemEventSchema> | null {
  if (e.type === 'overflow') return null;
  const type = EVENT_TYPE[e.type];
  if (type === undefined) return null;
  const name = posix.relative(root, e.path) || '.';
  if (name.startsWith('../') || name === '..') return null;
  return { name, type, ...(includeEntry && e.entry ? { entry: toEntryInfo(e.entry) } : {}) };
}

/** True when envd would resolve `path` against the user's home (relative, `~`, empty). */
export function needsHome(path: string): boolean {
  return !path.startsWith('/');
}

/**
 * A path as envd resolves it for a user whose home is `home`: absolute paths stay as they
 * are; `~` and `~/x` expand to the home; other relative paths (and the empty path) are
 * joined to the home and cleaned. `~other` is refused (`validation`), as envd refuses it.
 */
export function resolveEnvdPath(path: string, home: string): string {
  if (path.startsWith('/')) return path;
  const p = underHome(path, home);
  if (p === null)
    throw new SandboxdError('validation', `Cannot expand another user's home directory: ${path}`, { path });
  return p;
}

/** `path` without `//` and a trailing `/` (as the file tool names the paths it reports). */
export function normalizePath(path: string): string {
  const p = path.replace(/\/{2,}/g, '/');
  return p.length > 1 && p.endsWith('/') ? p.slice(0, -1) : p;
}
