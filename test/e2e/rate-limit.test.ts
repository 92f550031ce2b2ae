/**
 * Rate limits, black box: a server with tiny limits answers 429 in the error shape with
 * Retry-After and details.retryAfterMs; a refused request does nothing; other accounts,
 * /healthz and /metrics are unaffected; the announced wait is enough; failed logins lock
 * an email (and then an address) while other logins go on; sign-ups are throttled per
 * address; requests without credentials (terminal upgrades included) meet the address limit.
 * Both counter stores: memory (one process) and database (what replicas share).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { assertError, rawRequest } from '../security/abuse-support.js';
import { IMAGE, newAccount, RUNTIME, startServer, type Server } from './harness.js';

const LIMITS = {
  SANDBOXD_RATE_LIMIT_ACCOUNT_PER_SEC: '2',
  SANDBOXD_RATE_LIMIT_ACCOUNT_BURST: '10',
  SANDBOXD_RATE_LIMIT_IP_PER_SEC: '1',
  SANDBOXD_RATE_LIMIT_IP_BURST: '30',
  SANDBOXD_RATE_LIMIT_LOGIN_FAILURES_PER_EMAIL: '3',
  SANDBOXD_RATE_LIMIT_LOGIN_FAILURES_PER_IP: '6',
  SANDBOXD_RATE_LIMIT_SIGNUPS_PER_IP: '2',
};

for (const store of ['memory', 'database'])
  describe(`rate limits e2e (${RUNTIME}, ${store} counters)`, { timeout: 180_000 }, () => {
    let s: Server;
    let a: { id: string; key: string };
    let b: { id: string; key: string };
    const emailOf = async (key: string) => (await s.api('GET', '/api/v1/account', { key })).body.email as string;
    const errors429 = async () =>
      Number(
        /sandboxd_http_errors_total\{code="429"\} (\d+)/.exec(
          (await s.api('GET', '/metrics', { key: null })).text,
        )?.[1] ?? 0,
      );
    /** The 429 in the error shape with Retry-After = ceil(details.retryAfterMs / 1000) >= 1; returns retryAfterMs. */
    const assert429 = (
      r: { status: number; body: any; text: string; headers: Headers | Record<string, unknown> },
      limit: string,
    ): number => {
      assertError(r, 429, /Too many/, `limited by ${limit}`);
      assert.equal(r.body.details.limit, limit);
      const ms = r.body.details.retryAfterMs;
      assert.ok(Number.isInteger(ms) && ms > 0, `retryAfterMs ${ms}`);
      const header = r.headers instanceof Headers ? r.headers.get('retry-after') : (r.headers['retry-after'] as string);
      assert.equal(header, String(Math.max(1, Math.ceil(ms / 1000))), 'Retry-After in whole seconds');
      return ms;
    };

    before(async () => {
      s = await startServer({ env: { SANDBOXD_LOG_LEVEL: 'error', SANDBOXD_RATE_LIMIT_STORE: store, ...LIMITS } });
      a = await newAccount(s, { tokens: 10_000, plan: 'PRO' }); // PRO: six creates stay under its concurrency
      b = await newAccount(s, { tokens: 10_000 });
    });
    after(() => s?.stop());

    it('per account: past the burst 429 with Retry-After; refused creates do nothing; others, health and metrics unaffected; the wait is enough', async () => {
      const before429 = await errors429();
      const balance = (await s.api('GET', '/api/v1/account', { key: a.key })).body.balance as number;
      const t0 = Date.now();
      const answers = await Promise.all([
        ...Array.from({ length: 20 }, () => s.api('GET', '/api/v1/sandboxes', { key: a.key })),
        ...Array.from({ length: 6 }, () =>
          s.api('POST', '/api/v1/sandboxes', { key: a.key, body: { image: IMAGE, timeoutMs: 60_000 } }),
        ),
      ]);
      const elapsedS = (Date.now() - t0) / 1000;
      const limited = answers.filter((r) => r.status === 429);
      const served = answers.length - limited.length;
      assert.ok(limited.length >= 1, 'some were refused');
      // 10 per 5 s in fixed windows: at most 10 in each window the burst touched.
      assert.ok(
        served <= 10 * (1 + Math.ceil(elapsedS / 5)),
        `${served} served in ${elapsedS} s: at most 10 per window`,
      );
      let wait = 0;
      for (const r of limited) wait = Math.max(wait, assert429(r, 'account'));
      assert.ok(
        answers.every((r) => r.status === 200 || r.status === 201 || r.status === 429),
        answers.map((r) => r.status).join(','),
      );
      assert.equal(
        (await s.api('GET', '/api/v1/account', { key: b.key })).status,
        200,
        'another account is unaffected',
      );
      for (let i = 0; i < 30; i++)
        assert.equal((await s.api('GET', '/healthz', { key: null })).status, 200, 'health is never limited');
      assert.ok((await errors429()) >= before429 + limited.length, '429s are counted in /metrics');
      await new Promise((r) => setTimeout(r, wait + 50));
      const list = await s.api('GET', '/api/v1/sandboxes?state=started', { key: a.key });
      assert.equal(list.status, 200, 'served again after the announced wait');
      const created = answers.filter((r) => r.status === 201).map((r) => r.body.sandbox.id as string);
      assert.deepEqual(
        list.body.sandboxes.map((x: { id: string }) => x.id).sort(),
        [...created].sort(),
        'a refused create made no sandbox',
      );
      await new Promise((r) => setTimeout(r, 1000));
      assert.equal(
        (await s.api('GET', '/api/v1/account', { key: a.key })).body.balance,
        balance - created.length,
        'nor charged a token',
      );
      for (const id of created) {
        await new Promise((r) => setTimeout(r, 600)); // stays under 10 per 5 s
        assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key: a.key })).status, 204);
      }
    });

    it('failed logins: an email is locked after 3 (even with the right password), others log in; then the address after 6', async () => {
      const emailA = await emailOf(a.key);
      const emailB = await emailOf(b.key);
      const login = (email: string, password: string) =>
        s.api('POST', '/api/v1/auth/login', { key: null, body: { email, password } });
      for (let i = 0; i < 3; i++) assertError(await login(emailA, 'wrong-password'), 401, /Wrong email or password/);
      const locked = await login(emailA, 'password123');
      assert.ok(assert429(locked, 'login') > 800_000, 'locked for most of the 15 min window');
      assert.equal(locked.headers.get('set-cookie'), null, 'no session');
      assert.equal((await login(emailB, 'password123')).status, 200, 'another email logs in');
      for (let i = 0; i < 3; i++) assert.equal((await login(`nobody${i}@example.com`, 'whatever1')).status, 401);
      assert429(await login(emailB, 'password123'), 'login'); // 6 failures from this address
      assert.equal(
        (await s.api('GET', '/api/v1/account', { key: b.key })).status,
        200,
        'API keys are not affected by login throttling',
      );
    });

    it('sign-ups: 2 per address, then 429 and no account', async () => {
      const signup = (n: number) =>
        s.api('POST', '/api/v1/auth/signup', {
          key: null,
          body: { email: `rl-signup-${n}-${Date.now()}@example.com`, password: 'password123' },
        });
      assert.equal((await signup(1)).status, 201);
      assert.equal((await signup(2)).status, 201);
      const r = await signup(3);
      assert429(r, 'signup');
      const accounts = (await s.api('GET', '/api/v1/admin/accounts')).body.accounts as Array<{ email: string }>;
      assert.equal(accounts.filter((x) => x.email.startsWith('rl-signup-3-')).length, 0);
    });

    it('per address without valid credentials: bad keys, public routes and terminal upgrades meet 429; valid keys do not', async () => {
      const answers = await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          s.api('GET', i % 2 ? '/api/v1/sandboxes' : '/api/v1/openapi.json', {
            key: i % 4 === 1 ? 'sk_not_a_real_key_000000000000000000000' : null,
          }),
        ),
      );
      const limited = answers.filter((r) => r.status === 429);
      assert.ok(limited.length >= 1, 'some were refused');
      for (const r of limited) assert429(r, 'ip');
      const upgrade = await rawRequest(s.baseUrl, {
        path: '/api/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/terminals/term_aaaaaaaaaaaaaaaa/ws',
        headers: {
          upgrade: 'websocket',
          connection: 'Upgrade',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
          'sec-websocket-version': '13',
        },
      });
      assert429(upgrade, 'ip');
      assert.equal(
        (await s.api('GET', '/api/v1/account', { key: b.key })).status,
        200,
        'a valid key is charged to its account, not the address',
      );
    });
  });

for (const store of ['memory', 'database'])
  describe(`failed-login throttle under a parallel flood (${RUNTIME}, ${store} counters)`, { timeout: 180_000 }, () => {
    const N = 50;
    let s: Server;
    let victim = '';
    const login = (email: string, password: string) =>
      s.api('POST', '/api/v1/auth/login', { key: null, body: { email, password } });
    const tally = (rs: Array<{ status: number }>) => {
      const m: Record<number, number> = {};
      for (const r of rs) m[r.status] = (m[r.status] ?? 0) + 1;
      return m;
    };
    before(async () => {
      s = await startServer({
        env: {
          SANDBOXD_LOG_LEVEL: 'error',
          SANDBOXD_RATE_LIMIT_STORE: store,
          SANDBOXD_RATE_LIMIT_IP_PER_SEC: '1000',
          SANDBOXD_RATE_LIMIT_IP_BURST: '1000',
          SANDBOXD_RATE_LIMIT_LOGIN_FAILURES_PER_EMAIL: '3',
          SANDBOXD_RATE_LIMIT_LOGIN_FAILURES_PER_IP: '10',
        },
      });
      const v = await newAccount(s);
      victim = (await s.api('GET', '/api/v1/account', { key: v.key })).body.email;
    });
    after(() => s?.stop());

    it(`${N} parallel wrong passwords: the email's 3 reach the password check (401), the rest 429; then the address's 10`, async () => {
      const one = await Promise.all(Array.from({ length: N }, (_, i) => login(victim, `wrong-${i}`)));
      assert.deepEqual(tally(one), { 401: 3, 429: N - 3 });
      for (const r of one.filter((x) => x.status === 429)) assert.equal(r.body.details.limit, 'login');
      assert.equal((await login(victim, 'password123')).status, 429, 'the email is locked, right password or not');
      // The address has 3 failures; over many emails, 7 more reach the check and no more.
      const many = await Promise.all(
        Array.from({ length: N }, (_, i) => login(`nobody-${i}@example.com`, 'whatever1')),
      );
      assert.deepEqual(tally(many), { 401: 7, 429: N - 7 });
    });
  });
