/** Live processes over HTTP on the real runtime: streamed exec, stdin, signals, list, reconnect with replay. */
import assert from 'node:assert/strict';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { after, before, describe, it } from 'node:test';
import { IMAGE, newAccount, startServer, type Server } from './harness.js';

type Event = {
  type: string;
  pid?: number;
  data?: string;
  dataBase64?: string;
  exitCode?: number;
  signal?: string | null;
};

/** Reads NDJSON events from a response body; `until` may stop early (the connection is then dropped). */
async function readEvents(res: Response, until?: (ev: Event, all: Event[]) => boolean): Promise<Event[]> {
  const events: Event[] = [];
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl = buf.indexOf('\n');
    while (nl >= 0) {
      const ev = JSON.parse(buf.slice(0, nl)) as Event;
      buf = buf.slice(nl + 1);
      nl = buf.indexOf('\n');
      events.push(ev);
      if (until?.(ev, events)) {
        await reader.cancel();
        return events;
      }
    }
  }
  return events;
}

/**
 * A response body's NDJSON events one at a time, whatever the boundaries of its reads (a
 * read may end inside a line, or carry several lines: the start line and output together
 * when the client was slow to read). null at the end; a body that ends inside a line fails.
 */
function eventsOf(res: Response): { next(): Promise<Event | null> } {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let buf = '';
  return {
    async next() {
      for (;;) {
        const nl = buf.indexOf('\n');
        if (nl >= 0) {
          const ev = JSON.parse(buf.slice(0, nl)) as Event;
          buf = buf.slice(nl + 1);
          return ev;
        }
        const { value, done } = await reader.read();
        if (done) {
          assert.equal(buf + dec.decode(), '', 'the body ends with a whole line');
          return null;
        }
        buf += dec.decode(value, { stream: true });
      }
    },
  };
}

/**
 * Stalls this process's whole thread for `ms` once, right after the next fetch has sent its
 * request (undici's `undici:request:bodySent`): the server writes on meanwhile, as it does
 * while a loaded machine keeps a client from reading. `done()`: the stall happened.
 */
function stallOnce(ms: number): { done(): boolean } {
  let stalled = false;
  const onSent = () => {
    unsubscribe('undici:request:bodySent', onSent);
    stalled = true;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  };
  subscribe('undici:request:bodySent', onSent);
  return { done: () => stalled };
}

const text = (events: Event[], type = 'stdout') =>
  events
    .filter((e) => e.type === type)
    .map((e) => (e.data !== undefined ? e.data : Buffer.from(e.dataBase64 ?? '', 'base64').toString('latin1')))
    .join('');

describe('processes (streamed exec, stdin, signals, reconnect)', { timeout: 120_000 }, () => {
  let s: Server;
  let key: string;
  let id: string;
  let debian: string;
  const post = (path: string, body?: unknown, raw?: string) =>
    fetch(`${s.baseUrl}/api/v1/sandboxes/${id}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: raw ?? (body ? JSON.stringify(body) : undefined),
    });
  const stream = (command: string, options: Record<string, unknown> = {}, sb = id) =>
    fetch(`${s.baseUrl}/api/v1/sandboxes/${sb}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command, options: { stream: true, ...options } }),
    });

  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { tokens: 1_000_000 })).key;
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE } });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    const d = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: 'local/debian:bookworm' } });
    assert.equal(d.status, 201, d.text);
    debian = d.body.sandbox.id;
  });
  after(() => s?.stop());

  it('streams start, stdout/stderr as produced, then exit; answers stdin while running', async () => {
    const res = await stream('echo first; echo err >&2; read x; echo "got $x"; exit 3', { stdin: true });
    assert.equal(res.status, 200);
    assert.match(String(res.headers.get('content-type')), /application\/x-ndjson/);
    const events: Event[] = [];
    let pid = 0;
    // The process waits on stdin: "first" must arrive before it can end (live, not at exit).
    const all = await readEvents(res, (ev, evs) => {
      if (ev.type === 'start') pid = ev.pid as number;
      if (ev.type === 'stdout' && ev.data === 'first\n') {
        void post(`/processes/${pid}/stdin`, undefined, 'hello\n');
      }
      events.splice(0, events.length, ...evs);
      return false;
    });
    assert.equal(all[0].type, 'start');
    assert.ok(pid > 0);
    assert.equal(text(all), 'first\ngot hello\n');
    assert.equal(text(all, 'stderr'), 'err\n');
    assert.deepEqual(all.at(-1), { type: 'exit', exitCode: 3, signal: null });
  });

  it('a client that drops and reconnects by pid gets every byte and the exit code', async () => {
    const res = await stream('seq 1 5000; read x; seq 5001 20000; exit 7', { stdin: true, tag: 'counter' });
    let pid = 0;
    const first = await readEvents(res, (ev, evs) => {
      if (ev.type === 'start') pid = ev.pid as number;
      return text(evs).includes('\n5000\n');
    });
    assert.ok(first.length > 1);
    // Dropped. The process goes on once it gets its line.
    assert.equal((await post(`/processes/${pid}/stdin`, undefined, 'go\n')).status, 204);
    const again = await fetch(`${s.baseUrl}/api/v1/sandboxes/${id}/processes/${pid}/output?follow=true`, {
      headers: { authorization: `Bearer ${key}` },
    });
    assert.equal(again.status, 200);
    const rest = await readEvents(again);
    assert.equal(rest[0].type, 'start');
    assert.deepEqual((rest[0] as { replayFrom?: unknown }).replayFrom, { stdout: 0, stderr: 0 });
    const lines = text(rest).trimEnd().split('\n');
    assert.equal(lines.length, 20000);
    assert.ok(lines.every((l, i) => l === String(i + 1)));
    assert.deepEqual(rest.at(-1), { type: 'exit', exitCode: 7, signal: null });
    const list = await s.api('GET', `/api/v1/sandboxes/${id}/processes`, { key });
    const p = list.body.processes.find((x: { pid: number }) => x.pid === pid);
    assert.equal(p.tag, 'counter');
    assert.equal(p.running, false);
    assert.equal(p.exitCode, 7);
    // Without follow: the kept output and the exit, at once.
    const once = await fetch(`${s.baseUrl}/api/v1/sandboxes/${id}/processes/${pid}/output`, {
      headers: { authorization: `Bearer ${key}` },
    });
    const kept = await readEvents(once);
    assert.equal(text(kept), text(rest));
  });

  it('keeps the last 1 MiB for replay and says how much came before it', async () => {
    const c = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key,
      body: { command: 'head -c 3000000 /dev/zero | tr "\\0" a; echo; echo end', options: { background: true } },
    });
    assert.equal(c.status, 200, c.text);
    // Once it has exited, what is kept is all there is.
    for (let i = 0; i < 600; i++) {
      const l = await s.api('GET', `/api/v1/sandboxes/${id}/processes`, { key });
      if (!l.body.processes.find((x: { pid: number }) => x.pid === c.body.pid).running) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const out = await fetch(`${s.baseUrl}/api/v1/sandboxes/${id}/processes/${c.body.pid}/output?follow=true`, {
      headers: { authorization: `Bearer ${key}` },
    });
    const evs = await readEvents(out);
    assert.deepEqual(evs.at(-1), { type: 'exit', exitCode: 0, signal: null });
    const start = evs[0] as unknown as { replayFrom: { stdout: number; stderr: number } };
    const got = text(evs);
    assert.ok(got.endsWith('a\nend\n'));
    assert.equal(start.replayFrom.stdout + Buffer.byteLength(got), 3_000_000 + 5);
    assert.ok(Buffer.byteLength(got) <= 1 << 20);
  });

  it('slows a producer whose reader does not read, instead of buffering it; then delivers every byte', async () => {
    // The client's thread stalls once its request is sent, as on a loaded machine: its first
    // read then carries the start line and output together. Every line is counted, from the first byte.
    const stall = stallOnce(1000);
    const res = await stream('head -c 50000000 /dev/zero | tr "\\0" a; echo done >&2');
    const events = eventsOf(res);
    const start = await events.next();
    assert.equal(stall.done(), true, 'the client stalled');
    assert.equal(start?.type, 'start');
    const pid = start?.pid as number;
    // Not reading: whatever the machine's speed, 50 MB cannot pass a window of a few hundred KiB.
    await new Promise((r) => setTimeout(r, 1500));
    const list = await s.api('GET', `/api/v1/sandboxes/${id}/processes`, { key });
    assert.equal(list.body.processes.find((x: { pid: number }) => x.pid === pid).running, true);
    let stdout = 0;
    let stderr = '';
    let last: Event | null = null;
    for (let ev = await events.next(); ev; ev = await events.next()) {
      if (ev.type === 'stdout') {
        assert.ok(ev.data !== undefined && /^a*$/.test(ev.data), 'stdout is the payload, as text');
        stdout += ev.data.length;
      } else if (ev.type === 'stderr') stderr += ev.data;
      else last = ev;
    }
    // Exactly the payload: a byte lost (or doubled) anywhere fails.
    assert.equal(stdout, 50_000_000);
    assert.equal(stderr, 'done\n');
    assert.deepEqual(last, { type: 'exit', exitCode: 0, signal: null });
  });

  it('signals, stdin rules, unknown pids and the process list', async () => {
    const res = await stream('sleep 100', { stdin: true });
    const events = eventsOf(res);
    const pid = (await events.next())?.pid as number;
    const list = await s.api('GET', `/api/v1/sandboxes/${id}/processes`, { key });
    const p = list.body.processes.find((x: { pid: number }) => x.pid === pid);
    assert.deepEqual(Object.keys(p).sort(), ['command', 'cwd', 'exitCode', 'pid', 'running', 'startedAt', 'tag']);
    assert.equal(p.command, 'sleep 100');
    assert.equal(p.running, true);
    assert.equal((await post(`/processes/${pid}/signal`, { signal: 'SIGBOGUS' })).status, 400);
    assert.equal((await post(`/processes/${pid}/signal`, { signal: 'SIGTERM' })).status, 204);
    let last: Event | null = null;
    for (let ev = await events.next(); ev; ev = await events.next()) last = ev;
    assert.deepEqual(last, { type: 'exit', exitCode: 143, signal: 'SIGTERM' });
    assert.equal((await post(`/processes/${pid}/signal`, { signal: 'SIGKILL' })).status, 409);
    assert.equal((await post(`/processes/${pid}/stdin`, undefined, 'late')).status, 409);
    assert.equal((await post('/processes/999999/stdin', undefined, 'x')).status, 404);
    assert.equal((await post('/processes/999999/signal', { signal: 'SIGTERM' })).status, 404);
    assert.equal((await post('/processes/abc/stdin/close')).status, 400);
    const missing = await fetch(`${s.baseUrl}/api/v1/sandboxes/${id}/processes/999999/output`, {
      headers: { authorization: `Bearer ${key}` },
    });
    assert.equal(missing.status, 404);
    // Started without stdin: writes are refused.
    const bg = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key,
      body: { command: 'sleep 30', options: { background: true } },
    });
    assert.equal((await post(`/processes/${bg.body.pid}/stdin`, undefined, 'x')).status, 409);
    assert.equal((await post(`/processes/${bg.body.pid}/stdin/close`)).status, 409);
    assert.equal((await post(`/processes/${bg.body.pid}/signal`, { signal: 'SIGKILL' })).status, 204);
    // stdin without stream or background is a validation error.
    const bad = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key,
      body: { command: 'cat', options: { stdin: true } },
    });
    assert.equal(bad.status, 400);
  });

  it('closing stdin gives EOF; big stdin arrives whole', async () => {
    const res = await stream('wc -c', { stdin: true });
    let resolvePid: (pid: number) => void = () => {};
    const pidP = new Promise<number>((r) => {
      resolvePid = r;
    });
    const all = readEvents(res, (ev) => {
      if (ev.type === 'start') resolvePid(ev.pid as number);
      return false;
    });
    const pid = await pidP;
    const chunk = 'x'.repeat(1 << 20);
    for (let i = 0; i < 8; i++) assert.equal((await post(`/processes/${pid}/stdin`, undefined, chunk)).status, 204);
    assert.equal((await post(`/processes/${pid}/stdin/close`)).status, 204);
    const evs = await all;
    assert.equal(text(evs).trim(), String(8 << 20));
    assert.deepEqual(evs.at(-1), { type: 'exit', exitCode: 0, signal: null });
  });

  it('drives an interactive python3 -i through stdin', async () => {
    const res = await stream('python3 -i -q -u', { stdin: true }, debian);
    const say = (pid: number, line: string) =>
      fetch(`${s.baseUrl}/api/v1/sandboxes/${debian}/processes/${pid}/stdin`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}` },
        body: line,
      });
    let pid = 0;
    let step = 0;
    const evs = await readEvents(res, (ev, all) => {
      if (ev.type === 'start') {
        pid = ev.pid as number;
        void say(pid, 'x = 6 * 7\nprint("answer", x)\n');
      }
      const out = text(all);
      if (step === 0 && out.includes('answer 42')) {
        step = 1;
        void say(pid, 'import sys; sys.stdout.write("bye\\n"); sys.exit(5)\n');
      }
      return false;
    });
    assert.match(text(evs), /answer 42\n[\s\S]*bye\n/);
    assert.deepEqual(evs.at(-1), { type: 'exit', exitCode: 5, signal: null });
  });

  it('runs as another user, and refuses an unknown one', async () => {
    const e = await s.api('POST', `/api/v1/sandboxes/${debian}/exec`, {
      key,
      body: { command: 'id -u; echo $HOME', options: { user: 'nobody' } },
    });
    assert.equal(e.status, 200, e.text);
    assert.equal(e.body.stdout, '65534\n/nonexistent\n');
    const bad = await s.api('POST', `/api/v1/sandboxes/${debian}/exec`, {
      key,
      body: { command: 'id -u', options: { user: 'nosuchuser', stream: true } },
    });
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.body.message, /Unknown user/);
  });

  it('refuses streamed exec on a sandbox that is not started', async () => {
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE } });
    const sid = c.body.sandbox.id;
    assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${sid}`, { key })).status, 204);
    const r = await stream('true', {}, sid);
    assert.equal(r.status, 404);
  });
});
