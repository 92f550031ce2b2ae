/**
 * Property fuzz over the running server: >= 10,000 generated requests across every
 * endpoint (valid, near-valid and garbage) must never answer 5xx, must always answer an
 * Error body on 4xx, and must leave the server healthy.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { ADMIN_KEY, IMAGE, newAccount, startServer, type Server } from './harness.js';

const RUNS = Number(process.env.SANDBOXD_FUZZ_RUNS ?? 1300);
const BATCH = 8;

describe('fuzz', { timeout: 170_000 }, () => {
  let s: Server;
  let user: { id: string; key: string };
  let other: { id: string; key: string };
  const ids: string[] = [];
  let otherId = '';
  let count = 0;

  before(async () => {
    s = await startServer({ env: { SANDBOXD_LOG_LEVEL: 'error' } });
    user = await newAccount(s, { tokens: 1_000_000, plan: 'PRO' });
    other = await newAccount(s, { tokens: 1000 });
    for (let i = 0; i < 10; i++)
      ids.push(
        (await s.api('POST', '/api/v1/sandboxes', { key: user.key, body: { image: IMAGE, timeoutMs: 3_600_000 } })).body
          .sandbox.id,
      );
    otherId = (await s.api('POST', '/api/v1/sandboxes', { key: other.key, body: { image: IMAGE } })).body.sandbox.id;
  });
  after(() => s?.stop());

  it(`answers ${RUNS * BATCH} generated requests without a 5xx`, async () => {
    const idArb = fc.oneof(
      fc.constantFrom(
        ...ids,
        otherId,
        'sbx_aaaaaaaaaaaaaaaaaaaa',
        '',
        '..',
        '%00',
        '%2F',
        'x'.repeat(300),
        'ü',
        'key_x',
        'data',
        'acc_x',
      ),
      fc.string({ maxLength: 30 }).map(encodeURIComponent),
    );
    const scalar = fc.oneof(
      fc.string({ maxLength: 40 }),
      fc.integer(),
      fc.double(),
      fc.boolean(),
      fc.constant(null),
      fc.constant(-1),
      fc.constant(0),
      fc.constant(3_600_001),
    );
    const maybe = <T>(a: fc.Arbitrary<T>) => fc.oneof(a, scalar, fc.jsonValue({ maxDepth: 2 }));
    const volName = fc.oneof(fc.stringMatching(/^[a-z0-9_]{1,31}$/), fc.string({ maxLength: 35 }));
    const bodies = {
      create: fc.record(
        {
          image: maybe(fc.constantFrom(IMAGE, 'local/debian:bookworm', 'nope:1', '')),
          timeoutMs: maybe(fc.integer({ min: -10, max: 4_000_000 })),
          env: maybe(fc.dictionary(fc.string({ maxLength: 10 }), maybe(fc.string({ maxLength: 10 })), { maxKeys: 4 })),
          volumes: maybe(
            fc.dictionary(
              fc.oneof(fc.constantFrom('/data', '/', '/proc/x', 'rel', '/a/../b'), fc.string({ maxLength: 12 })),
              fc.oneof(
                volName,
                fc.record({ name: volName, sizeGb: maybe(fc.integer({ min: -1, max: 102 })) }, { requiredKeys: [] }),
              ),
              { maxKeys: 3 },
            ),
          ),
          extra: scalar,
        },
        { requiredKeys: [] },
      ),
      exec: fc.record(
        {
          command: maybe(fc.constantFrom('echo hi', 'exit 3', 'printenv PATH', 'true', 'false', '')),
          options: maybe(
            fc.record(
              {
                background: maybe(fc.boolean()),
                cwd: maybe(fc.constantFrom('/', '/tmp', '')),
                env: maybe(fc.dictionary(fc.string({ maxLength: 5 }), fc.string({ maxLength: 5 }))),
                timeoutMs: maybe(fc.integer({ min: -1, max: 5000 })),
              },
              { requiredKeys: [] },
            ),
          ),
        },
        { requiredKeys: [] },
      ),
      timeout: fc.record(
        { timeoutMs: maybe(fc.integer({ min: -5, max: 3_700_000 })), x: scalar },
        { requiredKeys: [] },
      ),
      track: fc.record(
        {
          event: maybe(fc.constantFrom('onboarding.started', 'onboarding.completed', 'onboarding.nope')),
          metadata: maybe(fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }))),
        },
        { requiredKeys: [] },
      ),
      key: fc.record({ name: maybe(fc.string({ maxLength: 120 })) }, { requiredKeys: [] }),
      auth: fc.record(
        { email: maybe(fc.emailAddress()), password: maybe(fc.string({ maxLength: 20 })) },
        { requiredKeys: [] },
      ),
      admin: fc.record(
        {
          email: maybe(fc.emailAddress()),
          password: maybe(fc.string({ minLength: 6, maxLength: 12 })),
          plan: maybe(fc.constantFrom('FREE', 'PRO', 'GOLD')),
          tokens: maybe(fc.integer({ min: -5, max: 100 })),
          admin: maybe(fc.boolean()),
        },
        { requiredKeys: [] },
      ),
      any: fc.jsonValue({ maxDepth: 3 }),
    };
    const route: fc.Arbitrary<[string, string, unknown]> = fc.oneof(
      fc.tuple(fc.constant('POST'), fc.constant('/api/v1/sandboxes'), bodies.create),
      fc.tuple(
        fc.constant('GET'),
        fc.oneof(
          fc.constant('/api/v1/sandboxes'),
          fc
            .record(
              {
                state: fc.constantFrom('started', 'stopped', 'x', ''),
                limit: fc.constantFrom('1', '0', '1000', '1001', 'a', '-1', '2.5'),
                cursor: fc.oneof(fc.string({ maxLength: 20 }), fc.base64String({ maxLength: 40 })),
              },
              { requiredKeys: [] },
            )
            .map((q) => `/api/v1/sandboxes?${new URLSearchParams(q as Record<string, string>)}`),
        ),
        fc.constant(undefined),
      ),
      fc.tuple(
        fc.constantFrom('GET', 'DELETE'),
        idArb.map((id) => `/api/v1/sandboxes/${id}`),
        fc.constant(undefined),
      ),
      fc.tuple(
        fc.constant('PATCH'),
        idArb.map((id) => `/api/v1/sandboxes/${id}/timeout`),
        bodies.timeout,
      ),
      fc.tuple(
        fc.constant('POST'),
        idArb.map((id) => `/api/v1/sandboxes/${id}/exec`),
        bodies.exec,
      ),
      fc.tuple(fc.constant('POST'), fc.constant('/api/v1/events/track'), bodies.track),
      fc.tuple(
        fc.constantFrom('GET'),
        fc.constantFrom(
          '/api/v1/account',
          '/api/v1/account/ledger?limit=5',
          '/api/v1/keys',
          '/api/v1/volumes',
          '/api/v1/events',
          '/healthz',
          '/api/v1/openapi.json',
          '/api/v1/admin/accounts',
        ),
        fc.constant(undefined),
      ),
      fc.tuple(fc.constant('POST'), fc.constant('/api/v1/keys'), bodies.key),
      fc.tuple(
        fc.constant('DELETE'),
        idArb.map((id) => `/api/v1/keys/${id}`),
        fc.constant(undefined),
      ),
      fc.tuple(
        fc.constant('DELETE'),
        fc.oneof(fc.constantFrom('data', 'x'), volName).map((n) => `/api/v1/volumes/${encodeURIComponent(n)}`),
        fc.constant(undefined),
      ),
      fc.tuple(
        fc.constantFrom('POST'),
        fc.constantFrom('/api/v1/auth/login', '/api/v1/auth/signup', '/api/v1/auth/logout'),
        bodies.auth,
      ),
      fc.tuple(
        fc.constant('GET'),
        fc.string({ maxLength: 40 }).map((t) => `/api/v1/auth/link?token=${encodeURIComponent(t)}`),
        fc.constant(undefined),
      ),
      fc.tuple(fc.constant('POST'), fc.constant('/api/v1/admin/accounts'), bodies.admin),
      fc.tuple(
        fc.constantFrom('PATCH', 'POST'),
        fc.constantFrom(`/api/v1/admin/accounts/x`, `/api/v1/admin/accounts/x/tokens`),
        bodies.any,
      ),
      fc.tuple(
        fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'),
        fc.string({ maxLength: 30 }).map((p) => `/api/v1/${encodeURIComponent(p)}`),
        bodies.any,
      ),
    );
    const request = fc.record({
      route,
      auth: fc.constantFrom('user', 'user', 'user', 'admin', 'other', 'none', 'bad', 'xkey', 'cookie'),
      encoding: fc.constantFrom('json', 'json', 'json', 'json', 'garbage', 'text', 'empty'),
      garbage: fc.constantFrom(
        '{',
        '{"image":',
        '[1,2',
        'nul',
        '{"a":1}}',
        '\u0000',
        '{"__proto__":{"x":1}}',
        '{"constructor":{"prototype":{}}}',
      ),
    });

    await fc.assert(
      fc.asyncProperty(fc.array(request, { minLength: BATCH, maxLength: BATCH }), async (reqs) => {
        await Promise.all(
          reqs.map(async ({ route: [method, path, body], auth, encoding, garbage }) => {
            const headers: Record<string, string> = {};
            if (auth === 'user') headers.authorization = `Bearer ${user.key}`;
            else if (auth === 'admin') headers.authorization = `Bearer ${ADMIN_KEY}`;
            else if (auth === 'other') headers.authorization = `Bearer ${other.key}`;
            else if (auth === 'bad') headers.authorization = 'Bearer sk_bad';
            else if (auth === 'xkey') headers['x-api-key'] = user.key;
            else if (auth === 'cookie') headers.cookie = 'sandboxd_session=abc; other=1';
            let raw: string | undefined;
            if (method !== 'GET' && method !== 'OPTIONS') {
              if (encoding === 'json' && body !== undefined) raw = JSON.stringify(body);
              else if (encoding === 'garbage') raw = garbage;
              else if (encoding === 'text') raw = JSON.stringify(body) ?? 'x';
              else if (encoding === 'empty') raw = '';
              if (raw !== undefined) headers['content-type'] = encoding === 'text' ? 'text/plain' : 'application/json';
            }
            const res = await fetch(`${s.baseUrl}${path}`, {
              method,
              headers,
              body: raw,
              redirect: 'manual',
              signal: AbortSignal.timeout(15_000),
            });
            const text = await res.text();
            count++;
            assert.ok(
              res.status < 500,
              `${method} ${path} ${raw?.slice(0, 200)} -> ${res.status} ${text.slice(0, 300)}`,
            );
            if (res.status >= 400) {
              const b = JSON.parse(text);
              assert.equal(b.code, res.status, `${method} ${path}: ${text.slice(0, 200)}`);
              assert.equal(typeof b.message, 'string');
            }
          }),
        );
      }),
      { numRuns: RUNS, endOnFailure: true, includeErrorInReport: true },
    );
    assert.ok(count >= RUNS * BATCH);
    assert.equal((await s.api('GET', '/healthz', { key: null })).status, 200);
    assert.equal(s.proc.exitCode, null, 'server still running');
  });
});
