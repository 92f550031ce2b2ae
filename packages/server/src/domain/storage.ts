import { SandboxdError } from '@sandboxd/protocol';

/** Error codes that mean a file system (or SQLite on it) ran out of space. */
const NO_SPACE_CODES = new Set(['ENOSPC', 'EDQUOT', 'SQLITE_FULL']);
/**
 * The same, as tools and wrapped errors print it (crun, cp, SQLite; mkfs.ext4 says "short
 * write" when write(2) to its image file stops early, which for a regular file means the
 * disk filled up).
 */
const NO_SPACE_TEXT =
  /\bENOSPC\b|\bEDQUOT\b|No space left on device|Disk quota exceeded|database or disk is full|\bshort write\b/i;

/** What a client is told when the server cannot store what a request needs. */
export const OUT_OF_STORAGE_MESSAGE =
  'The server is out of storage; requests that need disk space fail until an operator frees some';

/** True when `e`, or an error in its `cause` chain, says a disk is full. */
export function isOutOfSpace(e: unknown): boolean {
  let x: unknown = e;
  for (let depth = 0; x && typeof x === 'object' && depth < 8; depth++) {
    const { code, message, cause } = x as { code?: unknown; message?: unknown; cause?: unknown };
    if (typeof code === 'string' && NO_SPACE_CODES.has(code)) return true;
    if (typeof message === 'string' && NO_SPACE_TEXT.test(message)) return true;
    x = cause;
  }
  return false;
}

/** The 507 answer: `insufficient_storage`, saying nothing of paths or sizes. */
export function outOfStorage(): SandboxdError {
  return new SandboxdError('insufficient_storage', OUT_OF_STORAGE_MESSAGE);
}
