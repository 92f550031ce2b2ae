/** sandbox.runCode and the code contexts against an in-process server speaking sandboxd's code routes. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { body, fail, fakeServer, json, ndjson, sleep, type FakeServer } from '../test/fake-server.js';
import { Result } from './code.js';
import { ConnectionError, NoCodeInterpreterError, NotFoundError, ValidationError } from './errors.js';

describe('sandbox.runCode and code contexts', { timeout: 30_000 }, () => {
  let s: FakeServer;
  before(async () => {
    s = await fakeServer();
  });
  after(() => s.close());

  it('sends every option, calls back each event as it comes and resolves with the execution', async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const requests: unknown[] = [];
    s.route('POST', '/code/execute', async (req, res) => {
      requests.push({ accept: req.headers.accept, ...JSON.parse((await body(req)).toString()) });
      const out = ndjson(res);
      out.line({ type: 'stdout', text: 'a\n', timestamp: '2026-01-01T00:00:00.000Z' });
      // Nothing more until the client has called back for the first chunk.
      await released;
      out.line({ type: 'stderr', text: 'w\n', timestamp: '2026-01-01T00:00:01.000Z' });
      out.line({ type: 'result', result: { png: 'iVBOR', isMainResult: false } });
      out.line({
        type: 'result',
        result: { text: '2', html: '<b>2</b>', data: { a: [1] }, extra: { 'x/y': 1 }, isMainResult: true },
      });
      out.line({ type: 'executionCount', count: 7 });
      out.line({ type: 'end' });
      out.end();
    });
    const seen: string[] = [];
    const ex = await s.sandbox().runCode('print(1)', {
      language: 'python',
      envs: { A: 'b' },
      timeoutMs: 5000,
      onStdout: (t, at) => {
        seen.push(`out:${t}:${at.toISOString()}`);
        release();
      },
      onStderr: (t) => void seen.push(`err:${t}`),
      onResult: (r) => void seen.push(`result:${r.formats().join(',')}`),
    });
    assert.deepEqual(requests, [
      {
        accept: 'application/x-ndjson',
        code: 'print(1)',
        language: 'python',
        envs: { A: 'b' },
        timeoutMs: 5000,
      },
    ]);
    assert.deepEqual(seen, ['out:a\n:2026-01-01T00:00:00.000Z', 'err:w\n', 'result:png', 'result:text,html,data,x/y']);
    assert.deepEqual(ex.logs, { stdout: ['a\n'], stderr: ['w\n'] });
    assert.equal(ex.text, '2');
    assert.equal(ex.executionCount, 7);
    assert.equal(ex.error, undefined);
    assert.ok(ex.results[1] instanceof Result);
    assert.deepEqual(ex.results[1].data, { a: [1] });
    assert.deepEqual(ex.results[1].toJSON(), {
      text: '2',
      html: '<b>2</b>',
      data: { a: [1] },
      extra: { 'x/y': 1 },
      isMainResult: true,
    });
  });

  it('a code error is the execution’s error (onError called), not a rejection; a context goes by id', async () => {
    const requests: unknown[] = [];
    s.route('POST', '/code/execute', async (req, res) => {
      requests.push(JSON.parse((await body(req)).toString()));
      const out = ndjson(res);
      out.line({ type: 'error', name: 'ZeroDivisionError', value: 'division by zero', traceback: 'Traceback\n...' });
      out.line({ type: 'end' });
      out.end();
    });
    const errors: string[] = [];
    const ex = await s.sandbox().runCode('1/0', {
      context: { id: 'ctx-1', language: 'python', cwd: '/' },
      onError: (e) => void errors.push(e.name),
    });
    assert.deepEqual(ex.error, { name: 'ZeroDivisionError', value: 'division by zero', traceback: 'Traceback\n...' });
    assert.deepEqual(errors, ['ZeroDivisionError']);
    assert.deepEqual(requests, [{ code: '1/0', contextId: 'ctx-1' }]);
    await assert.rejects(s.sandbox().runCode('1', { context: 'c', language: 'python' }), TypeError);
  });

  it('a run past its timeout resolves with error TimeoutError; a stream cut before its end rejects ConnectionError', async () => {
    s.route('POST', '/code/execute', async (_req, res) => {
      const out = ndjson(res);
      out.line({ type: 'error', name: 'TimeoutError', value: 'took longer', traceback: '' });
      out.end();
    });
    const ex = await s.sandbox().runCode('sleep', { timeoutMs: 10 });
    assert.equal(ex.error?.name, 'TimeoutError');
    s.route('POST', '/code/execute', async (_req, res) => {
      const out = ndjson(res);
      out.line({ type: 'stdout', text: 'x' });
      res.destroy();
    });
    await assert.rejects(s.sandbox().runCode('x'), ConnectionError);
  });

  it('aborting the signal closes the request (the server sees it go) and rejects with its reason', async () => {
    let closed!: () => void;
    const gone = new Promise<void>((r) => (closed = r));
    s.route('POST', '/code/execute', async (_req, res) => {
      res.once('close', () => closed());
      const out = ndjson(res);
      out.line({ type: 'stdout', text: 'running\n' });
    });
    const ctrl = new AbortController();
    const run = s.sandbox().runCode('while True: pass', {
      signal: ctrl.signal,
      onStdout: () => ctrl.abort(new Error('stop it')),
    });
    await assert.rejects(run, /stop it/);
    await gone;
  });

  it('error answers are typed: 400 ValidationError, 404 NotFoundError, 409 NoCodeInterpreterError', async () => {
    for (const [status, kind, cls] of [
      [400, 'validation', ValidationError],
      [404, 'not_found', NotFoundError],
      [409, 'no_code_interpreter', NoCodeInterpreterError],
    ] as const) {
      s.route('POST', '/code/execute', (_req, res) =>
        fail(res, status, kind, `nope ${kind}`, { image: 'local/code-interpreter' }),
      );
      await assert.rejects(s.sandbox().runCode('1', { language: 'cobol' }), (e: Error) => {
        assert.ok(e instanceof cls, e.constructor.name);
        assert.match(e.message, new RegExp(kind));
        return true;
      });
    }
  });

  it('contexts: create, list, restart, remove by object or id', async () => {
    const calls: string[] = [];
    s.route('POST', '/code/contexts', async (req, res) => {
      calls.push(`create ${(await body(req)).toString()}`);
      json(res, 201, { id: 'c1', language: 'javascript', cwd: '/tmp' });
    });
    s.route('GET', '/code/contexts', (_req, res) =>
      json(res, 200, { contexts: [{ id: 'c1', language: 'javascript', cwd: '/tmp' }] }),
    );
    s.route('POST', /^\/code\/contexts\/[^/]+\/restart$/, (req, res) => {
      calls.push(`restart ${req.url}`);
      res.writeHead(204).end();
    });
    s.route('DELETE', /^\/code\/contexts\/[^/]+$/, async (req, res) => {
      await sleep(1);
      calls.push(`delete ${req.url}`);
      res.writeHead(204).end();
    });
    const sbx = s.sandbox();
    const ctx = await sbx.createCodeContext({ language: 'javascript', cwd: '/tmp' });
    assert.deepEqual(ctx, { id: 'c1', language: 'javascript', cwd: '/tmp' });
    assert.deepEqual(await sbx.listCodeContexts(), [ctx]);
    await sbx.restartCodeContext(ctx);
    await sbx.removeCodeContext('c1');
    assert.equal(calls[0], 'create {"language":"javascript","cwd":"/tmp"}');
    assert.match(calls[1], /\/code\/contexts\/c1\/restart$/);
    assert.match(calls[2], /\/code\/contexts\/c1$/);
  });
});
