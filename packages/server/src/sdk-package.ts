/**
 * The SDK as an npm-installable tarball, which the server serves at
 * `GET /sdk/sandboxd-sdk.tgz` so that a user with only the server's address can
 * `npm install http://<server>/sdk/sandboxd-sdk.tgz` (no registry: the package has no
 * dependencies, `ws` is an optional peer).
 *
 * The tarball is `npm pack`'s layout (files under `package/`, gzip), made by node-tar (what
 * npm packs with) from packages/sdk/dist, which is built first when missing or outdated. It
 * is deterministic (sorted entries, a fixed time, no owner), so its ETag only changes with
 * its content.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ensureSdkDist } from '@sandboxd/sdk/build';
import { create } from 'tar';

/** The packed SDK. */
export interface SdkPackage {
  name: string;
  version: string;
  /** What `npm pack` would call it (`sandboxd-sdk-0.3.0.tgz`), for Content-Disposition. */
  fileName: string;
  tarball: Buffer;
  /** A strong ETag (quoted) of the tarball's bytes. */
  etag: string;
  /** npm's `integrity` of the tarball (sha512, base64). */
  integrity: string;
}

/** npm pack's fixed mtime (1985-10-26T08:15:00Z): the same files make the same bytes. */
const MTIME = new Date(499_162_500_000);

/**
 * Packs `dir` (default: packages/sdk/dist, built first when stale) into an npm tarball.
 * Files whose names start with a dot (the build stamp) are left out.
 */
export async function createSdkPackage(opts: { dir?: string } = {}): Promise<SdkPackage> {
  const dir = opts.dir ?? (await ensureSdkDist()).dir;
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name: string; version: string };
  const names = readdirSync(dir)
    .filter((n) => !n.startsWith('.') && statSync(join(dir, n)).isFile())
    .sort();
  const chunks: Buffer[] = [];
  const pack = create({ gzip: { level: 9 }, portable: true, mtime: MTIME, cwd: dir, prefix: 'package' }, names);
  for await (const chunk of pack) chunks.push(chunk as Buffer);
  const tarball = Buffer.concat(chunks);
  return {
    name: manifest.name,
    version: manifest.version,
    fileName: `${manifest.name.replace(/^@/, '').replace('/', '-')}-${manifest.version}.tgz`,
    tarball,
    etag: `"${createHash('sha256').update(tarball).digest('base64url').slice(0, 27)}"`,
    integrity: `sha512-${createHash('sha512').update(tarball).digest('base64')}`,
  };
}

let loading: Promise<SdkPackage> | null = null;

/** {@link createSdkPackage} of the repo's SDK, once per process (every server in a test process shares it). */
export function loadSdkPackage(): Promise<SdkPackage> {
  loading ??= createSdkPackage().catch((e) => {
    loading = null;
    throw e;
  });
  return loading;
}
