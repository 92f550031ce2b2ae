/** Black-box: every operation's success shape and every error status, over real HTTP. */
import assert from 'node:assert/strict';
import { ERROR_STATUS, type ErrorKind } from '@sandboxd/protocol';
import { after, before, describe, it } from 'node:test';
import { IMAGE, newAccount, startServer, type Server } from './harness.js';

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

function assertSandbox(sb: Record<string, unknown>) {
  // The spec's eight fields, plus sandboxd's lifecycle additions (docs/lifecycle.md: `expiresAt` only when paused, stopped or error; `pausedMemory` only when paused), its egress (`network`) and its isolation tier.
  assert.deepEqual(
    Object.keys(sb)
      .filter((k) => k !== 'expiresAt' && k !== 'pausedMemory')
      .sort(),
    [
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
    ],
  );
  assert.equal('expiresAt' in sb, sb.state !== 'started');
  assert.match(String(sb.id), /^sbx_[a-z2-7]{20}$/);
  assert.match(String(sb.name), /^[a-z]+-[a-z]+-\d{4}$/);
  assert.match(String(sb.createdAt), ISO);
  assert.match(String(sb.stopAt), ISO);
  assert.ok(String(sb.publicAccessUrlTemplate).includes('{{PORT}}'));
  assert.equal(sb.region, 'local');
}

function assertError(r: { status: number; body: any }, status: number) {
  assert.equal(r.status, status, JSON.stringify(r.body));
  assert.equal(r.body.code, status);
  assert.equal(typeof r.body.message, 'string');
  assert.ok(Object.keys(r.body).every((k) => ['code', 'kind', 'message', 'details'].includes(k)));
  assert.equal(ERROR_STATUS[r.body.kind as ErrorKind], status, `kind ${r.body.kind} is a kind of ${status}`);
}

describe('sandbox API over HTTP', { timeout: 180_000 }, () => {
  let s: Server;
  let key: string;
  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { tokens: 100_000 })).key;
  });
  after(() => s?.stop());

  it('create 201 -> get -> list -> exec -> background -> timeout -> delete 204 -> 404', async () => {
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, env: { GREETING: 'hello' } } });
    assert.equal(c.status, 201, c.text);
    assert.deepEqual(Object.keys(c.body), ['sandbox']);
    assertSandbox(c.body.sandbox);
    const sb = c.body.sandbox;
    assert.equal(sb.state, 'started');
    assert.equal(sb.image, IMAGE);
    assert.equal(Date.parse(sb.stopAt) - Date.parse(sb.createdAt), 600_000);
    assert.equal(sb.publicAccessUrlTemplate, `{{PORT}}-${sb.id}.sandbox.localhost:${s.port}`);

    const g = await s.api('GET', `/api/v1/sandboxes/${sb.id}`, { key });
    assert.equal(g.status, 200);
    assert.deepEqual(g.body, { sandbox: sb });

    const l = await s.api('GET', '/api/v1/sandboxes', { key });
    assert.equal(l.status, 200);
    assert.deepEqual(Object.keys(l.body).sort(), ['count', 'sandboxes']);
    assert.equal(l.body.count, l.body.sandboxes.length);
    l.body.sandboxes.forEach(assertSandbox);

    const e = await s.api('POST', `/api/v1/sandboxes/${sb.id}/exec`, {
      key,
      body: { command: 'echo $GREETING', options: { background: false } },
    });
    assert.equal(e.status, 200);
    assert.deepEqual(e.body, { stdout: 'hello\n', stderr: '', exitCode: 0, success: true });
    const fail = await s.api('POST', `/api/v1/sandboxes/${sb.id}/exec`, { key, body: { command: 'exit 3' } });
    assert.deepEqual(fail.body, { stdout: '', stderr: '', exitCode: 3, success: false });
    const env = await s.api('POST', `/api/v1/sandboxes/${sb.id}/exec`, {
      key,
      body: { command: 'echo "$GREETING"', options: { env: { GREETING: 'over' }, cwd: '/', timeoutMs: 5000 } },
    });
    assert.equal(env.body.stdout, 'over\n');
    const bg = await s.api('POST', `/api/v1/sandboxes/${sb.id}/exec`, {
      key,
      body: { command: 'sleep 30', options: { background: true } },
    });
    assert.equal(bg.status, 200);
    assert.deepEqual(Object.keys(bg.body).sort(), ['exitCode', 'pid', 'stderr', 'stdout', 'success']);
    assert.equal(bg.body.success, true);
    assert.ok(Number.isInteger(bg.body.pid));

    const t = await s.api('PATCH', `/api/v1/sandboxes/${sb.id}/timeout`, { key, body: { timeoutMs: 120_000 } });
    assert.equal(t.status, 200);
    assert.deepEqual(Object.keys(t.body).sort(), ['id', 'stopAt']);
    assert.equal(t.body.id, sb.id);
    assert.ok(Math.abs(Date.parse(t.body.stopAt) - (Date.now() + 120_000)) < 5_000);

    const d = await s.api('DELETE', `/api/v1/sandboxes/${sb.id}`, { key });
    assert.equal(d.status, 204);
    assert.equal(d.text, '');
    assertError(await s.api('GET', `/api/v1/sandboxes/${sb.id}`, { key }), 404);
    assertError(await s.api('DELETE', `/api/v1/sandboxes/${sb.id}`, { key }), 404);
  });

  it('list: state filter, limit and nextCursor paging, newest first', async () => {
    const { key: k } = await newAccount(s, { tokens: 1000 });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++)
      ids.push(
        (await s.api('POST', '/api/v1/sandboxes', { key: k, body: { image: IMAGE, timeoutMs: 60_000 } })).body.sandbox
          .id,
      );
    await s.api('PATCH', `/api/v1/sandboxes/${ids[0]}/timeout`, { key: k, body: { timeoutMs: 0 } });
    const p1 = await s.api('GET', '/api/v1/sandboxes?limit=2', { key: k });
    assert.equal(p1.body.count, 2);
    assert.ok(p1.body.nextCursor);
    const p2 = await s.api('GET', `/api/v1/sandboxes?limit=2&cursor=${encodeURIComponent(p1.body.nextCursor)}`, {
      key: k,
    });
    assert.equal(p2.body.count, 1);
    assert.equal(p2.body.nextCursor, undefined);
    assert.deepEqual(
      [...p1.body.sandboxes, ...p2.body.sandboxes].map((x: { id: string }) => x.id),
      [...ids].reverse(),
    );
    const stopped = await s.api('GET', '/api/v1/sandboxes?state=stopped', { key: k });
    assert.deepEqual(
      stopped.body.sandboxes.map((x: { id: string; state: string }) => [x.id, x.state]),
      [[ids[0], 'stopped']],
    );
    assert.equal((await s.api('GET', '/api/v1/sandboxes?state=started', { key: k })).body.count, 2);
  });

  it('errors: 401, 402, 403, 404 (template, sandbox, route), 409 (stopped), with Error bodies', async () => {
    assertError(await s.api('GET', '/api/v1/sandboxes', { key: null }), 401);
    assertError(await s.api('GET', '/api/v1/sandboxes', { key: 'sk_not_a_real_key_at_all_00000000000000000' }), 401);
    const poor = await newAccount(s, { tokens: 0 });
    assertError(await s.api('POST', '/api/v1/sandboxes', { key: poor.key, body: { image: IMAGE } }), 402);
    const tpl = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: 'no/such-image:nope' } });
    assertError(tpl, 404);
    assert.equal(tpl.body.message, 'Template not found');
    assertError(await s.api('GET', '/api/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa', { key }), 404);
    assertError(await s.api('GET', '/api/v1/nothing/here', { key }), 404);
    const small = await newAccount(s, { tokens: 1000 });
    const made = [];
    for (let i = 0; i < 5; i++)
      made.push(
        await s.api('POST', '/api/v1/sandboxes', { key: small.key, body: { image: IMAGE, timeoutMs: 60_000 } }),
      );
    assert.ok(made.every((m) => m.status === 201));
    assertError(await s.api('POST', '/api/v1/sandboxes', { key: small.key, body: { image: IMAGE } }), 403);
    const id = made[0].body.sandbox.id;
    await s.api('PATCH', `/api/v1/sandboxes/${id}/timeout`, { key: small.key, body: { timeoutMs: 0 } });
    assertError(
      await s.api('PATCH', `/api/v1/sandboxes/${id}/timeout`, { key: small.key, body: { timeoutMs: 1000 } }),
      409,
    );
    assertError(
      await s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key: small.key, body: { command: 'true' } }),
      409,
    );
    assertError(await s.api('GET', `/api/v1/sandboxes/${made[1].body.sandbox.id}`, { key }), 404); // another account's
  });

  it('account, keys, volumes, events, auth and admin', async () => {
    const a = await newAccount(s, { tokens: 500 });
    const acct = await s.api('GET', '/api/v1/account', { key: a.key });
    assert.deepEqual(Object.keys(acct.body).sort(), [
      'admin',
      'balance',
      'createdAt',
      'email',
      'id',
      'limits',
      'plan',
      'usage',
    ]);
    assert.equal(acct.body.plan, 'FREE');
    assert.equal(acct.body.balance, 500);
    const k = await s.api('POST', '/api/v1/keys', { key: a.key, body: { name: 'second' } });
    assert.equal(k.status, 201);
    assert.deepEqual(Object.keys(k.body).sort(), ['createdAt', 'id', 'key', 'name', 'prefix']);
    const keys = await s.api('GET', '/api/v1/keys', { key: a.key });
    assert.ok(keys.body.keys.every((x: object) => !('key' in x)));
    assert.equal((await s.api('DELETE', `/api/v1/keys/${k.body.id}`, { key: a.key })).status, 204);
    assertError(await s.api('GET', '/api/v1/account', { key: k.body.key }), 401);

    const v = await s.api('POST', '/api/v1/sandboxes', {
      key: a.key,
      body: { image: IMAGE, timeoutMs: 60_000, volumes: { '/data': { name: 'data_1', sizeGb: 2 } } },
    });
    assert.equal(v.status, 201);
    assertError(
      await s.api('POST', '/api/v1/sandboxes', {
        key: a.key,
        body: { image: IMAGE, volumes: { '/d': { name: 'data_1', sizeGb: 3 } } },
      }),
      409,
    );
    const vols = await s.api('GET', '/api/v1/volumes', { key: a.key });
    assert.deepEqual(
      vols.body.volumes.map((x: { name: string; sizeGb: number; mountedBy: string[] }) => [
        x.name,
        x.sizeGb,
        x.mountedBy,
      ]),
      [['data_1', 2, [v.body.sandbox.id]]],
    );
    assertError(await s.api('DELETE', '/api/v1/volumes/data_1', { key: a.key }), 409);
    await s.api('DELETE', `/api/v1/sandboxes/${v.body.sandbox.id}`, { key: a.key });
    assert.equal((await s.api('DELETE', '/api/v1/volumes/data_1', { key: a.key })).status, 204);

    assert.deepEqual(
      (
        await s.api('POST', '/api/v1/events/track', {
          key: a.key,
          body: { event: 'onboarding.step_1_welcome', metadata: {} },
        })
      ).body,
      { success: true },
    );
    assertError(
      await s.api('POST', '/api/v1/events/track', { key: a.key, body: { event: 'onboarding.step_9', metadata: {} } }),
      400,
    );
    assertError(
      await s.api('POST', '/api/v1/events/track', { key: null, body: { event: 'onboarding.started', metadata: {} } }),
      401,
    );

    assertError(await s.api('GET', '/api/v1/admin/accounts', { key: a.key }), 404);
    assert.equal((await s.api('GET', '/api/v1/admin/accounts')).status, 200);
    assertError(
      await s.api('POST', '/api/v1/auth/login', {
        key: null,
        body: { email: 'nobody@example.com', password: 'whatever1' },
      }),
      401,
    );
    const doc = await s.api('GET', '/api/v1/openapi.json', { key: null });
    assert.equal(doc.body.openapi, '3.1.0');
    assert.match((await s.api('GET', '/metrics', { key: null })).text, /sandboxd_sandboxes/);
    assertError(await s.api('POST', '/api/v1/_test/clock', { body: { advanceMs: 1 } }), 404);
  });
});
