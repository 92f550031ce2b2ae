/**
 * `/mcp` on the fake driver (fast; test/e2e/mcp.test.ts drives the real runtime): the MCP
 * SDK's own client over streamable HTTP to the app listening on loopback, the tools acting
 * as the caller through the app in-process, failures as tool errors, and the endpoint's
 * refusals in the error shape.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { makeTestApp, type TestApp } from '../../../test/app.js';
import { SANDBOX_ID_RE } from '@sandboxd/mcp';
import { SANDBOX_ID_PATTERN } from '@sandboxd/protocol';
import { DEFAULT_RATE_LIMITS } from '../../config-plans.js';
import { MCP_MAX_BODY_BYTES, MCP_PATH } from './mcp.js';

const text = (r: CallToolResult) =>
  r.content
    .filter((c) => c.type === 'text')
    .map((c) => (c as { text: string }).text)
    .join('\n');

describe('MCP endpoint (fake driver)', () => {
  let t: TestApp;
  let base: string;
  let A: { id: string; key: string };
  let B: { id: string; key: string };
  const clients: Client[] = [];
  const connect = async (key: string) => {
    const c = new Client({ name: 'unit', version: '1' });
    await c.connect(
      new StreamableHTTPClientTransport(new URL(`${base}${MCP_PATH}`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
    clients.push(c);
    return c;
  };
  const call = async (c: Client, name: string, args: Record<string, unknown>) =>
    (await c.callTool({ name, arguments: args })) as CallToolResult;
  const initialize = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
  });
  const post = (headers: Record<string, string>, payload = initialize) =>
    t.req({
      method: 'POST',
      url: MCP_PATH,
      key: null,
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      payload,
    });

  before(async () => {
    t = await makeTestApp();
    await t.app.http.listen({ host: '127.0.0.1', port: 0 });
    const a = t.app.http.server.address() as { port: number };
    base = `http://127.0.0.1:${a.port}`;
    A = await t.newAccount({ tokens: 100_000 });
    B = await t.newAccount({ tokens: 100_000 });
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await t.close();
  });

  it('lists the tools and runs them as the caller: create (marked), run_command, list, resources, delete', async () => {
    const c = await connect(A.key);
    const { tools } = await c.listTools();
    assert.equal(tools.length, 11);
    for (const tool of tools) assert.ok((tool.description ?? '').length > 80, tool.name);
    const made = await call(c, 'create_sandbox', { image: 'local/busybox:latest' });
    assert.ok(!made.isError, text(made));
    const sb = (made.structuredContent as { sandbox: { id: string; metadata: Record<string, string> } }).sandbox;
    assert.deepEqual(sb.metadata, { createdBy: 'mcp' });
    const rec = await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb.id}`, key: A.key });
    assert.equal(rec.statusCode, 200, 'made in the caller account');
    const r = await call(c, 'run_command', { sandbox_id: sb.id, command: 'echo hi' });
    assert.equal((r.structuredContent as { stdout: string }).stdout, 'hi\n');
    const { resources } = await c.listResources();
    assert.deepEqual(
      resources.map((x) => x.uri),
      [`sandbox://${sb.id}`],
    );
    const other = await connect(B.key);
    const refused = await call(other, 'run_command', { sandbox_id: sb.id, command: 'echo hi' });
    assert.equal(refused.isError, true);
    assert.equal((refused.structuredContent as { error: { kind: string } }).error.kind, 'not_found');
    assert.deepEqual((await other.listResources()).resources, []);
    const g = await call(c, 'create_sandbox', { image: 'local/busybox:latest', isolation: 'gvisor' });
    assert.ok(!g.isError, text(g));
    const gsb = (g.structuredContent as { sandbox: { id: string; isolation: string } }).sandbox;
    assert.equal(gsb.isolation, 'gvisor', 'create_sandbox takes the tier');
    await call(c, 'delete_sandbox', { sandbox_id: gsb.id });
    const d = await call(c, 'delete_sandbox', { sandbox_id: sb.id });
    assert.ok(!d.isError, text(d));
    const gone = await call(c, 'delete_sandbox', { sandbox_id: sb.id });
    assert.match(text(gone), /^Error \(not_found, HTTP 404\)/);
  });

  it('refuses without a bearer key (401 in the error shape), answers 405 to GET and DELETE, 403 cross-origin, 413 past the bound', async () => {
    const bad: Array<Record<string, string>> = [{}, { authorization: 'Bearer sk_nope' }, { 'x-api-key': A.key }];
    for (const headers of bad) {
      const r = await post(headers);
      assert.equal(r.statusCode, 401, JSON.stringify(headers));
      assert.equal(r.json().kind, 'unauthorized');
      assert.equal(r.json().code, 401);
    }
    const ok = await post({ authorization: `Bearer ${A.key}` });
    assert.equal(ok.statusCode, 200);
    assert.match(ok.body, /"serverInfo":\{"name":"sandboxd"/);
    for (const method of ['GET', 'DELETE'] as const) {
      const r = await t.req({ method, url: MCP_PATH, key: A.key });
      assert.equal(r.statusCode, 405);
      assert.equal(r.headers.allow, 'POST');
    }
    const cross = await post({ authorization: `Bearer ${A.key}`, origin: 'https://evil.example' });
    assert.equal(cross.statusCode, 403);
    assert.equal(cross.json().code, 403);
    const big = await post({ authorization: `Bearer ${A.key}` }, `{"pad":"${'x'.repeat(MCP_MAX_BODY_BYTES)}"}`);
    assert.equal(big.statusCode, 413);
    assert.equal(big.json().kind, 'payload_too_large');
    const noRpc = await post({ authorization: `Bearer ${A.key}` }, '{"hello":"world"}');
    assert.equal(noRpc.statusCode, 400);
    assert.equal(noRpc.json().kind, 'validation');
    assert.equal(typeof noRpc.json().details.jsonrpc.code, 'number');
  });
});

describe('MCP endpoint: tool arguments never steer the inner API URL (fake driver)', () => {
  let t: TestApp;
  let base: string;
  let A: { id: string; key: string };
  const clients: Client[] = [];
  before(async () => {
    t = await makeTestApp();
    await t.app.http.listen({ host: '127.0.0.1', port: 0 });
    base = `http://127.0.0.1:${(t.app.http.server.address() as { port: number }).port}`;
    A = await t.newAccount({ tokens: 100_000 });
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await t.close();
  });

  it('refuses sandbox ids that are not ids (dot segments, slashes, encodings) before any inner call', async () => {
    const c = new Client({ name: 'unit', version: '1' });
    await c.connect(
      new StreamableHTTPClientTransport(new URL(`${base}${MCP_PATH}`), {
        requestInit: { headers: { authorization: `Bearer ${A.key}` } },
      }),
    );
    clients.push(c);
    for (const id of ['.', '..', '../admin', '%2e%2e', 'sbx_aaaaaaaaaaaaaaaaaaaa/../x', 'a?b', 'a#b', 'a\r\nX: y']) {
      for (const [name, args] of [
        ['get_port_url', { port: 80 }],
        ['delete_sandbox', {}],
        ['run_command', { command: 'true' }],
        ['list_directory', {}],
      ] as const) {
        const r = (await c.callTool({ name, arguments: { sandbox_id: id, ...args } })) as CallToolResult;
        assert.equal(r.isError, true, `${name} ${JSON.stringify(id)}: ${text(r)}`);
        assert.match(text(r), /sandbox_id/, `${name} ${JSON.stringify(id)}: ${text(r)}`);
      }
    }
    assert.equal(SANDBOX_ID_RE.source, SANDBOX_ID_PATTERN, "the tools' id shape is the API's");
    // A resource URI's id is a URL segment too: "%2e" decoded to "." read the sandbox list.
    for (const uri of ['sandbox://%2e', 'sandbox://%2E%2E', 'sandbox://..', 'sandbox://%zz', 'sandbox://x%2fy']) {
      await assert.rejects(c.readResource({ uri }), (e: Error & { code?: number }) => {
        assert.equal(e.code, -32002, `${uri}: ${e.message}`);
        assert.doesNotMatch(e.message, /Cannot read|undefined|URI malformed/, uri);
        return true;
      });
    }
  });
});

describe('MCP endpoint: the Host header is not part of any URL (fake driver, on loopback)', () => {
  let t: TestApp;
  let port: number;
  let A: { id: string; key: string };
  before(async () => {
    t = await makeTestApp();
    await t.app.http.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.http.server.address() as { port: number }).port;
    A = await t.newAccount({ tokens: 100_000 });
  });
  after(() => t.close());

  /** One raw HTTP/1.1 POST of a list_sandboxes call with `Host: host`: status line and body. */
  const raw = (host: string) =>
    new Promise<{ status: string; head: string; body: string }>((resolve, reject) => {
      const body = JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'list_sandboxes', arguments: {} },
      });
      const s = connect(port, '127.0.0.1', () => {
        s.write(
          `POST ${MCP_PATH} HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${A.key}\r\n` +
            'Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n' +
            `Mcp-Protocol-Version: 2025-06-18\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        );
      });
      let got = '';
      s.setEncoding('utf8');
      s.on('data', (d: string) => {
        got += d;
      });
      s.on('error', reject);
      s.on('close', () =>
        resolve({
          status: got.split('\r\n')[0],
          head: got.slice(0, got.indexOf('\r\n\r\n')),
          body: got.slice(got.indexOf('\r\n\r\n') + 4),
        }),
      );
    });

  it('a Host with a path, or no valid host at all, neither moves the inner calls nor fails the request', async () => {
    for (const host of ['x/api/v1/admin/accounts?', 'x/y', 'a b', '[::1', 'a:99999', '']) {
      const r = await raw(host);
      assert.match(r.status, /^HTTP\/1\.1 200 /, `${JSON.stringify(host)}: ${r.status} ${r.body.slice(0, 200)}`);
      assert.match(r.body, /No sandboxes\./, `${JSON.stringify(host)}: ${r.body.slice(0, 300)}`);
    }
  });

  it("a client that asks to close the connection gets it closed (the transport's keep-alive is not relayed)", async () => {
    const r = await raw('localhost');
    assert.match(r.head, /\r\nconnection: close\r\n/i, r.head);
    assert.doesNotMatch(r.head, /keep-alive/i, r.head);
  });
});

describe('MCP endpoint: the inner calls are the caller, rate limits included (fake driver)', () => {
  let t: TestApp;
  let A: { id: string; key: string };
  let B: { id: string; key: string };
  let now = Date.UTC(2030, 0, 1);
  before(async () => {
    // A tiny account limit: 12 requests a window, the window ends only when the test says.
    t = await makeTestApp(
      { rateLimit: { ...DEFAULT_RATE_LIMITS, accountPerSec: 1, accountBurst: 12 } },
      { rateLimitNow: () => now },
    );
    A = await t.newAccount({ tokens: 100_000 });
    B = await t.newAccount({ tokens: 100_000 });
    now += 1e9; // newAccount's own requests were the admin's; a fresh window for everyone
  });
  after(() => t.close());

  const batch = (key: string, calls: Array<[string, Record<string, unknown>]>, headers: Record<string, string> = {}) =>
    t.req({
      method: 'POST',
      url: MCP_PATH,
      key: null,
      headers: {
        authorization: `Bearer ${key}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2025-06-18',
        ...headers,
      },
      payload: JSON.stringify(
        calls.map(([name, args], i) => ({
          jsonrpc: '2.0',
          id: i + 1,
          method: 'tools/call',
          params: { name, arguments: args },
        })),
      ),
    });
  const results = (body: string) =>
    body
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => JSON.parse(l.slice(6)) as { id: number; result: CallToolResult })
      .sort((a, b) => a.id - b.id)
      .map((m) => m.result);

  it('a batch of 40 tool calls is charged call by call to the account: past the limit they are rate_limited tool errors', async () => {
    const r = await batch(
      A.key,
      Array.from({ length: 40 }, () => ['list_sandboxes', {}] as [string, Record<string, unknown>]),
    );
    assert.equal(r.statusCode, 200, r.body.slice(0, 300));
    const out = results(r.body);
    assert.equal(out.length, 40);
    const limited = out.filter(
      (x) => (x.structuredContent as { error?: { kind: string } })?.error?.kind === 'rate_limited',
    );
    // 12 a window: the POST itself took one, so at most 11 inner calls passed.
    assert.ok(out.length - limited.length <= 11, `${out.length - limited.length} inner calls passed`);
    assert.ok(limited.length >= 29);
    const again = await batch(A.key, [['list_sandboxes', {}]]);
    assert.equal(again.statusCode, 429, 'the endpoint itself is limited once the window is spent');
    now += 1e9;
  });

  it('a browser gets nothing: no CORS answer to a preflight or a request, Origin null or another port is 403', async () => {
    const pre = await t.req({
      method: 'OPTIONS',
      url: MCP_PATH,
      key: null,
      headers: {
        origin: 'https://evil.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type',
      },
    });
    assert.notEqual(pre.statusCode, 204);
    assert.ok(pre.statusCode >= 400, String(pre.statusCode));
    for (const r of [pre, await batch(A.key, [['list_sandboxes', {}]], { origin: 'https://evil.example' })])
      for (const h of Object.keys(r.headers)) assert.ok(!h.startsWith('access-control-'), `${h} on ${r.statusCode}`);
    for (const origin of ['null', 'http://localhost:1', 'http://localhost.evil.example']) {
      const r = await batch(A.key, [['list_sandboxes', {}]], { origin });
      assert.equal(r.statusCode, 403, origin);
      assert.equal(r.json().kind, 'permission');
    }
    now += 1e9;
  });

  it('a revoked key is refused (401), as on every route', async () => {
    const made = await t.req({ method: 'POST', url: '/api/v1/keys', key: A.key, payload: { name: 'soon revoked' } });
    assert.equal(made.statusCode, 201, made.body);
    const { id, key } = made.json() as { id: string; key: string };
    assert.equal((await batch(key, [['list_sandboxes', {}]])).statusCode, 200);
    assert.equal((await t.req({ method: 'DELETE', url: `/api/v1/keys/${id}`, key: A.key })).statusCode, 204);
    const r = await batch(key, [['list_sandboxes', {}]]);
    assert.equal(r.statusCode, 401);
    assert.equal(r.json().kind, 'unauthorized');
    now += 1e9;
  });

  it('tools act with the bearer key only: another key in X-API-Key, a cookie or forwarding headers change nothing', async () => {
    const r = await batch(A.key, [['create_sandbox', { image: 'local/busybox:latest' }]], {
      'x-api-key': B.key,
      cookie: 'sandboxd_session=forged',
      'x-forwarded-for': '127.0.0.1',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'admin.internal',
    });
    assert.equal(r.statusCode, 200, r.body.slice(0, 300));
    const [made] = results(r.body);
    assert.ok(!made.isError, text(made));
    const id = (made.structuredContent as { sandbox: { id: string } }).sandbox.id;
    assert.equal((await t.req({ method: 'GET', url: `/api/v1/sandboxes/${id}`, key: A.key })).statusCode, 200);
    assert.equal((await t.req({ method: 'GET', url: `/api/v1/sandboxes/${id}`, key: B.key })).statusCode, 404);
    now += 1e9;
  });
});
