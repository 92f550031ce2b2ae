import { LIMITS, SNAPSHOT_IMAGE_PREFIX, SNAPSHOT_NAME_PATTERN, type ValidationProblem } from '@sandboxd/protocol';

/** The runtime's namespace of snapshot images: `snapshot/<accountId>/<name>`, never reachable by name through the API. */
export const DRIVER_SNAPSHOT_PREFIX = 'snapshot/';

const NAME_RE = new RegExp(SNAPSHOT_NAME_PATTERN);

/** The runtime's reference of snapshot `name` of an account. */
export function snapshotRef(accountId: string, name: string): string {
  return `${DRIVER_SNAPSHOT_PREFIX}${accountId}/${name}`;
}

/** The public image reference of snapshot `name`: `snapshots/<name>`. */
export function snapshotImage(name: string): string {
  return `${SNAPSHOT_IMAGE_PREFIX}${name}`;
}

/**
 * The runtime's reference for a create's `image`, as an account may name it: its own
 * ready snapshot for `snapshots/<name>` (looked up with `find`), any other image as is,
 * null when it names no snapshot of the account or the runtime's own snapshot namespace.
 */
export async function driverImageOf(
  image: string,
  find: (name: string) => Promise<{ state: string } | null>,
  accountId: string,
): Promise<string | null> {
  if (image.startsWith(DRIVER_SNAPSHOT_PREFIX)) return null;
  if (!image.startsWith(SNAPSHOT_IMAGE_PREFIX)) return image;
  const name = image.slice(SNAPSHOT_IMAGE_PREFIX.length);
  if (!NAME_RE.test(name)) return null;
  const snap = await find(name);
  return snap?.state === 'ready' ? snapshotRef(accountId, name) : null;
}

/** What is wrong with a sandbox's `metadata` beyond its schema: the byte total (keys and values, UTF-8). */
export function metadataProblems(m: Record<string, string> | undefined, base: string): ValidationProblem[] {
  if (!m) return [];
  const bytes = Object.entries(m).reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v), 0);
  return bytes > LIMITS.maxMetadataBytes
    ? [{ in: 'body', path: base, message: `is ${bytes} bytes (keys and values); at most ${LIMITS.maxMetadataBytes}` }]
    : [];
}
