/**
 * The SDK as an npm-installable tarball, which the server serves at
 * `GET /sdk/sandboxd-sdk.tgz` so that a user with only the server's address can
 * `npm install http://<server>/sdk/sandboxd-sdk.tgz` (no registry: the package has no
 * dependencies, `ws` is an optional peer).
 *
 * The tarball is `npm pack`'s layout (files under `package/`, gzip) made from
 * packages/sdk/dist, which is built first when missing or outdated. It is deterministic
 * (sorted entries, fixed times and modes), so its ETag only changes with its content.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { ensureSdkDist } from '@sandboxd/sdk/build';

/** The packed SDK. */
export interface SdkPackage {
  name: string;
  version: string;
  /** What `npm pack` would call it (`sandboxd-sdk-0.1.0.tgz`), for Content-Disposition. */
  fileName: string;
  tarball: Buffer;
  /** A strong ETag (quoted) of the tarball's bytes. */
  etag: string;
  /** npm's `integrity` of the tarball (sha512, base64). */
  integrity: string;
}

/** npm pack's fixed mtime (1985-10-26T08:15:00Z): the same files make the same bytes. */
const MTIME = 499_162_500;

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
  const tarball = gzipSync(tar(names.map((n) => ({ name: `package/${n}`, body: readFileSync(join(dir, n)) }))), {
    level: 9,
  });
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

/** A ustar archive of regular files (names under 100 bytes, which npm packages' flat names are). */
export function tar(files: Array<{ name: string; body: Buffer }>): Buffer {
  const blocks: Buffer[] = [];
  for (const f of files) {
    if (Buffer.byteLength(f.name) >= 100) throw new Error(`tar: name too long for a plain ustar header: ${f.name}`);
    const h = Buffer.alloc(512);
    const put = (text: string, at: number) => h.write(text, at, 'ascii');
    const octal = (n: number, width: number) => `${n.toString(8).padStart(width - 1, '0')}\0`;
    h.write(f.name, 0, 'utf8');
    put(octal(0o644, 8), 100); // mode
    put(octal(0, 8), 108); // uid
    put(octal(0, 8), 116); // gid
    put(octal(f.body.length, 12), 124);
    put(octal(MTIME, 12), 136);
    put('        ', 148); // the checksum counts its own field as spaces
    put('0', 156); // regular file
    put('ustar\u000000', 257);
    let sum = 0;
    for (const byte of h) sum += byte;
    put(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    blocks.push(h, f.body, Buffer.alloc((512 - (f.body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024)); // two empty blocks end the archive
  return Buffer.concat(blocks);
}
