/**
 * Image builds in the SDK against a stub server on 127.0.0.1 that records each request and
 * answers as the contract says (packages/protocol/src/builds.ts): what `images.build` sends
 * (query, content type, the context's tar, read back by GNU tar), following the log across
 * dropped connections without losing or repeating a line, BuildError, cancel on abort, and
 * the builds and templates calls.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { gunzipSync, gzipSync } from 'node:zlib';
import { BuildError } from './builds.js';
import { SandboxdClient } from './client.js';
import { ConflictError, ConnectionError, NotFoundError, ValidationError } from './errors.js';
import { tarBytes } from './tar.js';
import type { Build, BuildLogEvent } from './types.js';

const KEY = 'sk_builds_unit';
const ID = 'bld_aaaaaaaaaaaaaaaaaaaa';

const build = (over: Partial<Build> = {}): Build => ({
  id: ID,
  name: 'web',
  tag: 'latest',
  image: 'templates/web:latest',
  state: 'queued',
  createdAt: '2030-01-01T00:00:00.000Z',
  steps: { total: 3, done: 0, cached: 0 },
  ...over,
});
const line = (seq: number, text: string, stream: 'stdout' | 'stderr' | 'system' = 'stdout') => ({
  type: 'log' as const,
  seq,
  time: '2030-01-01T00:00:01.000Z',
  step: 1,
  stream,
  text,
});

interface Seen {
  method: string;
  url: string;
  query: Record<string, string>;
  contentType?: string;
  body: Buffer;
}
/** Answers one request; the default is a 404. */
type Handler = (req: IncomingMessage, res: ServerResponse, seen: Seen) => void;

/** Names in a tar, and one file's content, as GNU tar reads them. */
const tarList = (tar: Buffer) => execFileSync('tar', ['-t'], { input: tar }).toString().trimEnd().split('\n');
const tarCat = (tar: Buffer, name: string) => execFileSync('tar', ['-xO', name], { input: tar }).toString();

describe('image builds (SDK)', { timeout: 60_000 }, () => {
  const seen: Seen[] = [];
  const routes = new Map<string, Handler>();
  let url = '';
  let tmp = '';
  let client: SandboxdClient;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const u = new URL(req.url ?? '/', 'http://x');
      const s: Seen = {
        method: req.method ?? '',
        url: req.url ?? '',
        query: Object.fromEntries(u.searchParams),
        contentType: req.headers['content-type'],
        body: Buffer.concat(chunks),
      };
      seen.push(s);
      if (req.headers.authorization !== `Bearer ${KEY}`)
        return json(res, 401, { code: 401, kind: 'unauthorized', message: 'Bad key' });
      const h = routes.get(`${req.method} ${u.pathname}`);
      if (h) return h(req, res, s);
      json(res, 404, { code: 404, kind: 'not_found', message: `Build ${ID} not found` });
    });
  });
  const json = (res: ServerResponse, status: number, body?: unknown) => {
    if (body === undefined) {
      res.writeHead(status);
      return res.end();
    }
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  /** A logs answer of these events; `cut` ends the connection without a clean end after them. */
  const logs = (res: ServerResponse, events: unknown[], cut = false) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.flushHeaders();
    for (const e of events) res.write(`${JSON.stringify(e)}\n`);
    if (cut) {
      res.write('{"type":"log","seq":'); // half a line, then the connection breaks
      setImmediate(() => res.socket?.destroy());
    } else res.end();
  };
  const accept = (over: Partial<Build> = {}) =>
    routes.set('POST /api/v1/images/builds', (_q, res) => json(res, 202, { build: build(over) }));
  const finalState = (over: Partial<Build>) =>
    routes.set(`GET /api/v1/images/builds/${ID}`, (_q, res) => json(res, 200, { build: build(over) }));
  const posts = () => seen.filter((s) => s.method === 'POST' && s.url.startsWith('/api/v1/images/builds?'));

  before(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    client = new SandboxdClient({ apiUrl: url, apiKey: KEY, maxRetries: 0 });
    tmp = mkdtempSync(join(tmpdir(), 'sdk-builds-'));
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    rmSync(tmp, { recursive: true, force: true });
  });
  beforeEach(() => {
    seen.length = 0;
    routes.clear();
  });

  it('images.build packs a directory, sends the query, follows the log across drops and resolves ready', async () => {
    const ctx = join(tmp, 'app');
    mkdirSync(join(ctx, 'src'), { recursive: true });
    writeFileSync(join(ctx, 'Dockerfile'), 'FROM local/busybox:latest\nCOPY src /src\n');
    writeFileSync(join(ctx, 'src/a.txt'), 'A');
    symlinkSync('/etc/passwd', join(ctx, 'src/pw'));
    accept();
    // The log: two lines, a drop mid-line; from 2: one line, a drop; from 3: two lines and the end.
    const offsets: string[] = [];
    routes.set(`GET /api/v1/images/builds/${ID}/logs`, (_q, res, s) => {
      offsets.push(s.query.offset);
      assert.equal(s.query.follow, 'true');
      const from = Number(s.query.offset);
      if (from === 0)
        return logs(res, [line(0, 'Step 1/3 : FROM local/busybox:latest', 'system'), line(1, 'one')], true);
      if (from === 2) return logs(res, [line(1, 'one (again: skipped)'), line(2, 'two')], true);
      logs(res, [line(3, 'three'), line(4, 'four', 'stderr'), { type: 'end', state: 'ready' }]);
    });
    finalState({ state: 'ready', digest: 'sha256:abc', sizeBytes: 10, steps: { total: 3, done: 3, cached: 1 } });
    const got: BuildLogEvent[] = [];
    let started: Build | undefined;
    let sent = 0;
    const b = await client.images.build({
      name: 'web',
      tag: 'v1',
      context: ctx,
      buildArgs: { A: '1', B: 'x y' },
      allowDomains: ['pypi.org', '*.npmjs.org'],
      noCache: true,
      onLog: (e) => got.push(e),
      onStart: (x) => {
        started = x;
      },
      onUploadProgress: (n) => {
        sent = n;
      },
    });
    assert.equal(b.state, 'ready');
    assert.equal(b.digest, 'sha256:abc');
    assert.equal(started?.state, 'queued');
    assert.deepEqual(
      got.map((e) => (e.type === 'log' ? `${e.seq}:${e.text}` : `end:${e.state}`)),
      ['0:Step 1/3 : FROM local/busybox:latest', '1:one', '2:two', '3:three', '4:four', 'end:ready'],
      'every line once, in order',
    );
    assert.deepEqual(offsets, ['0', '2', '3']);

    const [post] = posts();
    assert.deepEqual(post.query, {
      name: 'web',
      tag: 'v1',
      buildArgs: '{"A":"1","B":"x y"}',
      allowDomains: 'pypi.org,*.npmjs.org',
      noCache: 'true',
    });
    assert.equal(post.contentType, 'application/x-tar');
    assert.equal(sent, post.body.length, 'upload progress counts every byte');
    assert.deepEqual(tarList(post.body), ['Dockerfile', 'src/', 'src/a.txt', 'src/pw']);
    assert.equal(tarCat(post.body, 'src/a.txt'), 'A');
    const verbose = execFileSync('tar', ['-tv'], { input: post.body }).toString();
    assert.match(verbose, /src\/pw -> \/etc\/passwd/, 'a symlink is sent as a symlink');
  });

  it('a failed build throws BuildError with its failure; a cancelled one too', async () => {
    const failure = {
      code: 400,
      kind: 'validation' as const,
      message: 'Step 2/3 (line 2) RUN false: exit code 1',
      details: { step: 2, line: 2, instruction: 'RUN false', exitCode: 1, output: 'nope\n' },
    };
    accept();
    routes.set(`GET /api/v1/images/builds/${ID}/logs`, (_q, res) =>
      logs(res, [line(0, 'nope'), { type: 'end', state: 'error', error: failure }]),
    );
    finalState({ state: 'error', error: failure });
    const e = await client.images.build({ name: 'web', dockerfileText: 'FROM x\nRUN false\n' }).then(
      () => assert.fail('resolved'),
      (x: unknown) => x,
    );
    assert.ok(e instanceof BuildError, String(e));
    assert.equal(e.message, failure.message);
    assert.equal(e.state, 'error');
    assert.deepEqual(e.failure, failure);
    assert.deepEqual([e.step, e.line, e.instruction, e.exitCode, e.output], [2, 2, 'RUN false', 1, 'nope\n']);

    routes.set(`GET /api/v1/images/builds/${ID}/logs`, (_q, res) => logs(res, [{ type: 'end', state: 'cancelled' }]));
    finalState({ state: 'cancelled' });
    await assert.rejects(client.images.build({ name: 'web', dockerfileText: 'FROM x' }), (x: unknown) => {
      assert.ok(x instanceof BuildError);
      assert.equal(x.state, 'cancelled');
      assert.match(x.message, /was cancelled/);
      return true;
    });
  });

  it('dockerfileText goes in the tar under its own name, listed in .dockerignore (kept or made)', async () => {
    accept();
    const text = 'FROM local/busybox:latest\nCOPY . /x\n';
    const withIgnore = join(tmp, 'ign');
    mkdirSync(withIgnore);
    writeFileSync(join(withIgnore, '.dockerignore'), 'node_modules\n*.log');
    writeFileSync(join(withIgnore, 'Dockerfile'), 'FROM other\n');
    await client.builds.create({ name: 'web', context: withIgnore, dockerfileText: text });
    await client.builds.create({
      name: 'web',
      context: { 'app/main.py': 'print(1)', README: new Uint8Array([104, 105]) },
      dockerfileText: text,
    });
    await client.builds.create({ name: 'web', dockerfileText: text });
    const [a, b, c] = posts();
    for (const p of [a, b, c]) {
      assert.match(p.query.dockerfile, /^\.dockerfile\.[0-9a-f]{20}$/);
      assert.equal(tarCat(p.body, p.query.dockerfile), text);
    }
    assert.deepEqual(tarList(a.body), ['Dockerfile', '.dockerignore', a.query.dockerfile]);
    assert.equal(tarCat(a.body, '.dockerignore'), `node_modules\n*.log\n${a.query.dockerfile}\n`);
    assert.equal(tarCat(a.body, 'Dockerfile'), 'FROM other\n', "the context's own Dockerfile is left alone");
    assert.deepEqual(tarList(b.body), ['README', 'app/', 'app/main.py', '.dockerignore', b.query.dockerfile]);
    assert.equal(tarCat(b.body, 'app/main.py'), 'print(1)');
    assert.equal(tarCat(b.body, '.dockerignore'), `.dockerignore\n${b.query.dockerfile}\n`);
    assert.deepEqual(tarList(c.body), ['.dockerignore', c.query.dockerfile]);
    assert.notEqual(a.query.dockerfile, b.query.dockerfile);
  });

  it('a tar context is sent as it is, gzip told by its magic; compress gzips a packed one; bad combinations never reach the server', async () => {
    accept();
    const tar = Buffer.from(
      await tarBytes([{ path: 'Dockerfile', type: 'file', body: new TextEncoder().encode('FROM x\n') }]),
    );
    await client.builds.create({ name: 'web', context: tar, dockerfile: 'Dockerfile' });
    await client.builds.create({ name: 'web', context: gzipSync(tar) });
    await client.builds.create({ name: 'web', context: new Blob([gzipSync(tar)]) });
    await client.builds.create({
      name: 'web',
      context: (async function* () {
        yield gzipSync(tar).subarray(0, 5);
        yield gzipSync(tar).subarray(5);
      })(),
    });
    await client.builds.create({ name: 'web', context: { Dockerfile: 'FROM x\n' }, compress: true });
    const p = posts();
    assert.deepEqual(
      p.map((x) => x.contentType),
      ['application/x-tar', 'application/gzip', 'application/gzip', 'application/gzip', 'application/gzip'],
    );
    assert.ok(p[0].body.equals(tar));
    assert.equal(p[0].query.dockerfile, 'Dockerfile');
    for (const x of p.slice(1)) assert.deepEqual(tarList(gunzipSync(x.body)), ['Dockerfile']);

    const n = seen.length;
    await assert.rejects(client.builds.create({ name: 'web', context: tar, dockerfileText: 'FROM x' }), TypeError);
    await assert.rejects(client.builds.create({ name: 'web', dockerfile: 'D', dockerfileText: 'FROM x' }), TypeError);
    await assert.rejects(client.builds.create({ name: 'web' }), /needs a context, or dockerfileText/);
    await assert.rejects(
      client.builds.create({ name: 'web', context: join(tmp, 'nothing') }),
      /Cannot read the build context/,
    );
    await assert.rejects(client.builds.create({ name: 'web', context: { '../x': 'y' } }), /must be relative/);
    assert.equal(seen.length, n, 'nothing was sent');
  });

  it("the server's refusal is a typed error; aborting after the start cancels the build", async () => {
    routes.set('POST /api/v1/images/builds', (_q, res) =>
      json(res, 400, { code: 400, kind: 'validation', message: 'Dockerfile line 2: ONBUILD is not supported' }),
    );
    await assert.rejects(
      client.images.build({ name: 'web', dockerfileText: 'FROM x\nONBUILD RUN y' }),
      (e: unknown) => {
        assert.ok(e instanceof ValidationError);
        assert.match(e.message, /line 2/);
        return true;
      },
    );

    accept();
    let cancelled = 0;
    routes.set(`POST /api/v1/images/builds/${ID}/cancel`, (_q, res) => {
      cancelled++;
      json(res, 200, { build: build({ state: 'cancelled' }) });
    });
    const ac = new AbortController();
    routes.set(`GET /api/v1/images/builds/${ID}/logs`, (_q, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${JSON.stringify(line(0, 'working'))}\n`); // and nothing more: the build runs on
    });
    const p = client.images.build({
      name: 'web',
      dockerfileText: 'FROM x',
      signal: ac.signal,
      onLog: () => ac.abort(new Error('stop it')),
    });
    await assert.rejects(p, /stop it/);
    assert.equal(cancelled, 1, 'the build was cancelled on the server');
  });

  it('builds.logs: without follow, one pass; a 404 is NotFoundError; a follow that keeps dropping gives up', async () => {
    routes.set(`GET /api/v1/images/builds/${ID}/logs`, (_q, res, s) =>
      logs(res, [line(Number(s.query.offset), 'x')], s.query.follow === 'true'),
    );
    const once: BuildLogEvent[] = [];
    for await (const e of client.builds.logs(ID, { offset: 7 })) once.push(e);
    assert.deepEqual(once, [line(7, 'x')]);
    assert.equal(seen.at(-1)?.url, `/api/v1/images/builds/${ID}/logs?offset=7`);

    await assert.rejects(async () => {
      for await (const _ of client.builds.logs('bld_other', { follow: true })) break;
    }, NotFoundError);

    // Every answer is one new line and a drop: each drop after a line is forgiven...
    let n = 0;
    for await (const e of client.builds.logs(ID, { follow: true, maxReconnects: 1 })) {
      if (e.type === 'log') assert.equal(e.seq, n);
      if (++n === 5) break;
    }
    // ...but answers that bring nothing new run out of attempts.
    routes.set(`GET /api/v1/images/builds/${ID}/logs`, (_q, res) => logs(res, [], true));
    await assert.rejects(
      async () => {
        for await (const _ of client.builds.logs(ID, { follow: true, maxReconnects: 2 })) {
        }
      },
      (e: unknown) => e instanceof ConnectionError && /Lost the log of build .* 3 times in a row/.test(e.message),
    );
  });

  it('builds list/get/cancel/delete and templates list/delete send what the contract says', async () => {
    routes.set('GET /api/v1/images/builds', (_q, res) => json(res, 200, { count: 1, builds: [build()] }));
    finalState({ state: 'building' });
    routes.set(`POST /api/v1/images/builds/${ID}/cancel`, (_q, res) =>
      json(res, 409, { code: 409, kind: 'conflict', message: 'Build is ready already' }),
    );
    routes.set(`DELETE /api/v1/images/builds/${ID}`, (_q, res) => json(res, 204));
    const tpl = {
      name: 'web',
      tag: 'v1',
      image: 'templates/web:v1',
      digest: 'sha256:abc',
      sizeBytes: 1,
      buildId: ID,
      createdAt: '2030-01-01T00:00:00.000Z',
    };
    routes.set('GET /api/v1/templates', (_q, res) => json(res, 200, { count: 1, templates: [tpl] }));
    routes.set('DELETE /api/v1/templates/web', (_q, res) => json(res, 204));

    assert.deepEqual(await client.builds.list({ name: 'web', limit: 5 }), [build()]);
    assert.equal((await client.builds.get(ID)).state, 'building');
    await assert.rejects(client.builds.cancel(ID), ConflictError);
    await client.builds.delete(ID);
    assert.deepEqual(await client.templates.list(), [tpl]);
    await client.templates.delete('web', 'v1');
    await client.templates.delete('web');
    assert.deepEqual(
      seen.map((s) => `${s.method} ${s.url}`),
      [
        'GET /api/v1/images/builds?name=web&limit=5',
        `GET /api/v1/images/builds/${ID}`,
        `POST /api/v1/images/builds/${ID}/cancel`,
        `DELETE /api/v1/images/builds/${ID}`,
        'GET /api/v1/templates',
        'DELETE /api/v1/templates/web?tag=v1',
        'DELETE /api/v1/templates/web',
      ],
    );
  });
});
