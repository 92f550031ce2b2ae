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

describe('the session cookie cannot be planted, shadowed or used cross-origin', () => {
  let t: TestApp;
  /** The cookie pair (`name=value`) of a login as `email`, with `headers` (X-Forwarded-Proto). */
  const loginAs = async (email: string, headers: Record<string, string> = {}) => {
    const r = await t.req({
      method: 'POST',
      url: '/api/v1/auth/login',
      key: null,
      headers,
      payload: { email, password: 'rightpassword' },
    });
    assert.equal(r.statusCode, 200, r.body);
    return { pair: String(r.headers['set-cookie']).split(';')[0], setCookie: String(r.headers['set-cookie']) };
  };
  const whoAmI = (headers: Record<string, string>) =>
    t.req({ method: 'GET', url: '/api/v1/account', key: null, headers });
  const same = { host: 'api.example.test', origin: 'http://api.example.test' };
  let victim: string;
  let attacker: string;

  before(async () => {
    // X-Forwarded-Proto is believed from inject's peer (127.0.0.1) only as a trusted proxy.
    t = await makeTestApp({ signupEnabled: true, trustedProxies: ['127.0.0.1'] });
    for (const email of ['victim@example.com', 'attacker@example.com'])
      await t.req({ method: 'POST', url: '/api/v1/admin/accounts', payload: { email, password: 'rightpassword' } });
    victim = (await loginAs('victim@example.com')).pair;
    attacker = (await loginAs('attacker@example.com')).pair;
  });
  after(() => t.close());

  it('a request with two session cookies is refused (401, named), whichever comes first; the console shows the sign-in page', async () => {
    assert.equal((await whoAmI({ cookie: victim })).json().email, 'victim@example.com');
    for (const cookie of [`${attacker}; ${victim}`, `${victim}; ${attacker}`, `${victim}; a=1; ${victim}`]) {
      const r = await whoAmI({ cookie });
      assert.equal(r.statusCode, 401, cookie);
      assert.equal(r.json().kind, 'unauthorized');
      assert.match(r.json().message, /carries 2 sandboxd_session cookies.*clear this site's cookies/);
    }
    const page = await t.req({ method: 'GET', url: '/', key: null, headers: { cookie: `${attacker}; ${victim}` } });
    assert.equal(page.statusCode, 200);
    assert.match(page.body, /name="sandboxd-boot" content="signed-out"/);
    assert.equal((await whoAmI({ cookie: `${victim}; other=1; sandboxd_session=` })).statusCode, 200, 'empty: none');
  });

  it('over HTTPS the cookie is __Host-sandboxd_session (Secure, Path=/, no Domain) and the plain name is ignored', async () => {
    const tls = { 'x-forwarded-proto': 'https' };
    const { pair, setCookie } = await loginAs('victim@example.com', tls);
    assert.match(pair, /^__Host-sandboxd_session=[A-Za-z0-9_-]{20,}$/);
    const attrs = setCookie.split('; ').slice(1).sort();
    assert.deepEqual(attrs, ['HttpOnly', 'Max-Age=604800', 'Path=/', 'SameSite=Lax', 'Secure']);
    assert.equal((await whoAmI({ ...tls, cookie: pair })).json().email, 'victim@example.com');
    const planted = await whoAmI({ ...tls, cookie: attacker });
    assert.equal(planted.statusCode, 401, 'a plain-named cookie (settable by a sibling host) does not authenticate');
    for (const cookie of [`${attacker}; ${pair}`, `${pair}; ${attacker}`])
      assert.equal((await whoAmI({ ...tls, cookie })).json().email, 'victim@example.com', 'nor shadow the real one');
    assert.equal((await whoAmI({ cookie: pair })).statusCode, 401, 'the __Host- name is not read over plain HTTP');
    const out = await t.req({
      method: 'POST',
      url: '/api/v1/auth/logout',
      key: null,
      headers: { ...tls, host: 'api.example.test', origin: 'https://api.example.test', cookie: `${pair}; ${attacker}` },
    });
    assert.equal(out.statusCode, 204);
    const cleared = ([] as string[]).concat(out.headers['set-cookie'] ?? []);
    assert.match(
      cleared[0],
      /^__Host-sandboxd_session=; Max-Age=0; Path=\/; Expires=[^;]+; HttpOnly; Secure; SameSite=Lax$/,
    );
    assert.match(cleared[1] ?? '', /^sandboxd_session=;/, 'the plain name goes too');
    assert.equal((await whoAmI({ ...tls, cookie: pair })).statusCode, 401);
  });

  it('logout by cookie needs a same-origin Origin; refused, the session lives on', async () => {
    const { pair } = await loginAs('victim@example.com');
    for (const extra of [{}, { origin: 'http://8000-sbx_x.api.example.test' }, { origin: 'null' }]) {
      const r = await t.req({
        method: 'POST',
        url: '/api/v1/auth/logout',
        key: null,
        headers: { host: same.host, cookie: pair, ...extra },
      });
      assert.equal(r.statusCode, 401, JSON.stringify(extra));
      assert.match(r.json().message, /same-origin Origin/);
      assert.equal(r.headers['set-cookie'], undefined);
      assert.equal((await whoAmI({ cookie: pair })).statusCode, 200, 'still signed in');
    }
    const none = await t.req({ method: 'POST', url: '/api/v1/auth/logout', key: null });
    assert.equal(none.statusCode, 204, 'without a cookie there is nothing to end');
    const ok = await t.req({
      method: 'POST',
      url: '/api/v1/auth/logout',
      key: null,
      headers: { ...same, cookie: pair },
    });
    assert.equal(ok.statusCode, 204);
    assert.equal((await whoAmI({ cookie: pair })).statusCode, 401, 'ended');
  });

  it('logout with two cookies (one planted) ends both and clears the Domain copy too', async () => {
    const mine = (await loginAs('victim@example.com')).pair;
    const planted = (await loginAs('attacker@example.com')).pair;
    const out = await t.req({
      method: 'POST',
      url: '/api/v1/auth/logout',
      key: null,
      headers: { ...same, cookie: `${planted}; ${mine}` },
    });
    assert.equal(out.statusCode, 204);
    const cleared = ([] as string[]).concat(out.headers['set-cookie'] ?? []);
    assert.equal(cleared.length, 2);
    assert.match(cleared[1], /^sandboxd_session=; Max-Age=0; Domain=api\.example\.test; Path=\//);
    for (const c of [mine, planted]) assert.equal((await whoAmI({ cookie: c })).statusCode, 401);
  });

  it('every state-changing route and both WebSockets refuse a session cookie without a same-origin Origin', async () => {
    const { pair } = await loginAs('victim@example.com');
    const doc = (await t.req({ method: 'GET', url: '/api/v1/openapi.json', key: null })).json();
    /** Routes that never read the cookie: they check a password or a link and set a new one. */
    const READ_NO_COOKIE = new Set(['login', 'signup', 'loginLink']);
    const WS = new Set(['connectTerminal', 'watchFiles']);
    let checked = 0;
    for (const [template, ops] of Object.entries(doc.paths as Record<string, Record<string, { operationId: string }>>))
      for (const [method, op] of Object.entries(ops)) {
        const upgrade = WS.has(op.operationId);
        if (READ_NO_COOKIE.has(op.operationId) || (method === 'get' && !upgrade)) continue;
        const url = `${template.replace(/\{[^}]+\}/g, 'x')}${upgrade ? '?path=/tmp' : ''}`;
        for (const extra of [{}, { origin: 'http://8000-sbx_x.api.example.test' }]) {
          const r = await t.req({
            method: method.toUpperCase() as 'POST',
            url,
            key: null,
            headers: {
              host: same.host,
              cookie: pair,
              ...extra,
              ...(upgrade ? { connection: 'Upgrade', upgrade: 'websocket' } : {}),
            },
            payload: method === 'get' || method === 'delete' ? undefined : {},
          });
          assert.equal(r.statusCode, 401, `${method} ${template} ${JSON.stringify(extra)}: ${r.body}`);
          assert.match(r.json().message, /same-origin Origin/);
          checked++;
        }
      }
    assert.ok(checked >= 2 * 30, `only ${checked} checked`);
    assert.equal((await whoAmI({ cookie: pair })).statusCode, 200, 'the session lives on (logout refused too)');
  });
});
