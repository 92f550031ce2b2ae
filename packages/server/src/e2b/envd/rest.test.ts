import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { gunzipSync, gzipSync } from 'node:zlib';
import { type FileEntry, SandboxdError } from '@sandboxd/protocol';
import pino from 'pino';
import type { SandboxRecord } from '../../domain/sandbox.js';
import type { FileRead } from '../../runtime/files.js';
import type { EnvdCall } from './context.js';
import { resolveEnvdPath } from './entries.js';
import { envdErrorBody } from './errors.js';
import { asksForGzip, envdRest, httpError } from './rest.js';

const entry = (path: string, size: number): FileEntry => ({
  name: posix.basename(path),
  path,
  type: 'file',
  size,
  mode: 0o644,
  owner: 'user',
  group: 'user',
  modifiedAt: '2026-11-24T10:00:00.000Z',
});

/** Files in memory; `/full/...` answers no_space after reading a little, `/denied/...` permission. */
class MemFiles {
  readonly data = new Map<string, Buffer>();
  readonly writes: {
    path: string;
    user?: string;
    length?: number;
    metadata?: Record<string, string>;
    parentsAsRoot?: boolean;
  }[] = [];
  async read(_a: string, _s: string, path: string, o: { range?: string; user?: string } = {}): Promise<FileRead> {
    const b = this.data.get(path);
    if (!b) throw new SandboxdError('not_found', `No such file or directory: ${path}`, { path, code: 'ENOENT' });
    const m = /^(\d*)-(\d*)$/.exec(o.range ?? '');
    const start = m?.[1] ? Number(m[1]) : 0;
    const end = m?.[2] ? Math.min(Number(m[2]), b.length - 1) : b.length - 1;
    return { unsatisfiable: false, size: b.length, start, end, body: Readable.from([b.subarray(start, end + 1)]) };
  }
  async write(
    _a: string,
    _s: string,
    path: string,
    body: AsyncIterable<Uint8Array>,
    o: { user?: string; length?: number; metadata?: Record<string, string>; parentsAsRoot?: boolean } = {},
  ): Promise<FileEntry & { metadata?: Record<string, string> }> {
    if (path.startsWith('/denied/')) throw new SandboxdError('permission', `Permission denied: ${path}`, { path });
    if (o.user === 'ghost')
      throw new SandboxdError('validation', 'Unknown user in the sandbox: ghost', { unknownUser: true });
    const chunks: Buffer[] = [];
    const it = body[Symbol.asyncIterator]();
    for (;;) {
      const n = await it.next();
      if (n.done) break;
      chunks.push(Buffer.from(n.value));
      // Like the tool: it stops reading at once when the disk is full.
      if (path.startsWith('/full/')) throw new SandboxdError('no_space', `No space left for ${path}`, { path });
    }
    const b = Buffer.concat(chunks);
    this.data.set(path, b);
    this.writes.push({ path, user: o.user, length: o.length, metadata: o.metadata, parentsAsRoot: o.parentsAsRoot });
    return { ...entry(path, b.length), ...(o.metadata ? { metadata: o.metadata } : {}) };
  }
}

describe('envd /files', () => {
  const files = new MemFiles();
  let server: Server;
  let base: string;
  const call: EnvdCall = {
    accountId: 'acc',
    sandbox: { id: 'sbx_a' } as SandboxRecord,
    user: undefined,
    defaultUser: 'user',
  };

  before(async () => {
    const rest = envdRest({
      files,
      paths: { resolve: async (_c, p, user) => resolveEnvdPath(p, user === 'root' ? '/root' : '/home/user') },
      log: pino({ level: 'silent' }),
    });
    server = createServer((req, res) => {
      rest(call, req, res).then((served) => {
        if (!served) res.writeHead(418).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(
    () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  );

  const post = (q: string, body: BodyInit, headers: Record<string, string> = {}) =>
    fetch(`${base}/files?${q}`, { method: 'POST', body, headers, duplex: 'half' } as RequestInit);

  it('serves /health and leaves other paths and methods to the door', async () => {
    assert.equal((await fetch(`${base}/health`)).status, 204);
    assert.equal((await fetch(`${base}/nope`)).status, 418);
    assert.equal((await fetch(`${base}/files`, { method: 'PUT', body: 'x' })).status, 418);
  });

  it('uploads multipart parts to their names (relative ones in the home), or one to ?path', async () => {
    const form = new FormData();
    form.append('file', new Blob(['one']), '/tmp/one.txt');
    form.append('file', new Blob(['two']), 'sub/two.txt');
    form.append('comment', 'ignored');
    let r = await post('username=user', form);
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), [
      { name: 'one.txt', type: 'file', path: '/tmp/one.txt' },
      { name: 'two.txt', type: 'file', path: '/home/user/sub/two.txt' },
    ]);
    assert.equal(files.data.get('/home/user/sub/two.txt')?.toString(), 'two');
    const single = new FormData();
    single.append('file', new Blob(['three']), 'whatever');
    r = await post('path=~/three.txt&username=root', single);
    assert.deepEqual(await r.json(), [{ name: 'three.txt', type: 'file', path: '/root/three.txt' }]);
    assert.equal(files.writes.at(-1)?.user, 'root');
    // Two parts to the same path: the first is written, then 400.
    const twice = new FormData();
    twice.append('file', new Blob(['a']), 'x');
    twice.append('file', new Blob(['b']), 'x');
    r = await post('path=/tmp/twice', twice);
    assert.equal(r.status, 400);
    assert.match(((await r.json()) as { message: string }).message, /same path/);
    assert.equal(files.data.get('/tmp/twice')?.toString(), 'a');
  });

  it('uploads a raw body to ?path with its length, gzip bodies unpacked', async () => {
    let r = await post('path=/tmp/raw.bin', new Uint8Array([0, 1, 2, 255]), {
      'content-type': 'application/octet-stream',
    });
    assert.deepEqual(await r.json(), [{ name: 'raw.bin', type: 'file', path: '/tmp/raw.bin' }]);
    assert.deepEqual([...(files.data.get('/tmp/raw.bin') ?? [])], [0, 1, 2, 255]);
    assert.equal(files.writes.at(-1)?.length, 4);
    assert.equal(files.writes.at(-1)?.user, 'user', "the template's default user");
    const text = 'gz '.repeat(1000);
    r = await post('path=/tmp/gz.txt', gzipSync(text), {
      'content-type': 'application/octet-stream',
      'content-encoding': 'gzip',
    });
    assert.equal(r.status, 200);
    await r.text();
    assert.equal(files.data.get('/tmp/gz.txt')?.toString(), text);
    assert.equal(files.writes.at(-1)?.length, undefined, 'the length of a gzip body is not the file');
  });

  it("uploads with X-Metadata-* headers: the file's metadata, checked as envd checks it", async () => {
    const r = await post('path=/tmp/m.txt', 'm', {
      'content-type': 'application/octet-stream',
      'X-Metadata-Owner': 'agent 7',
      'x-metadata-run-id': 'r1',
    });
    assert.deepEqual(await r.json(), [
      { name: 'm.txt', type: 'file', path: '/tmp/m.txt', metadata: { owner: 'agent 7', 'run-id': 'r1' } },
    ]);
    assert.deepEqual(files.writes.at(-1)?.metadata, { owner: 'agent 7', 'run-id': 'r1' });
    assert.equal(files.writes.at(-1)?.parentsAsRoot, true, "envd's missing directories are made as root");
    const plain = await post('path=/tmp/p.txt', 'p', { 'content-type': 'application/octet-stream' });
    assert.deepEqual(await plain.json(), [{ name: 'p.txt', type: 'file', path: '/tmp/p.txt' }]);
    assert.equal(files.writes.at(-1)?.metadata, undefined);
    const count = files.writes.length;
    for (const [name, value] of [
      [`X-Metadata-${'k'.repeat(247)}`, 'v'],
      ['X-Metadata-big', 'v'.repeat(4100)],
      ['X-Metadata-tab', 'a\tb'],
    ]) {
      const bad = await post('path=/tmp/bad.txt', 'b', { 'content-type': 'application/octet-stream', [name]: value });
      assert.equal(bad.status, 400, name);
      assert.match(((await bad.json()) as { message: string }).message, /^invalid metadata: /);
    }
    assert.equal(files.writes.length, count, 'nothing written');
    assert.equal(files.data.has('/tmp/bad.txt'), false);
  });

  it('refuses bad uploads with envd JSON errors carrying sandboxd kinds', async () => {
    const cases: [string, BodyInit, Record<string, string>, number, RegExp][] = [
      ['path=/tmp/x', 'x', { 'content-type': 'text/plain' }, 400, /content type/],
      ['', 'x', { 'content-type': 'application/octet-stream' }, 400, /path/],
      ['path=/tmp/x', 'x', { 'content-type': 'application/octet-stream', 'content-encoding': 'br' }, 400, /Encoding/],
      [
        'path=/tmp/x',
        'not gzip',
        { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
        400,
        /gzip|body/i,
      ],
      ['path=/denied/x', 'x', { 'content-type': 'application/octet-stream' }, 403, /Permission denied/],
      ['path=/tmp/x&username=ghost', 'x', { 'content-type': 'application/octet-stream' }, 401, /ghost/],
      ['path=~other/x', 'x', { 'content-type': 'application/octet-stream' }, 400, /home/],
    ];
    for (const [q, body, headers, status, message] of cases) {
      const r = await post(q, body, headers);
      assert.equal(r.status, status, q);
      const j = (await r.json()) as { code: number; kind: string; message: string };
      assert.equal(j.code, status);
      assert.ok(j.kind, 'a sandboxd kind');
      assert.match(j.message, message);
    }
    assert.equal(files.data.has('/tmp/x'), false);
  });

  it('answers a full disk with 507 while the client is still sending (the rest is read and dropped)', async () => {
    let sent = 0;
    const big = new ReadableStream<Uint8Array>({
      pull(c) {
        if (sent >= 8 << 20) return c.close();
        sent += 64 << 10;
        c.enqueue(new Uint8Array(64 << 10));
      },
    });
    const r = await post('path=/full/x', big, { 'content-type': 'application/octet-stream' });
    assert.equal(r.status, 507);
    assert.equal(((await r.json()) as { kind: string }).kind, 'no_space');
    // The connection is still good for the next request.
    assert.equal((await fetch(`${base}/health`)).status, 204);
  });

  it('downloads with Content-Length, ranges, and gzip when that is what is asked for', async () => {
    files.data.set('/tmp/d.txt', Buffer.from('hello download'));
    let r = await fetch(`${base}/files?path=/tmp/d.txt`);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-length'), '14');
    assert.equal(r.headers.get('content-type'), 'application/octet-stream');
    assert.equal(await r.text(), 'hello download');
    r = await fetch(`${base}/files?path=/tmp/d.txt`, { headers: { range: 'bytes=6-9' } });
    assert.equal(r.status, 206);
    assert.equal(r.headers.get('content-range'), 'bytes 6-9/14');
    assert.equal(await r.text(), 'down');
    const raw = await new Promise<{ enc: string | undefined; body: Buffer }>((resolve, reject) => {
      import('node:http').then(({ get }) =>
        get(`${base}/files?path=/tmp/d.txt`, { headers: { 'accept-encoding': 'gzip' } }, (res) => {
          const parts: Buffer[] = [];
          res.on('data', (c: Buffer) => parts.push(c));
          res.on('end', () => resolve({ enc: res.headers['content-encoding'], body: Buffer.concat(parts) }));
        }).on('error', reject),
      );
    });
    assert.equal(raw.enc, 'gzip');
    assert.equal(gunzipSync(raw.body).toString(), 'hello download');
    r = await fetch(`${base}/files?path=/tmp/none`);
    assert.equal(r.status, 404);
    assert.deepEqual(await r.json(), { code: 404, kind: 'not_found', message: 'No such file or directory: /tmp/none' });
  });

  it('gzips only for a client that asks for gzip alone', () => {
    assert.equal(asksForGzip('gzip'), true);
    assert.equal(asksForGzip('GZIP'), true);
    assert.equal(asksForGzip('gzip, identity'), true);
    assert.equal(asksForGzip('x-gzip;q=1'), true);
    assert.equal(asksForGzip('gzip, deflate'), false, "fetch's default");
    assert.equal(asksForGzip('gzip, deflate, br'), false);
    assert.equal(asksForGzip('gzip;q=0'), false);
    assert.equal(asksForGzip('br;q=0, gzip'), true);
    assert.equal(asksForGzip('identity'), false);
    assert.equal(asksForGzip(''), false);
    assert.equal(asksForGzip(undefined), false);
    assert.equal(asksForGzip(['gzip']), true);
  });

  it('maps errors to envd statuses', () => {
    assert.deepEqual(httpError(new SandboxdError('validation', 'u', { unknownUser: true }), 'ghost').status, 401);
    assert.equal(httpError(new SandboxdError('conflict', 'gone', { state: 'lost' }), 'u').status, 502);
    assert.equal(httpError(new SandboxdError('no_space', 'full'), 'u').status, 507);
    assert.equal(httpError(new SandboxdError('insufficient_storage', 'full'), 'u').status, 507);
    assert.equal(httpError(new SandboxdError('not_found', 'x'), 'u').status, 404);
    assert.deepEqual(httpError(new Error('bug'), 'u'), { status: 500, message: 'Internal error' });
    assert.deepEqual(JSON.parse(envdErrorBody(507, 'full', 'insufficient_storage').json), {
      code: 507,
      kind: 'insufficient_storage',
      message: 'full',
    });
    assert.equal(JSON.parse(envdErrorBody(502, 'gone').json).kind, 'upstream');
    assert.deepEqual(envdErrorBody(405, 'no').status, 500);
  });
});
