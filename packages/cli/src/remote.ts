/**
 * `ID:/path` arguments (the sandbox side of `sbx cp` and `sbx ls`), and the names of
 * entries under a remote directory.
 */
import { posix } from 'node:path';
import { CliError } from './ui.js';

/** A path inside a sandbox. */
export interface RemotePath {
  id: string;
  path: string;
}

/**
 * `sbx_...:/work/a.txt` as {id, path}; undefined when `arg` names no sandbox (no colon
 * before the first slash: a local path, which `./` makes unambiguous). Throws CliError for
 * a sandbox path that is not absolute.
 */
export function parseRemote(arg: string): RemotePath | undefined {
  const m = /^([A-Za-z0-9_-]+):(.*)$/s.exec(arg);
  if (!m) return undefined;
  const path = m[2];
  if (!path.startsWith('/')) throw new CliError(`the sandbox path must be absolute: ${m[1]}:/${path} (got "${arg}")`);
  return { id: m[1], path };
}

/** The last component of a sandbox path (`/` for the root). */
export function remoteBase(path: string): string {
  return posix.basename(path.replace(/\/+$/, '')) || '/';
}

/** `child` under the sandbox directory `dir`. */
export function remoteJoin(dir: string, child: string): string {
  return posix.join(dir, child);
}
