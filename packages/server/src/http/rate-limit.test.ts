import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DEFAULT_RATE_LIMITS, loadConfig, type RateLimitConfig } from '../config.js';
import { MemoryCounters } from '../store/memory-counters.js';
import { SqliteStore } from '../store/sqlite/store.js';
import { addressKey, RateLimits, requestWindow } from './rate-limit.js';
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

describe('windows of the request limits', () => {
  it('a rate and a burst: burst requests per burst/perSec seconds; 0 turns it off', () => {
    assert.deepEqual(requestWindow(DEFAULT_RATE_LIMITS.accountPerSec, DEFAULT_RATE_LIMITS.accountBurst), {
      max: 2000,
      windowMs: 2000,
    });
    assert.deepEqual(requestWindow(DEFAULT_RATE_LIMITS.ipPerSec, DEFAULT_RATE_LIMITS.ipBurst), {
      max: 1000,
      windowMs: 10_000,
    });
    assert.deepEqual(requestWindow(3, 5), { max: 5, windowMs: 1667 });
    assert.deepEqual(requestWindow(1_000_000, 1), { max: 1, windowMs: 1 }, 'never a window of 0 ms');
    assert.equal(requestWindow(0, 10), null);
    assert.equal(requestWindow(10, 0), null);
  });

  it('a 500 req/s load from one account never meets the default account limit', async () => {
    const c = manual();
    const limits = new RateLimits(DEFAULT_RATE_LIMITS, new MemoryCounters(), c.now);
    const w = limits.account!;
    for (let i = 0; i < 5000; i++, c.advance(2)) assert.ok((await limits.hit('account:a', w.windowMs)).count <= w.max);
  });
});

describe('addressKey', () => {
  it('IPv4 as is (also mapped), IPv6 by its /64', () => {
    assert.equal(addressKey('127.0.0.1'), '127.0.0.1');
    assert.equal(addressKey('::ffff:10.1.2.3'), '10.1.2.3');
    assert.equal(addressKey('2001:db8:1:2:3:4:5:6'), '2001:db8:1:2::');
    assert.equal(addressKey('2001:db8:1:2::99'), '2001:db8:1:2::');
    assert.equal(addressKey('2001:0db8::1'), '2001:db8::');
    assert.equal(addressKey('fe80::1%eth0'), 'fe80::');
    assert.equal(addressKey(undefined), 'unknown');
  });
});

describe('RateLimits over counters (injected clock)', () => {
  it('counts in fixed windows with the wait to the end; purges ended windows at most once per interval', async () => {
    const c = manual();
    const counters = new MemoryCounters();
    let purges = 0;
    const purge = counters.purgeCounters.bind(counters);
    counters.purgeCounters = (now) => {
      purges++;
      return purge(now);
    };
    const limits = new RateLimits(DEFAULT_RATE_LIMITS, counters, c.now, 1000);
    assert.deepEqual(await limits.hit('k', 500), { count: 1, ttl: 500 });
    c.advance(100.7); // a fractional clock (performance.now) gives whole milliseconds
    assert.deepEqual(await limits.hit('k', 500), { count: 2, ttl: 400 });
    assert.deepEqual(await limits.read('k'), { count: 2, ttl: 400 });
    c.advance(400);
    assert.equal(await limits.read('k'), null);
    assert.equal(purges, 1, 'the first hit purges');
    await limits.hit('i', 100);
    await limits.hit('j', 100);
    assert.equal(counters.size, 2, 'k was dropped when read after its end');
    c.advance(1000);
    await limits.hit('x', 100);
    assert.equal(purges, 2);
    assert.equal(counters.size, 1, 'ended windows are gone');
  });

  it('chargeAccount (front doors outside fastify): the account window, its wait when over, null when off', async () => {
    const c = manual();
    const config = { ...DEFAULT_RATE_LIMITS, accountPerSec: 2, accountBurst: 2 };
    const limits = new RateLimits(config, new MemoryCounters(), c.now);
    assert.equal(await limits.chargeAccount('acc_1'), null);
    assert.equal(await limits.chargeAccount('acc_1'), null);
    assert.equal(await limits.chargeAccount('acc_1'), 1000, 'the third in a 1 s window waits for its end');
    assert.equal(await limits.chargeAccount('acc_2'), null, 'per account');
    assert.deepEqual(await limits.read('account:acc_1'), { count: 3, ttl: 1000 }, "the API limiter's key");
    c.advance(1000);
    assert.equal(await limits.chargeAccount('acc_1'), null);
    const off = new RateLimits({ ...DEFAULT_RATE_LIMITS, accountPerSec: 0 }, new MemoryCounters(), c.now);
    assert.equal(await off.chargeAccount('acc_1'), null);
  });

  it('failed logins: the longer wait of email and address; failures only; success clears the email only', async () => {
    const c = manual();
    const config = { ...DEFAULT_RATE_LIMITS, loginFailuresPerEmail: 2, loginFailuresPerIp: 3, authWindowMs: 10_000 };
    const limits = new RateLimits(config, new MemoryCounters(), c.now);
    assert.equal(await limits.loginWait('e', '1.1.1.1'), 0);
    await limits.loginFailed('e', '1.1.1.1');
    c.advance(1000);
    await limits.loginFailed('e', '1.1.1.1');
    assert.equal(await limits.loginWait('e', '2.2.2.2'), 9000, 'the email waits, from any address');
    assert.equal(await limits.loginWait('f', '1.1.1.1'), 0, 'the address has one failure left');
    c.advance(1000);
    await limits.loginFailed('f', '1.1.1.1');
    assert.equal(await limits.loginWait('g', '1.1.1.1'), 8000);
    await limits.loginSucceeded('e');
    assert.equal(await limits.loginWait('e', '2.2.2.2'), 0);
    assert.equal(await limits.loginWait('e', '1.1.1.1'), 8000, 'the address stays limited');
    const off = new RateLimits(
      { ...config, loginFailuresPerEmail: 0, loginFailuresPerIp: 0 },
      new MemoryCounters(),
      c.now,
    );
    for (let i = 0; i < 10; i++) await off.loginFailed('e', '1.1.1.1');
    assert.equal(await off.loginWait('e', '1.1.1.1'), 0, '0 turns them off');
  });

  it('reserveLogin: parallel reservations pass at most the max; a refusal is not counted; a success gives back', async () => {
    const c = manual();
    const config = { ...DEFAULT_RATE_LIMITS, loginFailuresPerEmail: 3, loginFailuresPerIp: 5, authWindowMs: 10_000 };
    const limits = new RateLimits(config, new MemoryCounters(), c.now);
    const all = await Promise.all(Array.from({ length: 20 }, () => limits.reserveLogin('e', '1.1.1.1')));
    const passed = all.filter((a) => !('wait' in a));
    assert.equal(passed.length, 3);
    assert.ok(all.every((a) => !('wait' in a) || a.wait === 10_000));
    assert.deepEqual(await limits.read('login-email:e'), { count: 3, ttl: 10_000 }, 'refusals given back');
    assert.deepEqual(await limits.read('login-ip:1.1.1.1'), { count: 3, ttl: 10_000 });
    for (const a of passed) if (!('wait' in a)) await a.failed();
    assert.equal(await limits.loginWait('e', '2.2.2.2'), 10_000);
    const ok = await limits.reserveLogin('f', '1.1.1.1');
    assert.ok(!('wait' in ok));
    assert.deepEqual(await limits.read('login-ip:1.1.1.1'), { count: 4, ttl: 10_000 }, 'in flight: counted');
    await ok.succeeded();
    assert.deepEqual(await limits.read('login-ip:1.1.1.1'), { count: 3, ttl: 10_000 }, 'a success is not a failure');
    assert.equal(await limits.read('login-email:f'), null);
  });

  it('a success gives its reservation back to the window it was counted in, never to the next one', async () => {
    const c = manual();
    const config = { ...DEFAULT_RATE_LIMITS, loginFailuresPerEmail: 100, loginFailuresPerIp: 5, authWindowMs: 10_000 };
    const limits = new RateLimits(config, new MemoryCounters(), c.now);
    // Right logins of the attacker's own account, reserved just before the address's window ends...
    const own = await Promise.all(Array.from({ length: 3 }, () => limits.reserveLogin('mine', '1.1.1.1')));
    c.advance(10_000);
    // ...then failures against other emails in the next window, and the successes land.
    for (let i = 0; i < 3; i++) {
      const a = await limits.reserveLogin(`victim${i}`, '1.1.1.1');
      if (!('wait' in a)) await a.failed();
    }
    for (const a of own) if (!('wait' in a)) await a.succeeded();
    assert.deepEqual(
      await limits.read('login-ip:1.1.1.1'),
      { count: 3, ttl: 10_000 },
      'the new window keeps its failures',
    );
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
    assert.equal(DEFAULT_RATE_LIMITS.store, 'memory');
    assert.equal(loadConfig({ SANDBOXD_RATE_LIMIT_STORE: 'database' }).rateLimit.store, 'database');
    assert.throws(
      () => loadConfig({ SANDBOXD_RATE_LIMIT_STORE: 'redis' }),
      /SANDBOXD_RATE_LIMIT_STORE must be one of memory, database/,
    );
  });
});

for (const store of ['memory', 'database'] as const)
  describe(`rate limits in the HTTP API (inject, moved clock, ${store} counters)`, () => {
    let t: TestApp;
    const c = manual();
    const limits: RateLimitConfig = {
      store,
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
      c.advance(1200); // 5 per 5 s, a window from the first request: 3.8 s left
      const before429 = await errors429();
      const r = await t.req({ method: 'GET', url: '/api/v1/account', key: a.key });
      assert.equal(r.statusCode, 429);
      assert.equal(r.headers['retry-after'], '4', 'whole seconds, rounded up');
      assert.equal(r.headers['x-ratelimit-limit'], undefined, 'no headers of the library');
      const body = r.json();
      assert.deepEqual(Object.keys(body).sort(), ['code', 'details', 'kind', 'message']);
      assert.equal(body.code, 429);
      assert.equal(body.kind, 'rate_limited');
      assert.deepEqual(body.details, { limit: 'account', retryAfterMs: 3800 });
      assert.match(body.message, /^Too many requests for this account \(at most 5 per 5 s\); retry in 4 s$/);
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
      c.advance(3799);
      assert.equal((await t.req({ method: 'GET', url: '/api/v1/account', key: a.key })).statusCode, 429, 'not before');
      c.advance(1);
      const after = await t.req({ method: 'GET', url: '/api/v1/account', key: a.key });
      assert.equal(after.statusCode, 200, 'a new window after the announced wait');
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
      assert.deepEqual(r.json().details, { limit: 'ip', retryAfterMs: 4000 });
      assert.match(r.json().message, /from this address \(at most 4 per 4 s\)/);
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
        c.advance(1000); // stays under the address's request limit (4 per 4 s)
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
      assert.deepEqual(r.json().details, { limit: 'signup', retryAfterMs: 55_000 });
      assert.equal(r.headers['retry-after'], '55');
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

describe('replicas on one database share the counters; memory counters are per process', () => {
  for (const store of ['database', 'memory'] as const)
    it(`${store}: the account limit and a login lockout seen from two servers`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'sbx-replicas-'));
      const c = manual();
      const config = {
        rateLimit: { ...DEFAULT_RATE_LIMITS, store, accountPerSec: 1, accountBurst: 5, loginFailuresPerEmail: 2 },
      };
      const path = join(dir, 'db.sqlite');
      const a = await makeTestApp(config, { rateLimitNow: c.now, store: new SqliteStore(path) });
      const b = await makeTestApp(config, { rateLimitNow: c.now, store: new SqliteStore(path) });
      try {
        const acct = await a.newAccount();
        c.advance(60_000);
        const get = (t: TestApp) => t.req({ method: 'GET', url: '/api/v1/account', key: acct.key });
        for (let i = 0; i < 3; i++) assert.equal((await get(a)).statusCode, 200);
        for (let i = 0; i < 2; i++) assert.equal((await get(b)).statusCode, 200);
        assert.equal((await get(a)).statusCode, store === 'database' ? 429 : 200);
        const email = (await a.app.store.getAccount(acct.id))?.email;
        const login = (t: TestApp) =>
          t.req({ method: 'POST', url: '/api/v1/auth/login', key: null, payload: { email, password: 'wrong' } });
        assert.equal((await login(a)).statusCode, 401);
        assert.equal((await login(a)).statusCode, 401);
        assert.equal((await login(b)).statusCode, store === 'database' ? 429 : 401);
      } finally {
        await a.close();
        await b.close();
        rmSync(dir, { recursive: true, force: true });
      }
    });
});
