/**
 * Abuse of the HTTP API, black box against the real server (the real runtime under
 * `npm test`). Auth is checked on EVERY operation of the served OpenAPI document, so a new
 * route is covered the day it is added: missing, malformed, unknown and revoked
 * credentials answer 401; another account's key answers 404 for this account's resources
 * (never 403, never its data); a session cookie with a cross-site Origin cannot change
 * anything; admin routes answer 404 to others. Then oversize inputs: each a clear 4xx in
 * the error shape naming what was wrong. Nothing refused may change anything (checked
 * against a snapshot of both accounts, their ledgers and the account list), nothing may
 * answer 5xx, and the server's memory after the floods is printed and loosely bounded.
 */
import { withDockerfile } from '../e2e/builds-support.js';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { refusedUpgrade, TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { ADMIN_KEY, IMAGE, newAccount, RUNTIME, startServer, type Server } from '../e2e/harness.js';
import {
  assertError,
  INSPECTABLE,
  MiB,
  rawRequest,
  settledMemory,
  showMemory,
  type RawAnswer,
} from './abuse-support.js';

/**
 * The routes decisions.md lets anyone call: log in and out, sign up, the first-start link,
 * health, and the kubelet's probes (which reveal nothing: docs/kubernetes.md#probes).
 */
const PUBLIC = new Set([
  'POST /api/v1/auth/login',
  'POST /api/v1/auth/signup',
  'POST /api/v1/auth/logout',
  'GET /api/v1/auth/link',
  'GET /healthz',
  'GET /livez',
  'GET /readyz',
]);
const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
/** The WebSocket upgrade is checked with real upgrades, not plain GETs. */
const WS_OPERATION = 'connectTerminal';
/** WebSocket operations: checked with real upgrades. */
const WS_OPERATIONS = new Set([WS_OPERATION, 'watchFiles']);
/** Query strings operations need to be valid (paths of the files routes). */
const VALID_QUERIES: Record<string, string> = {
  listFiles: '?path=/tmp',
  statFile: '?path=/tmp',
  downloadFile: '?path=/etc/passwd',
  removeFile: '?path=/tmp/abuse-missing',
  uploadFile: '?path=/tmp/abuse-upload',
  makeDirectory: '',
};

/** A body that passes validation, per operation, so that only auth or ownership can refuse it. */
const VALID_BODIES: Record<string, unknown> = {
  createSandbox: { image: IMAGE, timeoutMs: 60_000 },
  updateSandboxTimeout: { timeoutMs: 1000 },
  execCommand: { command: 'echo pwned > /tmp/pwned' },
  createPortLink: {},
  snapshotSandbox: { name: 'abuse-made' },
  forkSandbox: { count: 2 },
  pauseSandbox: { memory: 'disk' },
  createTerminal: {},
  createKey: { name: 'abuse' },
  trackEvent: { event: 'onboarding.started', metadata: { abuse: true } },
  createSecret: { name: 'abuse_made', value: 'abuse-made-value' },
  putSecret: { value: 'abuse-put-value' },
  adminCreateAccount: { email: 'abuse-made@example.com', password: 'password123' },
  adminUpdateAccount: { plan: 'PRO' },
  adminGrantTokens: { tokens: 1_000_000 },
  pullImage: { ref: 'local/busybox:latest' },
  buildImage: { ref: 'local/busybox:latest' },
  login: { email: 'nobody@example.com', password: 'password123' },
  signup: { email: 'abuse-signup@example.com', password: 'password123' },
  // The MCP endpoint (hidden from the document): a JSON-RPC initialize.
  mcp: {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'abuse', version: '1' } },
  },
};

interface Route {
  method: string;
  template: string;
  op: string;
  admin: boolean;
  /** JSON schema of the body, when the operation takes one. */
  bodySchema?: Record<string, unknown>;
}

/** A minimal valid value of a JSON schema (for operations added after this file). */
function exampleOf(schema: any, components: Record<string, any>, depth = 0): unknown {
  if (!schema || depth > 8) return {};
  if (schema.$ref) return exampleOf(components[schema.$ref.split('/').pop()], components, depth + 1);
  if (schema.enum) return schema.enum[0];
  if ('const' in schema) return schema.const;
  if (schema.anyOf) return exampleOf(schema.anyOf[0], components, depth + 1);
  switch (schema.type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const k of schema.required ?? []) out[k] = exampleOf(schema.properties?.[k], components, depth + 1);
      return out;
    }
    case 'array':
      return [];
    case 'integer':
    case 'number':
      return schema.minimum ?? 1;
    case 'boolean':
      return false;
    case 'string':
      return 'x'.repeat(Math.max(1, schema.minLength ?? 1));
    default:
      return {};
  }
}

describe(`API abuse (${RUNTIME})`, { timeout: 300_000 }, () => {
  let s: Server;
  let A: { id: string; key: string; email: string; cookie: string };
  let B: { id: string; key: string; cookie: string };
  let revokedKey = '';
  let loggedOutCookie = '';
  let keyIdA = '';
  let sandboxId = '';
  let terminalId = '';
  let pid = 0;
  /** A sandbox of the code interpreter's image (the code routes need its code server) and a context in it. */
  let codeSandboxId = '';
  let contextId = '';
  const volume = `abuse_${randomBytes(4).toString('hex')}`;
  const snapshotName = `abuse-snap-${randomBytes(4).toString('hex')}`;
  /** A build of account A (FROM busybox, one RUN) and the template it made. */
  let buildId = '';
  const templateName = `abuse-tpl-${randomBytes(4).toString('hex')}`;
  /** A secret of account A, and its value (which no answer to anyone, A included, may contain). */
  const secretName = `abuse_secret_${randomBytes(4).toString('hex')}`;
  const secretValue = `abuse-value-${randomBytes(8).toString('hex')}`;
  const routes: Route[] = [];
  let sent = 0;

  /** Strings of account A that no answer to anyone else may contain. */
  const secretsOfA = () =>
    [
      A.id,
      A.email,
      A.key,
      sandboxId,
      terminalId,
      volume,
      snapshotName,
      keyIdA,
      codeSandboxId,
      contextId,
      buildId,
      templateName,
      secretName,
      secretValue,
    ].filter(Boolean);
  const assertNoLeak = (text: string, what: string) => {
    for (const secret of secretsOfA()) assert.ok(!text.includes(secret), `${what}: the answer leaks ${secret}`);
  };

  const fill = (template: string): string =>
    template.replace(/\{(\w+)\}/g, (_, name: string) => {
      if (name === 'terminalId') return terminalId;
      if (name === 'contextId') return contextId;
      if (name === 'id' && template.startsWith('/api/v1/sandboxes/{id}/code/')) return codeSandboxId;
      if (name === 'pid') return String(pid);
      if (name === 'buildId') return buildId;
      if (name === 'name' && template.startsWith('/api/v1/templates/')) return templateName;
      if (name === 'name' && template.startsWith('/api/v1/snapshots/')) return snapshotName;
      if (name === 'name' && template.startsWith('/api/v1/secrets/')) return secretName;
      if (name === 'name') return volume;
      if (name === 'port') return '8000';
      if (name === 'id' && template.startsWith('/api/v1/sandboxes/')) return sandboxId;
      if (name === 'id' && template.startsWith('/api/v1/keys/')) return keyIdA;
      if (name === 'id' && template.startsWith('/api/v1/admin/accounts/')) return A.id;
      throw new Error(`${template}: teach fill() what to put in {${name}}`);
    });

  /** Sends the operation with a valid body (import: a tar content type) and `headers` as the only credentials. */
  const send = async (r: Route, headers: Record<string, string>): Promise<RawAnswer> => {
    const h = { ...headers };
    let body: string | undefined;
    let path = fill(r.template) + (VALID_QUERIES[r.op] ?? '');
    if (r.op === 'uploadFile' || r.op === 'writeProcessStdin') {
      h['content-type'] = 'application/octet-stream';
      body = 'abuse';
    } else if (r.op === 'importImage') {
      h['content-type'] = 'application/x-tar';
      body = 'not a tar';
      path += '?ref=local/abuse:1';
    } else if (r.bodySchema) {
      h['content-type'] = 'application/json';
      if (r.op === 'mcp') h.accept = 'application/json, text/event-stream';
      body = JSON.stringify(r.op in VALID_BODIES ? VALID_BODIES[r.op] : exampleOf(r.bodySchema, components));
    }
    sent++;
    const a = await rawRequest(s.baseUrl, { method: r.method, path, headers: h, body });
    assert.ok(a.status < 500, `${r.method} ${path}: ${a.status} ${a.text.slice(0, 300)}`);
    return a;
  };

  let components: Record<string, any> = {};
  const wsUrl = (r: Route) =>
    r.op === WS_OPERATION
      ? terminalUrl(s.baseUrl, sandboxId, terminalId)
      : `${s.baseUrl.replace(/^http/, 'ws')}${fill(r.template)}?path=/tmp`;

  const login = async (email: string): Promise<string> => {
    const r = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email, password: 'password123' } });
    assert.equal(r.status, 200, r.text);
    return String(r.headers.get('set-cookie')).split(';')[0];
  };

  /** Everything a refused request could have changed, without the fields that move by themselves. */
  const snapshot = async () => {
    const get = async (path: string, key: string) => {
      const r = await s.api('GET', path, { key });
      assert.equal(r.status, 200, `${path}: ${r.text.slice(0, 200)}`);
      return r.body;
    };
    const all = {
      accounts: await get('/api/v1/admin/accounts', ADMIN_KEY),
      images: await get('/api/v1/images', ADMIN_KEY),
      ...Object.fromEntries(
        await Promise.all(
          [A, B].flatMap((x, i) =>
            [
              ['account', '/api/v1/account'],
              ['ledger', '/api/v1/account/ledger?limit=1000'],
              ['sandboxes', '/api/v1/sandboxes?limit=1000'],
              ['keys', '/api/v1/keys'],
              ['volumes', '/api/v1/volumes'],
              ['snapshots', '/api/v1/snapshots'],
              ['events', '/api/v1/events'],
              ['secrets', '/api/v1/secrets'],
            ].map(async ([name, path]) => [`${'AB'[i]}.${name}`, await get(path, x.key)]),
          ),
        ),
      ),
      terminals: await get(`/api/v1/sandboxes/${sandboxId}/terminals`, A.key),
      terminal: await get(`/api/v1/sandboxes/${sandboxId}/terminals/${terminalId}`, A.key),
    };
    return JSON.parse(JSON.stringify(all, (k, v) => (k === 'lastUsedAt' || k === 'clientCount' ? undefined : v)));
  };

  before(async () => {
    s = await startServer({
      // Every route is tried with each kind of bad credential: more than the default burst of
      // requests without valid credentials per address (rate-limit.test.ts tests that limit).
      env: { SANDBOXD_LOG_LEVEL: 'error', SANDBOXD_RATE_LIMIT_IP_BURST: '10000', ...INSPECTABLE },
    });
    const a = await newAccount(s, { tokens: 100_000 });
    const emailA = (await s.api('GET', '/api/v1/account', { key: a.key })).body.email as string;
    A = { ...a, email: emailA, cookie: await login(emailA) };
    const b = await newAccount(s, { tokens: 1000 });
    B = { ...b, cookie: await login((await s.api('GET', '/api/v1/account', { key: b.key })).body.email) };
    const c = await s.api('POST', '/api/v1/sandboxes', {
      key: A.key,
      body: { image: IMAGE, timeoutMs: 1_800_000, volumes: { '/data': volume } },
    });
    assert.equal(c.status, 201, c.text);
    sandboxId = c.body.sandbox.id;
    const t = await s.api('POST', `/api/v1/sandboxes/${sandboxId}/terminals`, { key: A.key, body: {} });
    assert.equal(t.status, 201, t.text);
    terminalId = t.body.terminal.id;
    const p = await s.api('POST', `/api/v1/sandboxes/${sandboxId}/exec`, {
      key: A.key,
      body: { command: 'sleep 3600', options: { background: true } },
    });
    assert.equal(p.status, 200, p.text);
    pid = p.body.pid;
    const ci = await s.api('POST', '/api/v1/sandboxes', {
      key: A.key,
      body: { image: 'local/code-interpreter', timeoutMs: 1_800_000 },
    });
    assert.equal(ci.status, 201, ci.text);
    codeSandboxId = ci.body.sandbox.id;
    const ctx = await s.api('POST', `/api/v1/sandboxes/${codeSandboxId}/code/contexts`, { key: A.key, body: {} });
    assert.equal(ctx.status, 201, ctx.text);
    contextId = ctx.body.id;
    const snap = await s.api('POST', `/api/v1/sandboxes/${sandboxId}/snapshot`, {
      key: A.key,
      body: { name: snapshotName },
    });
    assert.equal(snap.status, 201, snap.text);
    const built = await fetch(`${s.baseUrl}/api/v1/images/builds?name=${templateName}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${A.key}`, 'content-type': 'application/x-tar' },
      body: new Uint8Array(withDockerfile(`FROM ${IMAGE}\nRUN echo built > /built\n`)),
    });
    assert.equal(built.status, 202, await built.clone().text());
    buildId = ((await built.json()) as { build: { id: string } }).build.id;
    for (let i = 0; i < 600; i++) {
      const b = await s.api('GET', `/api/v1/images/builds/${buildId}`, { key: A.key });
      if (['ready', 'error', 'cancelled'].includes(b.body.build.state)) {
        assert.equal(b.body.build.state, 'ready', b.text);
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const sec = await s.api('POST', '/api/v1/secrets', { key: A.key, body: { name: secretName, value: secretValue } });
    assert.equal(sec.status, 201, sec.text);
    assert.ok(!sec.text.includes(secretValue), 'the create answer carries no value');
    const k = await s.api('POST', '/api/v1/keys', { key: A.key, body: { name: 'to-revoke' } });
    revokedKey = k.body.key;
    assert.equal((await s.api('DELETE', `/api/v1/keys/${k.body.id}`, { key: A.key })).status, 204);
    keyIdA = (await s.api('GET', '/api/v1/keys', { key: A.key })).body.keys[0].id;
    loggedOutCookie = await login(emailA);
    assert.equal(
      (
        await s.api('POST', '/api/v1/auth/logout', {
          key: null,
          headers: { cookie: loggedOutCookie, origin: s.baseUrl },
        })
      ).status,
      204,
    );

    const doc = (await s.api('GET', '/api/v1/openapi.json', { key: null })).body;
    components = doc.components.schemas;
    for (const [template, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(ops)) {
        routes.push({
          method: method.toUpperCase(),
          template,
          op: op.operationId,
          admin: (op.tags ?? []).includes('admin') || (op.tags ?? []).includes('images'),
          bodySchema: op.requestBody?.content?.['application/json']?.schema,
        });
      }
    }
    // Routes hidden from the document that need credentials like the rest: the MCP endpoint
    // (docs/mcp.md; its GET and DELETE answer 405 to the owner, so only POST is listed here).
    routes.push({ method: 'POST', template: '/mcp', op: 'mcp', admin: false, bodySchema: { type: 'object' } });
  });
  after(() => s?.stop());

  it('the document lists every route, and the public ones are exactly those decisions.md names', () => {
    assert.ok(routes.length >= 30, `only ${routes.length} operations in the document`);
    const listed = new Set(routes.map((r) => `${r.method} ${r.template}`));
    for (const p of PUBLIC) assert.ok(listed.has(p), `${p} is public but not in the document`);
    assert.ok(
      routes.some((r) => r.op === WS_OPERATION),
      'the terminal WebSocket is documented',
    );
    console.log(
      `# ${routes.length} operations, ${routes.filter((r) => !PUBLIC.has(`${r.method} ${r.template}`)).length} need credentials`,
    );
  });

  it('positive controls: the owner reaches every resource route and the admin every admin route (so the refusals below mean something)', async () => {
    for (const r of routes.filter(
      (x) => x.method === 'GET' && !PUBLIC.has(`${x.method} ${x.template}`) && !WS_OPERATIONS.has(x.op),
    )) {
      const a = await send(r, { authorization: `Bearer ${r.admin ? ADMIN_KEY : A.key}` });
      assert.equal(a.status, 200, `${r.method} ${r.template}: ${a.text.slice(0, 200)}`);
    }
    const viaCookie = await s.api('POST', '/api/v1/events/track', {
      key: null,
      body: VALID_BODIES.trackEvent,
      headers: { cookie: A.cookie, origin: s.baseUrl },
    });
    assert.equal(viaCookie.status, 200, 'a same-origin cookie request may change state');
    const ws = await TermClient.connect(terminalUrl(s.baseUrl, sandboxId, terminalId), {
      cookie: A.cookie,
      origin: s.baseUrl,
    });
    await ws.control('ready');
    ws.close();
    await ws.closed;
  });

  it('every route but the public ones refuses missing, malformed, unknown and revoked credentials with 401, and changes nothing', async () => {
    const before = await snapshot();
    const flipped = A.key.slice(0, -1) + (A.key.endsWith('a') ? 'b' : 'a');
    const BAD: Array<[string, Record<string, string>]> = [
      ['no credentials', {}],
      ['"Bearer" alone', { authorization: 'Bearer' }],
      ['Basic auth', { authorization: `Basic ${Buffer.from(`${A.email}:password123`).toString('base64')}` }],
      ['a bearer that is no key', { authorization: 'Bearer not-a-key' }],
      ['two tokens after Bearer', { authorization: `Bearer ${A.key} ${A.key}` }],
      ['a junk bearer beside a valid X-API-Key (no fallback)', { authorization: 'Bearer junk', 'x-api-key': A.key }],
      ['X-API-Key "sk_"', { 'x-api-key': 'sk_' }],
      ['an unknown key', { authorization: `Bearer sk_${randomBytes(30).toString('base64url').slice(0, 40)}` }],
      ['an unknown key in X-API-Key', { 'x-api-key': `sk_${randomBytes(30).toString('base64url').slice(0, 40)}` }],
      ['the owner key with its last character changed', { authorization: `Bearer ${flipped}` }],
      ['a key of 10 KB', { authorization: `Bearer sk_${'a'.repeat(10_000)}` }],
      ['a revoked key', { authorization: `Bearer ${revokedKey}` }],
      ['a revoked key in X-API-Key', { 'x-api-key': revokedKey }],
      ['a bogus session cookie', { cookie: 'sandboxd_session=bogus', origin: s.baseUrl }],
      ['a logged-out session cookie', { cookie: loggedOutCookie, origin: s.baseUrl }],
    ];
    let checked = 0;
    for (const r of routes) {
      if (PUBLIC.has(`${r.method} ${r.template}`)) continue;
      for (const [what, headers] of BAD) {
        if (WS_OPERATIONS.has(r.op)) {
          const u = await refusedUpgrade(wsUrl(r), headers);
          sent++;
          assert.equal(u.status, 401, `upgrade with ${what}: ${JSON.stringify(u.body)}`);
          assertNoLeak(JSON.stringify(u.body), `upgrade with ${what}`);
        } else {
          const a = await send(r, headers);
          assertError(a, 401, undefined, `${r.method} ${r.template} with ${what}`);
          assertNoLeak(a.text, `${r.method} ${r.template} with ${what}`);
        }
        checked++;
      }
    }
    console.log(`# ${checked} credential refusals checked`);
    assert.deepEqual(await snapshot(), before, 'a refused request changed something');
  });

  it("another account's key or session gets 404 for this account's resources (never 403, never its data); admin routes 404 to non-admins", async () => {
    const before = await snapshot();
    let checked = 0;
    for (const r of routes) {
      if (PUBLIC.has(`${r.method} ${r.template}`)) continue;
      const owned = r.template.includes('{');
      if (r.op === 'putSecret') {
        // Names are the account's own: B's PUT of A's secret's name makes B's own secret
        // (201), leaving A's as it was; B's is removed again.
        const a = await send(r, { authorization: `Bearer ${B.key}` });
        assert.equal(a.status, 201, a.text);
        assert.equal(a.body.secret.version, 1);
        assertNoLeak(a.text.replace(secretName, ''), 'PUT of the name as B');
        const del = await s.api('DELETE', `/api/v1/secrets/${secretName}`, { key: B.key });
        assert.equal(del.status, 204);
        checked++;
        continue;
      }
      if (!owned && !r.admin) {
        if (r.method !== 'GET') continue; // B acting on its own things: not this test's business
        const a = await send(r, { authorization: `Bearer ${B.key}` });
        assert.equal(a.status, 200, `${r.template} for B`);
        assertNoLeak(a.text, `${r.method} ${r.template} as B`);
        checked++;
        continue;
      }
      const who: Array<[string, Record<string, string>]> = r.admin
        ? [
            ['A key (not admin)', { authorization: `Bearer ${A.key}` }],
            ['A session (not admin)', { cookie: A.cookie, origin: s.baseUrl }],
            ['B key', { authorization: `Bearer ${B.key}` }],
          ]
        : [
            ['B key', { authorization: `Bearer ${B.key}` }],
            ['B key in X-API-Key', { 'x-api-key': B.key }],
            ['B session', { cookie: B.cookie, origin: s.baseUrl }],
          ];
      for (const [what, headers] of who) {
        if (WS_OPERATIONS.has(r.op)) {
          const u = await refusedUpgrade(wsUrl(r), headers);
          sent++;
          assert.equal(u.status, 404, `upgrade with ${what}`);
          assertNoLeak(JSON.stringify(u.body), `upgrade with ${what}`);
        } else {
          const a = await send(r, headers);
          assertError(a, 404, undefined, `${r.method} ${r.template} with ${what}`);
          assertNoLeak(a.text, `${r.method} ${r.template} with ${what}`);
        }
        checked++;
      }
    }
    console.log(`# ${checked} cross-account and non-admin requests checked`);
    assert.deepEqual(await snapshot(), before, "another account's request changed something");
  });

  it('a session cookie cannot change state without a same-origin Origin (CSRF), nor open the terminal WebSocket; reads expose nothing cross-origin', async () => {
    const before = await snapshot();
    const origins: Array<[string, Record<string, string>]> = [
      ['no Origin', {}],
      ['a cross-site Origin', { origin: 'https://evil.example' }],
      ['Origin "null"', { origin: 'null' }],
      ['a look-alike host', { origin: `http://127.0.0.1:${s.port}.evil.example` }],
      ['another port', { origin: `http://127.0.0.1:${s.port === 1 ? 2 : s.port - 1}` }],
      ['another scheme-less value', { origin: `127.0.0.1:${s.port}` }],
    ];
    let checked = 0;
    for (const r of routes) {
      // Logout is public but acts on the cookie: it is a state change by cookie like the rest.
      if (PUBLIC.has(`${r.method} ${r.template}`) && r.op !== 'logout') continue;
      for (const [what, extra] of origins) {
        const headers = { cookie: A.cookie, ...extra };
        if (WS_OPERATIONS.has(r.op)) {
          const u = await refusedUpgrade(wsUrl(r), headers);
          sent++;
          assert.equal(u.status, 401, `upgrade with the cookie and ${what}`);
        } else if (UNSAFE.has(r.method)) {
          assertError(
            await send(r, headers),
            401,
            /same-origin Origin/,
            `${r.method} ${r.template} with the cookie and ${what}`,
          );
        } else {
          const a = await send(r, headers);
          assert.ok(a.status === 200 || a.status === 404, `${r.method} ${r.template}: ${a.status}`); // admin routes: A is no admin
          assert.equal(
            a.headers['access-control-allow-origin'],
            undefined,
            'no CORS grant: a cross-site page cannot read it',
          );
          assert.equal(a.headers['access-control-allow-credentials'], undefined);
        }
        checked++;
      }
    }
    console.log(`# ${checked} cookie requests with a foreign Origin checked`);
    assert.deepEqual(await snapshot(), before, 'a cross-site cookie request changed something');
  });

  it('public routes answer without credentials but never 5xx; hidden ones are only health, metrics, the document and the console', async () => {
    for (const r of routes.filter((x) => PUBLIC.has(`${x.method} ${x.template}`))) {
      const a = await rawRequest(s.baseUrl, { method: r.method, path: r.template, headers: {} });
      sent++;
      assert.ok(a.status < 500 && a.status !== 404, `${r.method} ${r.template}: ${a.status}`);
    }
    for (const p of ['/metrics', '/api/v1/openapi.json', '/'])
      assert.equal((await rawRequest(s.baseUrl, { path: p })).status, 200, p);
    const m = await rawRequest(s.baseUrl, { path: '/metrics' });
    assertNoLeak(m.text, '/metrics');
  });

  it('oversize and malformed inputs: each a clear 4xx naming the problem, nothing created or charged, no 5xx', async () => {
    const before = await snapshot();
    const key = { authorization: `Bearer ${A.key}` };
    const json = { ...key, 'content-type': 'application/json' };
    const exec = `/api/v1/sandboxes/${sandboxId}/exec`;
    let deepArray = '1';
    for (let i = 0; i < 100_000; i++) deepArray = `[${deepArray}]`;
    const deepObject = `${'{"a":'.repeat(50_000)}1${'}'.repeat(50_000)}`;
    const manyKeys = (n: number, v: (i: number) => unknown) =>
      Object.fromEntries(Array.from({ length: n }, (_, i) => [`K${i}`, v(i)]));
    const cases: Array<{
      what: string;
      method?: string;
      path: string;
      headers?: Record<string, string>;
      body?: string | object | Buffer;
      status: number;
      names?: RegExp;
    }> = [
      {
        what: 'env of 10 MB',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: { image: IMAGE, env: { BIG: 'x'.repeat(10 * 2 ** 20) } },
        status: 413,
        names: /larger than 1 MiB/,
      },
      {
        what: 'command of 10 MB',
        method: 'POST',
        path: exec,
        body: { command: 'x'.repeat(10 * 2 ** 20) },
        status: 413,
        names: /larger than 1 MiB/,
      },
      {
        what: '10,000 volumes',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: {
          image: IMAGE,
          volumes: Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`/v${i}`, `v${i}`])),
        },
        status: 400,
        names: /\/volumes.*16/,
      },
      {
        what: '10,000 env keys',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: { image: IMAGE, env: manyKeys(10_000, () => '1') },
        status: 400,
        names: /\/env.*256/,
      },
      {
        what: 'an env entry of 200 KB (under the body limit)',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: { image: IMAGE, env: { BIG: 'x'.repeat(200_000) } },
        status: 400,
        names: /\/env\/BIG/,
      },
      {
        what: 'an env entry of 70,000 two-byte characters (140 KB)',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: { image: IMAGE, env: { BIG: 'é'.repeat(70_000) } },
        status: 400,
        names: /\/env\/BIG.*140\d{3} bytes/,
      },
      {
        what: '256 env entries of 3.9 KB (a legal 1 MiB env) with one too many',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: { image: IMAGE, env: manyKeys(257, () => 'y'.repeat(3900)) },
        status: 400,
        names: /\/env/,
      },
      {
        what: 'a command of 200 KB',
        method: 'POST',
        path: exec,
        body: { command: 'x'.repeat(200_000) },
        status: 400,
        names: /\/command/,
      },
      {
        what: 'a command of 70,000 two-byte characters',
        method: 'POST',
        path: exec,
        body: { command: `echo ${'é'.repeat(70_000)}` },
        status: 400,
        names: /\/command.*bytes/,
      },
      {
        what: 'an exec env entry of 200 KB',
        method: 'POST',
        path: exec,
        body: { command: 'true', options: { env: { BIG: 'x'.repeat(200_000) } } },
        status: 400,
        names: /\/options\/env\/BIG/,
      },
      {
        what: 'a background exec with an env entry of 140 KB',
        method: 'POST',
        path: exec,
        body: { command: 'true', options: { background: true, env: { BIG: 'é'.repeat(70_000) } } },
        status: 400,
        names: /\/options\/env\/BIG/,
      },
      {
        what: 'a terminal cwd of 100 KB',
        method: 'POST',
        path: `/api/v1/sandboxes/${sandboxId}/terminals`,
        body: { cwd: `/${'d'.repeat(100_000)}` },
        status: 400,
        names: /\/cwd/,
      },
      {
        what: 'a volume mount path of 10 KB',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: { image: IMAGE, volumes: { [`/${'m'.repeat(10_000)}`]: 'v' } },
        status: 400,
        names: /\/volumes/,
      },
      {
        what: 'an image reference of 900 KB',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: { image: 'i'.repeat(900_000) },
        status: 400,
        names: /\/image/,
      },
      {
        what: 'event metadata nested 100,000 deep',
        method: 'POST',
        path: '/api/v1/events/track',
        body: `{"event":"onboarding.started","metadata":{"a":${deepArray}}}`,
        status: 400,
        names: /metadata.*deeper/,
      },
      {
        what: 'event metadata of objects nested 50,000 deep',
        method: 'POST',
        path: '/api/v1/events/track',
        body: `{"event":"onboarding.started","metadata":${deepObject}}`,
        status: 400,
        names: /metadata.*deeper/,
      },
      {
        what: 'event metadata of 900 KB',
        method: 'POST',
        path: '/api/v1/events/track',
        body: { event: 'onboarding.started', metadata: { a: 'm'.repeat(900_000) } },
        status: 400,
        names: /metadata.*bytes/,
      },
      {
        what: 'a create body nested 100,000 deep',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: `{"image":"x","env":{"A":${deepArray}}}`,
        status: 400,
        names: /\/env\/A/,
      },
      {
        what: 'a body that is a 100,000-deep array',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: deepArray,
        status: 400,
        names: /object/,
      },
      {
        what: 'an unknown field named by 100 KB',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: { image: IMAGE, ['f'.repeat(100_000)]: 1 },
        status: 400,
        names: /more characters/,
      },
      {
        what: '60,000 unknown fields',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: { image: IMAGE, ...Object.fromEntries(Array.from({ length: 60_000 }, (_, i) => [`k${i}`, 1])) },
        status: 400,
        names: /\/k0.*not an allowed field/,
      },
      {
        what: '900 KB of whitespace before {}',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: `${' '.repeat(900_000)}{}`,
        status: 400,
        names: /\/image.*required/,
      },
      {
        what: 'a 500,000-digit timeoutMs',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: `{"image":"${IMAGE}","timeoutMs":${'9'.repeat(500_000)}}`,
        status: 400,
        names: /\/timeoutMs/,
      },
      {
        what: 'a __proto__ key',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: `{"image":"${IMAGE}","__proto__":{"admin":true}}`,
        status: 400,
        names: /Malformed JSON|__proto__/,
      },
      {
        what: 'a truncated body',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: `{"image":"${IMAGE}","env":{"A":"`,
        status: 400,
        names: /Malformed JSON/,
      },
      {
        what: 'a body that is not UTF-8',
        method: 'POST',
        path: '/api/v1/sandboxes',
        body: Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]),
        status: 400,
      },
      { what: 'a URL of 20 KB', path: `/api/v1/sandboxes/${'u'.repeat(20_000)}`, status: 431, names: /16 KiB/ },
      {
        what: 'a header of 20 KB',
        path: '/api/v1/account',
        headers: { 'x-junk': 'j'.repeat(20_000) },
        status: 431,
        names: /16 KiB/,
      },
      { what: 'a path parameter of 10 KB', path: `/api/v1/sandboxes/${'p'.repeat(10_000)}`, status: 404 },
      {
        what: 'a session cookie of 15 KB',
        path: '/api/v1/account',
        headers: { cookie: `sandboxd_session=${'c'.repeat(15_000)}` },
        status: 401,
      },
      {
        what: '1,000 unknown query parameters',
        path: `/api/v1/sandboxes?${Array.from({ length: 1000 }, (_, i) => `q${i}=1`).join('&')}`,
        status: 400,
        names: /\/q0.*not an allowed field/,
      },
      {
        what: 'a cursor of 10 KB',
        path: `/api/v1/sandboxes?cursor=${'c'.repeat(10_000)}`,
        status: 400,
        names: /\/cursor/,
      },
      {
        what: 'limit given 1,000 times',
        path: `/api/v1/sandboxes?${'limit=1&'.repeat(1000)}`,
        status: 400,
        names: /\/limit/,
      },
      { what: 'limit=1e400', path: '/api/v1/sandboxes?limit=1e400', status: 400, names: /\/limit/ },
      {
        what: 'a query of 15 KB of percent-escapes',
        path: `/api/v1/sandboxes?state=${'%FF'.repeat(4000)}`,
        status: 400,
        names: /\/state/,
      },
    ];
    for (const c of cases) {
      const body =
        c.body === undefined || typeof c.body === 'string' || Buffer.isBuffer(c.body) ? c.body : JSON.stringify(c.body);
      const headers = { ...(c.headers?.cookie ? {} : body === undefined ? key : json), ...(c.headers ?? {}) };
      const a = await rawRequest(s.baseUrl, { method: c.method ?? 'GET', path: c.path, headers, body }).catch(
        (e: Error) => {
          throw new Error(`${c.what}: ${e.message}`);
        },
      );
      sent++;
      assertError(a, c.status, c.names, c.what);
      assert.ok(a.text.length < 8192, `${c.what}: the answer stays small (${a.text.length} bytes)`);
      assertNoLeak(a.text.replace(new RegExp(sandboxId, 'g'), ''), c.what);
    }
    const many = await rawRequest(s.baseUrl, {
      path: '/api/v1/account',
      headers: { ...key, ...Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`x-h${i}`, 'v'])) },
    });
    assert.equal(many.status, 200, '500 small headers are fine');
    assert.deepEqual(await snapshot(), before, 'an oversize request created or charged something');
  });

  it('floods of oversize requests leave the server up and its memory bounded', async () => {
    const key = { authorization: `Bearer ${A.key}` };
    const json = { ...key, 'content-type': 'application/json' };
    const exec = `/api/v1/sandboxes/${sandboxId}/exec`;
    let deep = '1';
    for (let i = 0; i < 100_000; i++) deep = `[${deep}]`;
    const bodies = {
      big: JSON.stringify({ image: IMAGE, env: { BIG: 'x'.repeat(10 * 2 ** 20) } }),
      envKeys: JSON.stringify({
        image: IMAGE,
        env: Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`K${i}`, 'v'])),
      }),
      deep: `{"event":"onboarding.started","metadata":{"a":${deep}}}`,
      wide: JSON.stringify({
        image: IMAGE,
        ...Object.fromEntries(Array.from({ length: 60_000 }, (_, i) => [`k${i}`, 1])),
      }),
      command: JSON.stringify({ command: 'é'.repeat(100_000) }),
    };
    const SOAK = process.env.SANDBOXD_SOAK === '1';
    const rounds = SOAK ? 200 : 8;
    const memBefore = await settledMemory(s.baseUrl, s);
    const t0 = Date.now();
    let n = 0;
    const statuses = new Map<number, number>();
    const one = async (method: string, path: string, headers: Record<string, string>, body?: string) => {
      const a = await rawRequest(s.baseUrl, { method, path, headers, body });
      n++;
      statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
      assert.ok(a.status >= 400 && a.status < 500, `${path}: ${a.status} ${a.text.slice(0, 200)}`);
    };
    for (let i = 0; i < rounds; i++) {
      await Promise.all([
        one('POST', '/api/v1/sandboxes', json, bodies.big),
        one('POST', '/api/v1/sandboxes', json, bodies.envKeys),
        one('POST', '/api/v1/events/track', json, bodies.deep),
        one('POST', '/api/v1/sandboxes', json, bodies.wide),
        one('POST', exec, json, bodies.command),
        ...Array.from({ length: 10 }, () => one('GET', `/api/v1/sandboxes/${'u'.repeat(20_000)}`, key)),
      ]);
    }
    const floodMs = Date.now() - t0;
    const memAfter = await settledMemory(s.baseUrl, s);
    sent += n;
    console.log(
      `# flood: ${n} oversize requests (${[...statuses].map(([k, v]) => `${v} x ${k}`).join(', ')}) in ${floodMs} ms`,
    );
    console.log(`# server memory before: ${showMemory(memBefore)}; after: ${showMemory(memAfter)}`);
    console.log(`# requests sent by this suite: ${sent}`);
    assert.equal(s.proc.exitCode, null, 'the server is still running');
    assert.equal((await s.api('GET', '/healthz', { key: null })).status, 200);
    assert.equal((await s.api('GET', `/api/v1/sandboxes/${sandboxId}`, { key: A.key })).body.sandbox.state, 'started');
    // After a full GC what the floods left is small; RSS only loosely (V8 and malloc keep freed pages).
    assert.ok(
      memAfter.heapUsed - memBefore.heapUsed < 32 * 2 ** 20,
      `JS heap grew by ${MiB(memAfter.heapUsed - memBefore.heapUsed)}`,
    );
    assert.ok(
      memAfter.external - memBefore.external < 32 * 2 ** 20,
      `external memory grew by ${MiB(memAfter.external - memBefore.external)}`,
    );
    assert.ok(memAfter.rss - memBefore.rss < 256 * 2 ** 20, `RSS grew by ${MiB(memAfter.rss - memBefore.rss)}`);
  });
});
