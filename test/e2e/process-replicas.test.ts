/**
 * Black-box, real runtime: one runner and TWO api processes sharing one PostgreSQL
 * database (SANDBOXD_ROLE=runner / api). Processes started through the API are tracked on
 * the runner, so a background process started through api A is listed, followed (replay,
 * then live), fed stdin and signalled through api B; a streamed exec whose api is killed
 * with -9 mid-output goes on, and its client reconnects through the other api and gets
 * every byte and the exit code; an E2B command started through one api is listed, fed and
 * followed to its end through the other.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Sandbox } from 'e2b';
import { type Server, startServer } from './harness.js';
import { e2bAt } from './e2b/support.js';
import { ReplicaPair, replicasSkip } from './replicas-support.js';
import { Waiters } from '../../packages/server/src/runtime/waiting.js';

const IMAGE = 'local/debian:bookworm'; // bash, for E2B's commands (`/bin/bash -l -c`)

type Event = { type: string; pid?: number; data?: string; exitCode?: number; signal?: string | null } & {
  replayFrom?: { stdout: number; stderr: number };
};

/**
 * An NDJSON response read as it comes: events, and whether the body ended cleanly or was
 * cut (the api serving it died).
 */
class EventStream {
  events: Event[] = [];
  cut: Error | null = null;
  ended = false;
  private readonly waiters = new Waiters(() => `stdout ends ${JSON.stringify(this.stdout().slice(-200))}`);
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly done: Promise<void>;

  constructor(res: Response) {
    assert.equal(res.status, 200);
    this.reader = (res.body as ReadableStream<Uint8Array>).getReader();
    this.done = this.pump();
  }

  stdout(): string {
    return this.events
      .filter((e) => e.type === 'stdout')
      .map((e) => e.data ?? '')
      .join('');
  }
  get exit(): Event | undefined {
    return this.events.find((e) => e.type === 'exit');
  }
  until(what: string, test: () => boolean, timeoutMs = 60_000): Promise<void> {
    return this.waiters.until(what, test, timeoutMs);
  }
  cancel(): Promise<void> {
    return this.reader.cancel();
  }

  private async pump(): Promise<void> {
    const dec = new TextDecoder();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await this.reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
          this.events.push(JSON.parse(buf.slice(0, nl)));
          buf = buf.slice(nl + 1);
        }
        this.waiters.wake();
      }
      this.ended = true;
    } catch (e) {
      this.cut = e as Error;
    }
    this.waiters.wake();
  }
}

const lines = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => `line-${from + i}\n`).join('');

describe('processes across api replicas: one runner, two apis, one PostgreSQL (real runtime)', {
  skip: replicasSkip,
  timeout: 300_000,
}, () => {
  const pair = new ReplicaPair();
  let apiA: Server;
  let apiB: Server;
  let key: string;
  let id: string;
  let apiEnv: Record<string, string>;
  const headers = () => ({ authorization: `Bearer ${key}` });
  const post = (s: Server, path: string, o: { json?: unknown; raw?: string } = {}) =>
    fetch(`${s.baseUrl}/api/v1/sandboxes/${id}${path}`, {
      method: 'POST',
      headers: { ...headers(), ...(o.json ? { 'content-type': 'application/json' } : {}) },
      body: o.raw ?? (o.json ? JSON.stringify(o.json) : undefined),
    });
  const output = async (s: Server, pid: number, follow = true) =>
    new EventStream(
      await fetch(`${s.baseUrl}/api/v1/sandboxes/${id}/processes/${pid}/output?follow=${follow}`, {
        headers: headers(),
      }),
    );
  const listed = async (s: Server) => {
    const r = await s.api('GET', `/api/v1/sandboxes/${id}/processes`, { key });
    assert.equal(r.status, 200, r.text);
    return r.body.processes as Array<{ pid: number; command: string; tag: string | null; running: boolean }>;
  };

  before(async () => {
    ({ apiA, apiB, apiEnv, key, id } = await pair.start({ nodeName: 'e2e-proc-replicas', image: IMAGE }));
  });
  after(async () => {
    await pair.stop();
  });

  it('a background process started through api A is listed, followed (replay + live), fed stdin and signalled through api B', async () => {
    const r = await apiA.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key,
      body: {
        command: 'echo before-$((6*7)); while read l; do echo "got $l"; done; echo eof; exec sleep 300',
        options: { background: true, stdin: true, tag: 'bg' },
      },
    });
    assert.equal(r.status, 200, r.text);
    const pid = r.body.pid as number;
    const p = (await listed(apiB)).find((x) => x.pid === pid);
    assert.deepEqual(p && { command: p.command, tag: p.tag, running: p.running }, {
      command: 'echo before-$((6*7)); while read l; do echo "got $l"; done; echo eof; exec sleep 300',
      tag: 'bg',
      running: true,
    });
    const viaB = await output(apiB, pid);
    await viaB.until('the replay', () => viaB.stdout().includes('before-42\n'));
    assert.deepEqual(viaB.events[0], { type: 'start', pid, replayFrom: { stdout: 0, stderr: 0 } });
    const viaA = await output(apiA, pid);
    assert.equal((await post(apiB, `/processes/${pid}/stdin`, { raw: 'one\n' })).status, 204);
    assert.equal((await post(apiA, `/processes/${pid}/stdin`, { raw: 'two\n' })).status, 204);
    for (const s of [viaA, viaB]) await s.until('live output', () => s.stdout().includes('got one\ngot two\n'));
    assert.equal((await post(apiB, `/processes/${pid}/stdin/close`)).status, 204);
    await viaB.until('eof', () => viaB.stdout().endsWith('eof\n'));
    assert.equal((await post(apiB, `/processes/${pid}/stdin`, { raw: 'late' })).status, 409);
    assert.equal((await post(apiB, `/processes/${pid}/signal`, { json: { signal: 'SIGTERM' } })).status, 204);
    await Promise.all([viaA.done, viaB.done]);
    for (const s of [viaA, viaB]) {
      assert.equal(s.ended, true);
      assert.equal(s.stdout(), 'before-42\ngot one\ngot two\neof\n');
      assert.deepEqual(s.exit, { type: 'exit', exitCode: 143, signal: 'SIGTERM' });
    }
    assert.equal((await listed(apiA)).find((x) => x.pid === pid)?.running, false);
    assert.equal((await post(apiA, `/processes/${pid}/signal`, { json: { signal: 'SIGKILL' } })).status, 409);
    assert.equal((await post(apiB, '/processes/999999/signal', { json: { signal: 'SIGKILL' } })).status, 404);
  });

  it('a streamed exec whose api is killed with -9 mid-output: its client follows it through the other api, nothing lost, and gets the exit code', async () => {
    const apiC = await startServer({ env: apiEnv });
    let pid = 0;
    try {
      const first = new EventStream(
        await fetch(`${apiC.baseUrl}/api/v1/sandboxes/${id}/exec`, {
          method: 'POST',
          headers: { ...headers(), 'content-type': 'application/json' },
          body: JSON.stringify({
            command: 'i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo line-$i; sleep 0.01; done; exit 9',
            options: { stream: true },
          }),
        }),
      );
      await first.until('some output', () => first.stdout().includes('line-20\n'));
      pid = first.events[0].pid as number;
      await apiC.kill('SIGKILL');
      await first.done;
      assert.ok(first.cut, 'the stream of the killed api is cut');
      assert.equal(first.exit, undefined);
      const had = first.stdout();
      // Reconnect through B: skip what was had (replayFrom says where the replay starts).
      const again = await output(apiB, pid);
      await again.done;
      const start = again.events[0];
      assert.equal(start.type, 'start');
      const replayed = again.stdout();
      const skip = Buffer.byteLength(had) - (start.replayFrom?.stdout ?? 0);
      const whole = had + Buffer.from(replayed).subarray(skip).toString();
      assert.equal(whole, lines(1, 300));
      assert.deepEqual(again.exit, { type: 'exit', exitCode: 9, signal: null });
    } finally {
      await apiC.stop();
    }
    assert.equal((await listed(apiA)).find((x) => x.pid === pid)?.running, false);
  });

  it('an E2B command started through api A is listed, fed stdin and followed to its end through api B', async () => {
    e2bAt(apiA, key);
    const viaA = await Sandbox.connect(id);
    const h = await viaA.commands.run('read x; echo "e2b-$x"; exit 5', { background: true, stdin: true, timeoutMs: 0 });
    await h.disconnect();
    e2bAt(apiB, key);
    const viaB = await Sandbox.connect(id);
    assert.ok((await viaB.commands.list()).some((p) => p.pid === h.pid));
    const out: string[] = [];
    const again = await viaB.commands.connect(h.pid, { onStdout: (d) => void out.push(d), timeoutMs: 0 });
    await viaB.commands.sendStdin(h.pid, 'via-b\n');
    await assert.rejects(again.wait(), (e: unknown) => (e as { exitCode?: number }).exitCode === 5);
    assert.equal(out.join(''), 'e2b-via-b\n');
    assert.equal((await listed(apiA)).find((x) => x.pid === h.pid)?.running, false);
  });
});
