/** Streamed and background exec, process handles and sandbox.processes against an in-process server. */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { body, fail, fakeServer, json, ndjson, sleep, type FakeServer } from '../test/fake-server.js';
import { ConflictError, NotFoundError } from './errors.js';
import type { ProcessHandle } from './process-handle.js';

const b64 = (b: Uint8Array | number[]) => Buffer.from(b).toString('base64');

/** Collects what a handle's callbacks got. */
function collector() {
  const c = {
    stdout: [] as string[],
    stderr: [] as string[],
    bytes: { stdout: [] as Buffer[], stderr: [] as Buffer[] },
    onStdout: (t: string) => void c.stdout.push(t),
    onStderr: (t: string) => void c.stderr.push(t),
    onOutput: (b: Uint8Array, s: 'stdout' | 'stderr') => void c.bytes[s].push(Buffer.from(b)),
  };
  return c;
}

describe('exec streaming, process handles, sandbox.processes', { timeout: 30_000 }, () => {
  let s: FakeServer;
  before(async () => {
    s = await fakeServer();
  });
  after(() => s.close());

  it('streams output to the callbacks as it is written, decodes dataBase64, resolves with the usual result', async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const requests: unknown[] = [];
    s.route('POST', '/exec', async (req, res) => {
      requests.push({ accept: req.headers.accept, ...JSON.parse((await body(req)).toString()) });
      const out = ndjson(res);
      out.line({ type: 'start', pid: 42 });
      out.line({ type: 'stdout', data: '1\n' });
      await sleep(20);
      out.line({ type: 'stderr', data: 'warn\n' });
      // Nothing more until the client has seen the first chunk: a client that waits for the
      // end before calling back never gets there (and the test times out).
      await released;
      out.line({ type: 'stdout', dataBase64: b64([0xc3]) }); // 'é' split across two chunks
      out.line({ type: 'stdout', dataBase64: b64([0xa9, 0x0a]) });
      out.line({ type: 'stdout', dataBase64: b64([0xff]) }); // not UTF-8
      out.line({ type: 'exit', exitCode: 3, signal: null });
      out.end();
    });
    const stdout: string[] = [];
    const stderr: string[] = [];
    const r = await s.sandbox().exec('run it', {
      onStdout: (t) => {
        stdout.push(t);
        if (t === '1\n') release();
      },
      onStderr: (t) => void stderr.push(t),
      cwd: '/tmp',
      env: { A: '1' },
      user: 'root',
      tag: 'job',
      timeoutMs: 5000,
    });
    assert.deepEqual(r, { stdout: '1\né\n\ufffd', stderr: 'warn\n', exitCode: 3, success: false });
    assert.deepEqual(stdout, ['1\n', 'é\n', '\ufffd']);
    assert.deepEqual(stderr, ['warn\n']);
    assert.deepEqual(requests, [
      {
        accept: 'application/x-ndjson',
        command: 'run it',
        options: { cwd: '/tmp', env: { A: '1' }, user: 'root', timeoutMs: 5000, tag: 'job', stream: true },
      },
    ]);
  });

  it('without callbacks, background or stdin, exec is the one-shot call it was', async () => {
    const requests: unknown[] = [];
    s.route('POST', '/exec', async (req, res) => {
      requests.push(JSON.parse((await body(req)).toString()));
      json(res, 200, { stdout: 'hi\n', stderr: '', exitCode: 0, success: true });
    });
    const r = await s.sandbox().exec('echo hi', { cwd: '/' });
    assert.deepEqual(r, { stdout: 'hi\n', stderr: '', exitCode: 0, success: true });
    assert.deepEqual(requests, [{ command: 'echo hi', options: { cwd: '/' } }]);
  });

  it('background: a handle at once, no connection until wait(); wait replays and follows; kill signals', async () => {
    const requests: unknown[] = [];
    s.route('POST', '/exec', async (req, res) => {
      requests.push(JSON.parse((await body(req)).toString()));
      json(res, 200, { stdout: '', stderr: '', exitCode: 0, success: true, pid: 7 });
    });
    s.route('GET', '/processes/7/output', async (_req, res, url) => {
      assert.equal(url.searchParams.get('follow'), 'true');
      const out = ndjson(res);
      out.line({ type: 'start', pid: 7 });
      out.line({ type: 'stdout', data: 'a' });
      await sleep(20);
      out.line({ type: 'stdout', data: 'b' });
      out.line({ type: 'exit', exitCode: 137, signal: 'SIGKILL' });
      out.end();
    });
    const signals: unknown[] = [];
    s.route('POST', '/processes/7/signal', async (req, res) => {
      signals.push(JSON.parse((await body(req)).toString()));
      res.writeHead(204).end();
    });
    const sb = s.sandbox();
    const h: ProcessHandle = await sb.exec('sleep 100', { background: true, tag: 'bg' });
    assert.equal(h.pid, 7);
    assert.deepEqual(requests, [{ command: 'sleep 100', options: { tag: 'bg', background: true } }]);
    const before = s.seen.length;
    await sleep(30);
    assert.equal(s.seen.length, before, 'no output connection before it is asked for');
    await h.kill();
    await h.kill('SIGTERM');
    assert.deepEqual(signals, [{ signal: 'SIGKILL' }, { signal: 'SIGTERM' }]);
    assert.deepEqual(await h.wait(), { stdout: 'ab', stderr: '', exitCode: 137, success: false });
    assert.deepEqual(h.exit, { exitCode: 137, signal: 'SIGKILL' });
  });

  it('stdin: writes are sent one after another in call order, then the close; 409 is a ConflictError', async () => {
    s.route('POST', '/exec', async (req, res) => {
      const b = JSON.parse((await body(req)).toString());
      assert.deepEqual(b.options, { stdin: true, background: true });
      json(res, 200, { stdout: '', stderr: '', exitCode: 0, success: true, pid: 9 });
    });
    const got: string[] = [];
    let delay = 60;
    s.route('POST', '/processes/9/stdin', async (req, res) => {
      assert.equal(req.headers['content-type'], 'application/octet-stream');
      const data = (await body(req)).toString();
      delay -= 20;
      await sleep(delay); // the first write is answered last if nothing orders them
      got.push(data);
      res.writeHead(204).end();
    });
    s.route('POST', '/processes/9/stdin/close', (_req, res) => {
      got.push('<close>');
      res.writeHead(204).end();
    });
    s.route('GET', '/processes/9/output', (_req, res) => {
      const out = ndjson(res);
      out.line({ type: 'start', pid: 9 });
      out.line({ type: 'stdout', data: got.join('') });
      out.line({ type: 'exit', exitCode: 0, signal: null });
      out.end();
    });
    s.route('POST', '/processes/10/stdin', (_req, res) => fail(res, 409, 'conflict', 'The process has exited'));
    const sb = s.sandbox();
    const h = await sb.exec('cat', { stdin: true });
    const writes = [h.sendStdin('a'), h.sendStdin('b'), h.sendStdin(new Uint8Array([0x63]))];
    await h.closeStdin();
    await Promise.all(writes);
    assert.deepEqual(got, ['a', 'b', 'c', '<close>']);
    assert.equal((await h.wait()).stdout, 'abc<close>');
    await assert.rejects(sb.processes.sendStdin(10, 'x'), ConflictError);
  });

  it('a dropped connection is resumed with output?follow=true: each byte once, and the exit code', async () => {
    const kept: [string, string][] = [
      ['stdout', 'one\n'],
      ['stderr', 'e1\n'],
      ['stdout', 'two\n'],
    ];
    s.route('POST', '/exec', async (_req, res) => {
      const out = ndjson(res);
      out.line({ type: 'start', pid: 5 });
      for (const [type, data] of kept) out.line({ type, data });
      await sleep(50);
      res.socket?.destroy();
      kept.push(['stdout', 'three\n']); // written while the client was away
    });
    const follows: string[] = [];
    s.route('GET', '/processes/5/output', async (_req, res, url) => {
      follows.push(url.search);
      const out = ndjson(res);
      out.line({ type: 'start', pid: 5 });
      // The replay, cut into other chunks than the first time.
      for (const [type, data] of [
        ['stdout', 'on'],
        ['stdout', 'e\n'],
        ['stderr', 'e1\n'],
        ['stdout', 'two\nthr'],
        ['stdout', 'ee\n'],
      ])
        out.line({ type, data });
      await sleep(30);
      out.line({ type: 'stdout', data: 'four\n' });
      out.line({ type: 'exit', exitCode: 0, signal: null });
      out.end();
    });
    const c = collector();
    const r = await s.sandbox().exec('talk', c);
    assert.equal(c.stdout.join(''), 'one\ntwo\nthree\nfour\n');
    assert.equal(c.stderr.join(''), 'e1\n');
    assert.deepEqual(r, { stdout: 'one\ntwo\nthree\nfour\n', stderr: 'e1\n', exitCode: 0, success: true });
    assert.deepEqual(follows, ['?follow=true']);
  });

  it('resumes past 1 MiB, when the server no longer has the start: aligns on content, every byte once', async () => {
    const CH = 64 << 10;
    const all: { type: 'stdout' | 'stderr'; bytes: Buffer }[] = [];
    for (let i = 0; i < 26; i++) all.push({ type: i % 5 === 4 ? 'stderr' : 'stdout', bytes: randomBytes(CH) });
    const sentFirst = 24; // 1.5 MiB before the drop; 2 chunks (128 KiB) written while away
    let timely = false;
    let seenAll!: () => void;
    const allSeen = new Promise<void>((r) => (seenAll = r));
    s.route('POST', '/exec', async (_req, res) => {
      const out = ndjson(res);
      out.line({ type: 'start', pid: 6 });
      for (const c of all.slice(0, sentFirst)) out.line({ type: c.type, dataBase64: b64(c.bytes) });
      await sleep(100);
      res.socket?.destroy();
    });
    s.route('GET', '/processes/6/output', async (_req, res: ServerResponse) => {
      const out = ndjson(res);
      out.line({ type: 'start', pid: 6 });
      // The server keeps 900 KiB: the replay starts inside a chunk, and is shorter than the
      // client's record, so the client decides once the output pauses.
      let skip = all.reduce((n, c) => n + c.bytes.length, 0) - (900 << 10);
      for (const c of all) {
        const b = skip >= c.bytes.length ? undefined : c.bytes.subarray(Math.max(0, skip));
        skip = Math.max(0, skip - c.bytes.length);
        if (b) out.line({ type: c.type, dataBase64: b64(b) });
      }
      timely = await Promise.race([
        allSeen.then(() => true),
        new Promise<boolean>((r) => setTimeout(() => r(false), 3000).unref()),
      ]);
      out.line({ type: 'exit', exitCode: 0, signal: null });
      out.end();
    });
    const want = (t: string) =>
      createHash('sha256')
        .update(Buffer.concat(all.filter((c) => c.type === t).map((c) => c.bytes)))
        .digest('hex');
    const total = all.reduce((n, c) => n + c.bytes.length, 0);
    let got = 0;
    const c = collector();
    const r = await s.sandbox().exec('noisy', {
      onOutput: (b, st) => {
        c.onOutput(b, st);
        got += b.byteLength;
        if (got === total) seenAll();
      },
    });
    assert.equal(got, total);
    assert.equal(createHash('sha256').update(Buffer.concat(c.bytes.stdout)).digest('hex'), want('stdout'));
    assert.equal(createHash('sha256').update(Buffer.concat(c.bytes.stderr)).digest('hex'), want('stderr'));
    assert.ok(timely, 'the new output of the replay came when the output paused, not only at exit');
    assert.equal(r.exitCode, 0);
    assert.equal(r.truncated, true, 'the result keeps 1 MiB per stream');
  });

  it('processes: list, connect (kept output, then live), signal, closeStdin; 404 for an unknown pid', async () => {
    const listed = [
      {
        pid: 11,
        command: 'sleep 9',
        tag: 't',
        cwd: '/',
        startedAt: '2026-11-24T10:00:00.000Z',
        running: true,
        exitCode: null,
      },
    ];
    s.route('GET', '/processes', (_req, res) => json(res, 200, { processes: listed }));
    s.route('GET', '/processes/11/output', async (_req, res) => {
      const out = ndjson(res);
      out.line({ type: 'start', pid: 11 });
      out.line({ type: 'stdout', data: 'kept\n' });
      await sleep(20);
      out.line({ type: 'stderr', data: 'live\n' });
      out.line({ type: 'exit', exitCode: 0, signal: null });
      out.end();
    });
    s.route('GET', '/processes/12/output', (_req, res) => fail(res, 404, 'not_found', 'No such process'));
    const posted: unknown[] = [];
    s.route('POST', /^\/processes\/11\/(signal|stdin\/close)$/, async (req, res, url) => {
      posted.push([url.pathname.split('/').slice(-2).join('/'), (await body(req)).toString()]);
      res.writeHead(204).end();
    });
    const p = s.sandbox().processes;
    assert.deepEqual(await p.list(), listed);
    const c = collector();
    const h = await p.connect(11, c);
    assert.equal(h.pid, 11);
    const r = await h.wait();
    assert.deepEqual([c.stdout, c.stderr], [['kept\n'], ['live\n']]);
    assert.deepEqual(r, { stdout: 'kept\n', stderr: 'live\n', exitCode: 0, success: true });
    await assert.rejects(p.connect(12), NotFoundError);
    await p.signal(11, 'SIGINT');
    await p.closeStdin(11);
    assert.deepEqual(posted, [
      ['11/signal', '{"signal":"SIGINT"}'],
      ['stdin/close', ''],
    ]);
  });

  it('a listener on a background handle connects it; reconnecting to a stopped sandbox rejects with ConflictError', async () => {
    s.route('POST', '/exec', async (req, res) => {
      const b = JSON.parse((await body(req)).toString());
      if (b.options.background) return json(res, 200, { stdout: '', stderr: '', exitCode: 0, success: true, pid: 20 });
      const out = ndjson(res);
      out.line({ type: 'start', pid: 21 });
      out.line({ type: 'stdout', data: 'x' });
      await sleep(30);
      res.socket?.destroy();
    });
    s.route('GET', '/processes/20/output', (_req, res) => {
      const out = ndjson(res);
      out.line({ type: 'start', pid: 20 });
      out.line({ type: 'stdout', data: 'late' });
      out.line({ type: 'exit', exitCode: 0, signal: null });
      out.end();
    });
    s.route('GET', '/processes/21/output', (_req, res) => fail(res, 409, 'conflict', 'Sandbox is not started'));
    const sb = s.sandbox();
    const h = await sb.exec('bg', { background: true });
    const seen: string[] = [];
    h.onStdout((t) => void seen.push(t));
    assert.equal((await h.wait()).stdout, 'late');
    assert.deepEqual(seen, ['late']);
    const lost = await sb.exec('fg', { onStdout: () => {} }).catch((e: unknown) => e);
    assert.ok(lost instanceof ConflictError, String(lost));
  });

  it("aborting the exec's signal stops following and rejects with the reason", async () => {
    s.route('POST', '/exec', (_req, res) => {
      const out = ndjson(res);
      out.line({ type: 'start', pid: 30 });
      out.line({ type: 'stdout', data: 'tick\n' });
      // and nothing more: the process runs on
    });
    const ctrl = new AbortController();
    const reason = new Error('enough');
    const p = s.sandbox().exec('forever', { onStdout: () => ctrl.abort(reason), signal: ctrl.signal });
    await assert.rejects(p, (e: unknown) => e === reason);
  });
});
