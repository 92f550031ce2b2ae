/**
 * `client.secrets` (create, list, get, put/set, delete, the audit trail) and `network.secrets`
 * on create and on `setNetwork`, against a stub server on 127.0.0.1 that records every
 * request and answers as the contract says (packages/protocol/src/secrets.ts).
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { after, before, beforeEach, describe, it } from 'node:test';
import { SandboxdClient } from './client.js';
import { ConflictError, NotFoundError, ValidationError } from './errors.js';
import { Sandbox } from './sandbox.js';
import type { SandboxInfo, SecretInfo, SecretInjectionInfo, SecretRule } from './types.js';

const KEY = 'sk_secrets_unit';
const ID = 'sbx_aaaaaaaaaaaaaaaaaaaa';
const VALUE = 'sk-live-THE-VALUE-0123456789';

const secret = (name: string, over: Partial<SecretInfo> = {}): SecretInfo => ({
  name,
  description: '',
  version: 1,
  createdAt: '2026-01-01T00:00:00.000Z',
  updatedAt: '2026-01-01T00:00:00.000Z',
  ...over,
});
const injection = (n: number): SecretInjectionInfo => ({
  id: `inj_${n}`,
  sandboxId: ID,
  secret: 'OPENAI',
  destination: 'api.openai.com:443',
  method: 'POST',
  status: 200,
  at: `2026-01-01T00:00:0${n}.000Z`,
});
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

interface Seen {
  method: string;
  url: string;
  body: string;
}
type Reply = { status: number; body?: unknown };

describe('client.secrets and network.secrets', { timeout: 30_000 }, () => {
  const seen: Seen[] = [];
  /** What the next requests get, keyed `METHOD /path` (no query); a function sees the request. */
  const replies = new Map<string, Reply | ((s: Seen) => Reply)>();
  let client: SandboxdClient;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const s = { method: req.method ?? '', url: req.url ?? '', body };
      seen.push(s);
      const found = replies.get(`${req.method} ${(req.url ?? '').split('?')[0]}`);
      const r =
        req.headers.authorization !== `Bearer ${KEY}`
          ? { status: 401, body: { code: 401, kind: 'unauthorized', message: 'Bad key' } }
          : typeof found === 'function'
            ? found(s)
            : (found ?? { status: 404, body: { code: 404, kind: 'not_found', message: 'Not found' } });
      if (r.body === undefined) {
        res.writeHead(r.status);
        return res.end();
      }
      res.writeHead(r.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(r.body));
    });
  });
  before(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    client = new SandboxdClient({ apiUrl: url, apiKey: KEY, maxRetries: 0 });
  });
  after(() => new Promise<void>((r) => server.close(() => r())));
  beforeEach(() => {
    seen.length = 0;
    replies.clear();
  });

  it('create POSTs name, value and description; a taken name is a ConflictError; a bad one a ValidationError', async () => {
    replies.set('POST /api/v1/secrets', { status: 201, body: { secret: secret('OPENAI', { description: 'prod' }) } });
    const s = await client.secrets.create('OPENAI', VALUE, { description: 'prod' });
    assert.deepEqual(JSON.parse(seen[0].body), { name: 'OPENAI', value: VALUE, description: 'prod' });
    assert.equal(s.name, 'OPENAI');
    assert.equal(s.version, 1);
    await client.secrets.create('NODESC', VALUE);
    assert.deepEqual(JSON.parse(seen[1].body), { name: 'NODESC', value: VALUE });

    replies.set('POST /api/v1/secrets', {
      status: 409,
      body: { code: 409, kind: 'conflict', message: 'Secret "OPENAI" exists: PUT /api/v1/secrets/OPENAI changes it' },
    });
    await assert.rejects(client.secrets.create('OPENAI', VALUE), (e: unknown) => {
      assert.ok(e instanceof ConflictError);
      assert.ok(!String(e.message).includes(VALUE) && !JSON.stringify(e).includes(VALUE));
      return true;
    });
    const problem = { in: 'body', path: '/value', message: 'a value is printable ASCII only' };
    replies.set('POST /api/v1/secrets', {
      status: 400,
      body: { code: 400, kind: 'validation', message: '/value: a value is printable ASCII only', details: [problem] },
    });
    await assert.rejects(client.secrets.create('X', 'bad\nvalue'), (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.deepEqual(e.details, [problem]);
      return true;
    });
  });

  it('list, get and delete; names are path-encoded; a missing secret is a NotFoundError', async () => {
    replies.set('GET /api/v1/secrets', {
      status: 200,
      body: { secrets: [secret('A'), secret('b-2', { version: 3 })] },
    });
    assert.deepEqual(
      (await client.secrets.list()).map((s) => [s.name, s.version]),
      [
        ['A', 1],
        ['b-2', 3],
      ],
    );
    replies.set('GET /api/v1/secrets/b-2', { status: 200, body: { secret: secret('b-2', { version: 3 }) } });
    assert.equal((await client.secrets.get('b-2')).version, 3);
    await assert.rejects(client.secrets.get('a/b'), NotFoundError);
    assert.equal(seen.at(-1)?.url, '/api/v1/secrets/a%2Fb');
    replies.set('DELETE /api/v1/secrets/A', { status: 204 });
    assert.equal(await client.secrets.delete('A'), undefined);
    assert.equal(seen.at(-1)?.method, 'DELETE');
    await assert.rejects(client.secrets.delete('gone'), NotFoundError);
  });

  it('put says whether it created (201) or changed (200); set sends the value, description only when given', async () => {
    replies.set('PUT /api/v1/secrets/OPENAI', { status: 201, body: { secret: secret('OPENAI') } });
    const made = await client.secrets.put('OPENAI', { value: VALUE });
    assert.equal(made.created, true);
    assert.deepEqual(JSON.parse(seen[0].body), { value: VALUE });
    replies.set('PUT /api/v1/secrets/OPENAI', { status: 200, body: { secret: secret('OPENAI', { version: 2 }) } });
    const changed = await client.secrets.put('OPENAI', { description: 'rotated monthly' });
    assert.equal(changed.created, false);
    assert.equal(changed.secret.version, 2);
    assert.deepEqual(JSON.parse(seen[1].body), { description: 'rotated monthly' });
    assert.equal((await client.secrets.set('OPENAI', VALUE)).version, 2);
    assert.deepEqual(JSON.parse(seen[2].body), { value: VALUE });
    await client.secrets.set('OPENAI', VALUE, { description: 'd' });
    assert.deepEqual(JSON.parse(seen[3].body), { value: VALUE, description: 'd' });
    replies.set('PUT /api/v1/secrets/NEW', {
      status: 400,
      body: { code: 400, kind: 'validation', message: 'A new secret needs a value' },
    });
    await assert.rejects(client.secrets.put('NEW', { description: 'x' }), ValidationError);
  });

  it('injections sends the filters as query parameters; allInjections follows next to the last page', async () => {
    replies.set('GET /api/v1/secrets/injections', (s) => {
      const q = new URL(s.url, 'http://x').searchParams;
      if (q.get('before') === null)
        return { status: 200, body: { injections: [injection(3), injection(2)], next: 'c2' } };
      assert.equal(q.get('before'), 'c2');
      return { status: 200, body: { injections: [injection(1)] } };
    });
    const page = await client.secrets.injections({ sandboxId: ID, secret: 'OPENAI', limit: 2 });
    assert.equal(page.next, 'c2');
    const q = new URL(seen[0].url, 'http://x').searchParams;
    assert.deepEqual(Object.fromEntries(q), { sandboxId: ID, secret: 'OPENAI', limit: '2' });
    const all: string[] = [];
    for await (const i of client.secrets.allInjections({ sandboxId: ID })) all.push(i.id);
    assert.deepEqual(all, ['inj_3', 'inj_2', 'inj_1']);
    const capped: string[] = [];
    for await (const i of client.secrets.allInjections({}, 2)) capped.push(i.id);
    assert.deepEqual(capped, ['inj_3', 'inj_2']);
  });

  it('network.secrets goes out on create; setNetwork takes {egress, secrets} or a bare egress', async () => {
    const rule: SecretRule = {
      secret: 'OPENAI',
      domains: ['api.openai.com'],
      header: 'Authorization',
      format: 'Bearer {value}',
    };
    const shown = { ...rule, placeholder: 'sbx-secret-0123456789abcdef01234567' };
    const network = { egress: { allow: ['api.openai.com'] }, secrets: [rule] };
    replies.set('POST /api/v1/sandboxes', {
      status: 201,
      body: { sandbox: info({ network: { ...network, secrets: [shown] } }) },
    });
    const sb = await client.sandboxes.create({ image: 'img', network });
    assert.deepEqual(JSON.parse(seen[0].body).network, network);
    assert.equal(sb.info.network?.secrets?.[0].placeholder, shown.placeholder);

    const base = `/api/v1/sandboxes/${ID}/network`;
    replies.set(`PATCH ${base}`, { status: 200, body: { id: ID, network: { egress: 'internet', secrets: [shown] } } });
    const got = await sb.setNetwork({ egress: 'internet', secrets: [rule] });
    assert.deepEqual(JSON.parse(seen[1].body), { egress: 'internet', secrets: [rule] });
    assert.deepEqual(got.secrets, [shown]);
    assert.deepEqual(sb.info.network, got);
    await sb.setNetwork({ allow: ['api.openai.com'] });
    assert.deepEqual(JSON.parse(seen[2].body), { egress: { allow: ['api.openai.com'] } });
    await Sandbox.from(info(), client).setNetwork({ egress: 'none', secrets: [] });
    assert.deepEqual(JSON.parse(seen[3].body), { egress: 'none', secrets: [] });

    const problem = { in: 'body', path: '/secrets/0/secret', message: 'no secret named "NOPE"' };
    replies.set(`PATCH ${base}`, {
      status: 400,
      body: { code: 400, kind: 'validation', message: problem.message, details: [problem] },
    });
    await assert.rejects(
      sb.setNetwork({ egress: 'internet', secrets: [{ ...rule, secret: 'NOPE' }] }),
      (e: unknown) => {
        assert.ok(e instanceof ValidationError);
        assert.deepEqual(e.details, [problem]);
        return true;
      },
    );
  });
});
