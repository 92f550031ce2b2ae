/**
 * sandboxd's MCP server, black box, with the MCP SDK's own client on both transports:
 * streamable HTTP at `/mcp` of a real server, and stdio through `sbx mcp` spawned as a
 * process (key and URL from the environment). Every tool is called for real on the real
 * runtime: create, run_command (also cut output and background), write then read a file,
 * list a directory, get_port_url then a request through the port proxy to busybox httpd,
 * pause/resume, run_code on local/code-interpreter (also a run stopped past its output
 * bound), delete; resources listed and read;
 * failures as `isError` results with the API's kind (unknown sandbox, a bad command
 * timeout, a create beyond the plan's concurrency, another account's sandbox); the HTTP
 * endpoint's auth (no key, a wrong key, a cookie, X-API-Key: 401), its 405s, origin check
 * and body bound; and `sbx mcp` ending cleanly when its stdin closes, mid-call too.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { assertErrorBody } from './error-kinds.js';
import { newAccount, RUNTIME, startServer, type Server } from './harness.js';
import { hget, waitListening } from './proxy-support.js';

const ROOT = resolve(import.meta.dirname, '../..');
const BUSYBOX = 'local/busybox:latest';
const CODE_IMAGE = 'local/code-interpreter:latest';
const TOOLS = [
  'create_sandbox',
  'list_sandboxes',
  'get_port_url',
  'pause_sandbox',
  'resume_sandbox',
  'delete_sandbox',
  'run_command',
  'run_code',
  'read_file',
  'write_file',
  'list_directory',
];
/** The MCP client's own request timeout: generous, calls on a loaded runner may take a while. */
const CALL = { timeout: 300_000 };

type Kind = 'http' | 'stdio';

const text = (r: CallToolResult) =>
  r.content
    .filter((c) => c.type === 'text')
    .map((c) => (c as { text: string }).text)
    .join('\n');

describe(`MCP server over both transports (${RUNTIME})`, {
  skip: RUNTIME !== 'local' && 'needs the real runtime (SANDBOXD_E2E_RUNTIME=local)',
  timeout: 900_000,
}, () => {
  let s: Server;
  let A: { id: string; key: string };
  let B: { id: string; key: string };
  let ONE: { id: string; key: string };
  const cfgDir = mkdtempSync(join(tmpdir(), 'sbx-mcp-cfg-'));
  const home = mkdtempSync(join(tmpdir(), 'sbx-mcp-home-'));
  const config = join(cfgDir, 'config.json');
  writeFileSync(config, JSON.stringify({ plans: { ONE: { concurrency: 1 } } }));
  const clients: Client[] = [];

  const connect = async (kind: Kind, key: string): Promise<Client> => {
    const client = new Client({ name: 'sandboxd-mcp-test', version: '1.0.0' });
    const transport =
      kind === 'http'
        ? new StreamableHTTPClientTransport(new URL(`${s.baseUrl}/mcp`), {
            requestInit: { headers: { authorization: `Bearer ${key}` } },
          })
        : new StdioClientTransport({
            command: process.execPath,
            args: ['packages/cli/bin/sbx.js', 'mcp'],
            cwd: ROOT,
            // No stored login: HOME is an empty folder; the key and URL come from the environment.
            env: { PATH: process.env.PATH ?? '', HOME: home, SANDBOX_API_KEY: key, SANDBOX_API_URL: s.baseUrl },
            stderr: 'pipe',
          });
    await client.connect(transport);
    clients.push(client);
    return client;
  };
  const call = async (c: Client, name: string, args: Record<string, unknown>) =>
    (await c.callTool({ name, arguments: args }, undefined, CALL)) as CallToolResult;
  const must = async (c: Client, name: string, args: Record<string, unknown>) => {
    const r = await call(c, name, args);
    assert.ok(!r.isError, `${name}: ${text(r)}`);
    return r;
  };
  const failed = async (c: Client, name: string, args: Record<string, unknown>, kind: string) => {
    const r = await call(c, name, args);
    assert.equal(r.isError, true, `${name} should fail: ${text(r)}`);
    assert.equal((r.structuredContent as { error: { kind: string } }).error.kind, kind, text(r));
    assert.match(text(r), new RegExp(`^Error \\(${kind}`));
    return r;
  };
  const create = async (c: Client, args: Record<string, unknown> = {}) =>
    (
      (await must(c, 'create_sandbox', { image: BUSYBOX, lifetime_ms: 600_000, ...args })).structuredContent as {
        sandbox: { id: string; name: string; state: string; metadata: Record<string, string> };
      }
    ).sandbox;

  before(async () => {
    s = await startServer({ env: { SANDBOXD_CONFIG: config } });
    A = await newAccount(s, { tokens: 100_000, plan: 'PRO' });
    B = await newAccount(s, { tokens: 100_000, plan: 'PRO' });
    ONE = await newAccount(s, { tokens: 100_000, plan: 'ONE' });
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await s?.stop();
    rmSync(cfgDir, { recursive: true, force: true });
    rmSync(home, { recursive: true, force: true });
  });

  for (const kind of ['http', 'stdio'] as const) {
    describe(`over ${kind}`, () => {
      let c: Client;
      before(async () => {
        c = await connect(kind, A.key);
      });

      it('lists every tool, each with a description for a model and an object schema', async () => {
        const { tools } = await c.listTools();
        assert.deepEqual(tools.map((t) => t.name).sort(), [...TOOLS].sort());
        for (const t of tools) {
          assert.ok((t.description ?? '').length >= 80, `${t.name}: description "${t.description}"`);
          assert.equal(t.inputSchema.type, 'object', t.name);
          if (t.name !== 'list_sandboxes')
            assert.ok(Object.keys(t.inputSchema.properties ?? {}).length > 0, `${t.name} has arguments`);
          for (const [p, schema] of Object.entries(t.inputSchema.properties ?? {}))
            assert.ok((schema as { description?: string }).description, `${t.name}.${p} is described`);
        }
        const info = c.getServerVersion();
        assert.equal(info?.name, 'sandboxd');
        assert.match(c.getInstructions() ?? '', /create_sandbox/);
      });

      it('create, run a command, write then read a file, list a directory, pause, resume, delete', async () => {
        const sb = await create(c, { env: { WHO: 'mcp' }, egress: 'none' });
        assert.match(sb.id, /^sbx_[a-z2-7]{20}$/);
        assert.equal(sb.state, 'started');
        assert.deepEqual(sb.metadata, { createdBy: 'mcp' });

        const r = await must(c, 'run_command', {
          sandbox_id: sb.id,
          command: 'echo "hello $WHO"; echo oops >&2; exit 3',
        });
        assert.deepEqual(r.structuredContent, {
          exitCode: 3,
          stdout: 'hello mcp\n',
          stderr: 'oops\n',
          truncated: false,
        });
        assert.match(text(r), /^exit code 3\n--- stdout ---\nhello mcp\n/);

        const w = await must(c, 'write_file', {
          sandbox_id: sb.id,
          path: '/tmp/mcp/dir/hello.sh',
          content: '#!/bin/sh\necho "héllo from a file"\n',
          mode: '755',
        });
        assert.equal(
          (w.structuredContent as { size: number }).size,
          Buffer.byteLength('#!/bin/sh\necho "héllo from a file"\n'),
        );
        const ran = await must(c, 'run_command', { sandbox_id: sb.id, command: '/tmp/mcp/dir/hello.sh', cwd: '/tmp' });
        assert.equal((ran.structuredContent as { stdout: string }).stdout, 'héllo from a file\n');
        const rd = await must(c, 'read_file', { sandbox_id: sb.id, path: '/tmp/mcp/dir/hello.sh' });
        assert.equal((rd.structuredContent as { content: string }).content, '#!/bin/sh\necho "héllo from a file"\n');
        await must(c, 'write_file', {
          sandbox_id: sb.id,
          path: '/tmp/mcp/bin.dat',
          content: Buffer.from([0, 1, 2, 255]).toString('base64'),
          encoding: 'base64',
        });
        const bin = await must(c, 'read_file', { sandbox_id: sb.id, path: '/tmp/mcp/bin.dat' });
        assert.deepEqual(
          [
            (bin.structuredContent as { encoding: string }).encoding,
            (bin.structuredContent as { content: string }).content,
          ],
          ['base64', Buffer.from([0, 1, 2, 255]).toString('base64')],
        );

        const ls = await must(c, 'list_directory', { sandbox_id: sb.id, path: '/tmp/mcp', depth: 2 });
        const entries = (ls.structuredContent as { entries: Array<{ path: string; type: string; mode: string }> })
          .entries;
        assert.deepEqual(entries.map((e) => e.path).sort(), [
          '/tmp/mcp/bin.dat',
          '/tmp/mcp/dir',
          '/tmp/mcp/dir/hello.sh',
        ]);
        assert.equal(entries.find((e) => e.path.endsWith('hello.sh'))?.mode, '0755');
        assert.match(text(ls), /^d .* \/tmp\/mcp\/dir\/$/m);

        const listed = await must(c, 'list_sandboxes', { created_by_mcp_only: true });
        assert.ok(
          (listed.structuredContent as { sandboxes: Array<{ id: string }> }).sandboxes.some((x) => x.id === sb.id),
        );

        const p = await must(c, 'pause_sandbox', { sandbox_id: sb.id });
        assert.equal((p.structuredContent as { sandbox: { state: string } }).sandbox.state, 'paused');
        await failed(c, 'run_command', { sandbox_id: sb.id, command: 'true' }, 'conflict');
        await failed(c, 'pause_sandbox', { sandbox_id: sb.id }, 'conflict');
        const res = await must(c, 'resume_sandbox', { sandbox_id: sb.id, lifetime_ms: 300_000 });
        assert.equal((res.structuredContent as { sandbox: { state: string } }).sandbox.state, 'started');
        const again = await must(c, 'run_command', { sandbox_id: sb.id, command: 'cat /tmp/mcp/dir/hello.sh | wc -l' });
        assert.equal((again.structuredContent as { stdout: string }).stdout.trim(), '2', 'files kept across pause');

        const d = await must(c, 'delete_sandbox', { sandbox_id: sb.id });
        assert.match(text(d), new RegExp(`Deleted ${sb.id}`));
        await failed(c, 'run_command', { sandbox_id: sb.id, command: 'true' }, 'not_found');
        await failed(c, 'delete_sandbox', { sandbox_id: sb.id }, 'not_found');
      });

      it('bounds output: a huge stdout and a big file are cut with a note saying how to see the rest', async () => {
        const sb = await create(c);
        const r = await must(c, 'run_command', {
          sandbox_id: sb.id,
          command: "head -c 300000 /dev/zero | tr '\\0' a; echo END",
        });
        const out = (r.structuredContent as { stdout: string; truncated: boolean }).stdout;
        assert.equal((r.structuredContent as { truncated: boolean }).truncated, true);
        assert.ok(out.length < 40_000, `stdout of ${out.length} characters`);
        assert.match(out, /^a+\n\[\.\.\. \d+ characters cut here \.\.\.\]\na+END\n$/);
        assert.match(text(r), /redirect it to a file and use read_file/);

        await must(c, 'run_command', { sandbox_id: sb.id, command: 'seq 1 100000 > /tmp/big.txt' });
        const first = await must(c, 'read_file', { sandbox_id: sb.id, path: '/tmp/big.txt' });
        const sc = first.structuredContent as { bytes: number; nextOffset: number; content: string; size: number };
        assert.equal(sc.bytes, 65_536);
        assert.equal(sc.nextOffset, 65_536);
        assert.equal(sc.size, 588_895);
        assert.match(text(first), /bytes 0-65535 of 588895 bytes\. More follows: read_file with offset 65536/);
        const tail = await must(c, 'read_file', { sandbox_id: sb.id, path: '/tmp/big.txt', offset: 588_895 - 7 });
        assert.equal((tail.structuredContent as { content: string }).content, '100000\n');
        assert.equal((tail.structuredContent as { nextOffset?: number }).nextOffset, undefined);
        await failed(c, 'read_file', { sandbox_id: sb.id, path: '/tmp/nope.txt' }, 'not_found');
        await failed(c, 'read_file', { sandbox_id: sb.id, path: '/tmp' }, 'validation');
        await must(c, 'delete_sandbox', { sandbox_id: sb.id });
      });

      it('get_port_url gives the public URL of a port: busybox httpd answers through the port proxy', async () => {
        const sb = await create(c);
        await must(c, 'write_file', { sandbox_id: sb.id, path: '/www/index.html', content: `hello from ${sb.id}\n` });
        const bg = await must(c, 'run_command', {
          sandbox_id: sb.id,
          command: 'busybox httpd -f -p 8000 -h /www',
          background: true,
        });
        assert.ok((bg.structuredContent as { pid: number }).pid > 0);
        const u = await must(c, 'get_port_url', { sandbox_id: sb.id, port: 8000 });
        const url = (u.structuredContent as { url: string }).url;
        assert.equal(url, `http://8000-${sb.id}.sandbox.localhost:${s.port}`);
        const host = url.replace(/^http:\/\//, '');
        await waitListening(s, host);
        const page = await hget(s.port, host, { path: '/' });
        assert.equal(page.status, 200);
        assert.equal(page.body, `hello from ${sb.id}\n`);
        const badPort = await call(c, 'get_port_url', { sandbox_id: sb.id, port: 70_000 });
        assert.equal(badPort.isError, true, 'a port out of range is refused by the tool schema');
        assert.match(text(badPort), /port/);
        await must(c, 'delete_sandbox', { sandbox_id: sb.id });
      });

      it('run_code on local/code-interpreter: text results, stdout, an error with its traceback, a chart as an image', async () => {
        const sb = await create(c, { image: CODE_IMAGE });
        const r = await must(c, 'run_code', { sandbox_id: sb.id, code: 'x = 6 * 7\nprint("printed", x)\nx' });
        const sc = r.structuredContent as { stdout: string; results: Array<{ text?: string; isMainResult: boolean }> };
        assert.equal(sc.stdout, 'printed 42\n');
        assert.deepEqual(
          sc.results.filter((x) => x.isMainResult).map((x) => x.text),
          ['42'],
        );
        const kept = await must(c, 'run_code', { sandbox_id: sb.id, code: 'x + 1' });
        assert.match(text(kept), /--- result ---\n43/);
        const err = await must(c, 'run_code', { sandbox_id: sb.id, code: 'def f():\n    return 1 / 0\nf()' });
        const e = (err.structuredContent as { error: { name: string; traceback: string } }).error;
        assert.equal(e.name, 'ZeroDivisionError');
        assert.match(e.traceback, /1 \/ 0/);
        assert.ok(!e.traceback.includes('\u001b['), 'no terminal colours for the model');
        assert.match(text(err), /^The code raised ZeroDivisionError\./);
        const plot = await must(c, 'run_code', {
          sandbox_id: sb.id,
          code: 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()',
        });
        const img = plot.content.find((x) => x.type === 'image') as { data: string; mimeType: string } | undefined;
        assert.ok(img, `an image in ${JSON.stringify(plot.content).slice(0, 300)}`);
        assert.equal(img.mimeType, 'image/png');
        assert.deepEqual([...Buffer.from(img.data, 'base64').subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
        const js = await must(c, 'run_code', {
          sandbox_id: sb.id,
          code: 'console.log(2 ** 10)',
          language: 'javascript',
        });
        assert.match((js.structuredContent as { stdout: string }).stdout, /1024/);
        await must(c, 'delete_sandbox', { sandbox_id: sb.id });
        // A sandbox of another image has no kernel: a tool error naming the image to use.
        const plain = await create(c);
        const no = await failed(c, 'run_code', { sandbox_id: plain.id, code: '1' }, 'no_code_interpreter');
        assert.match(text(no), /local\/code-interpreter/);
        await must(c, 'delete_sandbox', { sandbox_id: plain.id });
      });

      it('run_code stops a run whose output passes its bound, keeping what came first (never held whole)', async () => {
        const sb = await create(c, { image: CODE_IMAGE });
        // 12 MiB of stdout, past the 8 Mi characters run_code collects from a run, in chunks of
        // 1 MiB (the kernel may join what it is given at once into one line, and the server
        // ends a run whose line passes 16 MiB: a bound of its own, not the one tested here).
        const r = await must(c, 'run_code', {
          sandbox_id: sb.id,
          code: 'import sys, time\nfor i in range(12):\n    sys.stdout.write(("%07d" % i + "x" * 1016 + "\\n") * 1024)\n    sys.stdout.flush()\n    time.sleep(0.2)',
        });
        const sc = r.structuredContent as { stdout: string; stopped?: boolean };
        assert.equal(sc.stopped, true, text(r).slice(-500));
        assert.match(text(r), /The run was stopped: it gave more than \d+ characters of output/);
        assert.match(sc.stdout, /^0000000x/, 'the start is kept');
        assert.ok(sc.stdout.length < 64_000, 'and cut for the model');
        // The kernel was interrupted, not wedged: the next cell runs.
        const next = await must(c, 'run_code', { sandbox_id: sb.id, code: '6 * 7' });
        assert.match(text(next), /--- result ---\n42/);
        await must(c, 'delete_sandbox', { sandbox_id: sb.id });
      });

      it('lists the sandboxes made through MCP as resources and reads one as JSON', async () => {
        const sb = await create(c);
        const other = await s.api('POST', '/api/v1/sandboxes', { key: A.key, body: { image: BUSYBOX } });
        assert.equal(other.status, 201, other.text);
        const { resources } = await c.listResources();
        const uris = resources.map((r) => r.uri);
        assert.ok(uris.includes(`sandbox://${sb.id}`), uris.join(', '));
        assert.ok(!uris.includes(`sandbox://${other.body.sandbox.id}`), 'only the sandboxes made through MCP');
        assert.ok(resources.every((r) => r.mimeType === 'application/json'));
        const read = await c.readResource({ uri: `sandbox://${sb.id}` });
        const state = JSON.parse((read.contents[0] as { text: string }).text);
        assert.equal(state.id, sb.id);
        assert.equal(state.state, 'started');
        assert.equal(state.createdByMcp, true);
        const { resourceTemplates } = await c.listResourceTemplates();
        assert.deepEqual(
          resourceTemplates.map((t) => t.uriTemplate),
          ['sandbox://{id}'],
        );
        await assert.rejects(c.readResource({ uri: 'sandbox://sbx_aaaaaaaaaaaaaaaaaaaa' }), /not found/i);
        await must(c, 'delete_sandbox', { sandbox_id: sb.id });
        await s.api('DELETE', `/api/v1/sandboxes/${other.body.sandbox.id}`, { key: A.key });
      });

      it('failures are tool errors with the API kind: unknown sandbox, bad timeout, bad image, bad arguments', async () => {
        await failed(c, 'run_command', { sandbox_id: 'sbx_aaaaaaaaaaaaaaaaaaaa', command: 'true' }, 'not_found');
        // Not the shape of an id: refused by the tool's schema before any API call.
        const nope = await call(c, 'read_file', { sandbox_id: 'nope', path: '/etc/hostname' });
        assert.equal(nope.isError, true);
        assert.match(text(nope), /sandbox_id must be a sandbox id/);
        const sb = await create(c);
        const t = await failed(
          c,
          'run_command',
          { sandbox_id: sb.id, command: 'true', timeout_ms: 99_999_999 },
          'validation',
        );
        assert.match(text(t), /timeoutMs/);
        await failed(c, 'read_file', { sandbox_id: sb.id, path: 'relative/path' }, 'validation');
        await failed(c, 'create_sandbox', { image: 'local/no-such-image:1' }, 'template_not_found');
        await failed(c, 'create_sandbox', { image: BUSYBOX, egress: ['not a rule!'] }, 'validation');
        await failed(c, 'create_sandbox', { image: BUSYBOX, lifetime_ms: 10 * 86_400_000 }, 'validation');
        // Arguments the tool's schema refuses: the SDK's validation, still a tool result.
        const bad = await call(c, 'run_command', { sandbox_id: sb.id });
        assert.equal(bad.isError, true);
        assert.match(text(bad), /command/);
        await must(c, 'delete_sandbox', { sandbox_id: sb.id });
      });

      it("another account's sandbox is not found, and is not among the resources", async () => {
        const sb = await create(c);
        const other = await connect(kind, B.key);
        await failed(other, 'run_command', { sandbox_id: sb.id, command: 'echo pwned > /tmp/pwned' }, 'not_found');
        await failed(other, 'read_file', { sandbox_id: sb.id, path: '/etc/hostname' }, 'not_found');
        await failed(other, 'delete_sandbox', { sandbox_id: sb.id }, 'not_found');
        await failed(other, 'get_port_url', { sandbox_id: sb.id, port: 8000 }, 'not_found');
        const { resources } = await other.listResources();
        assert.ok(!resources.some((r) => r.uri === `sandbox://${sb.id}`));
        await assert.rejects(other.readResource({ uri: `sandbox://${sb.id}` }), /not found/i);
        const mine = await must(c, 'run_command', { sandbox_id: sb.id, command: 'ls /tmp/pwned 2>/dev/null; echo ok' });
        assert.equal((mine.structuredContent as { stdout: string }).stdout, 'ok\n', 'B changed nothing');
        await must(c, 'delete_sandbox', { sandbox_id: sb.id });
      });

      it("a create beyond the plan's concurrency is a tool error the model can act on", async () => {
        const one = await connect(kind, ONE.key);
        const first = await create(one);
        const r = await failed(one, 'create_sandbox', { image: BUSYBOX }, 'concurrency');
        assert.match(text(r), /delete_sandbox or pause_sandbox/);
        // The connection is still good: the model frees a slot and goes on.
        await must(one, 'delete_sandbox', { sandbox_id: first.id });
        const second = await create(one);
        await must(one, 'delete_sandbox', { sandbox_id: second.id });
      });
    });
  }

  describe('the HTTP endpoint', () => {
    const initialize = {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    };
    const post = (headers: Record<string, string>, body: string = JSON.stringify(initialize)) =>
      fetch(`${s.baseUrl}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body,
      });

    it('401 in the error shape without a key, with a wrong key, with X-API-Key or a session cookie', async () => {
      const cases: Array<[string, Record<string, string>]> = [
        ['no credentials', {}],
        ['a wrong key', { authorization: `Bearer sk_${'x'.repeat(40)}` }],
        ['a malformed Authorization', { authorization: `Basic ${A.key}` }],
        ['a valid key in X-API-Key (bearer only)', { 'x-api-key': A.key }],
      ];
      for (const [what, headers] of cases) {
        const r = await post(headers);
        const body = await r.text();
        assert.equal(r.status, 401, `${what}: ${body}`);
        assertErrorBody(401, body, `POST /mcp with ${what}`);
        assert.equal(JSON.parse(body).kind, 'unauthorized');
      }
      for (const method of ['GET', 'DELETE']) {
        const r = await fetch(`${s.baseUrl}/mcp`, { method });
        assert.equal(r.status, 401, method);
        assertErrorBody(401, await r.text(), `${method} /mcp`);
      }
    });

    it('a session cookie is not accepted, even same-origin', async () => {
      const email = `mcp-cookie-${Date.now()}@example.com`;
      assert.equal(
        (await s.api('POST', '/api/v1/admin/accounts', { body: { email, password: 'password123' } })).status,
        201,
      );
      const login = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email, password: 'password123' } });
      const cookie = String(login.headers.get('set-cookie')).split(';')[0];
      const r = await post({ cookie, origin: s.baseUrl });
      const body = await r.text();
      assert.equal(r.status, 401, body);
      assertErrorBody(401, body, 'POST /mcp with a cookie');
      assert.match(JSON.parse(body).message, /Authorization: Bearer/);
    });

    it('with the key: initialize answers; GET and DELETE are 405 (stateless); another origin is 403; a body over 4 MiB is 413', async () => {
      const ok = await post({ authorization: `Bearer ${A.key}` });
      assert.equal(ok.status, 200);
      assert.equal(ok.headers.get('mcp-session-id'), null, 'stateless: no session');
      const reply = await ok.text();
      assert.match(reply, /"serverInfo":\{"name":"sandboxd"/);
      for (const method of ['GET', 'DELETE']) {
        const r = await fetch(`${s.baseUrl}/mcp`, {
          method,
          headers: { authorization: `Bearer ${A.key}`, accept: 'text/event-stream' },
        });
        assert.equal(r.status, 405, method);
        assert.equal(r.headers.get('allow'), 'POST');
        assert.match(await r.text(), /^Method Not Allowed: this MCP endpoint is stateless/);
      }
      const cross = await post({ authorization: `Bearer ${A.key}`, origin: 'https://evil.example' });
      assert.equal(cross.status, 403);
      assertErrorBody(403, await cross.text(), 'POST /mcp cross-origin');
      const same = await post({ authorization: `Bearer ${A.key}`, origin: s.baseUrl });
      assert.equal(same.status, 200);
      await same.text();
      const big = await post(
        { authorization: `Bearer ${A.key}` },
        JSON.stringify({ ...initialize, params: { ...initialize.params, pad: 'x'.repeat(5 * 1024 * 1024) } }),
      );
      assert.equal(big.status, 413);
      assertErrorBody(413, await big.text(), 'POST /mcp over the bound');
      const notJson = await post({ authorization: `Bearer ${A.key}` }, '{"jsonrpc":');
      assert.equal(notJson.status, 400);
      assertErrorBody(400, await notJson.text(), 'POST /mcp with broken JSON');
      // The transport's own refusals leave in the error shape too, the JSON-RPC error in details.
      const notRpc = await post({ authorization: `Bearer ${A.key}` }, JSON.stringify({ hello: 'world' }));
      const notRpcBody = await notRpc.text();
      assert.equal(notRpc.status, 400, notRpcBody);
      assertErrorBody(400, notRpcBody, 'POST /mcp with no JSON-RPC message');
      assert.equal(typeof JSON.parse(notRpcBody).details.jsonrpc.code, 'number');
      const noAccept = await post({ authorization: `Bearer ${A.key}`, accept: 'text/html' });
      const noAcceptBody = await noAccept.text();
      assert.equal(noAccept.status, 400, noAcceptBody);
      assert.match(JSON.parse(noAcceptBody).message, /text\/event-stream/);
    });
  });

  describe('sbx mcp', () => {
    /** Spawns `sbx mcp` with A's key; returns it with helpers to read its stdout lines. */
    const spawnMcp = (env: Record<string, string> = {}) => {
      const p = spawn(process.execPath, ['packages/cli/bin/sbx.js', 'mcp'], {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '', HOME: home, SANDBOX_API_KEY: A.key, SANDBOX_API_URL: s.baseUrl, ...env },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      p.stdout.on('data', (b) => (out += b));
      p.stderr.on('data', (b) => (err += b));
      const exited = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
      const line = async (n: number) => {
        for (let i = 0; i < 600 && out.split('\n').length <= n; i++) await new Promise((r) => setTimeout(r, 50));
        return out.split('\n')[n - 1];
      };
      const send = (m: unknown) => p.stdin.write(`${JSON.stringify(m)}\n`);
      return { p, exited, line, send, out: () => out, err: () => err };
    };
    const init = {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    };

    it('ends cleanly (exit 0) when stdin closes, with nothing but JSON-RPC on stdout', async () => {
      const m = spawnMcp();
      m.send(init);
      const first = JSON.parse(await m.line(1));
      assert.equal(first.id, 1);
      assert.equal(first.result.serverInfo.name, 'sandboxd');
      m.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
      m.send({ jsonrpc: '2.0', id: 2, method: 'tools/list' });
      assert.equal(JSON.parse(await m.line(2)).result.tools.length, TOOLS.length);
      m.p.stdin.end();
      assert.equal(await m.exited, 0, m.err());
      for (const l of m.out().split('\n').filter(Boolean)) assert.equal(JSON.parse(l).jsonrpc, '2.0');
      assert.match(m.err(), /sbx mcp: serving sandboxd at/);
    });

    it('ends when stdin closes during a long call, cancelling it', async () => {
      const sb = (await s.api('POST', '/api/v1/sandboxes', { key: A.key, body: { image: BUSYBOX } })).body.sandbox;
      const m = spawnMcp();
      m.send(init);
      await m.line(1);
      m.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
      m.send({
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'run_command', arguments: { sandbox_id: sb.id, command: 'sleep 600', timeout_ms: 900_000 } },
      });
      // The call has reached the sandbox once the sleep shows in its process list.
      for (let i = 0; i < 300; i++) {
        const ps = await s.api('POST', `/api/v1/sandboxes/${sb.id}/exec`, { key: A.key, body: { command: 'ps' } });
        if (/sleep 600/.test(ps.body.stdout)) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      m.p.stdin.end();
      assert.equal(await m.exited, 0, m.err());
      await s.api('DELETE', `/api/v1/sandboxes/${sb.id}`, { key: A.key });
    });

    it('without a key it fails at once with a clear message on stderr and nothing on stdout', async () => {
      const m = spawnMcp({ SANDBOX_API_KEY: '' });
      m.p.stdin.end();
      assert.equal(await m.exited, 1);
      assert.match(m.err(), /not logged in/);
      assert.equal(m.out(), '');
    });
  });
});
