/** sandbox.files against an in-process server speaking the files contract. */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync, createReadStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { body, fail, fakeServer, json, type FakeServer } from '../test/fake-server.js';
import { ConflictError, InsufficientStorageError, NotFoundError, SandboxdApiError, ValidationError } from './errors.js';
import type { FileEntry, FileEvent } from './types.js';

const entry = (path: string, o: Partial<FileEntry> = {}): FileEntry => ({
  name: path.split('/').pop() ?? '',
  path,
  type: 'file',
  size: 0,
  mode: 0o644,
  owner: 'root',
  group: 'root',
  modifiedAt: '2026-11-24T10:00:00.000Z',
  ...o,
});

describe('sandbox.files', () => {
  let s: FakeServer;
  before(async () => {
    s = await fakeServer();
  });
  after(() => s.close());

  /** Routes PUT /files/content to a handler that hashes the body as it arrives. */
  const uploads: {
    path: string;
    mode: string | null;
    user: string | null;
    headers: Record<string, unknown>;
    sha: string;
    size: number;
    chunks: number;
  }[] = [];
  let onUploadBytes: (n: number) => void = () => {};
  before(() =>
    s.route('PUT', '/files/content', async (req, res, url) => {
      const h = createHash('sha256');
      let size = 0;
      let chunks = 0;
      for await (const c of req) {
        h.update(c as Buffer);
        size += (c as Buffer).length;
        chunks++;
        onUploadBytes(size);
      }
      const path = url.searchParams.get('path') ?? '';
      uploads.push({
        path,
        mode: url.searchParams.get('mode'),
        user: url.searchParams.get('user'),
        headers: req.headers,
        sha: h.digest('hex'),
        size,
        chunks,
      });
      if (path === '/full')
        return fail(res, 507, 'insufficient_storage', 'No space left on the sandbox disk', { path });
      json(res, 200, { entry: entry(path, { size }) });
    }),
  );
  const sha = (b: Uint8Array | string) => createHash('sha256').update(b).digest('hex');

  it('writes a string, bytes and a Blob with their Content-Length, mode and user', async () => {
    const files = s.sandbox().files;
    const e = await files.write('/work/a.txt', 'héllo\n', { mode: 0o755, user: 'root' });
    assert.deepEqual(e, entry('/work/a.txt', { size: 7 }));
    let u = uploads.at(-1)!;
    assert.deepEqual(
      [u.path, u.mode, u.user, u.headers['content-length'], u.sha],
      ['/work/a.txt', '0755', 'root', '7', sha('héllo\n')],
    );
    assert.equal(u.headers['content-type'], 'application/octet-stream');

    const bytes = randomBytes(1000);
    await files.write('/b.bin', new Uint8Array(bytes), { mode: '600' });
    u = uploads.at(-1)!;
    assert.deepEqual([u.mode, u.headers['content-length'], u.sha], ['600', '1000', sha(bytes)]);

    await files.write('/c.bin', new Blob([bytes, bytes]));
    u = uploads.at(-1)!;
    assert.deepEqual([u.mode, u.headers['content-length'], u.sha], [null, '2000', sha(Buffer.concat([bytes, bytes]))]);
    await assert.rejects(files.write('/d', 'x', { mode: 0o10000 }), RangeError);
  });

  it('streams a web ReadableStream (chunked) and a file stream with size (Content-Length)', async () => {
    const files = s.sandbox().files;
    const parts = [randomBytes(70_000), randomBytes(5), randomBytes(100_000)];
    let i = 0;
    const web = new ReadableStream<Uint8Array>({
      pull(c) {
        if (i < parts.length) c.enqueue(new Uint8Array(parts[i++]));
        else c.close();
      },
    });
    await files.write('/web.bin', web);
    let u = uploads.at(-1)!;
    assert.equal(u.headers['transfer-encoding'], 'chunked');
    assert.equal(u.headers['content-length'], undefined);
    assert.equal(u.sha, sha(Buffer.concat(parts)));

    const dir = mkdtempSync(join(tmpdir(), 'sdk-files-'));
    try {
      const data = randomBytes(300_000);
      writeFileSync(join(dir, 'f'), data);
      await files.write('/node.bin', createReadStream(join(dir, 'f')), { size: data.length });
      u = uploads.at(-1)!;
      assert.equal(u.headers['content-length'], String(data.length));
      assert.equal(u.headers['transfer-encoding'], undefined);
      assert.equal(u.sha, sha(data));
      await files.write('/text-stream', Readable.from(['ab', 'c']));
      assert.equal(uploads.at(-1)!.sha, sha('abc'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('uploads a large Node stream as it is produced, never buffering it whole', async () => {
    const CHUNK = 1 << 20;
    const TOTAL = 48;
    let received = 0;
    const waiters: { n: number; resolve: () => void }[] = [];
    onUploadBytes = (n) => {
      received = n;
      for (let i = waiters.length - 1; i >= 0; i--) if (received >= waiters[i].n) waiters.splice(i, 1)[0].resolve();
    };
    const serverHas = (n: number) =>
      received >= n
        ? Promise.resolve()
        : new Promise<void>((resolve, reject) => {
            waiters.push({ n, resolve });
            setTimeout(
              () => reject(new Error(`the server got ${received} bytes, not ${n}: the body is buffered`)),
              10_000,
            ).unref();
          });
    const h = createHash('sha256');
    async function* produce() {
      for (let i = 0; i < TOTAL; i++) {
        const b = randomBytes(CHUNK);
        h.update(b);
        yield b;
        // Chunk i+2 is made only once the server has chunk i: a client that read the whole
        // stream before sending would wait here for ever (and the test fail).
        if (i >= 1) await serverHas((i - 1) * CHUNK + 1);
      }
    }
    const e = await s.sandbox().files.write('/big.bin', Readable.from(produce()));
    onUploadBytes = () => {};
    const u = uploads.at(-1)!;
    assert.equal(e.size, TOTAL * CHUNK);
    assert.equal(u.size, TOTAL * CHUNK);
    assert.equal(u.sha, h.digest('hex'));
    assert.equal(u.headers['transfer-encoding'], 'chunked');
    assert.ok(u.chunks > TOTAL / 2, `arrived in ${u.chunks} chunks`);
  });

  it('reads text, bytes, a stream, and ranges (206); 416 and 404 are typed errors', async () => {
    const content = Buffer.from('0123456789héllo');
    s.route('GET', '/files/content', (req, res, url) => {
      if (url.searchParams.get('path') !== '/r.txt')
        return fail(res, 404, 'not_found', 'No such file', { path: url.searchParams.get('path') });
      const m = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range ?? '');
      if (!m) {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': content.length });
        return void res.end(content);
      }
      const start = m[1] === '' ? content.length - Number(m[2]) : Number(m[1]);
      const end = m[1] !== '' && m[2] !== '' ? Number(m[2]) : content.length - 1;
      if (start >= content.length) return fail(res, 416, 'validation', 'Range not satisfiable', { path: '/r.txt' });
      res.writeHead(206, {
        'content-range': `bytes ${start}-${end}/${content.length}`,
        'content-length': end - start + 1,
      });
      res.end(content.subarray(start, end + 1));
    });
    const files = s.sandbox().files;
    assert.equal(await files.read('/r.txt'), '0123456789héllo');
    assert.deepEqual(Buffer.from(await files.read('/r.txt', { format: 'bytes' })), content);
    const stream = await files.read('/r.txt', { format: 'stream' });
    const got: Uint8Array[] = [];
    for await (const c of stream) got.push(c);
    assert.deepEqual(Buffer.concat(got), content);
    assert.equal(await files.read('/r.txt', { range: { start: 2, end: 5 } }), '2345');
    assert.equal(s.seen.at(-1)!.headers.range, 'bytes=2-5');
    assert.equal(await files.read('/r.txt', { range: { start: 10 } }), 'héllo');
    assert.equal(s.seen.at(-1)!.headers.range, 'bytes=10-');
    await assert.rejects(
      files.read('/r.txt', { range: { start: 99 } }),
      (e: unknown) => e instanceof SandboxdApiError && e.status === 416,
    );
    await assert.rejects(
      files.read('/nope'),
      (e: unknown) => e instanceof NotFoundError && (e.details as { path: string }).path === '/nope',
    );
    await assert.rejects(files.read('/r.txt', { range: { start: 5, end: 2 } }), RangeError);
  });

  it('lists, stats, checks existence, makes dirs, moves and removes', async () => {
    const listed: string[] = [];
    s.route('GET', '/files', (_req, res, url) => {
      listed.push(url.search);
      if (url.searchParams.get('path') === '/file')
        return fail(res, 400, 'validation', 'Not a directory', { path: '/file' });
      json(res, 200, {
        entries: [entry('/w/a'), entry('/w/d', { type: 'dir' }), entry('/w/d/b')],
        truncated: url.searchParams.get('depth') === '10',
      });
    });
    s.route('GET', '/files/stat', (_req, res, url) => {
      const p = url.searchParams.get('path');
      if (p === '/w') return json(res, 200, { entry: entry('/w', { type: 'dir', mode: 0o755 }) });
      fail(res, 404, 'not_found', 'No such file or directory', { path: p });
    });
    const posted: unknown[] = [];
    s.route('POST', '/files/mkdir', async (req, res) => {
      const b = JSON.parse((await body(req)).toString());
      posted.push(b);
      if (b.path === '/w') return fail(res, 409, 'conflict', 'Exists', { path: '/w' });
      json(res, 201, { entry: entry(b.path, { type: 'dir' }) });
    });
    s.route('POST', '/files/move', async (req, res) => {
      const b = JSON.parse((await body(req)).toString());
      posted.push(b);
      json(res, 200, { entry: entry(b.to) });
    });
    s.route('DELETE', '/files', (_req, res, url) => {
      posted.push(url.search);
      res.writeHead(204).end();
    });
    const files = s.sandbox().files;

    const l = await files.list('/w', { depth: 2 });
    assert.deepEqual(
      l.map((e) => e.path),
      ['/w/a', '/w/d', '/w/d/b'],
    );
    assert.equal(l.truncated, false);
    assert.equal((await files.list('/w', { depth: 10, user: '1000' })).truncated, true);
    assert.deepEqual(listed, ['?path=%2Fw&depth=2', '?path=%2Fw&depth=10&user=1000']);
    await assert.rejects(files.list('/file'), ValidationError);

    assert.equal((await files.stat('/w')).mode, 0o755);
    assert.equal(await files.exists('/w'), true);
    assert.equal(await files.exists('/missing'), false);
    const other = s.sandbox();
    Object.defineProperty(other.files, 'sandboxId', { value: 'sbx_bbbbbbbbbbbbbbbbbbbb' });
    await assert.rejects(other.files.exists('/w'), NotFoundError, 'a missing sandbox is not a missing file');

    assert.equal((await files.mkdir('/w/new/deep')).type, 'dir');
    await assert.rejects(files.mkdir('/w'), ConflictError);
    assert.equal((await files.move('/w/a', '/w/b')).path, '/w/b');
    await files.remove('/w/d');
    assert.deepEqual(posted, [{ path: '/w/new/deep' }, { path: '/w' }, { from: '/w/a', to: '/w/b' }, '?path=%2Fw%2Fd']);
  });

  it('maps error answers to the classes of their kind: 507 insufficient_storage', async () => {
    const e = await s
      .sandbox()
      .files.write('/full', 'data')
      .catch((x: unknown) => x);
    assert.ok(e instanceof InsufficientStorageError, String(e));
    assert.equal(e.status, 507);
    assert.deepEqual(e.details, { path: '/full' });
  });

  it('watches over a WebSocket with the API key; refusals before the upgrade are typed', async () => {
    let socketClosed: Promise<void> = Promise.resolve();
    s.routeWs('/files/watch', (req, url, accept, refuse) => {
      if (url.searchParams.get('path') === '/missing')
        return refuse(404, {
          code: 404,
          kind: 'not_found',
          message: 'No such directory',
          details: { path: '/missing' },
        });
      if (url.searchParams.get('path') === '/file')
        return refuse(400, { code: 400, kind: 'validation', message: 'Not a directory' });
      assert.equal(req.headers.authorization, 'Bearer sk_unit_test_key');
      accept((ws) => {
        socketClosed = new Promise((r) => ws.on('close', () => r()));
        ws.send(JSON.stringify({ type: 'create', path: '/w/a.txt', entry: entry('/w/a.txt') }));
        ws.send(JSON.stringify({ type: 'write', path: '/w/a.txt', entry: entry('/w/a.txt', { size: 3 }) }));
        ws.send('not json');
        ws.send(JSON.stringify({ type: 'rename', path: '/w/a.txt' }));
        ws.send(JSON.stringify({ type: 'remove', path: '/w/b.txt' }));
      });
    });
    const files = s.sandbox().files;
    const events: FileEvent[] = [];
    let got4!: () => void;
    const four = new Promise<void>((r) => (got4 = r));
    const w = await files.watch(
      '/w',
      (e) => {
        events.push(e);
        if (events.length === 4) got4();
      },
      { recursive: true },
    );
    await four;
    assert.deepEqual(
      events.map((e) => [e.type, e.path]),
      [
        ['create', '/w/a.txt'],
        ['write', '/w/a.txt'],
        ['rename', '/w/a.txt'],
        ['remove', '/w/b.txt'],
      ],
    );
    assert.equal(events[1].entry?.size, 3);
    assert.match(s.seen.at(-1)!.url, /\/files\/watch\?path=%2Fw&recursive=true$/);
    w.close();
    assert.equal((await w.closed).code, 1000);
    await socketClosed;
    await assert.rejects(
      files.watch('/missing', () => {}),
      NotFoundError,
    );
    await assert.rejects(
      files.watch('/file', () => {}),
      ValidationError,
    );
  });
});
