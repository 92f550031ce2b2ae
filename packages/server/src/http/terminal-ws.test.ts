import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { DEFAULT_FAIR_SHARE } from '../config.js';
import { MAX_TERMINALS_PER_SANDBOX } from '../services/terminals.js';
import { parseControl } from './terminal-ws.js';
import { refusedUpgrade, TermClient, terminalUrl } from '../../test/terminals.js';
import { makeTestApp, type TestApp } from '../../test/app.js';

describe('terminal routes and WebSocket (real ws clients, fake driver)', () => {
  let t: TestApp;
  let base: string;
  const auth = () => ({ authorization: `Bearer ${t.adminKey}` });
  const newSandbox = async (key?: string) =>
    (await t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image: 'local/busybox:latest' }, key })).json()
      .sandbox.id as string;
  const newTerminal = async (sb: string, payload?: object, key?: string) => {
    const r = await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals`, payload, key });
    assert.equal(r.statusCode, 201, r.body);
    return r.json() as {
      terminal: { id: string; sandboxId: string; shell: string; status: string; createdAt: string };
      wsUrl: string;
    };
  };

  before(async () => {
    t = await makeTestApp({ terminalIdleMs: 300, trustedProxies: ['127.0.0.1'] });
    base = await t.app.http.listen({ host: '127.0.0.1', port: 0 });
  });
  after(() => t.close());
  afterEach(async () => {
    const list = (await t.req({ method: 'GET', url: '/api/v1/sandboxes?state=started' })).json();
    for (const sb of list.sandboxes) await t.req({ method: 'DELETE', url: `/api/v1/sandboxes/${sb.id}` });
  });

  it('create (empty body): 201 with the spec fields, term_ id and ws:// / wss:// wsUrl on the request host', async () => {
    const sb = await newSandbox();
    const c = await t.req({
      method: 'POST',
      url: `/api/v1/sandboxes/${sb}/terminals`,
      headers: { host: 'box.example:9000' },
    });
    assert.equal(c.statusCode, 201, c.body);
    const { terminal, wsUrl } = c.json();
    assert.deepEqual(Object.keys(terminal).sort(), ['createdAt', 'id', 'sandboxId', 'shell', 'status']);
    assert.match(terminal.id, /^term_[a-z2-7]{16}$/);
    assert.equal(terminal.shell, 'bash');
    assert.equal(terminal.status, 'active');
    assert.equal(wsUrl, `ws://box.example:9000/api/v1/sandboxes/${sb}/terminals/${terminal.id}/ws`);
    const tls = await t.req({
      method: 'POST',
      url: `/api/v1/sandboxes/${sb}/terminals`,
      payload: { shell: 'sh', cols: 100, rows: 30 },
      headers: { host: 'h', 'x-forwarded-proto': 'https' },
    });
    assert.match(tls.json().wsUrl, /^wss:\/\/h\/api\/v1\/sandboxes\//);
    assert.equal(tls.json().terminal.shell, 'sh');
  });

  it('create: 400 naming a missing shell or cwd, or bad fields; 404 unknown or foreign sandbox; 409 stopped', async () => {
    const sb = await newSandbox();
    const zsh = await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals`, payload: { shell: 'zsh' } });
    assert.equal(zsh.statusCode, 400);
    assert.match(zsh.json().message, /shell "zsh"/);
    assert.equal(zsh.json().details[0].path, '/shell');
    const cwd = await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals`, payload: { cwd: '/no/such' } });
    assert.equal(cwd.statusCode, 400);
    assert.match(cwd.json().message, /cwd "\/no\/such"/);
    for (const payload of [{ cols: 0 }, { rows: 1.5 }, { shell: 'pwsh' }, { cwd: 'relative' }, { extra: 1 }]) {
      assert.equal(
        (await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals`, payload })).statusCode,
        400,
        JSON.stringify(payload),
      );
    }
    assert.equal(
      (await t.req({ method: 'POST', url: '/api/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/terminals', payload: {} }))
        .statusCode,
      404,
    );
    const other = await t.newAccount({ tokens: 100 });
    assert.equal(
      (await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals`, payload: {}, key: other.key }))
        .statusCode,
      404,
    );
    await t.req({ method: 'PATCH', url: `/api/v1/sandboxes/${sb}/timeout`, payload: { timeoutMs: 0 } });
    const stopped = await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals`, payload: {} });
    assert.equal(stopped.statusCode, 409);
  });

  it('protocol: ready, binary output, text or binary input, JSON-looking input, resize, invalid resize ignored, exit then 1000', async () => {
    const sb = await newSandbox();
    const { terminal } = await newTerminal(sb, { cols: 90, rows: 20 });
    const c = await TermClient.connect(terminalUrl(base, sb, terminal.id), auth());
    assert.deepEqual(await c.control('ready'), { type: 'ready', pid: c.controls[0].pid, shell: 'bash' });
    assert.equal(typeof c.controls[0].pid, 'number');
    c.type('stty size\r', { text: true });
    await c.waitForOutput(/20 90/);
    c.resize(132, 43);
    c.resize(0, 10);
    c.resize('x', 10);
    c.ws.send('{"type":"resize","cols":5000,"rows":5}');
    c.ws.send('{"type":"unknown"}');
    c.type('stty size\r');
    await c.waitForOutput(/43 132/);
    c.type('echo {"a":1}\r', { text: true });
    await c.waitForOutput(/\{a:1\}|\{"a":1\}/);
    assert.deepEqual(parseControl(Buffer.from(' {"type":"resize","cols":1,"rows":1}')), {
      type: 'resize',
      cols: 1,
      rows: 1,
    });
    assert.equal(parseControl(Buffer.from('{"a":1}')), null);
    assert.equal(parseControl(Buffer.from('[1]')), null);
    assert.equal(parseControl(Buffer.from('{oops')), null);
    c.type('exit 3\r');
    assert.deepEqual(await c.control('exit'), { type: 'exit', exitCode: 3, signal: null });
    assert.equal((await c.closed).code, 1000);
    assert.deepEqual(c.textFrames, []);
    const g = await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals/${terminal.id}` });
    assert.equal(g.json().status, 'exited');
    assert.deepEqual((await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals` })).json(), {
      terminals: [],
    });
    const late = await TermClient.connect(terminalUrl(base, sb, terminal.id), auth());
    assert.deepEqual(await late.closed, { code: 1000, reason: 'shell exited' });
    assert.deepEqual(late.controls, [{ type: 'exit', exitCode: 3, signal: null }]);
  });

  it('two clients: same output, either types, clientCount live, replay=1 replays; kill -9 reports SIGKILL', async () => {
    const sb = await newSandbox();
    const { terminal } = await newTerminal(sb);
    const url = terminalUrl(base, sb, terminal.id);
    const a = await TermClient.connect(url, { 'x-api-key': t.adminKey });
    const b = await TermClient.connect(url, auth());
    await a.control('ready');
    await b.control('ready');
    const get = async () =>
      (await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals/${terminal.id}` })).json();
    assert.equal((await get()).clientCount, 2);
    b.type('echo from-b\r');
    await a.waitForOutput(/from-b\r\n/);
    await b.waitForOutput(/from-b\r\n/);
    const r = await TermClient.connect(`${url}?replay=1`, auth());
    await r.waitForOutput(/from-b\r\n/);
    r.close();
    await r.closed;
    for (let i = 0; i < 50 && (await get()).clientCount !== 2; i++) await new Promise((res) => setTimeout(res, 20));
    assert.equal((await get()).clientCount, 2);
    const list = (await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals` })).json();
    assert.deepEqual(list, { terminals: [{ id: terminal.id, shell: 'bash', status: 'active', clientCount: 2 }] });
    a.type('kill -9 $$\r');
    assert.deepEqual(await b.control('exit'), { type: 'exit', exitCode: 137, signal: 'SIGKILL' });
    assert.equal((await a.closed).code, 1000);
  });

  it('upgrade refusals are plain HTTP with the Error body: 401, 404, 409, cross-site cookie, bad replay', async () => {
    const sb = await newSandbox();
    const { terminal } = await newTerminal(sb);
    const url = terminalUrl(base, sb, terminal.id);
    assert.equal((await refusedUpgrade(url)).status, 401);
    const bad = await refusedUpgrade(url, { authorization: 'Bearer sk_nope' });
    assert.deepEqual(bad, {
      status: 401,
      body: { code: 401, kind: 'unauthorized', message: (bad.body as { message: string }).message },
    });
    assert.equal((await refusedUpgrade(terminalUrl(base, sb, 'term_aaaaaaaaaaaaaaaa'), auth())).status, 404);
    assert.equal(
      (await refusedUpgrade(terminalUrl(base, 'sbx_aaaaaaaaaaaaaaaaaaaa', terminal.id), auth())).status,
      404,
    );
    const other = await t.newAccount({ tokens: 100 });
    assert.equal((await refusedUpgrade(url, { authorization: `Bearer ${other.key}` })).status, 404);
    const sb2 = await newSandbox();
    const t2 = await newTerminal(sb2);
    assert.equal(
      (await refusedUpgrade(terminalUrl(base, sb, t2.terminal.id), auth())).status,
      404,
      'terminal of another sandbox',
    );
    assert.equal((await refusedUpgrade(`${url}?replay=yes`, auth())).status, 400);
    // Session cookie: accepted with a same-origin Origin only.
    const email = `cookie-${Date.now()}@example.com`;
    await t.req({
      method: 'POST',
      url: '/api/v1/admin/accounts',
      payload: { email, password: 'password123', tokens: 100 },
    });
    const login = await t.req({
      method: 'POST',
      url: '/api/v1/auth/login',
      key: null,
      payload: { email, password: 'password123' },
    });
    const cookie = String(login.headers['set-cookie']).split(';')[0];
    const mine = await t.req({
      method: 'POST',
      url: '/api/v1/sandboxes',
      key: null,
      headers: { cookie, origin: 'http://localhost:80', host: 'localhost:80' },
      payload: { image: 'local/busybox:latest' },
    });
    assert.equal(mine.statusCode, 201, mine.body);
    const msb = mine.json().sandbox.id;
    const mt = await t.req({
      method: 'POST',
      url: `/api/v1/sandboxes/${msb}/terminals`,
      key: null,
      headers: { cookie, origin: 'http://localhost:80', host: 'localhost:80' },
      payload: {},
    });
    const murl = terminalUrl(base, msb, mt.json().terminal.id);
    assert.equal((await refusedUpgrade(murl, { cookie, origin: 'https://evil.example' })).status, 401);
    assert.equal((await refusedUpgrade(murl, { cookie })).status, 401, 'no Origin');
    const ok = await TermClient.connect(murl, { cookie, origin: base });
    await ok.control('ready');
    ok.close();
    await t.req({ method: 'PATCH', url: `/api/v1/sandboxes/${sb}/timeout`, payload: { timeoutMs: 0 } });
    const stopped = await refusedUpgrade(url, auth());
    assert.equal(stopped.status, 409);
    assert.equal((stopped.body as { code: number }).code, 409);
    const plain = await fetch(`${base}/api/v1/sandboxes/${sb2}/terminals/${t2.terminal.id}/ws`, { headers: auth() });
    assert.equal(plain.status, 400, 'a GET without Upgrade is told to upgrade');
  });

  it('delete: 204, clients get exit + 1000, then 404; sandbox delete closes every terminal', async () => {
    const sb = await newSandbox();
    const one = await newTerminal(sb);
    const two = await newTerminal(sb);
    const c1 = await TermClient.connect(terminalUrl(base, sb, one.terminal.id), auth());
    const c2 = await TermClient.connect(terminalUrl(base, sb, two.terminal.id), auth());
    await c1.control('ready');
    await c2.control('ready');
    const del = await t.req({ method: 'DELETE', url: `/api/v1/sandboxes/${sb}/terminals/${one.terminal.id}` });
    assert.equal(del.statusCode, 204);
    assert.equal(del.body, '');
    assert.deepEqual(await c1.control('exit'), { type: 'exit', exitCode: 129, signal: 'SIGHUP' });
    assert.equal((await c1.closed).code, 1000);
    assert.equal(
      (await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals/${one.terminal.id}` })).statusCode,
      404,
    );
    assert.equal(
      (await t.req({ method: 'DELETE', url: `/api/v1/sandboxes/${sb}/terminals/${one.terminal.id}` })).statusCode,
      404,
    );
    assert.equal((await t.req({ method: 'DELETE', url: `/api/v1/sandboxes/${sb}` })).statusCode, 204);
    assert.equal((await c2.control('exit')).type, 'exit');
    assert.equal((await c2.closed).code, 1000);
  });

  it('idle cleanup after terminalIdleMs with no client, never while one is connected', async () => {
    const sb = await newSandbox();
    const idle = await newTerminal(sb);
    const watched = await newTerminal(sb);
    const c = await TermClient.connect(terminalUrl(base, sb, watched.terminal.id), auth());
    await c.control('ready');
    const status = async (id: string) =>
      (await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals/${id}` })).statusCode;
    for (let i = 0; i < 200 && (await status(idle.terminal.id)) === 200; i++)
      await new Promise((r) => setTimeout(r, 25));
    assert.equal(await status(idle.terminal.id), 404, 'cleaned up');
    await new Promise((r) => setTimeout(r, 600)); // two idle periods with a client connected
    assert.equal(await status(watched.terminal.id), 200, 'kept while connected');
    c.close();
    await c.closed;
    for (let i = 0; i < 200 && (await status(watched.terminal.id)) === 200; i++)
      await new Promise((r) => setTimeout(r, 25));
    assert.equal(await status(watched.terminal.id), 404, 'cleaned up after the last client left');
  });

  it('a program started to run without clients (E2B PTYs) is kept while it runs, listed, and cleaned up once it exits', async () => {
    const sb = await newSandbox();
    const account = (await t.app.services.auth.fromApiKey(t.adminKey)).account.id;
    const s = await t.app.services.terminals.start(account, sb, {
      argv: ['/bin/sh'],
      env: { A: 'b' },
      cwd: '/tmp',
      cols: 90,
      rows: 30,
      tag: 'tagged',
      keepWhileIdle: true,
    });
    assert.deepEqual([s.argv, s.env, s.cwd, s.tag, s.shell], [['/bin/sh'], { A: 'b' }, '/tmp', 'tagged', 'sh']);
    assert.equal((await t.app.services.terminals.byPid(account, sb, s.pid))?.id, s.id);
    const status = async () =>
      (await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals/${s.id}` })).statusCode;
    await new Promise((r) => setTimeout(r, 700)); // two idle periods without a client
    assert.equal(await status(), 200, 'kept while it runs');
    await s.write('exit 0\r');
    for (let i = 0; i < 200 && (await status()) === 200; i++) await new Promise((r) => setTimeout(r, 25));
    assert.equal(await status(), 404, 'cleaned up after it exited');
    assert.equal(await t.app.services.terminals.byPid(account, sb, s.pid), undefined);
  });

  it(`at most ${MAX_TERMINALS_PER_SANDBOX} terminals per sandbox; exited ones are evicted first`, async () => {
    // An app of its own: this describe's 300 ms idle cleanup would remove the first terminals
    // while a loaded host is still making the last ones, and the 33rd create would fit.
    const t3 = await makeTestApp({ terminalIdleMs: 600_000 });
    try {
      const base3 = await t3.app.http.listen({ host: '127.0.0.1', port: 0 });
      const sb = (
        await t3.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image: 'local/busybox:latest' } })
      ).json().sandbox.id as string;
      const create = () => t3.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals`, payload: {} });
      const ids: string[] = [];
      for (let i = 0; i < MAX_TERMINALS_PER_SANDBOX; i++) {
        const r = await create();
        assert.equal(r.statusCode, 201, r.body);
        ids.push(r.json().terminal.id);
      }
      assert.equal((await create()).statusCode, 409);
      const c = await TermClient.connect(terminalUrl(base3, sb, ids[5]), { authorization: `Bearer ${t3.adminKey}` });
      c.type('exit 0\r');
      await c.closed;
      // The server may see the client's close a moment after the client does: until then the
      // exited terminal still has a client and is not evicted (bounded wait).
      for (let i = 0; i < 100; i++) {
        const r = await t3.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals/${ids[5]}` });
        if (r.json().clientCount === 0) break;
        await new Promise((res) => setTimeout(res, 20));
      }
      assert.equal((await create()).statusCode, 201);
      assert.equal(
        (await t3.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals/${ids[5]}` })).statusCode,
        404,
      );
    } finally {
      await t3.close();
    }
  });

  it('shutdown closes connected clients with 1001', async () => {
    const t2 = await makeTestApp();
    const base2 = await t2.app.http.listen({ host: '127.0.0.1', port: 0 });
    const sb = (
      await t2.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image: 'local/busybox:latest' } })
    ).json().sandbox.id;
    const term = (await t2.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals`, payload: {} })).json()
      .terminal.id;
    const c = await TermClient.connect(terminalUrl(base2, sb, term), { authorization: `Bearer ${t2.adminKey}` });
    await c.control('ready');
    await t2.close();
    assert.equal((await c.closed).code, 1001);
  });
});

describe('terminal shares per sandbox (real ws clients, fake driver)', () => {
  let t: TestApp;
  let base: string;
  const auth = () => ({ authorization: `Bearer ${t.adminKey}` });
  const newSandbox = async () =>
    (await t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image: 'local/busybox:latest' } })).json()
      .sandbox.id as string;
  const newTerminal = async (sb: string) =>
    (await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals` })).json().terminal.id as string;
  const clientCount = async (sb: string, id: string) =>
    (await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb}/terminals/${id}` })).json().clientCount;

  before(async () => {
    t = await makeTestApp({
      fairShare: { ...DEFAULT_FAIR_SHARE, clientsPerTerminal: 2, terminalSocketsPerSandbox: 3 },
    });
    base = await t.app.http.listen({ host: '127.0.0.1', port: 0 });
  });
  after(() => t.close());

  it('clients per terminal and sockets per sandbox: 429 naming each before the handshake; another sandbox of the account attaches; a close frees a slot', async () => {
    const [sb, other] = [await newSandbox(), await newSandbox()];
    const [t1, t2] = [await newTerminal(sb), await newTerminal(sb)];
    const open = [
      await TermClient.connect(terminalUrl(base, sb, t1), auth()),
      await TermClient.connect(terminalUrl(base, sb, t1), auth()),
    ];
    const perTerminal = await refusedUpgrade(terminalUrl(base, sb, t1), auth());
    assert.equal(perTerminal.status, 429);
    assert.deepEqual((perTerminal.body as { details: unknown }).details, { limit: 'clientsPerTerminal', max: 2 });
    assert.match((perTerminal.body as { message: string }).message, /already has 2 clients attached/);
    open.push(await TermClient.connect(terminalUrl(base, sb, t2), auth()));
    const perSandbox = await refusedUpgrade(terminalUrl(base, sb, t2), auth());
    assert.equal(perSandbox.status, 429);
    assert.deepEqual((perSandbox.body as { details: unknown }).details, {
      limit: 'terminalSocketsPerSandbox',
      max: 3,
    });
    const neighbour = await TermClient.connect(terminalUrl(base, other, await newTerminal(other)), auth());
    await neighbour.control('ready');
    neighbour.close();
    open[2].close();
    await open[2].closed;
    open[2] = await TermClient.connect(terminalUrl(base, sb, t2), auth());
    await open[2].control('ready');
    for (const c of open) c.close();
  });

  it('two upgrades racing for the last client slot: one attaches, the other is refused (429) or closed with 1013 naming the limit', async () => {
    const sb = await newSandbox();
    const id = await newTerminal(sb);
    const first = await TermClient.connect(terminalUrl(base, sb, id), auth());
    await first.control('ready');
    const racing = await Promise.allSettled([
      TermClient.connect(terminalUrl(base, sb, id), auth()),
      TermClient.connect(terminalUrl(base, sb, id), auth()),
    ]);
    const clients: TermClient[] = [];
    for (const r of racing) {
      if (r.status === 'fulfilled') clients.push(r.value);
      else assert.equal((r.reason as { status?: number }).status, 429, String(r.reason));
    }
    let ready = 0;
    for (const c of clients) {
      await c.waitFor(() => c.controls.some((m) => m.type === 'ready') || c.closeInfo !== null, 'ready or a close');
      if (c.closeInfo) {
        assert.equal(c.closeInfo.code, 1013);
        assert.match(c.closeInfo.reason, /already has 2 clients attached/);
      } else ready++;
    }
    assert.equal(ready, 1, 'exactly one of the two got the last slot');
    assert.equal(await clientCount(sb, id), 2);
    first.close();
    for (const c of clients) c.close();
  });
});
