/**
 * Secrets on the fake driver and SQLite, through the HTTP routes: CRUD (status codes and
 * shapes), the rules' checks on create and PATCH network (each error by its path), the
 * placeholders and env, the values handed to the driver (and again on a change or a
 * deletion), the audit trail (batched, paged, pruned), and that no value ever shows in an
 * answer, an error, or a log line (every line the app logs at debug is captured).
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { SqliteStore } from '../store/sqlite/store.js';
import { AUDIT_MAX_ROWS_PER_ACCOUNT, AUDIT_RETENTION_MS } from './secrets.js';

const IMAGE = 'local/busybox:latest';
const V1 = 'v1-sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345';
const V2 = 'v2-sk-zyxwvutsrqponmlkjihgfedcba987654';
const V3 = 'v3-sk-the-third-value-never-to-be-seen';
const VALUES = [V1, V2, V3];

describe('secrets (service and routes, fake driver)', () => {
  let t: TestApp;
  const logs: string[] = [];
  const answers: string[] = [];
  let key = '';
  let accountId = '';
  before(async () => {
    const sink = new Writable({
      write(chunk, _enc, cb) {
        logs.push(String(chunk));
        cb();
      },
    });
    t = await makeTestApp({}, { logger: pino({ level: 'debug' }, sink) });
    const a = await t.newAccount({ tokens: 100_000 });
    key = a.key;
    accountId = a.id;
  });
  after(async () => {
    await t.close();
    // Nothing the app said or answered held a value.
    const all = [...logs, ...answers].join('\n');
    for (const v of VALUES) assert.ok(!all.includes(v), 'a secret value was logged or answered');
    assert.ok(
      logs.some((l) => l.includes('secret created')),
      'the log was captured',
    );
  });

  const call = async (method: string, url: string, payload?: unknown, k = key) => {
    const r = await t.req({
      method: method as 'GET',
      url,
      ...(payload !== undefined ? { payload: payload as object } : {}),
      key: k,
    });
    answers.push(r.body);
    return { status: r.statusCode, body: r.body ? r.json() : null };
  };
  const create = (body: Record<string, unknown>) =>
    call('POST', '/api/v1/sandboxes', { image: IMAGE, timeoutMs: 60_000, ...body });

  it('CRUD: 201, 409, list, get, PUT 200/201, 204, 404; answers never carry the value', async () => {
    const c = await call('POST', '/api/v1/secrets', { name: 'OPENAI', value: V1, description: 'model key' });
    assert.equal(c.status, 201);
    assert.deepEqual(Object.keys(c.body.secret).sort(), ['createdAt', 'description', 'name', 'updatedAt', 'version']);
    assert.equal(c.body.secret.version, 1);
    assert.equal((await call('POST', '/api/v1/secrets', { name: 'OPENAI', value: V2 })).status, 409);
    assert.equal((await call('GET', '/api/v1/secrets/OPENAI')).body.secret.description, 'model key');
    const p = await call('PUT', '/api/v1/secrets/OPENAI', { value: V2 });
    assert.deepEqual([p.status, p.body.secret.version, p.body.secret.description], [200, 2, 'model key']);
    const d = await call('PUT', '/api/v1/secrets/OPENAI', { description: 'changed' });
    assert.deepEqual([d.status, d.body.secret.version], [200, 2], 'a description alone keeps the version');
    const n = await call('PUT', '/api/v1/secrets/gh-token', { value: V3 });
    assert.deepEqual([n.status, n.body.secret.version], [201, 1]);
    const missing = await call('PUT', '/api/v1/secrets/NOVALUE', { description: 'x' });
    assert.equal(missing.status, 400);
    assert.match(missing.body.message, /\/value/);
    assert.deepEqual(
      (await call('GET', '/api/v1/secrets')).body.secrets.map((s: { name: string }) => s.name),
      ['OPENAI', 'gh-token'],
    );
    assert.equal((await call('DELETE', '/api/v1/secrets/gh-token')).status, 204);
    assert.equal((await call('DELETE', '/api/v1/secrets/gh-token')).status, 404);
    assert.equal((await call('GET', '/api/v1/secrets/gh-token')).status, 404);
    // Another account sees none of it.
    const other = await t.newAccount();
    assert.deepEqual((await call('GET', '/api/v1/secrets', undefined, other.key)).body.secrets, []);
    assert.equal((await call('GET', '/api/v1/secrets/OPENAI', undefined, other.key)).status, 404);
  });

  it('bad input: a clear 400 by path that never quotes the value; a reserved or bad name', async () => {
    const bad = `${V3}\r\nX-Evil: 1`;
    const r = await call('POST', '/api/v1/secrets', { name: 'BAD', value: bad });
    assert.equal(r.status, 400);
    assert.match(JSON.stringify(r.body), /\/value/);
    assert.ok(!JSON.stringify(r.body).includes('X-Evil') && !JSON.stringify(r.body).includes(V3));
    assert.equal((await call('POST', '/api/v1/secrets', { name: 'injections', value: 'x' })).status, 400);
    assert.equal((await call('POST', '/api/v1/secrets', { name: '1bad', value: 'x' })).status, 400);
    assert.equal((await call('POST', '/api/v1/secrets', { name: 'LONG', value: 'x'.repeat(8193) })).status, 400);
    assert.equal((await call('GET', '/api/v1/secrets/BAD')).status, 404, 'nothing was made');
  });

  it('create with rules: placeholder in the rule and the env, values only in the driver spec', async () => {
    const r = await create({
      env: { KEEP: '1' },
      network: {
        egress: { allow: ['api.openai.com', '*.example.com'] },
        secrets: [
          {
            secret: 'OPENAI',
            domains: ['API.OpenAI.com.', 'a.example.com'],
            header: 'Authorization',
            format: 'Bearer {value}',
            // Chosen by the server only: a caller's would make the proxy replace any text.
            placeholder: 'Bearer',
          },
        ],
      },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const rule = r.body.sandbox.network.secrets[0];
    assert.match(rule.placeholder, /^sbx-secret-[0-9a-f]{24}$/);
    assert.deepEqual(rule.domains, ['api.openai.com', 'a.example.com']);
    const id = r.body.sandbox.id;
    const spec = t.driver.secretsOf(id);
    assert.deepEqual(spec, [
      {
        secret: 'OPENAI',
        domains: ['api.openai.com', 'a.example.com'],
        header: 'Authorization',
        format: 'Bearer {value}',
        placeholder: rule.placeholder,
        value: V2,
      },
    ]);
    const rec = await t.app.store.getSandbox(id);
    assert.deepEqual(rec?.env, { KEEP: '1', OPENAI: rule.placeholder });
    const env = await call('POST', `/api/v1/sandboxes/${id}/exec`, { command: 'printenv OPENAI' });
    assert.equal(env.body.stdout, `${rule.placeholder}\n`, 'the sandbox holds the placeholder');
    assert.ok(!JSON.stringify(rec).includes(V2), 'the record holds no value');
    // The get shows the rule with its placeholder, no value.
    const g = await call('GET', `/api/v1/sandboxes/${id}`);
    assert.equal(g.body.sandbox.network.secrets[0].placeholder, rule.placeholder);
  });

  it('create: each bad rule is a 400 naming it by path, and nothing is created or charged', async () => {
    await call('PUT', '/api/v1/secrets/my-key', { value: V3 });
    await call('PUT', '/api/v1/secrets/SSL_CERT_FILE', { value: V3 });
    const balance = await t.app.store.balance(accountId);
    const count = (await call('GET', '/api/v1/sandboxes')).body.sandboxes.length;
    const cases: Array<[string, Record<string, unknown>, RegExp]> = [
      [
        'unknown secret',
        { egress: 'internet', secrets: [{ secret: 'NOPE', domains: ['a.b.com'] }] },
        /\/network\/secrets\/0\/secret: no secret named NOPE/,
      ],
      [
        'a domain outside the allow rules',
        {
          egress: { allow: ['api.openai.com'] },
          secrets: [{ secret: 'OPENAI', domains: ['api.openai.com', 'evil.com'] }],
        },
        /\/network\/secrets\/0\/domains\/1: evil\.com is not allowed/,
      ],
      [
        'egress none',
        { egress: 'none', secrets: [{ secret: 'OPENAI', domains: ['api.openai.com'] }] },
        /\/network\/secrets\/0\/domains\/0: .*"none"/,
      ],
      [
        'a wildcard wider than the rule that allows it',
        { egress: { allow: ['*.api.example.com'] }, secrets: [{ secret: 'OPENAI', domains: ['*.example.com'] }] },
        /\/network\/secrets\/0\/domains\/0: .*wildcard/,
      ],
      [
        'an address',
        { egress: 'internet', secrets: [{ secret: 'OPENAI', domains: ['10.0.0.1'] }] },
        /domains\/0: a rule names domains/,
      ],
      [
        'a forbidden header',
        { egress: 'internet', secrets: [{ secret: 'OPENAI', domains: ['a.b.com'], header: 'Host' }] },
        /\/network\/secrets\/0\/header/,
      ],
      [
        'a format without {value}',
        {
          egress: 'internet',
          secrets: [{ secret: 'OPENAI', domains: ['a.b.com'], header: 'X-Key', format: 'Bearer' }],
        },
        /\/network\/secrets\/0\/format: format must contain \{value\}/,
      ],
      [
        'a format without header',
        { egress: 'internet', secrets: [{ secret: 'OPENAI', domains: ['a.b.com'], format: '{value}' }] },
        /needs header/,
      ],
      [
        'two secrets on one env name',
        {
          egress: 'internet',
          secrets: [
            { secret: 'my-key', domains: ['a.b.com'] },
            { secret: 'my_key', domains: ['a.b.com'] },
          ],
        },
        /\/network\/secrets\/1\/secret/,
      ],
      [
        // Its placeholder would stand where the sandbox's trust in the proxy's CA is named
        // (the sandbox's TLS would trust nothing).
        'a secret named as a variable of the CA trust',
        { egress: 'internet', secrets: [{ secret: 'SSL_CERT_FILE', domains: ['a.b.com'] }] },
        /\/network\/secrets\/0\/secret: .*SSL_CERT_FILE.*CA/,
      ],
    ];
    for (const [what, network, re] of cases) {
      const r = await create({ network });
      assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.message, re, what);
    }
    const env = await create({
      env: { OPENAI: 'mine' },
      network: { egress: 'internet', secrets: [{ secret: 'OPENAI', domains: ['a.b.com'] }] },
    });
    assert.equal(env.status, 400);
    assert.match(env.body.message, /\/network\/secrets\/0\/secret: environment variable OPENAI/);
    assert.equal(await t.app.store.balance(accountId), balance, 'nothing charged');
    assert.equal((await call('GET', '/api/v1/sandboxes')).body.sandboxes.length, count, 'nothing created');
    // A wildcard allowed by an equal or a wider wildcard; any name under internet.
    for (const domain of ['*.example.com', '*.api.example.com', 'x.example.com']) {
      const ok = await create({
        network: { egress: { allow: ['*.example.com'] }, secrets: [{ secret: 'OPENAI', domains: [domain] }] },
      });
      assert.equal(ok.status, 201, JSON.stringify(ok.body));
      await call('DELETE', `/api/v1/sandboxes/${ok.body.sandbox.id}`);
    }
  });

  it('PUT and DELETE reach every sandbox naming the secret before the answer; a re-made secret injects again', async () => {
    const a = await create({ network: { egress: 'internet', secrets: [{ secret: 'my-key', domains: ['a.b.com'] }] } });
    const b = await create({ network: { egress: 'internet', secrets: [{ secret: 'OPENAI', domains: ['a.b.com'] }] } });
    const ida = a.body.sandbox.id;
    const idb = b.body.sandbox.id;
    assert.equal(t.driver.secretsOf(ida)?.[0].value, V3);
    // Stopped ones too (their driver keeps the rules for the next start).
    assert.equal((await call('POST', `/api/v1/sandboxes/${ida}/stop`)).status, 200);
    const before = t.driver.calls.filter((c) => c === `setSecrets ${idb}`).length;
    await call('PUT', '/api/v1/secrets/my-key', { value: V1 });
    assert.equal(t.driver.secretsOf(ida)?.[0].value, V1);
    assert.equal(t.driver.calls.filter((c) => c === `setSecrets ${idb}`).length, before, 'others are left alone');
    await call('DELETE', '/api/v1/secrets/my-key');
    const gone = t.driver.secretsOf(ida)?.[0];
    assert.equal(gone?.value, undefined, 'the rule stays without value');
    assert.equal(gone?.placeholder, a.body.sandbox.network.secrets[0].placeholder);
    await call('POST', '/api/v1/secrets', { name: 'my-key', value: V3 });
    assert.equal(t.driver.secretsOf(ida)?.[0].value, V3);
    assert.equal((await call('POST', `/api/v1/sandboxes/${ida}/start`)).status, 200);
    assert.equal(t.driver.secretsOf(ida)?.[0].value, V3, 'kept across stop and start');
    // A runtime that fails the push: the change is still made (and retried later).
    t.driver.failSetSecrets = true;
    try {
      assert.equal((await call('PUT', '/api/v1/secrets/my-key', { value: V2 })).status, 200);
    } finally {
      t.driver.failSetSecrets = false;
    }
    assert.equal(t.driver.secretsOf(ida)?.[0].value, V3);
    await t.app.services.secrets.resync();
    assert.equal(t.driver.secretsOf(ida)?.[0].value, V2);
  });

  it('PATCH network: replaces rules (same secret, same placeholder), keeps them when absent, checks kept ones against the new egress', async () => {
    const c = await create({
      network: { egress: { allow: ['a.b.com', 'c.d.com'] }, secrets: [{ secret: 'OPENAI', domains: ['a.b.com'] }] },
    });
    const id = c.body.sandbox.id;
    const ph = c.body.sandbox.network.secrets[0].placeholder;
    const url = `/api/v1/sandboxes/${id}/network`;
    const r1 = await call('PATCH', url, {
      egress: { allow: ['a.b.com', 'c.d.com'] },
      secrets: [
        { secret: 'OPENAI', domains: ['c.d.com'], header: 'X-Key' },
        { secret: 'my-key', domains: ['a.b.com'] },
      ],
    });
    assert.equal(r1.status, 200, JSON.stringify(r1.body));
    assert.equal(r1.body.network.secrets[0].placeholder, ph, 'stable for the sandbox');
    assert.equal(r1.body.network.secrets[0].format, '{value}', 'format defaults with a header');
    assert.notEqual(r1.body.network.secrets[1].placeholder, ph);
    assert.deepEqual(
      t.driver.secretsOf(id)?.map((s) => [s.secret, s.domains, s.value]),
      [
        ['OPENAI', ['c.d.com'], V2],
        ['my-key', ['a.b.com'], V2],
      ],
    );
    // Absent: kept, and checked against the new egress.
    const narrow = await call('PATCH', url, { egress: { allow: ['a.b.com'] } });
    assert.equal(narrow.status, 400);
    assert.match(narrow.body.message, /\/secrets\/0\/domains\/0: c\.d\.com is not allowed/);
    assert.equal((await t.app.store.getSandbox(id))?.network?.secrets?.length, 2, 'nothing changed');
    // A secret deleted since: its kept rule stays (without value), the PATCH goes through.
    await call('DELETE', '/api/v1/secrets/my-key');
    const kept = await call('PATCH', url, { egress: 'internet' });
    assert.equal(kept.status, 200, JSON.stringify(kept.body));
    assert.equal(kept.body.network.secrets.length, 2);
    assert.equal(t.driver.secretsOf(id)?.[1].value, undefined);
    // Named again in a replacing PATCH, it must exist.
    const named = await call('PATCH', url, { egress: 'internet', secrets: kept.body.network.secrets });
    assert.equal(named.status, 400);
    assert.match(named.body.message, /\/secrets\/1\/secret: no secret named my-key/);
    await call('POST', '/api/v1/secrets', { name: 'my-key', value: V2 });
    // An empty list removes them.
    const cleared = await call('PATCH', url, { egress: 'internet', secrets: [] });
    assert.equal(cleared.body.network.secrets, undefined);
    assert.deepEqual(t.driver.secretsOf(id), []);
    // Named again: the placeholder its env variable (the create's) still holds.
    const back = await call('PATCH', url, {
      egress: 'internet',
      secrets: [{ secret: 'OPENAI', domains: ['a.b.com'] }],
    });
    assert.equal(back.status, 200, JSON.stringify(back.body));
    assert.equal(back.body.network.secrets[0].placeholder, ph);
  });

  it('audit: driver events are written in batches, listed newest first, filtered, paged, pruned', async () => {
    const c = await create({ network: { egress: 'internet', secrets: [{ secret: 'OPENAI', domains: ['a.b.com'] }] } });
    const id = c.body.sandbox.id;
    const t0 = t.clock.now();
    for (let i = 0; i < 450; i++)
      t.driver.emitInjection({
        sandboxId: id,
        secret: i % 3 ? 'OPENAI' : 'my-key',
        destination: 'a.b.com:443',
        method: 'GET',
        status: i === 449 ? null : 200,
        ...(i === 449 ? { error: 'upstream refused the connection' } : {}),
        at: t0 + i,
      });
    // An event of an unknown sandbox is dropped, not written to anyone.
    t.driver.emitInjection({
      sandboxId: 'sbx_unknown',
      secret: 'X',
      destination: 'x:80',
      method: 'GET',
      status: 200,
      at: t0,
    });
    const first = await call('GET', '/api/v1/secrets/injections?limit=100');
    assert.equal(first.status, 200);
    assert.equal(first.body.injections.length, 100);
    assert.deepEqual(first.body.injections[0], {
      id: first.body.injections[0].id,
      sandboxId: id,
      secret: 'OPENAI',
      destination: 'a.b.com:443',
      method: 'GET',
      status: null,
      error: 'upstream refused the connection',
      at: new Date(t0 + 449).toISOString(),
    });
    let seen = first.body.injections.length;
    let next = first.body.next;
    for (let i = 0; i < 10 && next; i++) {
      const p = await call('GET', `/api/v1/secrets/injections?limit=100&before=${next}`);
      seen += p.body.injections.length;
      next = p.body.next;
    }
    assert.equal(seen, 450);
    const mine = await call('GET', `/api/v1/secrets/injections?secret=my-key&sandboxId=${id}&limit=500`);
    assert.equal(mine.body.injections.length, 150);
    assert.equal(mine.body.next, undefined);
    assert.equal((await call('GET', '/api/v1/secrets/injections?before=junk')).status, 400);
    assert.equal((await call('GET', '/api/v1/secrets/injections?limit=0')).status, 400);
    const other = await t.newAccount();
    assert.deepEqual((await call('GET', '/api/v1/secrets/injections', undefined, other.key)).body.injections, []);
    // Pruning: past 30 days they go.
    t.clock.advance(AUDIT_RETENTION_MS + 1000);
    assert.equal(await t.app.services.secrets.prune(), 450);
    assert.deepEqual((await call('GET', '/api/v1/secrets/injections')).body.injections, []);
    assert.equal(AUDIT_MAX_ROWS_PER_ACCOUNT, 100_000);
  });

  it("another account: naming this one's secret is unknown there; this one's sandbox, rules and audit are out of its reach; a value of the wrong shape is never echoed", async () => {
    // An account of its own (the suite's first is at its sandbox limit by now).
    const me = await t.newAccount({ tokens: 100_000 });
    assert.equal((await call('POST', '/api/v1/secrets', { name: 'OPENAI', value: V2 }, me.key)).status, 201);
    const mine = await call(
      'POST',
      '/api/v1/sandboxes',
      {
        image: IMAGE,
        timeoutMs: 60_000,
        network: { egress: 'internet', secrets: [{ secret: 'OPENAI', domains: ['a.b.com'] }] },
      },
      me.key,
    );
    assert.equal(mine.status, 201, JSON.stringify(mine.body));
    const id = mine.body.sandbox.id;
    t.driver.emitInjection({
      sandboxId: id,
      secret: 'OPENAI',
      destination: 'a.b.com:443',
      method: 'GET',
      status: 200,
      at: t.clock.now(),
    });
    const other = await t.newAccount({ tokens: 100_000 });
    const theirs = await call(
      'POST',
      '/api/v1/sandboxes',
      {
        image: IMAGE,
        timeoutMs: 60_000,
        network: { egress: 'internet', secrets: [{ secret: 'OPENAI', domains: ['a.b.com'] }] },
      },
      other.key,
    );
    assert.equal(theirs.status, 400);
    assert.match(theirs.body.message, /no secret named OPENAI in this account/);
    assert.equal((await call('GET', `/api/v1/sandboxes/${id}`, undefined, other.key)).status, 404);
    const patch = await call(
      'PATCH',
      `/api/v1/sandboxes/${id}/network`,
      { egress: 'internet', secrets: [] },
      other.key,
    );
    assert.equal(patch.status, 404);
    assert.equal(t.driver.secretsOf(id)?.[0].value, V2, 'the rules are as they were');
    const audit = await call('GET', `/api/v1/secrets/injections?sandboxId=${id}`, undefined, other.key);
    assert.deepEqual(audit.body.injections, []);
    assert.ok(
      (await call('GET', `/api/v1/secrets/injections?sandboxId=${id}`, undefined, me.key)).body.injections.length >= 1,
    );
    // Values of the wrong shape: 400 by path, the value not quoted (`after` looks at every answer).
    for (const value of [[V3], { v: V3 }, `${V3}\u00e9`, `${V3}${'x'.repeat(8192)}`]) {
      const r = await call('PUT', '/api/v1/secrets/SHAPE', { value }, me.key);
      assert.equal(r.status, 400);
      assert.match(JSON.stringify(r.body), /\/value/);
    }
    assert.equal((await call('GET', '/api/v1/secrets/SHAPE', undefined, me.key)).status, 404);
  });
});

describe('secrets: servers sharing a database need the same keys', () => {
  it('a server whose keys do not decrypt the database check answers secrets requests 503, changing nothing', async () => {
    const store = new SqliteStore(':memory:');
    const a = await makeTestApp({}, { store });
    const b = await makeTestApp({ secretsKey: Buffer.alloc(32, 9).toString('base64') }, { store });
    try {
      const acc = await a.newAccount();
      const made = await a.req({
        method: 'POST',
        url: '/api/v1/secrets',
        payload: { name: 'A', value: V1 },
        key: acc.key,
      });
      assert.equal(made.statusCode, 201);
      const refused = await b.req({ method: 'PUT', url: '/api/v1/secrets/A', payload: { value: V2 }, key: acc.key });
      assert.equal(refused.statusCode, 503);
      assert.match(refused.json().message, /same SANDBOXD_SECRETS_KEY/);
      assert.equal((await store.getSecret(acc.id, 'A'))?.version, 1);
      assert.ok(!refused.body.includes(V1) && !refused.body.includes(V2));
    } finally {
      await b.app.close().catch(() => undefined);
      await a.close();
    }
  });
});
