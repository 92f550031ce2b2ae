import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DEFAULT_RATE_LIMITS } from '../../config.js';
import { makeTestApp, type TestApp } from '../../../test/app.js';

/** Wraps `auth.login` (the password check) to count the calls that reach it. */
function countPasswordChecks(t: TestApp): { readonly n: number } {
  const auth = t.app.services.auth;
  const login = auth.login.bind(auth);
  const seen = { n: 0 };
  auth.login = (email, password) => {
    seen.n++;
    return login(email, password);
  };
  return seen;
}

for (const store of ['memory', 'database'] as const)
  describe(`the failed-login throttle reserves before the password check (${store} counters)`, () => {
    let t: TestApp;
    let checks: { readonly n: number };
    const N = 50;
    before(async () => {
      t = await makeTestApp({
        rateLimit: {
          ...DEFAULT_RATE_LIMITS,
          store,
          ipPerSec: 10_000,
          ipBurst: 10_000,
          loginFailuresPerEmail: 3,
          loginFailuresPerIp: 6,
        },
      });
      checks = countPasswordChecks(t);
      await t.req({
        method: 'POST',
        url: '/api/v1/admin/accounts',
        payload: { email: 'victim@example.com', password: 'rightpassword' },
      });
    });
    after(() => t.close());

    const login = (email: string, password: string, remoteAddress: string) =>
      t.req({ method: 'POST', url: '/api/v1/auth/login', key: null, payload: { email, password }, remoteAddress });
    const tally = (codes: number[]) => {
      const m: Record<number, number> = {};
      for (const c of codes) m[c] = (m[c] ?? 0) + 1;
      return m;
    };

    it(`${N} parallel wrong passwords for one email: at most the email's limit reach the password check, the rest 429`, async () => {
      const before = checks.n;
      const codes = await Promise.all(
        Array.from({ length: N }, (_, i) =>
          login('victim@example.com', `wrong${i}`, `10.9.${i}.1`).then((r) => r.statusCode),
        ),
      );
      assert.deepEqual(tally(codes), { 401: 3, 429: N - 3 });
      assert.equal(checks.n - before, 3, 'password checks');
      assert.equal(
        (await login('victim@example.com', 'rightpassword', '10.9.200.1')).statusCode,
        429,
        'the email stays locked',
      );
    });

    it(`${N} parallel wrong logins over many emails from one address: at most the address's limit, the rest 429`, async () => {
      const before = checks.n;
      const codes = await Promise.all(
        Array.from({ length: N }, (_, i) =>
          login(`nobody${i}@example.com`, 'wrong', '10.8.0.1').then((r) => r.statusCode),
        ),
      );
      assert.deepEqual(tally(codes), { 401: 6, 429: N - 6 });
      assert.equal(checks.n - before, 6, 'password checks');
    });

    it('successful logins are not failures: each gives its reservation back, the address never locks', async () => {
      await t.req({
        method: 'POST',
        url: '/api/v1/admin/accounts',
        payload: { email: 'honest@example.com', password: 'rightpassword' },
      });
      for (let i = 0; i < 20; i++)
        assert.equal((await login('honest@example.com', 'rightpassword', '10.7.0.1')).statusCode, 200);
      for (let i = 0; i < 5; i++)
        assert.equal((await login(`nobody${i}@example.com`, 'wrong', '10.7.0.1')).statusCode, 401);
      assert.equal(
        (await login('honest@example.com', 'rightpassword', '10.7.0.1')).statusCode,
        200,
        'five failures of six: still free',
      );
      // In flight, an attempt counts as a failure (its password is not checked yet): so even
      // right passwords sent in parallel pass at most the email's limit at once.
      const codes = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          login('honest@example.com', 'rightpassword', `10.6.${i}.1`).then((r) => r.statusCode),
        ),
      );
      assert.ok((tally(codes)[200] ?? 0) >= 3, `at least the limit pass: ${codes}`);
      assert.equal((tally(codes)[200] ?? 0) + (tally(codes)[429] ?? 0), 10);
    });
  });
