/**
 * Black-box, real runtime: an `api` process whose sandboxes live on a `runner` process
 * (SANDBOXD_ROLE=api / runner, one runner URL, one shared token). Everything goes through
 * the api's public HTTP API: create, exec, a terminal over WebSocket, a streamed process
 * with stdin, file upload and download, a port reached through the api's port proxy (the
 * runner's tunnel), pause/resume, delete; then the runner is killed with -9: the api
 * answers 503 `unavailable` naming the runner, and once the runner is back (same data dir,
 * same port) the same sandbox answers again. The runner runs on a fake host (fake-host.ts):
 * its own network namespace, so its sandboxes' addresses route only there, as on another
 * machine.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { type FakeHost, makeFakeHost } from './fake-host.js';
import { IMAGE, newAccount, RUNTIME, type Server, startServer } from './harness.js';
import { hget, waitListening } from './proxy-support.js';

const TOKEN = `e2e-runner-token-${randomBytes(8).toString('hex')}`;
const runnerReady = { path: '/runner/v1/health', headers: { authorization: `Bearer ${TOKEN}` } };

type Event = { type: string; [k: string]: unknown };
async function readEvents(res: Response): Promise<Event[]> {
  const text = await res.text();
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Event);
}

describe('api + runner: two processes, one deployment (real runtime)', {
  skip: RUNTIME !== 'local' ? 'needs SANDBOXD_E2E_RUNTIME=local' : undefined,
  timeout: 300_000,
}, () => {
  let fake: FakeHost;
  let runner: Server;
  let api: Server;
  let key: string;
  let id: string;
  const runnerDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-runner-'));
  const runnerEnv = { SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: TOKEN, SANDBOXD_NODE_NAME: 'e2e-runner' };
  const call = (method: string, path: string, body?: unknown) => api.api(method, path, { key, body });

  before(async () => {
    fake = await makeFakeHost();
    runner = await startServer({ dataDir: runnerDir, env: runnerEnv, ready: runnerReady, on: fake });
    api = await startServer({
      // A long SANDBOXD_RUNNER_DOWN_MS: the outage below (kill -9, restart) stays shorter, so the
      // sandbox is kept (test/e2e/fleet.test.ts covers one that lasts longer).
      env: {
        SANDBOXD_ROLE: 'api',
        SANDBOXD_RUNNERS: runner.baseUrl,
        SANDBOXD_RUNNER_TOKEN: TOKEN,
        SANDBOXD_RUNNER_DOWN_MS: '600000',
      },
    });
    key = (await newAccount(api, { tokens: 1_000_000, plan: 'PRO' })).key;
  });
  after(async () => {
    await api?.stop();
    await runner?.stop();
    await fake?.remove();
  });

  it('the runner refuses a request without its token (401)', async () => {
    const r = await fetch(`${runner.baseUrl}/runner/v1/health`);
    assert.equal(r.status, 401);
    assert.equal(((await r.json()) as { kind: string }).kind, 'unauthorized');
    const h = await fetch(`${runner.baseUrl}/runner/v1/health`, { headers: runnerReady.headers });
    assert.equal(((await h.json()) as { node: string }).node, 'e2e-runner');
  });

  it('creates a sandbox on the runner and runs a command in it', async () => {
    const c = await call('POST', '/api/v1/sandboxes', { image: IMAGE });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    const e = await call('POST', `/api/v1/sandboxes/${id}/exec`, { command: 'echo hi; hostname; exit 2' });
    assert.equal(e.status, 200, e.text);
    assert.equal(e.body.exitCode, 2);
    assert.match(e.body.stdout, /^hi\n/);
  });

  it('opens a terminal over WebSocket', async () => {
    const t = await call('POST', `/api/v1/sandboxes/${id}/terminals`, {});
    assert.equal(t.status, 201, t.text);
    const c = await TermClient.connect(terminalUrl(api.baseUrl, id, t.body.terminal.id), {
      authorization: `Bearer ${key}`,
    });
    c.type('echo "sum-$((40+2))"\r');
    await c.waitForOutput(/sum-42/);
    c.type('exit\r');
    await c.control('exit');
  });

  it('streams a process with stdin', async () => {
    const res = await fetch(`${api.baseUrl}/api/v1/sandboxes/${id}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        command: 'echo first; read x; echo "got $x"; echo err >&2; exit 3',
        options: { stream: true, stdin: true },
      }),
    });
    assert.equal(res.status, 200);
    const events = readEvents(res);
    // The start event comes first; its pid takes the stdin.
    let pid = 0;
    for (let i = 0; i < 100 && !pid; i++) {
      const list = await call('GET', `/api/v1/sandboxes/${id}/processes`);
      pid = list.body?.processes?.find((p: { command?: string }) => p.command?.includes('read x'))?.pid ?? 0;
      if (!pid) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(pid > 0, 'the streamed process is listed');
    const w = await fetch(`${api.baseUrl}/api/v1/sandboxes/${id}/processes/${pid}/stdin`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: 'hello\n',
    });
    assert.equal(w.status, 204);
    const all = await events;
    const text = (stream: string) =>
      all
        .filter((e) => e.type === stream)
        .map((e) => e.data)
        .join('');
    assert.equal(all[0].type, 'start');
    assert.equal(text('stdout'), 'first\ngot hello\n');
    assert.equal(text('stderr'), 'err\n');
    assert.deepEqual(all.at(-1), { type: 'exit', exitCode: 3, signal: null });
  });

  it('uploads and downloads a file', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 17);
    const url = `${api.baseUrl}/api/v1/sandboxes/${id}/files/content?path=${encodeURIComponent('/tmp/up.bin')}`;
    const put = await fetch(url, {
      method: 'PUT',
      headers: { authorization: `Bearer ${key}` },
      body: data,
    });
    assert.ok(put.status === 200 || put.status === 201, `${put.status} ${await put.text()}`);
    const get = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(get.status, 200);
    assert.ok(Buffer.from(await get.arrayBuffer()).equals(data), 'the download is the upload');
    const sum = await call('POST', `/api/v1/sandboxes/${id}/exec`, { command: 'wc -c < /tmp/up.bin' });
    assert.equal(sum.body.stdout.trim(), String(data.length));
  });

  it("reaches a sandbox port through the api's port proxy (the runner's tunnel)", async () => {
    const page = await call('POST', `/api/v1/sandboxes/${id}/exec`, {
      command: `mkdir -p /www && echo "hello from ${id}" > /www/index.html`,
    });
    assert.equal(page.body.exitCode, 0);
    await call('POST', `/api/v1/sandboxes/${id}/exec`, {
      command: 'busybox httpd -f -p 8000 -h /www',
      options: { background: true },
    });
    const sb = await call('GET', `/api/v1/sandboxes/${id}`);
    const host = String(sb.body.sandbox.publicAccessUrlTemplate).replace('{{PORT}}', '8000').split('/')[0];
    await waitListening(api, host);
    for (let i = 0; i < 3; i++) {
      const r = await hget(api.port, host, { path: '/' });
      assert.equal(r.status, 200);
      assert.equal(r.body, `hello from ${id}\n`);
    }
    const closed = await hget(api.port, host.replace(/^8000-/, '8001-'), { path: '/' });
    assert.equal(closed.status, 502);
  });

  it('an image that declares a service (local/code-interpreter): the create answers once it is healthy on the runner; E2B reaches it by header through the tunnel', async () => {
    const c = await call('POST', '/api/v1/sandboxes', {
      image: 'local/code-interpreter:latest',
      env: { ON_RUNNER: 'yes' },
    });
    assert.equal(c.status, 201, c.text);
    const ci = c.body.sandbox.id as string;
    try {
      // No wait: the runner's local runtime probed /health before the create answered.
      const e2b = (path: string, init: { method?: string; body?: string } = {}) =>
        fetch(`${api.baseUrl}${path}`, {
          method: init.method ?? 'GET',
          body: init.body,
          headers: {
            'content-type': 'application/json',
            'E2b-Sandbox-Id': ci,
            'E2b-Sandbox-Port': '49999',
            // The code port runs code for the sandbox's owner only (codePortGuard).
            'X-Sandboxd-Key': key,
          },
        });
      const health = await e2b('/health');
      assert.equal(health.status, 200, await health.text());
      const run = await e2b('/execute', {
        method: 'POST',
        body: JSON.stringify({ code: 'import os; os.environ.get("ON_RUNNER") == "yes"' }),
      });
      assert.equal(run.status, 200);
      const lines = (await run.text())
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      assert.deepEqual(
        lines.filter((l) => l.type === 'result').map((l) => l.text),
        ['True'],
      );
    } finally {
      assert.equal((await call('DELETE', `/api/v1/sandboxes/${ci}`)).status, 204);
    }
  });

  it('pauses and resumes', async () => {
    assert.equal((await call('POST', `/api/v1/sandboxes/${id}/pause`)).status, 200);
    assert.equal((await call('GET', `/api/v1/sandboxes/${id}`)).body.sandbox.state, 'paused');
    assert.equal((await call('POST', `/api/v1/sandboxes/${id}/exec`, { command: 'true' })).status, 409);
    assert.equal((await call('POST', `/api/v1/sandboxes/${id}/resume`)).status, 200);
    const e = await call('POST', `/api/v1/sandboxes/${id}/exec`, { command: 'echo back' });
    assert.equal(e.body.stdout, 'back\n');
  });

  it('a runner killed with -9: requests answer 503 unavailable; after its restart the api works again', async () => {
    await runner.kill('SIGKILL');
    const e = await call('POST', `/api/v1/sandboxes/${id}/exec`, { command: 'echo x' });
    assert.equal(e.status, 503, e.text);
    assert.equal(e.body.kind, 'unavailable');
    assert.match(e.body.message, new RegExp(`Runner ${fake.address.replaceAll('.', '\\.')}:\\d+`));
    runner = await startServer({ dataDir: runnerDir, port: runner.port, env: runnerEnv, ready: runnerReady, on: fake });
    const again = await call('POST', `/api/v1/sandboxes/${id}/exec`, { command: 'cat /www/index.html' });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.body.stdout, `hello from ${id}\n`);
  });

  it('deletes the sandbox from the runner', async () => {
    assert.equal((await call('DELETE', `/api/v1/sandboxes/${id}`)).status, 204);
    const h = await fetch(`${runner.baseUrl}/runner/v1/list`, {
      method: 'POST',
      headers: { ...runnerReady.headers, 'content-type': 'application/json' },
      body: '{"args":[]}',
    });
    const listed = ((await h.json()) as { result: Array<{ id: string }> }).result;
    assert.ok(!listed.some((s) => s.id === id), 'the runner no longer has it');
  });
});
