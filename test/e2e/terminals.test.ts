/**
 * Black-box: interactive terminals over real WebSocket clients against the real server,
 * on the fake runtime or (SANDBOXD_E2E_RUNTIME=local) real crun sandboxes with real PTYs.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, afterEach, before, describe, it } from 'node:test';
import { refusedUpgrade, TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { ADMIN_KEY, GVISOR, IMAGE, RUNTIME, startServer, type Server } from './harness.js';

const local = RUNTIME === 'local';
const auth = { authorization: `Bearer ${ADMIN_KEY}` };

const rssBytes = (pid: number) =>
  Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;

describe(`terminals e2e (${RUNTIME})`, { timeout: 600_000 }, () => {
  let s: Server;
  const made: string[] = [];
  const sandbox = async (image = IMAGE) => {
    const c = await s.api('POST', '/api/v1/sandboxes', { body: { image, timeoutMs: 600_000 } });
    assert.equal(c.status, 201, c.text);
    made.push(c.body.sandbox.id);
    return c.body.sandbox.id as string;
  };
  const newTerminal = async (sb: string, body: object = {}) => {
    const c = await s.api('POST', `/api/v1/sandboxes/${sb}/terminals`, { body });
    assert.equal(c.status, 201, c.text);
    return c.body as { terminal: { id: string; shell: string }; wsUrl: string };
  };
  const connect = (sb: string, id: string, query = '') =>
    TermClient.connect(terminalUrl(s.baseUrl, sb, id, query), auth);
  const getTerminal = (sb: string, id: string) => s.api('GET', `/api/v1/sandboxes/${sb}/terminals/${id}`);

  before(async () => {
    s = await startServer();
  });
  afterEach(async () => {
    for (const id of made.splice(0)) await s.api('DELETE', `/api/v1/sandboxes/${id}`);
  });
  after(() => s?.stop());

  it('two clients see the output of a command typed by one; resize reaches stty; exit 3 gives exitCode 3', async () => {
    const sb = await sandbox();
    const { terminal, wsUrl } = await newTerminal(sb, { cols: 90, rows: 20 });
    assert.equal(wsUrl, terminalUrl(s.baseUrl, sb, terminal.id));
    const a = await connect(sb, terminal.id);
    const b = await connect(sb, terminal.id);
    const ready = await a.control('ready');
    assert.equal(ready.shell, terminal.shell);
    assert.ok(Number.isInteger(ready.pid) && (ready.pid as number) > 0);
    await b.control('ready');
    assert.equal((await getTerminal(sb, terminal.id)).body.clientCount, 2);
    b.type('echo a-$TERM-b\r');
    await a.waitForOutput(/a-xterm-256color-b/);
    await b.waitForOutput(/a-xterm-256color-b/);
    a.type('stty size\r');
    await b.waitForOutput(/20 90/);
    b.resize(132, 43); // resize and input on the same socket: ordered
    b.type('stty size\r', { text: true });
    await a.waitForOutput(/43 132/);
    b.type('exit 3\r');
    for (const c of [a, b]) {
      assert.deepEqual(await c.control('exit'), { type: 'exit', exitCode: 3, signal: null });
      assert.equal((await c.closed).code, 1000);
      assert.deepEqual(c.textFrames, [], 'output comes in binary frames only');
    }
    assert.equal((await getTerminal(sb, terminal.id)).body.status, 'exited');
    const late = await connect(sb, terminal.id);
    assert.equal((await late.closed).code, 1000);
    assert.deepEqual(late.controls, [{ type: 'exit', exitCode: 3, signal: null }]);
  });

  it('a killed shell reports its signal; defaults and 400s for a missing shell or cwd', async () => {
    const sb = await sandbox();
    const { terminal } = await newTerminal(sb);
    assert.ok(['bash', 'sh'].includes(terminal.shell));
    const c = await connect(sb, terminal.id);
    await c.control('ready');
    c.type('pwd\r');
    await c.waitForOutput(/\r\n\/root\r\n/);
    c.type('kill -9 $$\r');
    assert.deepEqual(await c.control('exit'), { type: 'exit', exitCode: 137, signal: 'SIGKILL' });
    const zsh = await s.api('POST', `/api/v1/sandboxes/${sb}/terminals`, { body: { shell: 'zsh' } });
    assert.equal(zsh.status, 400);
    assert.match(zsh.body.message, /shell "zsh"/);
    const cwd = await s.api('POST', `/api/v1/sandboxes/${sb}/terminals`, { body: { cwd: '/does/not/exist' } });
    assert.equal(cwd.status, 400);
    assert.match(cwd.body.message, /cwd "\/does\/not\/exist"/);
    const tmp = await newTerminal(sb, { shell: 'sh', cwd: '/tmp' });
    const t2 = await connect(sb, tmp.terminal.id);
    t2.type('pwd\r');
    await t2.waitForOutput(/\r\n\/tmp\r\n/);
    t2.close();
  });

  it('upgrade failures answer plain HTTP with the Error body: 401, 404, 409, cross-site Origin with a cookie', async () => {
    const sb = await sandbox();
    const { terminal } = await newTerminal(sb);
    const url = terminalUrl(s.baseUrl, sb, terminal.id);
    const none = await refusedUpgrade(url);
    assert.equal(none.status, 401);
    assert.equal((none.body as { code: number }).code, 401);
    assert.equal((await refusedUpgrade(url, { authorization: 'Bearer sk_wrongwrongwrongwrongwrong' })).status, 401);
    assert.equal((await refusedUpgrade(terminalUrl(s.baseUrl, sb, 'term_aaaaaaaaaaaaaaaa'), auth)).status, 404);
    assert.equal(
      (await refusedUpgrade(terminalUrl(s.baseUrl, 'sbx_aaaaaaaaaaaaaaaaaaaa', terminal.id), auth)).status,
      404,
    );
    const email = `term-${Date.now()}@example.com`;
    assert.equal(
      (await s.api('POST', '/api/v1/admin/accounts', { body: { email, password: 'password123', tokens: 100 } })).status,
      201,
    );
    const login = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email, password: 'password123' } });
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    assert.equal((await refusedUpgrade(url, { cookie, origin: s.baseUrl })).status, 404, "another account's terminal");
    const headers = { cookie, origin: s.baseUrl };
    const own = await s.api('POST', '/api/v1/sandboxes', { key: null, headers, body: { image: IMAGE } });
    assert.equal(own.status, 201, own.text);
    try {
      const ot = await s.api('POST', `/api/v1/sandboxes/${own.body.sandbox.id}/terminals`, {
        key: null,
        headers,
        body: {},
      });
      const ourl = terminalUrl(s.baseUrl, own.body.sandbox.id, ot.body.terminal.id);
      assert.equal((await refusedUpgrade(ourl, { cookie, origin: 'https://evil.example' })).status, 401);
      const ok = await TermClient.connect(ourl, { cookie, origin: s.baseUrl });
      await ok.control('ready');
      ok.close();
    } finally {
      await s.api('DELETE', `/api/v1/sandboxes/${own.body.sandbox.id}`, { key: null, headers });
    }
    assert.equal((await s.api('PATCH', `/api/v1/sandboxes/${sb}/timeout`, { body: { timeoutMs: 0 } })).status, 200);
    const stopped = await refusedUpgrade(url, auth);
    assert.equal(stopped.status, 409);
    assert.equal((stopped.body as { code: number }).code, 409);
  });

  it('deleting the sandbox sends exit to every terminal and closes it', async () => {
    const sb = await sandbox();
    const clients = [];
    for (let i = 0; i < 2; i++) {
      const { terminal } = await newTerminal(sb);
      const c = await connect(sb, terminal.id);
      await c.control('ready');
      clients.push(c);
    }
    assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${sb}`)).status, 204);
    for (const c of clients) {
      assert.equal((await c.control('exit')).type, 'exit');
      assert.equal((await c.closed).code, 1000);
    }
  });

  // gVisor: a PTY moves output at a small fraction of a container's speed (every write is a
  // call into the Sentry): 200 MB would take minutes. The stalling client's drop is the
  // server's, the same for both tiers.
  it('a client that stops reading does not stall another streaming 200 MB; it is dropped and server memory stays bounded', {
    skip: GVISOR && 'a PTY under gVisor streams far slower; the server side is the same on both tiers',
  }, async (t) => {
    const sb = await sandbox(local ? 'local/debian:bookworm' : IMAGE); // GNU head: busybox's knows no "200M"
    const { terminal } = await newTerminal(sb);
    const fast = await connect(sb, terminal.id);
    const slow = await connect(sb, terminal.id);
    await fast.control('ready');
    await slow.control('ready');
    slow.pause();
    const rss0 = rssBytes(s.proc.pid!);
    let rssMax = rss0;
    const sampler = setInterval(() => (rssMax = Math.max(rssMax, rssBytes(s.proc.pid!))), 50);
    // The fake shell prints at most 1 MiB per command line, so it gets 24 lines of 1 MB.
    const size = local ? 200 * 1024 * 1024 : 24_000_000;
    fast.type(
      local ? 'yes | head -c 200M; echo DONE-$TERM\r' : `${'head -c 1000000 /dev/zero\r'.repeat(24)}echo DONE-$TERM\r`,
    );
    try {
      await fast.control('ready');
      let dropped = false;
      for (let i = 0; i < 1200 && !dropped; i++) {
        dropped = (await getTerminal(sb, terminal.id)).body.clientCount === 1;
        if (!dropped) await new Promise((r) => setTimeout(r, 50));
      }
      assert.ok(dropped, 'the slow client was dropped');
      slow.resume();
      const closed = await slow.closed;
      assert.equal(closed.code, 1013);
      assert.match(closed.reason, /too slow/);
      await fast.waitForOutput(/DONE-xterm-256color/, 300_000);
    } finally {
      clearInterval(sampler);
    }
    // `yes` writes "y\n", which the tty sends as "y\r\n": 1.5 bytes per byte.
    assert.ok(fast.receivedBytes >= (local ? size * 1.5 : size), `fast client got ${fast.receivedBytes} bytes`);
    const grew = `server RSS grew by ${((rssMax - rss0) / 2 ** 20).toFixed(0)} MiB while the fast client got ${fast.receivedBytes} bytes`;
    t.diagnostic(grew);
    assert.ok(rssMax - rss0 < 200 * 1024 * 1024, grew);
    fast.type('exit 0\r');
    assert.equal((await fast.closed).code, 1000);
  });
});

describe(`terminal idle cleanup e2e (${RUNTIME})`, { timeout: 300_000 }, () => {
  it('a terminal with no client is cleaned up after SANDBOXD_TERMINAL_IDLE_MS, never while a client is connected', async () => {
    const s = await startServer({ env: { SANDBOXD_TERMINAL_IDLE_MS: '1500' } });
    try {
      const sb = (await s.api('POST', '/api/v1/sandboxes', { body: { image: IMAGE } })).body.sandbox.id;
      const mk = async () =>
        (await s.api('POST', `/api/v1/sandboxes/${sb}/terminals`, { body: {} })).body.terminal.id as string;
      const idle = await mk();
      const watched = await mk();
      const c = await TermClient.connect(terminalUrl(s.baseUrl, sb, watched), auth);
      await c.control('ready');
      const status = async (id: string) => (await s.api('GET', `/api/v1/sandboxes/${sb}/terminals/${id}`)).status;
      for (let i = 0; i < 400 && (await status(idle)) === 200; i++) await new Promise((r) => setTimeout(r, 50));
      assert.equal(await status(idle), 404, 'the unwatched terminal was cleaned up');
      await new Promise((r) => setTimeout(r, 3_500)); // over two idle periods, with the client still there
      assert.equal(await status(watched), 200, 'never cleaned up while a client is connected');
      c.type('echo still-$TERM\r');
      await c.waitForOutput(/still-xterm-256color/);
      c.close();
      await c.closed;
      for (let i = 0; i < 400 && (await status(watched)) === 200; i++) await new Promise((r) => setTimeout(r, 50));
      assert.equal(await status(watched), 404, 'cleaned up once the last client left');
      assert.deepEqual((await s.api('GET', `/api/v1/sandboxes/${sb}/terminals`)).body, { terminals: [] });
    } finally {
      await s.stop();
    }
  });
});
