import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DEFAULT_RATE_LIMITS, loadConfig, type RateLimitConfig } from '../config.js';
import { clientKey, SlidingWindow, TokenBuckets } from './rate-limit.js';
import { refusedUpgrade, TermClient, terminalUrl } from '../../test/terminals.js';
import { makeTestApp, type TestApp } from '../../test/app.js';

/** A clock the test moves by hand. */
function manual(start = 1_000_000) {
  let t = start;
  return {
    now: () => t,
    advance: (ms: number) => {
      t += ms;
    },
  };
}

describe('TokenBuckets (injected clock)', () => {
  it('spends the burst, then refuses with the exact wait; refills at the rate', () => {
    const c = manual();
    const b = new TokenBuckets({ perSec: 10, burst: 3, now: c.now });
    for (let i = 0; i < 3; i++) assert.deepEqual(b.take('a'), { ok: true });
    assert.deepEqual(b.take('a'), { ok: false, retryAfterMs: 100 });
    c.advance(40);
    assert.deepEqual(b.take('a'), { ok: false, retryAfterMs: 60 }, 'the wait shrinks as tokens refill');
    c.advance(60);
    assert.deepEqual(b.take('a'), { ok: true });
    assert.equal(b.take('a').ok, false);
    c.advance(10_000);
    for (let i = 0; i < 3; i++) assert.equal(b.take('a').ok, true, 'never more than the burst after a long pause');
    assert.equal(b.take('a').ok, false);
  });

  it('keys are independent', () => {
    const c = manual();
    const b = new TokenBuckets({ perSec: 1, burst: 1, now: c.now });
    assert.equal(b.take('a').ok, true);
    assert.equal(b.take('a').ok, false);
    assert.equal(b.take('b').ok, true);
  });

  it('sustains exactly its rate: 1000/s with a burst of 2000 serves 2000 + 1000 per second', () => {
    const c = manual();
    const b = new TokenBuckets({
      perSec: DEFAULT_RATE_LIMITS.accountPerSec,
      burst: DEFAULT_RATE_LIMITS.accountBurst,
      now: c.now,
    });
    let ok = 0;
    // 10 s of 1,500 requests/s, 1 ms apart in groups of 1.5
    for (let ms = 0; ms < 10_000; ms++) {
      for (let k = 0; k < (ms % 2 ? 2 : 1); k++) if (b.take('acc').ok) ok++;
      c.advance(1);
    }
    assert.ok(ok >= 2000 + 9990 && ok <= 2000 + 10_000, `served ${ok}`);
    // 500 req/s (the load test) never meets the limit
    const slow = new TokenBuckets({ perSec: 1000, burst: 2000, now: c.now });
    for (let i = 0; i < 5000; i++, c.advance(2)) assert.equal(slow.take('acc').ok, true);
  });

  it('perSec 0 turns it off', () => {
    const b = new TokenBuckets({ perSec: 0, burst: 0, now: () => 0 });
    for (let i = 0; i < 100; i++) assert.equal(b.take('a').ok, true);
    assert.equal(b.size, 0);
  });

  it('forgets buckets once they are full again, and never holds more than maxKeys', () => {
    const c = manual();
    const b = new TokenBuckets({ perSec: 10, burst: 10, now: c.now, sweepMs: 1000, maxKeys: 500 });
    for (let i = 0; i < 400; i++) b.take(`ip${i}`);
    assert.equal(b.size, 400);
    c.advance(50); // nothing is full yet, and no sweep is due
    b.take('x');
    assert.equal(b.size, 401);
    c.advance(1000); // every bucket refilled: the next call sweeps them
    b.take('y');
    assert.equal(b.size, 1);
    for (let i = 0; i < 2000; i++) b.take(`flood${i}`);
    assert.equal(b.size, 500, 'bounded under a flood of new keys');
    // the least recently used key goes first: a key in use keeps its (empty) bucket
    const hot = new TokenBuckets({ perSec: 1, burst: 1, now: c.now, maxKeys: 3 });
    hot.take('hot');
    for (let i = 0; i < 10; i++) {
      hot.take(`cold${i}`);
      assert.equal(hot.take('hot').ok, false, 'still limited: its bucket was not evicted');
    }
  });
});

describe('SlidingWindow (injected clock)', () => {
  it('allows max events per window, says when the oldest leaves, and clears', () => {
    const c = manual();
    const w = new SlidingWindow({ max: 3, windowMs: 1000, now: c.now });
    for (let i = 0; i < 3; i++) {
      assert.equal(w.check('e').ok, true);
      w.record('e');
      c.advance(100);
    }
    // events at 0, 100, 200; now 300: the first leaves at 1000
    assert.deepEqual(w.check('e'), { ok: false, retryAfterMs: 700 });
    assert.equal(w.check('other').ok, true);
    c.advance(700);
    assert.equal(w.check('e').ok, true);
    w.record('e');
    assert.deepEqual(w.check('e'), { ok: false, retryAfterMs: 100 });
    w.clear('e');
    assert.equal(w.check('e').ok, true);
    // a fractional clock (performance.now) still gives whole milliseconds
    const f = new SlidingWindow({ max: 1, windowMs: 1000, now: () => 0.25 });
    f.record('x');
    assert.deepEqual(f.check('x'), { ok: false, retryAfterMs: 1000 });
  });

  it('drops keys whose events left the window; bounded; max 0 is off', () => {
    const c = manual();
    const w = new SlidingWindow({ max: 2, windowMs: 1000, now: c.now, maxKeys: 100 });
    for (let i = 0; i < 50; i++) w.record(`k${i}`);
    assert.equal(w.size, 50);
    c.advance(1001);
    w.record('new');
    assert.equal(w.size, 1);
    for (let i = 0; i < 1000; i++) w.record(`f${i}`);
    assert.equal(w.size, 100);
    const off = new SlidingWindow({ max: 0, windowMs: 1000, now: c.now });
    for (let i = 0; i < 10; i++) off.record('x');
    assert.equal(off.check('x').ok, true);
    assert.equal(off.size, 0);
  });
});

describe('clientKey', () => {
  it('IPv4 as is (also mapped), IPv6 by its /64', () => {
    assert.equal(clientKey('127.0.0.1'), '127.0.0.1');
    assert.equal(clientKey('::ffff:10.1.2.3'), '10.1.2.3');
    assert.equal(clientKey('2001:db8:1:2:3:4:5:6'), '2001:db8:1:2::/64');
    assert.equal(clientKey('2001:db8:1:2::99'), '2001:db8:1:2::/64');
    assert.equal(clientKey('2001:0db8::1'), '2001:db8:0:0::/64');
    assert.equal(clientKey('::1'), '0:0:0:0::/64');
    assert.equal(clientKey(undefined), 'unknown');
  });
});

describe('rate limit config', () => {
  it('defaults, SANDBOXD_RATE_LIMIT_* variables, and bad values named', () => {
    assert.deepEqual(loadConfig({}).rateLimit, DEFAULT_RATE_LIMITS);
    assert.ok(
      DEFAULT_RATE_LIMITS.accountPerSec >= 1000 && DEFAULT_RATE_LIMITS.accountBurst >= 2000,
      'a 500 exec/s load never meets the default',
    );
    const c = loadConfig({
      SANDBOXD_RATE_LIMIT_ACCOUNT_PER_SEC: '5',
      SANDBOXD_RATE_LIMIT_ACCOUNT_BURST: '7',
      SANDBOXD_RATE_LIMIT_IP_PER_SEC: '0',
      SANDBOXD_RATE_LIMIT_LOGIN_FAILURES_PER_EMAIL: '3',
      SANDBOXD_RATE_LIMIT_AUTH_WINDOW_MS: '60000',
    });
    assert.equal(c.rateLimit.accountPerSec, 5);
    assert.equal(c.rateLimit.accountBurst, 7);
    assert.equal(c.rateLimit.ipPerSec, 0);
    assert.equal(c.rateLimit.loginFailuresPerEmail, 3);
    assert.equal(c.rateLimit.authWindowMs, 60_000);
    assert.equal(c.rateLimit.signupsPerIp, DEFAULT_RATE_LIMITS.signupsPerIp);
    assert.throws(() => loadConfig({ SANDBOXD_RATE_LIMIT_IP_BURST: 'many' }), /SANDBOXD_RATE_LIMIT_IP_BURST/);
    assert.throws(
      () => loadConfig({ SANDBOXD_RATE_LIMIT_ACCOUNT_PER_SEC: '-1' }),
      /SANDBOXD_RATE_LIMIT_ACCOUNT_PER_SEC/,
    );
    assert.throws(() => loadConfig({ SANDBOXD_RATE_LIMIT_AUTH_WINDOW_MS: '0' }), /SANDBOXD_RATE_LIMIT_AUTH_WINDOW_MS/);
  });
});

describe('rate limits in the HTTP API (inject, moved clock)', () => {
  let t: TestApp;
  const c = manual();
  const limits: RateLimitConfig = {
    accountPerSec: 1,
    accountBurst: 5,
    ipPerSec: 1,
    ipBurst: 4,
    loginFailuresPerEmail: 3,
    loginFailuresPerIp: 6,
    signupsPerIp: 2,
    authWindowMs: 60_000,
    terminalSocketsPerAccount: 3,
  };
  const errors429 = async () =>
    Number(
      /sandboxd_http_errors_total\{code="429"\} (\d+)/.exec(
        (await t.req({ method: 'GET', url: '/metrics', key: null })).body,
      )?.[1] ?? 0,
    );
  before(async () => {
    t = await makeTestApp({ rateLimit: limits, signupEnabled: true }, { rateLimitNow: c.now });
  });
  after(() => t.close());

  it('per account: the burst, then 429 with Retry-After and details; other accounts and health unaffected', async () => {
    c.advance(60_000);
    const a = await t.newAccount();
    c.advance(60_000);
    const b = await t.newAccount();
    c.advance(60_000);
    for (let i = 0; i < 5; i++)
      assert.equal((await t.req({ method: 'GET', url: '/api/v1/account', key: a.key })).statusCode, 200);
    const before429 = await errors429();
    const r = await t.req({ method: 'GET', url: '/api/v1/account', key: a.key });
    assert.equal(r.statusCode, 429);
    assert.equal(r.headers['retry-after'], '1');
    const body = r.json();
    assert.deepEqual(Object.keys(body).sort(), ['code', 'details', 'kind', 'message']);
    assert.equal(body.code, 429);
    assert.deepEqual(body.details, { limit: 'account', retryAfterMs: 1000 });
    assert.match(body.message, /Too many requests for this account.*retry in 1 s/);
    // a refused request is not run: a create is refused before validation and billing
    const create = await t.req({
      method: 'POST',
      url: '/api/v1/sandboxes',
      key: a.key,
      payload: { image: 'local/busybox:latest' },
    });
    assert.equal(create.statusCode, 429);
    assert.equal(await errors429(), before429 + 2, '429s are counted in /metrics by code');
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/account', key: b.key })).statusCode,
      200,
      'another account is unaffected',
    );
    for (let i = 0; i < 20; i++)
      assert.equal(
        (await t.req({ method: 'GET', url: '/healthz', key: null })).statusCode,
        200,
        'health is never limited',
      );
    c.advance(1000);
    const after = await t.req({ method: 'GET', url: '/api/v1/account', key: a.key });
    assert.equal(after.statusCode, 200, 'one token after the announced wait');
    assert.equal(after.json().usage.startedSandboxes, 0, 'the refused create did nothing');
    assert.equal(after.json().balance, 1000, 'and charged nothing');
  });

  it('per IP without valid credentials: bad keys and public routes, by address', async () => {
    c.advance(60_000);
    const ip = (remoteAddress: string) => ({ remoteAddress });
    for (let i = 0; i < 4; i++)
      assert.equal(
        (await t.req({ method: 'GET', url: '/api/v1/sandboxes', key: `sk_${'x'.repeat(40)}`, ...ip('10.0.0.1') }))
          .statusCode,
        401,
      );
    const r = await t.req({ method: 'GET', url: '/api/v1/sandboxes', key: null, ...ip('10.0.0.1') });
    assert.equal(r.statusCode, 429);
    assert.equal(r.json().details.limit, 'ip');
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/openapi.json', key: null, ...ip('10.0.0.1') })).statusCode,
      429,
      'public routes count too',
    );
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/nope', key: null, ...ip('10.0.0.1') })).statusCode,
      429,
      'unknown routes count too',
    );
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/sandboxes', key: null, ...ip('10.0.0.2') })).statusCode,
      401,
      'another address is unaffected',
    );
    const acct = await t.newAccount();
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/sandboxes', key: acct.key, ...ip('10.0.0.1') })).statusCode,
      200,
      'valid credentials are charged to the account, not the address',
    );
  });

  it('login: failures per email, then 429 even with the right password; other emails and addresses unaffected; success clears', async () => {
    c.advance(120_000);
    const email = 'victim@example.com';
    await t.req({ method: 'POST', url: '/api/v1/admin/accounts', payload: { email, password: 'rightpassword' } });
    await t.req({
      method: 'POST',
      url: '/api/v1/admin/accounts',
      payload: { email: 'bystander@example.com', password: 'rightpassword' },
    });
    const login = (e: string, password: string, remoteAddress = '10.1.0.1') =>
      t.req({ method: 'POST', url: '/api/v1/auth/login', key: null, payload: { email: e, password }, remoteAddress });
    c.advance(10_000);
    for (let i = 0; i < 3; i++) {
      assert.equal((await login(email, 'wrong')).statusCode, 401);
      c.advance(1000);
    }
    const blocked = await login('Victim@Example.com', 'rightpassword', '10.1.0.2');
    assert.equal(
      blocked.statusCode,
      429,
      'the email is locked for a while, whatever the case, the password or the address',
    );
    assert.equal(blocked.json().details.limit, 'login');
    assert.equal(blocked.headers['retry-after'], '57');
    assert.equal(
      (await login('bystander@example.com', 'rightpassword', '10.1.0.2')).statusCode,
      200,
      'another email logs in',
    );
    c.advance(57_000);
    assert.equal((await login(email, 'rightpassword')).statusCode, 200, 'after the window');
    // per address: 6 failures over several emails block that address only
    c.advance(10_000);
    for (let i = 0; i < 6; i++) {
      assert.equal((await login(`nobody${i}@example.com`, 'wrong', '10.2.0.1')).statusCode, 401);
      c.advance(1000); // stays under the address's request bucket
    }
    assert.equal((await login('bystander@example.com', 'rightpassword', '10.2.0.1')).statusCode, 429);
    assert.equal((await login('bystander@example.com', 'rightpassword', '10.2.0.9')).statusCode, 200);
  });

  it('sign-up: per address', async () => {
    c.advance(120_000);
    const signup = (n: number, remoteAddress: string) =>
      t.req({
        method: 'POST',
        url: '/api/v1/auth/signup',
        key: null,
        payload: { email: `s${n}@example.com`, password: 'password123' },
        remoteAddress,
      });
    assert.equal((await signup(1, '10.3.0.1')).statusCode, 201);
    c.advance(5000);
    assert.equal((await signup(1, '10.3.0.1')).statusCode, 409, 'a taken email counts as an attempt');
    const r = await signup(2, '10.3.0.1');
    assert.equal(r.statusCode, 429);
    assert.equal(r.json().details.limit, 'signup');
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/admin/accounts' }))
        .json()
        .accounts.some((a: { email: string }) => a.email === 's2@example.com'),
      false,
    );
    assert.equal((await signup(3, '10.3.0.2')).statusCode, 201);
  });

  it('terminal sockets per account: past the cap the upgrade is refused (429) until one closes; others unaffected', async () => {
    const base = await t.app.http.listen({ host: '127.0.0.1', port: 0 });
    c.advance(60_000);
    const acct = await t.newAccount();
    c.advance(60_000);
    const sb = (
      await t.req({
        method: 'POST',
        url: '/api/v1/sandboxes',
        key: acct.key,
        payload: { image: 'local/busybox:latest' },
      })
    ).json().sandbox.id;
    const term = (
      await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb}/terminals`, key: acct.key, payload: {} })
    ).json().terminal.id;
    const url = terminalUrl(base, sb, term);
    const auth = { authorization: `Bearer ${acct.key}` };
    c.advance(60_000);
    const open = [
      await TermClient.connect(url, auth),
      await TermClient.connect(url, auth),
      await TermClient.connect(url, auth),
    ];
    const refused = await refusedUpgrade(url, auth);
    assert.equal(refused.status, 429);
    assert.deepEqual((refused.body as { details: unknown }).details, { limit: 'connections', max: 3 });
    c.advance(60_000);
    const sb2 = (
      await t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image: 'local/busybox:latest' } })
    ).json().sandbox.id;
    const term2 = (await t.req({ method: 'POST', url: `/api/v1/sandboxes/${sb2}/terminals`, payload: {} })).json()
      .terminal.id;
    const admin = await TermClient.connect(terminalUrl(base, sb2, term2), { authorization: `Bearer ${t.adminKey}` });
    await admin.control('ready');
    admin.close();
    open[0].close();
    await open[0].closed;
    c.advance(60_000);
    let again: TermClient | null = null;
    for (let i = 0; i < 50 && !again; i++) {
      again = await TermClient.connect(url, auth).catch(() => null); // the server counts the socket until it has closed its side
      if (!again) await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(again, 'a slot is free again once a socket closed');
    for (const x of [...open.slice(1), again]) x.close();
    await Promise.all([...open.slice(1), again].map((x) => x.closed));
  });
});
