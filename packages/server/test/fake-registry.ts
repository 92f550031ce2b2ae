/**
 * A scripted OCI registry on 127.0.0.1 for the pull-policy tests: serves one tiny image
 * (`<name>:1`), records every request with its Authorization header, and can answer basic
 * auth challenges or redirect every blob to another URL (as registries redirect to CDNs).
 * Also a bare recording HTTP server, the target of such redirects. Loopback only.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { gzipSync } from 'node:zlib';

export interface SeenRequest {
  method: string;
  path: string;
  authorization?: string;
}

export interface FakeRegistry {
  /** `127.0.0.1:<port>` */
  host: string;
  seen: SeenRequest[];
  /** Moves every tag to another image (a new config, so a new digest), as a registry's tag moves. */
  moveTags(): void;
  stop(): Promise<void>;
}

export interface FakeRegistryOptions {
  /** Answer 401 with a Basic challenge to any request whose Authorization is not this (`Basic ...`). */
  basicAuth?: string;
  /** Where each blob is redirected (307); unset: blobs are served. */
  redirectBlobs?: (digest: string) => string;
  /** The content of the one file (`/sbx-file`) of the image's layer; unset: an empty layer. */
  file?: string;
  /**
   * A forged image: its config is that of the image whose `file` is this (same bytes, so the
   * same config digest), its layer the one of `file`. The config's diff_ids then do not
   * match the layer served.
   */
  claimFile?: string;
}

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** A tar of one regular file `sbx-file` holding `content` (ustar, fixed owner and time); empty without `content`. */
function layerTar(content?: string): Buffer {
  const end = Buffer.alloc(1024);
  if (content === undefined) return end;
  const data = Buffer.from(content);
  const h = Buffer.alloc(512);
  const put = (v: string, at: number, len: number) => h.write(v, at, len, 'latin1');
  put('sbx-file', 0, 100);
  put('0000644\0', 100, 8);
  put('0000000\0', 108, 8);
  put('0000000\0', 116, 8);
  put(`${data.length.toString(8).padStart(11, '0')}\0`, 124, 12);
  put('00000000000\0', 136, 12);
  put('        ', 148, 8);
  put('0', 156, 1);
  put('ustar\0', 257, 6);
  put('00', 263, 2);
  let sum = 0;
  for (const b of h) sum += b;
  put(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8);
  return Buffer.concat([h, data, Buffer.alloc((512 - (data.length % 512)) % 512), end]);
}

/**
 * A one-layer image (the layer of `file`, see {@link FakeRegistryOptions}) and its config
 * (`n` in its env; the diff_ids of `claimFile`'s layer when given); an OCI manifest of both.
 */
function tinyImage(n = 0, file?: string, claimFile?: string): { manifest: Buffer; blobs: Map<string, Buffer> } {
  const tar = layerTar(file);
  const claimed = claimFile === undefined ? tar : layerTar(claimFile);
  const layer = gzipSync(tar);
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { Cmd: ['/bin/sh'], User: '0', ...(n ? { Env: [`FAKE_IMAGE=${n}`] } : {}) },
      rootfs: { type: 'layers', diff_ids: [sha(claimed)] },
    }),
  );
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha(config), size: config.length },
      layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: sha(layer), size: layer.length }],
    }),
  );
  return {
    manifest,
    blobs: new Map([
      [sha(config), config],
      [sha(layer), layer],
    ]),
  };
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const addr = server.address();
  if (!addr || typeof addr !== 'object') throw new Error('no address');
  return `127.0.0.1:${addr.port}`;
}

function stopper(server: Server): () => Promise<void> {
  return () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
}

/** Starts a fake registry serving `<any name>:1` and `<any name>@<manifest digest>`. */
export async function startFakeRegistry(opts: FakeRegistryOptions = {}): Promise<FakeRegistry> {
  let img = tinyImage(0, opts.file, opts.claimFile);
  let manifestDigest = sha(img.manifest);
  let moves = 0;
  const seen: SeenRequest[] = [];
  const server = createServer((req, res) => {
    const path = req.url ?? '/';
    seen.push({ method: req.method ?? '', path, authorization: req.headers.authorization });
    if (opts.basicAuth && req.headers.authorization !== opts.basicAuth) {
      res.writeHead(401, { 'www-authenticate': 'Basic realm="fake"', 'content-type': 'application/json' });
      res.end('{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}');
      return;
    }
    if (path === '/v2/' || path === '/v2') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
      return;
    }
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(path);
    if (m?.[2] === 'manifests' && (m[3] === '1' || m[3] === manifestDigest)) {
      res.writeHead(200, {
        'content-type': 'application/vnd.oci.image.manifest.v1+json',
        'docker-content-digest': manifestDigest,
        'content-length': img.manifest.length,
      });
      res.end(req.method === 'HEAD' ? undefined : img.manifest);
      return;
    }
    const blob = m?.[2] === 'blobs' ? img.blobs.get(m[3]) : undefined;
    if (m && blob) {
      if (opts.redirectBlobs) {
        res.writeHead(307, { location: opts.redirectBlobs(m[3]) });
        res.end();
        return;
      }
      res.writeHead(200, {
        'content-type': 'application/octet-stream',
        'docker-content-digest': m[3],
        'content-length': blob.length,
      });
      res.end(req.method === 'HEAD' ? undefined : blob);
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}');
  });
  const host = await listen(server);
  const moveTags = () => {
    img = tinyImage(++moves, opts.file, opts.claimFile);
    manifestDigest = sha(img.manifest);
  };
  return { host, seen, moveTags, stop: stopper(server) };
}

/** A server on 127.0.0.1 that records every request and answers 200 `secret`. */
export async function startRecorder(): Promise<{
  host: string;
  port: number;
  seen: SeenRequest[];
  stop(): Promise<void>;
}> {
  const seen: SeenRequest[] = [];
  const server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', path: req.url ?? '/', authorization: req.headers.authorization });
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('secret');
  });
  const host = await listen(server);
  return { host, port: Number(host.split(':')[1]), seen, stop: stopper(server) };
}
