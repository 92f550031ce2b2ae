/**
 * The data's release marker: each store records which release of sandboxd last served it
 * (`instance_meta`'s `release` row, SQLite migration 11, PostgreSQL migration 7), and a
 * server refuses, before it writes anything, data that a newer release has served: a newer
 * release may have changed what its records mean in ways an older one would misread
 * (docs/upgrades.md, "Downgrades").
 */

/** The `instance_meta` key of the release that last served the data. */
export const RELEASE_KEY = 'release';
/** The `instance_meta` key of when (epoch ms) that release first served it. */
export const RELEASE_SINCE_KEY = 'release_since';

/** `a` < `b` (negative), equal (0) or newer (positive), by `major.minor.patch` numbers. */
export function compareReleases(a: string, b: string): number {
  const pa = parseRelease(a);
  const pb = parseRelease(b);
  for (let i = 0; i < 3; i++) if (pa[i] !== pb[i]) return pa[i] - pb[i];
  return 0;
}

function parseRelease(v: string): [number, number, number] {
  const m = /^(\d+)\.(\d+)\.(\d+)$/.exec(v);
  if (!m) throw new Error(`"${v}" is not a sandboxd release version (major.minor.patch)`);
  return [Number(m[1]), Number(m[2]), Number(m[3])];
}

/** What a store found, and what this server is: the parts of the refusal. */
export interface DataFound {
  /** The data refused, for the message: the SQLite file, or the PostgreSQL database (no credentials). */
  where: string;
  /** The release the marker names, when the data has one. */
  release?: string;
  /** The data's schema version. */
  schema: number;
  /** This server's release and its latest schema version. */
  thisRelease: string;
  thisSchema: number;
}

/**
 * A server refused data that a newer release has served (a downgrade). Its message says what
 * was found, what this server is, and what to do; the refusal changed nothing.
 */
export class DowngradeError extends Error {
  constructor(readonly found: DataFound) {
    const by = found.release ? `sandboxd ${found.release}` : 'a newer sandboxd release';
    const schema =
      found.schema > found.thisSchema
        ? ` (database schema version ${found.schema} is newer than this server (${found.thisSchema}))`
        : '';
    const run = found.release ? `sandboxd ${found.release} or newer` : 'the newer release';
    super(
      `${found.where} was last served by ${by}; this is sandboxd ${found.thisRelease}, an older release` +
        `${schema}. Downgrades are not supported: run ${run} on it, or restore the backup taken before ` +
        'the upgrade (sandboxd restore; docs/upgrades.md). Nothing was changed.',
    );
    this.name = 'DowngradeError';
  }
}

/**
 * Throws {@link DowngradeError} when the data (schema `schema`, marker `release`) is newer
 * than this server: a newer schema, or a newer release's marker.
 */
export function refuseNewer(found: DataFound): void {
  const newerSchema = found.schema > found.thisSchema;
  const newerRelease = found.release !== undefined && compareReleases(found.release, found.thisRelease) > 0;
  if (newerSchema || newerRelease) throw new DowngradeError(found);
}
