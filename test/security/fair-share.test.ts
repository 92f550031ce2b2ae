/**
 * Fair shares of the host resources a sandbox holds through the API: terminals and their
 * clients, processes started through the API (records and readers), file watches and file
 * transfers. One noisy sandbox at each of its limits gets a clear error naming the limit;
 * a neighbour sandbox of the same account is unaffected (it creates a terminal, attaches,
 * runs a streamed process, opens a watch, downloads a file, runs a foreground exec); the noisy one works again
 * once it releases. The server runs with small shares (SANDBOXD_FAIR_SHARE_*) so that each
 * limit is met in a few requests; the defaults are in config-fair-share.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import { refusedUpgrade, TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { newAccount, RUNTIME, startServer, type Server, until } from '../e2e/harness.js';
import { Api, BUSYBOX } from './escape-support.js';

const SHARE = {
  TERMINALS_PER_SANDBOX: 3,
  CLIENTS_PER_TERMINAL: 3,
  TERMINAL_SOCKETS_PER_SANDBOX: 4,
  RUNNING_PROCESSES_PER_SANDBOX: 4,
  EXITED_PROCESSES_PER_SANDBOX: 2,
  FOLLOWERS_PER_PROCESS: 3,
  FOLLOWERS_PER_SANDBOX: 5,
  WATCHES_PER_SANDBOX: 3,
  FILE_TRANSFERS_PER_SANDBOX: 3,
  EXECS_PER_SANDBOX: 3,
};
/** The account's own cap: twice a sandbox's share, so a sandbox at its share leaves the rest to its neighbours. */
const ACCOUNT_SOCKETS = 8;

describe('fair shares: one sandbox at its limits leaves its neighbours unaffected', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 600_000,
}, () => {
  let s: Server;
  let api: Api;
  let key = '';
  let noisy = '';
  let neighbour = '';
  const closers: Array<() => void> = [];
  const auth = () => ({ authorization: `Bearer ${key}` });
  const req = (method: string, path: string, body?: unknown) => s.api(method, path, { key, body });

  before(async () => {
    const env: Record<string, string> = { SANDBOXD_RATE_LIMIT_TERMINAL_SOCKETS_PER_ACCOUNT: String(ACCOUNT_SOCKETS) };
    for (const [k, v] of Object.entries(SHARE)) env[`SANDBOXD_FAIR_SHARE_${k}`] = String(v);
    s = await startServer({ env });
    key = (await newAccount(s, { tokens: 100_000 })).key;
    api = new Api(s, key);
    [noisy, neighbour] = await Promise.all([api.create({ image: BUSYBOX }), api.create({ image: BUSYBOX })]);
  });
  after(async () => {
    for (const c of closers.splice(0)) c();
    await s?.stop();
  });

  const newTerminal = async (sb: string) => {
    const r = await req('POST', `/api/v1/sandboxes/${sb}/terminals`, {});
    return r;
  };
  const attach = async (sb: string, term: string) => {
    const c = await TermClient.connect(terminalUrl(s.baseUrl, sb, term), auth());
    closers.push(() => c.close());
    await c.control('ready');
    return c;
  };
  /** The neighbour creates a terminal, attaches, and sees its shell answer. */
  const neighbourTerminalWorks = async () => {
    const t = await newTerminal(neighbour);
    assert.equal(t.status, 201, `neighbour terminal: ${t.text}`);
    const c = await attach(neighbour, t.body.terminal.id);
    c.type('echo ok-$((40+2))\n');
    await c.waitForOutput(/ok-42/);
    c.close();
    assert.equal((await req('DELETE', `/api/v1/sandboxes/${neighbour}/terminals/${t.body.terminal.id}`)).status, 204);
  };
  /** The neighbour runs a streamed exec and reads it to its exit. */
  const neighbourStreams = async () => {
    const r = await fetch(`${s.baseUrl}/api/v1/sandboxes/${neighbour}/exec`, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: JSON.stringify({ command: 'echo streamed', options: { stream: true } }),
    });
    assert.equal(r.status, 200, await r.clone().text());
    const text = await r.text();
    assert.match(text, /"type":"exit","exitCode":0/);
    assert.match(text, /streamed/);
  };

  it('terminals per sandbox: past the share 409 naming it; the neighbour creates one; a delete frees a slot', async () => {
    const mine: string[] = [];
    for (let i = 0; i < SHARE.TERMINALS_PER_SANDBOX; i++) {
      const t = await newTerminal(noisy);
      assert.equal(t.status, 201, t.text);
      mine.push(t.body.terminal.id);
    }
    const over = await newTerminal(noisy);
    assert.equal(over.status, 409, over.text);
    assert.equal(over.body.kind, 'conflict');
    assert.match(over.body.message, new RegExp(`at most ${SHARE.TERMINALS_PER_SANDBOX} terminals`));
    await neighbourTerminalWorks();
    assert.equal((await req('DELETE', `/api/v1/sandboxes/${noisy}/terminals/${mine.pop()}`)).status, 204);
    const again = await newTerminal(noisy);
    assert.equal(again.status, 201, again.text);
    for (const id of [...mine, again.body.terminal.id])
      assert.equal((await req('DELETE', `/api/v1/sandboxes/${noisy}/terminals/${id}`)).status, 204);
  });

  it('clients per terminal and terminal sockets per sandbox: past each 429 naming it; the neighbour of the same account attaches; a close frees a slot', async () => {
    const t1 = (await newTerminal(noisy)).body.terminal.id as string;
    const t2 = (await newTerminal(noisy)).body.terminal.id as string;
    const url1 = terminalUrl(s.baseUrl, noisy, t1);
    const url2 = terminalUrl(s.baseUrl, noisy, t2);
    const on1: TermClient[] = [];
    for (let i = 0; i < SHARE.CLIENTS_PER_TERMINAL; i++) on1.push(await attach(noisy, t1));
    const perTerminal = await refusedUpgrade(url1, auth());
    assert.equal(perTerminal.status, 429, JSON.stringify(perTerminal.body));
    const b1 = perTerminal.body as { kind: string; message: string; details: Record<string, unknown> };
    assert.equal(b1.kind, 'rate_limited');
    assert.match(b1.message, new RegExp(`${SHARE.CLIENTS_PER_TERMINAL} clients`));
    assert.deepEqual(b1.details, { limit: 'clientsPerTerminal', max: SHARE.CLIENTS_PER_TERMINAL });

    // The sandbox's socket share (4) is half the account's (8): one more on t2 fills it.
    const on2 = [await attach(noisy, t2)];
    const perSandbox = await refusedUpgrade(url2, auth());
    assert.equal(perSandbox.status, 429, JSON.stringify(perSandbox.body));
    const b2 = perSandbox.body as { kind: string; message: string; details: Record<string, unknown> };
    assert.match(b2.message, new RegExp(`${SHARE.TERMINAL_SOCKETS_PER_SANDBOX} terminal connections`));
    assert.deepEqual(b2.details, { limit: 'terminalSocketsPerSandbox', max: SHARE.TERMINAL_SOCKETS_PER_SANDBOX });

    // The neighbour, same account, is unaffected.
    await neighbourTerminalWorks();

    // Released: the noisy sandbox attaches again.
    on1[0].close();
    await on1[0].closed;
    await until('a slot on the noisy terminal', async () => {
      try {
        const c = await attach(noisy, t1);
        on1.push(c);
        return true;
      } catch {
        return undefined;
      }
    });
    for (const c of [...on1, ...on2]) c.close();
    for (const id of [t1, t2]) await req('DELETE', `/api/v1/sandboxes/${noisy}/terminals/${id}`);
  });

  it('process records: running past the share 409, exited ones kept to their share; the neighbour streams', async () => {
    const pids: number[] = [];
    for (let i = 0; i < SHARE.RUNNING_PROCESSES_PER_SANDBOX; i++) pids.push(await api.background(noisy, 'sleep 600'));
    const over = await api.execRaw(noisy, 'sleep 600', { background: true, timeoutMs: undefined });
    assert.equal(over.status, 409, JSON.stringify(over.body));
    assert.match(String(over.body.message), new RegExp(`${SHARE.RUNNING_PROCESSES_PER_SANDBOX} processes`));
    await neighbourStreams();
    for (const pid of pids)
      assert.equal(
        (await req('POST', `/api/v1/sandboxes/${noisy}/processes/${pid}/signal`, { signal: 'SIGKILL' })).status,
        204,
      );
    // A signal answers before the exit is seen: a slot is free once the process is listed exited.
    const allExited = () =>
      until('the processes to exit', async () => {
        const l = (await req('GET', `/api/v1/sandboxes/${noisy}/processes`)).body.processes as Array<{
          running: boolean;
        }>;
        return l.every((p) => !p.running) ? l : undefined;
      });
    await allExited();
    // Many short ones (in rounds within the running share): the records stay within the exited share.
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < SHARE.RUNNING_PROCESSES_PER_SANDBOX; i++) await api.background(noisy, 'true');
      await allExited();
    }
    const listed = await allExited();
    assert.equal(listed.length, SHARE.EXITED_PROCESSES_PER_SANDBOX, JSON.stringify(listed));
    await neighbourStreams();
  });

  it('process readers: per process and per sandbox 429 naming the share; the neighbour streams; a reader that leaves frees a slot', async () => {
    const a = await api.background(noisy, 'sleep 600');
    const b = await api.background(noisy, 'sleep 600');
    const readers: AbortController[] = [];
    const held: Response[] = [];
    const follow = async (pid: number) => {
      const ac = new AbortController();
      const r = await fetch(`${s.baseUrl}/api/v1/sandboxes/${noisy}/processes/${pid}/output?follow=true`, {
        headers: auth(),
        signal: ac.signal,
      });
      if (r.status === 200) {
        readers.push(ac);
        // Held: undici cancels the body of a Response that is garbage collected unread, which
        // closes the reader's connection and frees its slot under the test (a run got 200 here).
        held.push(r);
        closers.push(() => ac.abort());
      } else ac.abort();
      return { status: r.status, body: r.status === 200 ? null : await r.json().catch(() => null) };
    };
    for (let i = 0; i < SHARE.FOLLOWERS_PER_PROCESS; i++) assert.equal((await follow(a)).status, 200);
    const perProcess = await follow(a);
    assert.equal(perProcess.status, 429, JSON.stringify(perProcess.body));
    assert.match(perProcess.body.message, new RegExp(`${SHARE.FOLLOWERS_PER_PROCESS} readers`));
    assert.deepEqual(perProcess.body.details, { limit: 'followersPerProcess', max: SHARE.FOLLOWERS_PER_PROCESS });
    for (let i = SHARE.FOLLOWERS_PER_PROCESS; i < SHARE.FOLLOWERS_PER_SANDBOX; i++)
      assert.equal((await follow(b)).status, 200);
    const perSandbox = await follow(b);
    assert.equal(perSandbox.status, 429, JSON.stringify(perSandbox.body));
    assert.deepEqual(perSandbox.body.details, { limit: 'followersPerSandbox', max: SHARE.FOLLOWERS_PER_SANDBOX });
    // A streamed exec needs a reader: refused before anything starts.
    const streamed = await api.execRaw(noisy, 'echo never', { stream: true });
    assert.equal(streamed.status, 429, JSON.stringify(streamed.body));
    await neighbourStreams();
    readers.shift()?.abort();
    await until('a reader slot of the noisy sandbox', async () => {
      const r = await follow(b);
      return r.status === 200 ? true : undefined;
    });
    for (const ac of readers) ac.abort();
    held.length = 0;
    for (const pid of [a, b])
      await req('POST', `/api/v1/sandboxes/${noisy}/processes/${pid}/signal`, { signal: 'SIGKILL' });
  });

  it('file watches: past the share 409 naming it; the neighbour watches; a closed watch frees a slot', async () => {
    const watch = (sb: string) =>
      new Promise<{ ws?: WebSocket; status?: number; body?: any }>((resolve) => {
        const ws = new WebSocket(`${s.baseUrl.replace(/^http/, 'ws')}/api/v1/sandboxes/${sb}/files/watch?path=/tmp`, {
          headers: auth(),
        });
        ws.once('open', () => {
          closers.push(() => ws.close());
          resolve({ ws });
        });
        ws.once('unexpected-response', (_req, res) => {
          let text = '';
          res.on('data', (d: Buffer) => {
            text += d;
          });
          res.on('end', () => resolve({ status: res.statusCode, body: JSON.parse(text || 'null') }));
        });
        ws.once('error', () => undefined);
      });
    const open: WebSocket[] = [];
    for (let i = 0; i < SHARE.WATCHES_PER_SANDBOX; i++) {
      const w = await watch(noisy);
      assert.ok(w.ws, `watch ${i}: ${w.status} ${JSON.stringify(w.body)}`);
      open.push(w.ws);
    }
    const over = await watch(noisy);
    assert.equal(over.status, 409, JSON.stringify(over.body));
    assert.match(over.body.message, new RegExp(`${SHARE.WATCHES_PER_SANDBOX} watches`));
    const n = await watch(neighbour);
    assert.ok(n.ws, `neighbour watch: ${n.status} ${JSON.stringify(n.body)}`);
    n.ws.close();
    open.shift()?.close();
    const again = await until('a watch slot of the noisy sandbox', async () => {
      const w = await watch(noisy);
      return w.ws;
    });
    for (const w of [...open, again]) w.close();
  });

  it('file transfers: downloads past the share 429 naming it; the neighbour downloads; a finished one frees a slot', async () => {
    for (const sb of [noisy, neighbour]) await api.exec(sb, 'head -c 67108864 /dev/zero > /tmp/big');
    const downloads: AbortController[] = [];
    const held: Response[] = []; // unread, held: undici cancels a collected Response's body (see readers)
    const download = async (sb: string) => {
      const ac = new AbortController();
      closers.push(() => ac.abort());
      const r = await fetch(`${s.baseUrl}/api/v1/sandboxes/${sb}/files/content?path=/tmp/big`, {
        headers: auth(),
        signal: ac.signal,
      });
      if (r.status === 200) {
        downloads.push(ac);
        held.push(r);
      } else ac.abort();
      return { status: r.status, body: r.status === 200 ? null : await r.json().catch(() => null), ac, r };
    };
    // Opened and never read: each holds its stream in the sandbox and its buffers on the host.
    for (let i = 0; i < SHARE.FILE_TRANSFERS_PER_SANDBOX; i++) assert.equal((await download(noisy)).status, 200);
    const over = await download(noisy);
    assert.equal(over.status, 429, JSON.stringify(over.body));
    assert.match(over.body.message, new RegExp(`${SHARE.FILE_TRANSFERS_PER_SANDBOX} file transfers`));
    assert.deepEqual(over.body.details, { limit: 'fileTransfersPerSandbox', max: SHARE.FILE_TRANSFERS_PER_SANDBOX });
    const upload = await fetch(`${s.baseUrl}/api/v1/sandboxes/${noisy}/files/content?path=/tmp/up`, {
      method: 'PUT',
      headers: auth(),
      body: 'x',
    });
    assert.equal(upload.status, 429, 'uploads count too');
    const n = await download(neighbour);
    assert.equal(n.status, 200);
    assert.equal((await n.r.arrayBuffer()).byteLength, 64 << 20, 'the neighbour downloads the whole file');
    downloads.shift()?.abort();
    const again = await until('a transfer slot of the noisy sandbox', async () => {
      const r = await download(noisy);
      return r.status === 200 ? r : undefined;
    });
    again.ac.abort();
    for (const ac of downloads) ac.abort();
    held.length = 0;
  });

  it('foreground execs in flight: past the share 429 naming it; the neighbour execs; an exec that ends frees a slot', async () => {
    const waiter = 'while [ ! -e /tmp/go ]; do sleep 0.1; done; echo waited';
    const waiting = Array.from({ length: SHARE.EXECS_PER_SANDBOX }, () => api.execRaw(noisy, waiter));
    // Once the sandbox runs them all, every slot is taken (a slot is taken before its process starts).
    await until('the waiters to run', async () => {
      const pid = await api.background(noisy, "ps -o args | grep -c '[t]mp/go'");
      const out = await until('the count', async () => {
        const r = await fetch(`${s.baseUrl}/api/v1/sandboxes/${noisy}/processes/${pid}/output`, { headers: auth() });
        const text = await r.text();
        return /"type":"exit"/.test(text) ? text : undefined;
      });
      const n = Number(/"data":"(\d+)/.exec(out)?.[1] ?? 0);
      return n >= SHARE.EXECS_PER_SANDBOX ? n : undefined;
    });
    const over = await api.execRaw(noisy, 'echo never');
    assert.equal(over.status, 429, JSON.stringify(over.body));
    assert.match(String(over.body.message), new RegExp(`${SHARE.EXECS_PER_SANDBOX} foreground execs`));
    assert.equal((await api.exec(neighbour, 'echo neighbour')).stdout, 'neighbour\n');
    await api.background(noisy, 'touch /tmp/go'); // background execs are processes, not counted here
    for (const r of await Promise.all(waiting)) assert.equal(r.body.stdout, 'waited\n');
    assert.equal((await api.exec(noisy, 'echo again')).stdout, 'again\n');
  });
});
