/**
 * The lifecycle calls (pause, resume, stop, start, snapshot), the snapshots API and the list's
 * metadata filter, against a stub server on 127.0.0.1 that records every request and answers
 * as the contract says (packages/protocol/src/sandbox.ts).
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { after, before, beforeEach, describe, it } from 'node:test';
import { SandboxdClient } from './client.js';
import { ConflictError, NotFoundError, QuotaExceededError, ValidationError } from './errors.js';
import { HttpClient } from './http.js';
import { listQueryParams } from './lifecycle.js';
import { Sandbox } from './sandbox.js';
import type { SandboxInfo, SnapshotInfo } from './types.js';

const KEY = 'sk_lifecycle_unit';
const ID = 'sbx_aaaaaaaaaaaaaaaaaaaa';

const info = (over: Partial<SandboxInfo> = {}): SandboxInfo => ({
  id: ID,
  name: 'unit',
  state: 'started',
  region: 'local',
  image: 'local/busybox:latest',
  createdAt: '2026-01-01T00:00:00.000Z',
  stopAt: '2026-01-01T00:10:00.000Z',
  publicAccessUrlTemplate: `{{PORT}}-${ID}.sandbox.localhost:8080`,
  metadata: {},
  onTimeout: 'stop',
  isolation: 'container',
  ...over,
});

const snap = (name: string): SnapshotInfo => ({
  name,
  image: `snapshots/${name}`,
  sizeBytes: 4096,
  baseImage: 'local/busybox:latest',
  sandboxId: ID,
  createdAt: '2026-01-01T00:05:00.000Z',
});

interface Seen {
  method: string;
  url: string;
  body: string;
  contentType: string | undefined;
}
type Reply = { status: number; body?: unknown };

describe('sandbox lifecycle, snapshots and list filters', { timeout: 30_000 }, () => {
  const seen: Seen[] = [];
  /** What the next requests get, keyed `METHOD /path` (no query); default 404. */
  const replies = new Map<string, Reply>();
  let url = '';
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', body, contentType: req.headers['content-type'] });
      const r =
        req.headers.authorization === `Bearer ${KEY}`
          ? (replies.get(`${req.method} ${(req.url ?? '').split('?')[0]}`) ?? {
              status: 404,
              body: { code: 404, kind: 'not_found', message: 'Not found' },
            })
          : { status: 401, body: { code: 401, kind: 'unauthorized', message: 'Bad key' } };
      if (r.body === undefined) {
        res.writeHead(r.status);
        return res.end();
      }
      res.writeHead(r.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(r.body));
    });
  });
  let client: SandboxdClient;
  before(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    client = new SandboxdClient({ apiUrl: url, apiKey: KEY, maxRetries: 0 });
  });
  after(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
  beforeEach(() => {
    seen.length = 0;
    replies.clear();
  });
  const base = `/api/v1/sandboxes/${ID}`;

  it('builds metadata.<key>=<value> query parameters, URL-encoded, next to state and paging', () => {
    const q = listQueryParams({ state: 'paused', limit: 5, metadata: { team: 'a b', 'k&x=': 'v=1/é' } });
    assert.deepEqual(q, {
      state: 'paused',
      limit: 5,
      cursor: undefined,
      'metadata.team': 'a b',
      'metadata.k&x=': 'v=1/é',
    });
    const u = new URL(new HttpClient({ apiUrl: 'http://h', apiKey: KEY }).url('/api/v1/sandboxes', q));
    assert.equal(u.search, '?state=paused&limit=5&metadata.team=a+b&metadata.k%26x%3D=v%3D1%2F%C3%A9');
    // The server's reading of that query gives the pairs back whole.
    assert.deepEqual(Object.fromEntries(u.searchParams), {
      state: 'paused',
      limit: '5',
      'metadata.team': 'a b',
      'metadata.k&x=': 'v=1/é',
    });
    assert.deepEqual(listQueryParams({}), { state: undefined, limit: undefined, cursor: undefined });
    assert.throws(() => listQueryParams({ metadata: { '': 'x' } }), TypeError);
  });

  it('list and listPage send the metadata filter and state; create sends metadata and onTimeout', async () => {
    replies.set('GET /api/v1/sandboxes', { status: 200, body: { count: 1, sandboxes: [info({ state: 'paused' })] } });
    const list = await client.sandboxes.list({ state: 'paused', metadata: { env: 'ci', run: '42' } });
    assert.deepEqual(
      list.map((s) => s.state),
      ['paused'],
    );
    assert.equal(seen[0].url, '/api/v1/sandboxes?state=paused&limit=1000&metadata.env=ci&metadata.run=42');
    await Sandbox.listPage({ metadata: { 'a b': 'c' }, cursor: 'x' }, client);
    assert.equal(seen[1].url, '/api/v1/sandboxes?cursor=x&metadata.a+b=c');

    replies.set('POST /api/v1/sandboxes', {
      status: 201,
      body: { sandbox: info({ metadata: { env: 'ci' }, onTimeout: 'pause' }) },
    });
    const sb = await client.sandboxes.create({ image: 'img', metadata: { env: 'ci' }, onTimeout: 'pause' });
    assert.deepEqual(JSON.parse(seen[2].body), { image: 'img', metadata: { env: 'ci' }, onTimeout: 'pause' });
    assert.deepEqual(sb.metadata, { env: 'ci' });
    assert.equal(sb.onTimeout, 'pause');
    assert.equal(sb.expiresAt, undefined);
  });

  it('create sends network.egress; setNetwork PATCHes it and keeps the answer; a bad rule is a ValidationError', async () => {
    replies.set('POST /api/v1/sandboxes', {
      status: 201,
      body: { sandbox: info({ network: { egress: { allow: ['pypi.org'] } } }) },
    });
    const sb = await client.sandboxes.create({ image: 'img', network: { egress: { allow: ['pypi.org'] } } });
    assert.deepEqual(JSON.parse(seen[0].body).network, { egress: { allow: ['pypi.org'] } });
    assert.deepEqual(sb.info.network, { egress: { allow: ['pypi.org'] } });
    replies.set(`PATCH ${base}/network`, { status: 200, body: { id: ID, network: { egress: 'internet' } } });
    assert.deepEqual(await sb.setNetwork('internet'), { egress: 'internet' });
    assert.deepEqual(JSON.parse(seen[1].body), { egress: 'internet' });
    assert.deepEqual(sb.info.network, { egress: 'internet' });
    const problem = { in: 'body', path: '/egress/allow/0', message: 'a domain needs at least two labels' };
    replies.set(`PATCH ${base}/network`, {
      status: 400,
      body: { code: 400, kind: 'validation', message: `/egress/allow/0: ${problem.message}`, details: [problem] },
    });
    await assert.rejects(sb.setNetwork({ allow: ['localhost'] }), (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.deepEqual(e.details, [problem]);
      return true;
    });
  });

  it('maps pause, resume, stop, start to their POST routes and takes the answered state', async () => {
    const sb = Sandbox.from(info(), client);
    const expiresAt = '2026-01-02T00:00:00.000Z';
    replies.set(`POST ${base}/pause`, { status: 200, body: { sandbox: info({ state: 'paused', expiresAt }) } });
    replies.set(`POST ${base}/resume`, {
      status: 200,
      body: { sandbox: info({ state: 'started', stopAt: '2026-01-01T01:00:00.000Z' }) },
    });
    replies.set(`POST ${base}/stop`, { status: 200, body: { sandbox: info({ state: 'stopped', expiresAt }) } });
    replies.set(`POST ${base}/start`, { status: 200, body: { sandbox: info({ state: 'started' }) } });

    assert.equal(await sb.pause(), sb);
    assert.equal(sb.state, 'paused');
    assert.equal(sb.expiresAt?.toISOString(), expiresAt);
    await sb.resume({ timeoutMs: 3_600_000 });
    assert.equal(sb.state, 'started');
    assert.equal(sb.stopAt.toISOString(), '2026-01-01T01:00:00.000Z');
    await sb.stop();
    assert.equal(sb.state, 'stopped');
    await sb.start();
    assert.equal(sb.state, 'started');
    assert.deepEqual(
      seen.map((r) => [r.method, r.url, r.body, r.contentType]),
      [
        ['POST', `${base}/pause`, '', undefined],
        ['POST', `${base}/resume`, '{"timeoutMs":3600000}', 'application/json'],
        ['POST', `${base}/stop`, '', undefined],
        ['POST', `${base}/start`, '{}', 'application/json'],
      ],
    );
  });

  it('isolation: create sends the tier; pause({memory}) sends it; fork({count}) answers new Sandbox handles', async () => {
    replies.set('POST /api/v1/sandboxes', { status: 201, body: { sandbox: info({ isolation: 'gvisor' }) } });
    const sb = await client.sandboxes.create({ image: 'img', isolation: 'gvisor' });
    assert.equal(sb.isolation, 'gvisor');
    assert.equal(sb.pausedMemory, undefined);
    replies.set(`POST ${base}/pause`, {
      status: 200,
      body: { sandbox: info({ state: 'paused', isolation: 'gvisor', pausedMemory: 'disk' }) },
    });
    await sb.pause({ memory: 'disk' });
    assert.deepEqual([sb.state, sb.pausedMemory], ['paused', 'disk']);
    const F1 = 'sbx_bbbbbbbbbbbbbbbbbbbb';
    const F2 = 'sbx_cccccccccccccccccccc';
    replies.set(`POST ${base}/fork`, {
      status: 201,
      body: {
        sandboxes: [
          info({ id: F1, name: 'unit-fork-1', isolation: 'gvisor' }),
          info({ id: F2, name: 'unit-fork-2', isolation: 'gvisor' }),
        ],
      },
    });
    const forks = await sb.fork({ count: 2 });
    assert.deepEqual(
      forks.map((f) => [f.id, f.name, f.isolation, f instanceof Sandbox]),
      [
        [F1, 'unit-fork-1', 'gvisor', true],
        [F2, 'unit-fork-2', 'gvisor', true],
      ],
    );
    await sb.fork();
    replies.set(`POST ${base}/fork`, {
      status: 400,
      body: { code: 400, kind: 'validation', message: 'Only gvisor sandboxes can be forked' },
    });
    assert.ok((await sb.fork().catch((x: unknown) => x)) instanceof ValidationError);
    assert.deepEqual(
      seen.map((r) => [r.method, r.url, r.body]),
      [
        ['POST', '/api/v1/sandboxes', '{"image":"img","isolation":"gvisor"}'],
        ['POST', `${base}/pause`, '{"memory":"disk"}'],
        ['POST', `${base}/fork`, '{"count":2}'],
        ['POST', `${base}/fork`, '{}'],
        ['POST', `${base}/fork`, '{}'],
      ],
    );
  });

  it('a wrong state is a ConflictError naming the state; quotas are QuotaExceededError; nothing is retried', async () => {
    const sb = Sandbox.from(info({ state: 'stopped' }), client);
    replies.set(`POST ${base}/pause`, {
      status: 409,
      body: { code: 409, kind: 'conflict', message: 'Sandbox is stopped', details: { state: 'stopped' } },
    });
    const e = await sb.pause().catch((x: unknown) => x);
    assert.ok(e instanceof ConflictError);
    assert.deepEqual(e.details, { state: 'stopped' });
    assert.equal(sb.state, 'stopped', 'a failed call leaves the handle as it was');

    replies.set(`POST ${base}/snapshot`, {
      status: 403,
      body: {
        code: 403,
        kind: 'quota',
        message: 'Snapshot quota reached',
        details: { quota: 'snapshotBytes', limit: 1 },
      },
    });
    const q = await sb.snapshot('s1').catch((x: unknown) => x);
    assert.ok(q instanceof QuotaExceededError);
    assert.equal((q.details as { quota: string }).quota, 'snapshotBytes');
    assert.equal(seen.length, 2);
  });

  it('snapshot posts the name and resolves with the snapshot; client.snapshots lists, gets, deletes', async () => {
    replies.set(`POST ${base}/snapshot`, { status: 201, body: snap('base-1') });
    const made = await Sandbox.from(info(), client).snapshot('base-1');
    assert.deepEqual(made, snap('base-1'));
    assert.deepEqual(await client.snapshots.create(ID, 'base-1'), snap('base-1'));
    replies.set('GET /api/v1/snapshots', { status: 200, body: { count: 2, snapshots: [snap('b'), snap('a')] } });
    assert.deepEqual(
      (await client.snapshots.list()).map((s) => s.name),
      ['b', 'a'],
    );
    replies.set('GET /api/v1/snapshots/a.1', { status: 200, body: { snapshot: snap('a.1') } });
    assert.equal((await client.snapshots.get('a.1')).image, 'snapshots/a.1');
    replies.set('DELETE /api/v1/snapshots/a.1', { status: 204 });
    assert.equal(await client.snapshots.delete('a.1'), undefined);
    await assert.rejects(client.snapshots.get('gone'), NotFoundError);
    await assert.rejects(client.snapshots.delete('we/ird'), NotFoundError);
    assert.deepEqual(
      seen.map((r) => `${r.method} ${r.url} ${r.body}`),
      [
        `POST ${base}/snapshot {"name":"base-1"}`,
        `POST ${base}/snapshot {"name":"base-1"}`,
        'GET /api/v1/snapshots ',
        'GET /api/v1/snapshots/a.1 ',
        'DELETE /api/v1/snapshots/a.1 ',
        'GET /api/v1/snapshots/gone ',
        'DELETE /api/v1/snapshots/we%2Fird ',
      ],
    );
  });
});
