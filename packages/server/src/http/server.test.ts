import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { makeTestApp, type TestApp } from '../../test/app.js';

describe('HTTP API (inject, fake driver)', () => {
  let t: TestApp;
  before(async () => (t = await makeTestApp({ signupEnabled: true })));
  after(() => t.close());

  it('create 201, get, list, exec, timeout, delete 204 then 404', async () => {
    const c = await t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image: 'local/busybox:latest' } });
    assert.equal(c.statusCode, 201);
    const sb = c.json().sandbox;
    assert.deepEqual(Object.keys(sb).sort(), [
      'createdAt',
      'id',
      'image',
      'isolation',
      'metadata',
      'name',
      'network',
      'onTimeout',
      'publicAccessUrlTemplate',
      'region',
      'state',
      'stopAt',
    ]);
    assert.equal(sb.publicAccessUrlTemplate, `{{PORT}}-${sb.id}.sandbox.localhost:8080`);
    assert.equal((await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb.id}` })).json().sandbox.id, sb.id);
    const list = (await t.req({ method: 'GET', url: '/api/v1/sandboxes?state=started&limit=10' })).json();
    assert.equal(list.count, list.sandboxes.length);
    const ex = await t.req({
      method: 'POST',
      url: `/api/v1/sandboxes/${sb.id}/exec`,
      payload: { command: 'echo ok', options: { background: false } },
    });
    assert.deepEqual(ex.json(), { stdout: 'ok\n', stderr: '', exitCode: 0, success: true });
    const to = await t.req({
      method: 'PATCH',
      url: `/api/v1/sandboxes/${sb.id}/timeout`,
      payload: { timeoutMs: 1000 },
    });
    assert.deepEqual(Object.keys(to.json()).sort(), ['id', 'stopAt']);
    const del = await t.req({ method: 'DELETE', url: `/api/v1/sandboxes/${sb.id}` });
    assert.equal(del.statusCode, 204);
    assert.equal(del.body, '');
    const gone = await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb.id}` });
    assert.equal(gone.statusCode, 404);
    assert.deepEqual(gone.json(), { code: 404, kind: 'not_found', message: 'Sandbox not found' });
  });

  it('401 without or with bad credentials; X-API-Key works', async () => {
    const none = await t.req({ method: 'GET', url: '/api/v1/sandboxes', key: null });
    assert.equal(none.statusCode, 401);
    assert.equal(none.json().code, 401);
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/sandboxes', key: 'sk_wrong' })).statusCode, 401);
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/sandboxes', headers: { authorization: 'Basic abc' } })).statusCode,
      401,
    );
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/sandboxes', key: null, headers: { 'x-api-key': t.adminKey } }))
        .statusCode,
      200,
    );
    assert.equal(
      (
        await t.req({
          method: 'POST',
          url: '/api/v1/events/track',
          key: null,
          payload: { event: 'onboarding.started', metadata: {} },
        })
      ).statusCode,
      401,
    );
  });

  it('keys: create shows the key once, list hides it, the key works, delete revokes it', async () => {
    const c = await t.req({ method: 'POST', url: '/api/v1/keys', payload: { name: 'ci' } });
    assert.equal(c.statusCode, 201);
    const k = c.json();
    assert.match(k.key, /^sk_[A-Za-z0-9]{40}$/);
    assert.equal(k.prefix, k.key.slice(0, 10));
    const l = (await t.req({ method: 'GET', url: '/api/v1/keys' })).json();
    assert.ok(l.keys.every((x: Record<string, unknown>) => !('key' in x)));
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/account', key: k.key })).statusCode, 200);
    const listed = (await t.req({ method: 'GET', url: '/api/v1/keys' }))
      .json()
      .keys.find((x: { id: string }) => x.id === k.id);
    assert.ok(listed.lastUsedAt);
    assert.equal((await t.req({ method: 'DELETE', url: `/api/v1/keys/${k.id}` })).statusCode, 204);
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/account', key: k.key })).statusCode, 401);
    assert.equal((await t.req({ method: 'DELETE', url: `/api/v1/keys/${k.id}` })).statusCode, 404);
  });

  it('session: signup sets a cookie; cookie GET works; POST needs a same-origin Origin; logout ends it', async () => {
    const s = await t.req({
      method: 'POST',
      url: '/api/v1/auth/signup',
      key: null,
      payload: { email: 'web@example.com', password: 'hunter2hunter2' },
    });
    assert.equal(s.statusCode, 201);
    const setCookie = String(s.headers['set-cookie']);
    const attrs = (c: string) => c.split('; ').slice(1).sort();
    assert.deepEqual(attrs(setCookie), ['HttpOnly', 'Max-Age=604800', 'Path=/', 'SameSite=Lax'], 'no Secure over http');
    const cookie = setCookie.split(';')[0];
    assert.match(cookie, /^sandboxd_session=[A-Za-z0-9_-]{20,}$/);
    assert.equal(
      (
        await t.req({
          method: 'GET',
          url: '/api/v1/account',
          key: null,
          headers: { cookie: `a=%zz; ${cookie}` },
        })
      ).statusCode,
      200,
      'a malformed cookie does not throw',
    );
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/account', key: null, headers: { cookie: `${cookie}; ${cookie}x` } }))
        .statusCode,
      401,
      'two sandboxd_session cookies: refused, whichever is first (routes/auth.test.ts)',
    );
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/account', key: null, headers: { cookie } })).json().email,
      'web@example.com',
    );
    const ev = { event: 'onboarding.started', metadata: {} };
    assert.equal(
      (await t.req({ method: 'POST', url: '/api/v1/events/track', key: null, headers: { cookie }, payload: ev }))
        .statusCode,
      401,
    );
    assert.equal(
      (
        await t.req({
          method: 'POST',
          url: '/api/v1/events/track',
          key: null,
          headers: { cookie, origin: 'http://evil.example' },
          payload: ev,
        })
      ).statusCode,
      401,
    );
    assert.equal(
      (
        await t.req({
          method: 'POST',
          url: '/api/v1/events/track',
          key: null,
          headers: { cookie, origin: 'http://localhost:80', host: 'localhost:80' },
          payload: ev,
        })
      ).statusCode,
      200,
    );
    const out = await t.req({
      method: 'POST',
      url: '/api/v1/auth/logout',
      key: null,
      headers: { cookie, origin: 'http://localhost:80', host: 'localhost:80' },
    });
    assert.equal(out.statusCode, 204);
    const cleared = String(out.headers['set-cookie']);
    assert.match(cleared, /^sandboxd_session=;/);
    assert.deepEqual(attrs(cleared), [
      'Expires=Thu, 01 Jan 1970 00:00:00 GMT',
      'HttpOnly',
      'Max-Age=0',
      'Path=/',
      'SameSite=Lax',
    ]);
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/account', key: null, headers: { cookie } })).statusCode,
      401,
    );
    const dup = await t.req({
      method: 'POST',
      url: '/api/v1/auth/signup',
      key: null,
      payload: { email: 'web@example.com', password: 'hunter2hunter2' },
    });
    assert.equal(dup.statusCode, 409);
    const login = await t.req({
      method: 'POST',
      url: '/api/v1/auth/login',
      key: null,
      payload: { email: 'web@example.com', password: 'wrong-password' },
    });
    assert.equal(login.statusCode, 401);
    const ok = await t.req({
      method: 'POST',
      url: '/api/v1/auth/login',
      key: null,
      payload: { email: 'WEB@example.com', password: 'hunter2hunter2' },
    });
    assert.equal(ok.statusCode, 200);
  });

  it('one-time login link works once', async () => {
    const a = await t.newAccount();
    const token = await t.app.services.auth.newLoginLink(a.id);
    const r = await t.req({ method: 'GET', url: `/api/v1/auth/link?token=${token}`, key: null });
    assert.equal(r.statusCode, 303);
    assert.match(String(r.headers['set-cookie']), /sandboxd_session=/);
    assert.equal((await t.req({ method: 'GET', url: `/api/v1/auth/link?token=${token}`, key: null })).statusCode, 401);
  });

  it('admin routes are 404 for non-admins; admin can change plan and grant tokens', async () => {
    const a = await t.newAccount({ tokens: 0 });
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/admin/accounts', key: a.key })).statusCode, 404);
    assert.equal(
      (await t.req({ method: 'PATCH', url: `/api/v1/admin/accounts/${a.id}`, payload: { plan: 'NOPE' } })).statusCode,
      400,
    );
    assert.equal(
      (await t.req({ method: 'PATCH', url: `/api/v1/admin/accounts/${a.id}`, payload: { plan: 'PRO' } })).json().account
        .plan,
      'PRO',
    );
    assert.equal(
      (await t.req({ method: 'POST', url: `/api/v1/admin/accounts/${a.id}/tokens`, payload: { tokens: 50 } })).json()
        .balance,
      50,
    );
    const acct = (await t.req({ method: 'GET', url: '/api/v1/account', key: a.key })).json();
    assert.equal(acct.limits.concurrency, 50);
    assert.equal(acct.balance, 50);
    const ledger = (await t.req({ method: 'GET', url: '/api/v1/account/ledger', key: a.key })).json();
    assert.deepEqual(
      ledger.entries.map((e: { delta: number }) => e.delta),
      [50],
    );
  });

  it('error shapes: validation details, malformed JSON, 413, unknown route, unknown query field', async () => {
    const v = await t.req({
      method: 'POST',
      url: '/api/v1/sandboxes',
      payload: { image: 'x', bogus: 1, env: { A: 1 } },
    });
    assert.equal(v.statusCode, 400);
    assert.deepEqual(
      v
        .json()
        .details.map((d: { path: string }) => d.path)
        .sort(),
      ['/bogus', '/env/A'],
    );
    const m = await t.req({
      method: 'POST',
      url: '/api/v1/sandboxes',
      payload: '{"image":',
      headers: { 'content-type': 'application/json' },
    });
    assert.deepEqual(m.json(), { code: 400, kind: 'validation', message: 'Malformed JSON body' });
    const big = await t.req({
      method: 'POST',
      url: '/api/v1/sandboxes',
      payload: JSON.stringify({ image: 'x'.repeat(1_100_000) }),
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(big.statusCode, 413);
    assert.equal(big.json().code, 413);
    const nf = await t.req({ method: 'GET', url: '/api/v1/nothing' });
    assert.deepEqual(nf.json(), { code: 404, kind: 'not_found', message: 'Route GET /api/v1/nothing not found' });
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/sandboxes?bogus=1' })).statusCode, 400);
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/sandboxes?limit=0' })).statusCode, 400);
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/sandboxes?limit=1001' })).statusCode, 400);
  });

  it('Content-Type: application/json with an empty body: bodiless requests pass, a required body is 400, nothing changes', async () => {
    const json = { 'content-type': 'application/json' };
    const sb = (
      await t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: { image: 'local/busybox:latest' } })
    ).json().sandbox;
    const before = (await t.req({ method: 'GET', url: '/api/v1/sandboxes' })).json().count;
    const none = await t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: '', headers: json });
    assert.equal(none.statusCode, 400);
    assert.deepEqual(none.json().details, [{ in: 'body', path: '', message: 'is required' }]);
    const nul = await t.req({ method: 'POST', url: '/api/v1/sandboxes', payload: 'null', headers: json });
    assert.equal(nul.statusCode, 400);
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/sandboxes' })).json().count, before, 'nothing created');
    // All-optional bodies (terminals) may be left out.
    const term = await t.req({
      method: 'POST',
      url: `/api/v1/sandboxes/${sb.id}/terminals`,
      payload: '',
      headers: json,
    });
    assert.equal(term.statusCode, 201, term.body);
    const del = await t.req({ method: 'DELETE', url: `/api/v1/sandboxes/${sb.id}`, payload: '', headers: json });
    assert.equal(del.statusCode, 204, del.body);
    assert.equal((await t.req({ method: 'GET', url: `/api/v1/sandboxes/${sb.id}` })).statusCode, 404);
    // Still strict: malformed JSON and unknown fields.
    const bad = await t.req({ method: 'DELETE', url: `/api/v1/keys/key_nope`, payload: '{', headers: json });
    assert.deepEqual(bad.json(), { code: 400, kind: 'validation', message: 'Malformed JSON body' });
    const unknown = await t.req({
      method: 'PATCH',
      url: `/api/v1/sandboxes/${sb.id}/timeout`,
      payload: { timeoutMs: 1, x: 1 },
    });
    assert.equal(unknown.statusCode, 400);
  });

  it('events: unknown kind lists the allowed kinds; metadata over 8 KiB is 400', async () => {
    const bad = await t.req({ method: 'POST', url: '/api/v1/events/track', payload: { event: 'nope', metadata: {} } });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().details[0].allowed.length, 11);
    const big = await t.req({
      method: 'POST',
      url: '/api/v1/events/track',
      payload: { event: 'onboarding.completed', metadata: { x: 'y'.repeat(9000) } },
    });
    assert.equal(big.statusCode, 400);
    assert.deepEqual(
      (
        await t.req({
          method: 'POST',
          url: '/api/v1/events/track',
          payload: { event: 'onboarding.completed', metadata: { step: 3 } },
        })
      ).json(),
      { success: true },
    );
    const evs = (await t.req({ method: 'GET', url: '/api/v1/events' })).json().events;
    assert.equal(evs.at(-1).event, 'onboarding.completed');
  });

  it('volumes: listed with mountedBy; delete 409 while mounted, 204 after', async () => {
    const c = await t.req({
      method: 'POST',
      url: '/api/v1/sandboxes',
      payload: { image: 'local/busybox:latest', volumes: { '/data': { name: 'shared', sizeGb: 2 } } },
    });
    const id = c.json().sandbox.id;
    const vols = (await t.req({ method: 'GET', url: '/api/v1/volumes' })).json().volumes;
    assert.deepEqual(vols.find((v: { name: string }) => v.name === 'shared').mountedBy, [id]);
    assert.equal((await t.req({ method: 'DELETE', url: '/api/v1/volumes/shared' })).statusCode, 409);
    await t.req({ method: 'DELETE', url: `/api/v1/sandboxes/${id}` });
    assert.equal((await t.req({ method: 'DELETE', url: '/api/v1/volumes/shared' })).statusCode, 204);
    assert.equal((await t.req({ method: 'DELETE', url: '/api/v1/volumes/shared' })).statusCode, 404);
  });

  it('the probes: /livez and /readyz answer 200 {"status":"ok"} without credentials, nothing else in them', async () => {
    for (const url of ['/livez', '/readyz']) {
      const r = await t.req({ method: 'GET', url, key: null });
      assert.equal(r.statusCode, 200, url);
      assert.deepEqual(r.json(), { status: 'ok' }, url);
    }
    const doc = (await t.req({ method: 'GET', url: '/api/v1/openapi.json', key: null })).json();
    for (const p of ['/livez', '/readyz'])
      assert.equal(doc.paths[p].get.responses['429'], undefined, `${p} is never limited`);
  });

  it('healthz, metrics and openapi', async () => {
    const health = (await t.req({ method: 'GET', url: '/healthz', key: null })).json();
    assert.equal(health.status, 'ok');
    assert.deepEqual(health.capacity.full, [], 'the fake host has room');
    const m = await t.req({ method: 'GET', url: '/metrics', key: null });
    assert.match(m.body, /sandboxd_sandboxes\{state="started"\}/);
    assert.match(m.body, /sandboxd_sandbox_create_seconds_bucket/);
    const doc = (await t.req({ method: 'GET', url: '/api/v1/openapi.json', key: null })).json();
    assert.equal(doc.openapi, '3.1.0');
    assert.ok(doc.paths['/api/v1/sandboxes'].post);
    assert.ok(doc.paths['/api/v1/sandboxes/{id}/timeout'].patch);
    assert.ok(doc.components.schemas.SandboxCreate);
    assert.equal(doc.paths['/api/v1/_test/clock'], undefined);
  });
});
