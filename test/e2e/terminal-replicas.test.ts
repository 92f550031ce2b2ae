/**
 * Black-box, real runtime: one runner and TWO api processes sharing one PostgreSQL
 * database (SANDBOXD_ROLE=runner / api). A terminal's PTY and its clients live on the
 * runner, so a terminal opened through api A is listed and joined through api B (same
 * output on both, input from either, clientCount counts both), and a client that stops
 * reading is dropped (1013) without slowing one on the other replica; E2B's PTYs are the
 * same terminals. Then api A is killed with -9: B's client keeps working, A's client reconnects
 * through B to the same shell (same `$$`), and an E2B PTY started through A is driven
 * through B; a third api stopped with SIGTERM closes its client with 1001 and leaves the
 * shell running; the runner stopped with SIGTERM ends its terminals (exit, 1001).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { Sandbox } from 'e2b';
import { TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { type Server, startServer } from './harness.js';
import { e2bAt } from './e2b/support.js';
import { ReplicaPair, replicasSkip } from './replicas-support.js';

const IMAGE = 'local/debian:bookworm'; // bash, for E2B's PTYs (`/bin/bash -i -l`)

const rssBytes = (pid: number) =>
  Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;

/** The shell's pid as it prints it (`echo <tag>-$$`), once `c` shows it. */
async function shellPid(c: TermClient, tag: string): Promise<number> {
  c.type(`echo ${tag}-$$-end\r`);
  const re = new RegExp(`${tag}-(\\d+)-end`);
  await c.waitForOutput(re);
  return Number(re.exec(c.text)![1]);
}

describe('terminals across api replicas: one runner, two apis, one PostgreSQL (real runtime)', {
  skip: replicasSkip,
  timeout: 300_000,
}, () => {
  const pair = new ReplicaPair();
  let runner: Server;
  let apiA: Server;
  let apiB: Server;
  let key: string;
  let id: string;
  let termId: string;
  let a: TermClient;
  let b: TermClient;
  let pid: number;
  let e2bPid: number;
  let e2bViewer: TermClient;
  let apiEnv: Record<string, string>;
  const e2bOut: Buffer[] = [];
  const auth = () => ({ authorization: `Bearer ${key}` });
  const get = (s: Server, path: string) => s.api('GET', `/api/v1/sandboxes/${id}${path}`, { key });

  before(async () => {
    ({ runner, apiA, apiB, apiEnv, key, id } = await pair.start({ nodeName: 'e2e-replicas', image: IMAGE }));
  });
  after(async () => {
    for (const c of [a, b, e2bViewer]) c?.close();
    await pair.stop();
  });

  it('a terminal opened through api A is listed through api B', async () => {
    const t = await apiA.api('POST', `/api/v1/sandboxes/${id}/terminals`, { key, body: {} });
    assert.equal(t.status, 201, t.text);
    termId = t.body.terminal.id;
    const list = await get(apiB, '/terminals');
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(list.body, { terminals: [{ id: termId, shell: 'bash', status: 'active', clientCount: 0 }] });
  });

  it('joined through both: the same output on each, input from either, clientCount 2 through either api', async () => {
    a = await TermClient.connect(terminalUrl(apiA.baseUrl, id, termId), auth());
    b = await TermClient.connect(terminalUrl(apiB.baseUrl, id, termId), auth());
    const readyA = await a.control('ready');
    const readyB = await b.control('ready');
    assert.equal(readyA.pid, readyB.pid, 'the same shell');
    assert.equal((await get(apiA, `/terminals/${termId}`)).body.clientCount, 2);
    assert.equal((await get(apiB, `/terminals/${termId}`)).body.clientCount, 2);
    a.type('echo from-a-$((6*7))\r');
    await a.waitForOutput(/from-a-42/);
    await b.waitForOutput(/from-a-42/);
    b.type('echo from-b-$((6*8))\r');
    await a.waitForOutput(/from-b-48/);
    await b.waitForOutput(/from-b-48/);
    b.resize(101, 33);
    // The resize travels through api B, the typing through api A: either may reach the runner
    // first, so ask again until the shell sees the new size.
    for (let i = 0; i < 100 && !/33 101/.test(a.text); i++) {
      a.type('stty size\r');
      await new Promise((r) => setTimeout(r, 100));
    }
    await a.waitForOutput(/33 101/);
    pid = await shellPid(a, 'pid');
    assert.ok(pid > 0);
    assert.deepEqual(a.textFrames, [], 'output comes in binary frames only');
  });

  it('a client of A that stops reading is dropped (1013) while a client of B gets 100 MB; every process stays bounded', async (t) => {
    const made = await apiB.api('POST', `/api/v1/sandboxes/${id}/terminals`, { key, body: {} });
    assert.equal(made.status, 201, made.text);
    const tid = made.body.terminal.id as string;
    const fast = await TermClient.connect(terminalUrl(apiB.baseUrl, id, tid), auth());
    const slow = await TermClient.connect(terminalUrl(apiA.baseUrl, id, tid), auth());
    await fast.control('ready');
    await slow.control('ready');
    slow.pause();
    const procs = { runner, apiA, apiB };
    const rss0 = Object.fromEntries(Object.entries(procs).map(([k, s]) => [k, rssBytes(s.proc.pid!)]));
    const rssMax = { ...rss0 };
    const sampler = setInterval(() => {
      for (const [k, s] of Object.entries(procs)) rssMax[k] = Math.max(rssMax[k], rssBytes(s.proc.pid!));
    }, 50);
    try {
      fast.type('yes | head -c 100M; echo DONE-$TERM\r');
      let count = 2;
      for (let i = 0; i < 1200 && count !== 1; i++) {
        count = (await get(apiA, `/terminals/${tid}`)).body.clientCount;
        if (count !== 1) await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(count, 1, 'the slow client was dropped');
      slow.resume();
      const closed = await slow.closed;
      assert.equal(closed.code, 1013);
      assert.match(closed.reason, /too slow/);
      await fast.waitForOutput(/DONE-xterm-256color/, 300_000);
    } finally {
      clearInterval(sampler);
    }
    // `yes` writes "y\n", which the tty sends as "y\r\n": 1.5 bytes per byte.
    assert.ok(fast.receivedBytes >= 100 * 1024 * 1024 * 1.5, `the fast client got ${fast.receivedBytes} bytes`);
    for (const k of Object.keys(procs)) {
      const grew = `${k}: RSS grew by ${((rssMax[k] - rss0[k]) / 2 ** 20).toFixed(0)} MiB`;
      t.diagnostic(grew);
      assert.ok(rssMax[k] - rss0[k] < 200 * 1024 * 1024, grew);
    }
    fast.type('exit 0\r');
    assert.equal((await fast.closed).code, 1000);
  });

  it("E2B's PTY started through api A is a terminal api B lists and joins", async () => {
    e2bAt(apiA, key);
    const sbx = await Sandbox.connect(id);
    const pty = await sbx.pty.create({
      cols: 80,
      rows: 24,
      timeoutMs: 0,
      onData: (d) => void e2bOut.push(Buffer.from(d)),
    });
    e2bPid = pty.pid;
    pty.wait().catch(() => undefined); // its stream goes with api A
    const listed = (await get(apiB, '/terminals')).body.terminals as Array<{ id: string }>;
    assert.equal(listed.length, 2, JSON.stringify(listed));
    const e2bTerm = listed.find((t) => t.id !== termId)!;
    e2bViewer = await TermClient.connect(terminalUrl(apiB.baseUrl, id, e2bTerm.id), auth());
    assert.equal((await e2bViewer.control('ready')).pid, e2bPid);
    await sbx.pty.sendInput(e2bPid, new TextEncoder().encode('echo e2b-$((2*21))\n'));
    await e2bViewer.waitForOutput(/e2b-42/);
    const deadline = Date.now() + 20_000;
    while (!Buffer.concat(e2bOut).toString().includes('e2b-42') && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    assert.match(Buffer.concat(e2bOut).toString(), /e2b-42/, "E2B's own stream got it too");
  });

  it("api A killed with -9: the client on B keeps working; A's client reconnects through B to the same shell", async () => {
    await apiA.kill('SIGKILL');
    const cut = await a.closed;
    assert.notEqual(cut.code, 1000, 'the client of A lost its connection');
    b.type('echo still-$((1+1))\r');
    await b.waitForOutput(/still-2/);
    // The runner saw A's sockets go: only B's clients are counted.
    let count = 0;
    for (let i = 0; i < 100; i++) {
      count = (await get(apiB, `/terminals/${termId}`)).body.clientCount;
      if (count === 1) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(count, 1);
    a = await TermClient.connect(terminalUrl(apiB.baseUrl, id, termId, '?replay=1'), auth());
    assert.equal((await a.control('ready')).pid, pid);
    await a.waitForOutput(/still-2/); // replayed
    assert.equal(await shellPid(a, 'again'), pid, 'the same shell ($$)');
    await b.waitForOutput(/again-\d+-end/);
    assert.equal((await get(apiB, `/terminals/${termId}`)).body.clientCount, 2);
  });

  it('the E2B PTY started through the dead api is driven and killed through api B', async () => {
    e2bAt(apiB, key);
    const sbx = await Sandbox.connect(id);
    await sbx.pty.sendInput(e2bPid, new TextEncoder().encode('echo after-$((3*3))\n'));
    await e2bViewer.waitForOutput(/after-9/);
    assert.equal(await sbx.pty.kill(e2bPid), true);
    assert.deepEqual(await e2bViewer.control('exit'), { type: 'exit', exitCode: 137, signal: 'SIGKILL' });
    assert.equal((await e2bViewer.closed).code, 1000);
  });

  it('a third api shut down with SIGTERM closes its client with 1001 and no exit; the shell runs on', async () => {
    const apiC = await startServer({ env: apiEnv });
    try {
      const c = await TermClient.connect(terminalUrl(apiC.baseUrl, id, termId), auth());
      await c.control('ready');
      assert.equal((await get(apiB, `/terminals/${termId}`)).body.clientCount, 3);
      await apiC.kill('SIGTERM');
      const closed = await c.closed;
      assert.equal(closed.code, 1001);
      assert.deepEqual(
        c.controls.map((m) => m.type),
        ['ready'],
        'no exit: the terminal lives on the runner',
      );
      b.type('echo on-$((5*5))\r');
      await b.waitForOutput(/on-25/);
      assert.equal((await get(apiB, `/terminals/${termId}`)).body.status, 'active');
    } finally {
      await apiC.stop();
    }
  });

  it('the shell exits: every client gets exit and 1000; the terminal is exited through B', async () => {
    b.type('exit 4\r');
    for (const c of [a, b]) {
      assert.deepEqual(await c.control('exit'), { type: 'exit', exitCode: 4, signal: null });
      assert.equal((await c.closed).code, 1000);
    }
    assert.equal((await get(apiB, `/terminals/${termId}`)).body.status, 'exited');
    assert.deepEqual((await get(apiB, '/terminals')).body, { terminals: [] });
  });

  it('the runner stopped with SIGTERM ends its terminals: a client of an api gets exit (SIGHUP) and 1001', async () => {
    const t = await apiB.api('POST', `/api/v1/sandboxes/${id}/terminals`, { key, body: {} });
    assert.equal(t.status, 201, t.text);
    const c = await TermClient.connect(terminalUrl(apiB.baseUrl, id, t.body.terminal.id), auth());
    await c.control('ready');
    await runner.kill('SIGTERM');
    assert.deepEqual(await c.control('exit'), { type: 'exit', exitCode: 129, signal: 'SIGHUP' });
    assert.deepEqual(await c.closed, { code: 1001, reason: 'runner shutting down' });
  });
});
