/**
 * sandboxd's own clients of the code interpreter against the real server on the real
 * runtime with a sandbox of `local/code-interpreter`: the SDK's runCode with each option,
 * rich results, errors, contexts, env vars, timeout and abort interrupting the run; the API's
 * refusals; and `sbx run` as the real binary.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { type Execution, NotFoundError, Sandbox, SandboxdClient, ValidationError } from '@sandboxd/sdk';
import { IMAGE, newAccount, startServer, type Server } from '../harness.js';

const CI_IMAGE = process.env.SANDBOXD_E2E_CI_IMAGE ?? 'local/code-interpreter:latest';
const SBX = resolve(fileURLToPath(import.meta.url), '../../../../packages/cli/bin/sbx.js');
/** A run that must not wait behind an earlier one gets this long; past it, it ends with TimeoutError. */
const NEXT_RUN_MS = 30_000;
const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47]);

describe('code interpreter: sandboxd API, SDK and CLI', { timeout: 900_000 }, () => {
  let s: Server;
  let key: string;
  let otherKey: string;
  let client: SandboxdClient;
  let sb: Sandbox;
  let dir: string;

  before(async () => {
    // A busy host may take a while to start the sandbox's kernel: the create waits for it.
    s = await startServer({ env: { SANDBOXD_SERVICE_START_TIMEOUT_MS: '240000' } });
    key = (await newAccount(s, { tokens: 1_000_000 })).key;
    otherKey = (await newAccount(s, { tokens: 1_000_000 })).key;
    client = new SandboxdClient({ apiKey: key, apiUrl: s.baseUrl, timeoutMs: 300_000 });
    sb = await Sandbox.create({ image: CI_IMAGE, env: { FROM_CREATE: 'created' }, timeoutMs: 900_000 }, client);
    dir = mkdtempSync(join(tmpdir(), 'sbx-run-e2e-'));
  });
  after(async () => {
    await s?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const api = (method: string, path: string, body?: unknown, k: string = key) =>
    s.api(method, `/api/v1/sandboxes/${sb.id}/code${path}`, { key: k, body });

  it('runCode: state kept between runs, stdout, the main result, execution count, callbacks in order', async () => {
    const events: string[] = [];
    const ex = await sb.runCode(
      'import sys\nx = 41\nprint("hi", flush=True)\nprint("warn", file=sys.stderr, flush=True)\nx + 1',
      {
        onStdout: (t) => void events.push(`stdout:${t}`),
        onStderr: (t) => void events.push(`stderr:${t}`),
        onResult: (r) => void events.push(`result:${r.text}`),
      },
    );
    assert.equal(ex.error, undefined, JSON.stringify(ex.error));
    assert.equal(ex.text, '42');
    assert.deepEqual(ex.logs.stdout, ['hi\n']);
    assert.deepEqual(ex.logs.stderr, ['warn\n']);
    assert.ok(typeof ex.executionCount === 'number' && ex.executionCount >= 1);
    assert.deepEqual(events, ['stdout:hi\n', 'stderr:warn\n', 'result:42']);
    const again = await sb.runCode('x');
    assert.equal(again.text, '41');
    assert.equal(again.executionCount, (ex.executionCount ?? 0) + 1);
  });

  it('rich results: a matplotlib figure as png (and chart), a DataFrame as html and data, display outputs not main', async () => {
    const plot = await sb.runCode(
      'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()',
    );
    assert.equal(plot.error, undefined, JSON.stringify(plot.error));
    const fig = plot.results.find((r) => r.png);
    assert.ok(fig, `a png result among ${JSON.stringify(plot.results.map((r) => r.formats()))}`);
    assert.equal(fig.isMainResult, false);
    assert.ok(fig.formats().includes('png'));
    assert.deepEqual(Buffer.from(fig.png!, 'base64').subarray(0, 4), PNG_MAGIC);
    if (fig.chart) assert.equal(fig.chart.title, 'squares');

    const df = await sb.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})');
    assert.equal(df.error, undefined, JSON.stringify(df.error));
    const main = df.results.find((r) => r.isMainResult);
    assert.ok(main, 'a main result');
    assert.ok(main.html?.includes('<table'), main.html);
    assert.ok(main.data, `DataFrame data in ${JSON.stringify(main.formats())}`);
    assert.ok(JSON.stringify(main.data).includes('"x"'));
  });

  it('errors: the exception with its traceback (onError called); the kernel goes on', async () => {
    const seen: string[] = [];
    const ex = await sb.runCode('def f():\n    return 1 / 0\nf()', { onError: (e) => void seen.push(e.name) });
    assert.equal(ex.error?.name, 'ZeroDivisionError');
    assert.match(ex.error.value, /division by zero/);
    assert.match(ex.error.traceback, /ZeroDivisionError/);
    assert.deepEqual(seen, ['ZeroDivisionError']);
    assert.equal((await sb.runCode('2 * 3')).text, '6');
  });

  it("envs: the sandbox's own env vars, per-run envs that do not leak into the next run", async () => {
    const code = 'import os\nprint(os.environ.get("FROM_CREATE"), os.environ.get("PER_RUN"))';
    const withEnv = await sb.runCode(code, { envs: { PER_RUN: 'yes', FROM_CREATE: 'overridden' } });
    assert.deepEqual(withEnv.logs.stdout.join(''), 'overridden yes\n');
    const next = await sb.runCode(code);
    assert.deepEqual(next.logs.stdout.join(''), 'created None\n');
  });

  it('languages: javascript and bash by language; an unknown one is a ValidationError', async () => {
    const js = await sb.runCode('const a = 6 * 7; await Promise.resolve(a)', { language: 'javascript' });
    assert.equal(js.error, undefined, JSON.stringify(js.error));
    assert.equal(js.text, '42');
    const ts = await sb.runCode('const n: number = 5;\nn * 2', { language: 'typescript' });
    assert.equal(ts.error, undefined, JSON.stringify(ts.error));
    assert.equal(ts.text, '10');
    const sh = await sb.runCode('echo "$((6 * 7)) $FROM_CREATE"', { language: 'bash' });
    assert.equal(sh.logs.stdout.join(''), '42 created\n');
    await assert.rejects(sb.runCode('1', { language: 'cobol' }), ValidationError);
  });

  it('contexts: create with cwd, independent state, list, restart loses state, remove; gone ones are NotFoundError', async () => {
    const ctx = await sb.createCodeContext({ language: 'python', cwd: '/tmp' });
    assert.equal(ctx.language, 'python');
    assert.equal(ctx.cwd, '/tmp');
    assert.equal((await sb.runCode('import os\nos.getcwd()', { context: ctx })).text, '/tmp');
    assert.equal((await sb.runCode('x', { context: ctx })).error?.name, 'NameError', 'x of the default context');
    await sb.runCode('y = 5', { context: ctx });
    assert.equal((await sb.runCode('y', { context: ctx.id })).text, '5');
    assert.ok((await sb.listCodeContexts()).some((c) => c.id === ctx.id));
    await sb.restartCodeContext(ctx);
    assert.equal((await sb.runCode('y', { context: ctx })).error?.name, 'NameError');
    await sb.removeCodeContext(ctx);
    assert.ok(!(await sb.listCodeContexts()).some((c) => c.id === ctx.id));
    await assert.rejects(sb.runCode('1', { context: ctx }), NotFoundError);
    await assert.rejects(sb.restartCodeContext(ctx), NotFoundError);
  });

  /** The next run ends by itself, without waiting behind an earlier one. */
  async function nextRunWorks(): Promise<void> {
    const ex: Execution = await sb.runCode('1 + 1', { timeoutMs: NEXT_RUN_MS });
    assert.equal(ex.error, undefined, `the next run: ${JSON.stringify(ex.error)}`);
    assert.equal(ex.text, '2');
  }

  it('timeoutMs interrupts the run (error TimeoutError) and the next run works', async () => {
    const ex = await sb.runCode('import time\nprint("sleeping", flush=True)\ntime.sleep(600)', { timeoutMs: 3000 });
    assert.equal(ex.error?.name, 'TimeoutError');
    await nextRunWorks();
  });

  it('aborting the signal interrupts the run in the sandbox and the next run works', async () => {
    const stop = new AbortController();
    const run = sb.runCode('import time\nprint("started", flush=True)\ntime.sleep(600)', {
      signal: stop.signal,
      onStdout: () => stop.abort(new Error('stopped by the test')),
    });
    await assert.rejects(run, /stopped by the test/);
    await nextRunWorks();
  });

  it('API: refusals with {code, kind, message, details}', async () => {
    const lang = await api('POST', '/execute', { code: '1', language: 'cobol' });
    assert.equal(lang.status, 400, lang.text);
    assert.equal(lang.body.kind, 'validation');
    assert.match(lang.body.message, /cobol/i);

    const ctx = await api('POST', '/execute', { code: '1', contextId: 'no-such-context' });
    assert.equal(ctx.status, 404, ctx.text);
    assert.equal(ctx.body.kind, 'not_found');

    const both = await api('POST', '/execute', { code: '1', contextId: 'a', language: 'python' });
    assert.equal(both.status, 400);
    assert.match(both.body.message, /Only one of contextId or language/);

    const bad = await api('POST', '/execute', { code: 1 });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.kind, 'validation');
    assert.ok(
      JSON.stringify(bad.body.details).includes('/code'),
      `the field is named: ${JSON.stringify(bad.body.details)}`,
    );
    const missing = await api('POST', '/execute', { language: 'python' });
    assert.equal(missing.status, 400);
    assert.match(JSON.stringify(missing.body), /code/);

    const other = await api('POST', '/execute', { code: '1' }, otherKey);
    assert.equal(other.status, 404);
    assert.equal(other.body.kind, 'not_found');
    assert.equal((await api('GET', '/contexts', undefined, otherKey)).status, 404);

    const unknownCtx = await api('DELETE', '/contexts/no-such-context');
    assert.equal(unknownCtx.status, 404);

    const created = await api('POST', '/contexts', {});
    assert.equal(created.status, 201, created.text);
    assert.equal(created.body.language, 'python');
    const listed = await api('GET', '/contexts');
    assert.ok(listed.body.contexts.some((c: { id: string }) => c.id === created.body.id));
    assert.equal((await api('POST', `/contexts/${created.body.id}/restart`)).status, 204);
    assert.equal((await api('DELETE', `/contexts/${created.body.id}`)).status, 204);
  });

  it('API: a session cookie works with a same-origin Origin on state changes, and is 401 without', async () => {
    const email = `ci-cookie-${Date.now()}@example.com`;
    const made = await s.api('POST', '/api/v1/admin/accounts', {
      body: { email, password: 'password123', tokens: 100_000 },
    });
    assert.equal(made.status, 201, made.text);
    const login = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email, password: 'password123' } });
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    const own = await s.api('POST', '/api/v1/sandboxes', {
      key: null,
      body: { image: CI_IMAGE, timeoutMs: 300_000 },
      headers: { cookie, origin: s.baseUrl },
    });
    assert.equal(own.status, 201, own.text);
    const path = `/api/v1/sandboxes/${own.body.sandbox.id}/code/execute`;
    const body = { code: '6 * 7' };
    const noOrigin = await s.api('POST', path, { key: null, body, headers: { cookie } });
    assert.equal(noOrigin.status, 401, noOrigin.text);
    const ok = await s.api('POST', path, { key: null, body, headers: { cookie, origin: s.baseUrl } });
    assert.equal(ok.status, 200, ok.text);
    assert.match(ok.headers.get('content-type') ?? '', /application\/x-ndjson/);
    const events = ok.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(events.find((e) => e.type === 'result')?.result, { text: '42', isMainResult: true });
    assert.equal(events.at(-1).type, 'end');
    const listed = await s.api('GET', `/api/v1/sandboxes/${own.body.sandbox.id}/code/contexts`, {
      key: null,
      headers: { cookie },
    });
    assert.equal(listed.status, 200, 'a GET needs no Origin');
    await s.api('DELETE', `/api/v1/sandboxes/${own.body.sandbox.id}`, {
      key: null,
      headers: { cookie, origin: s.baseUrl },
    });
  });

  it('API: a sandbox that is not of the image is 409 no_code_interpreter naming the image; a paused one 409 conflict', async () => {
    const plain = await Sandbox.create({ image: IMAGE, timeoutMs: 300_000 }, client);
    try {
      const r = await s.api('POST', `/api/v1/sandboxes/${plain.id}/code/execute`, { key, body: { code: '1' } });
      assert.equal(r.status, 409, r.text);
      assert.equal(r.body.kind, 'no_code_interpreter');
      assert.equal(r.body.details.image, 'local/code-interpreter');
      assert.match(r.body.message, /local\/code-interpreter/);
      await plain.pause();
      const paused = await s.api('GET', `/api/v1/sandboxes/${plain.id}/code/contexts`, { key });
      assert.equal(paused.status, 409);
      assert.equal(paused.body.kind, 'conflict');
      assert.equal(paused.body.details.state, 'paused');
    } finally {
      await plain.delete();
    }
  });

  interface Run {
    code: number | null;
    stdout: string;
    stderr: string;
  }
  /** Runs the real `sbx` in `dir` (bounded), with `input` on stdin. */
  const sbx = (args: string[], input = ''): Promise<Run> =>
    new Promise((res, rej) => {
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env))
        if (v !== undefined && !['NO_COLOR', 'FORCE_COLOR'].includes(k)) env[k] = v;
      Object.assign(env, { HOME: dir, SANDBOX_API_URL: s.baseUrl, SANDBOX_API_KEY: key });
      const p = spawn(SBX, args, { cwd: dir, env, stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b) => (stdout += b));
      p.stderr.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 180_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
      p.stdin.end(input);
    });

  it('sbx run: code argument, -f FILE, stdin, -l and -e', async () => {
    const a = await sbx(['run', sb.id, 'print("from arg")\n6 * 7']);
    assert.equal(a.code, 0, a.stderr);
    assert.equal(a.stdout, 'from arg\n42\n');
    writeFileSync(join(dir, 'cell.py'), 'import os\nprint(os.environ["CLI_ENV"])\n');
    const f = await sbx(['run', sb.id, '-e', 'CLI_ENV=from-flag', '-f', join(dir, 'cell.py')]);
    assert.equal(f.code, 0, f.stderr);
    assert.equal(f.stdout, 'from-flag\n');
    const i = await sbx(['run', '-l', 'bash', sb.id, '-'], 'echo "from stdin $((1 + 2))"\n');
    assert.equal(i.code, 0, i.stderr);
    assert.equal(i.stdout, 'from stdin 3\n');
  });

  it('sbx run: an image result is saved to a file and its path printed; --out-dir; --json prints events', async () => {
    const code = 'import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()';
    const r = await sbx(['run', sb.id, code]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /result-1\.png/);
    assert.deepEqual(readFileSync(join(dir, 'result-1.png')).subarray(0, 4), PNG_MAGIC);
    const out = join(dir, 'plots');
    const o = await sbx(['run', sb.id, '--out-dir', out, code]);
    assert.equal(o.code, 0, o.stderr);
    assert.ok(existsSync(join(out, 'result-1.png')), readdirSync(dir).join(' '));
    const j = await sbx(['run', sb.id, '--json', 'print(1)\n2']);
    assert.equal(j.code, 0, j.stderr);
    const events = j.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      events.map((e) => e.type),
      ['stdout', 'result', 'executionCount', 'end'],
    );
    assert.equal(events[1].result.text, '2');
  });

  it('sbx run: a code error prints its traceback to stderr and exits 1', async () => {
    const r = await sbx(['run', sb.id, 'raise ValueError("bad value")']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /ValueError/);
    assert.match(r.stderr, /bad value/);
    const gone = await sbx(['run', '--context', 'no-such-context', sb.id, '1']);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /^error: /m);
  });
});
