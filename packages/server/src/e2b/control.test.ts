import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { LIMITS } from '@sandboxd/protocol';
import type { LightMyRequestResponse } from 'fastify';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { AccessTokens } from './tokens.js';
import { ENVD_VERSION } from './version.js';

/*
 * E2B's control API under /e2b on the fake runtime: shapes, refusals and bad input. The
 * unchanged `e2b` SDK against a real server is test/e2e/e2b/control.test.ts.
 */

const SANDBOX_ID = /^sbx_[a-z2-7]{20}$/;
/** The key of the secrets at rest (the test app has no data dir for a key file). */
const SECRETS_KEY = randomBytes(32).toString('base64');

/** The `metadata` query parameter as E2B's SDK builds it, ready to go into a URL. */
function metadataQuery(m: Record<string, string>): string {
  const inner = new URLSearchParams(
    Object.fromEntries(Object.entries(m).map(([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)])),
  ).toString();
  return `metadata=${encodeURIComponent(inner)}`;
}

function assertError(r: LightMyRequestResponse, status: number, kind: string, text?: string | RegExp): void {
  assert.equal(r.statusCode, status, r.body);
  const b = r.json();
  assert.equal(b.code, status, 'E2B reads code as the status');
  assert.equal(b.kind, kind);
  assert.equal(typeof b.message, 'string');
  if (typeof text === 'string') assert.ok(b.message.includes(text), `${b.message} should include ${text}`);
  else if (text) assert.match(b.message, text);
}

describe('E2B control API (fake runtime)', () => {
  let t: TestApp;
  before(
    async () =>
      (t = await makeTestApp({
        secretsKey: SECRETS_KEY,
        plans: {
          FREE: {
            maxLifetimeMs: 3_600_000,
            concurrency: 20,
            signupTokens: 1000,
            maxPaused: 5,
            pausedRetentionMs: 604_800_000,
            snapshotBytes: 2 ** 30,
            limits: { memoryBytes: 2 * 1024 ** 3, cpus: 1, pids: 512, rootDiskBytes: 10 * 1024 ** 3 },
          },
          ONE: {
            maxLifetimeMs: 3_600_000,
            concurrency: 1,
            signupTokens: 1000,
            maxPaused: 5,
            pausedRetentionMs: 604_800_000,
            snapshotBytes: 2 ** 30,
            limits: { memoryBytes: 1024 ** 3, cpus: 0.5, pids: 512, rootDiskBytes: 1024 ** 3 },
          },
        },
      })),
  );
  after(() => t.close());

  /** A fresh account; `e2b` calls /e2b with its key in X-API-Key, as E2B's SDK sends it. */
  async function user(o: { tokens?: number; plan?: string } = {}) {
    const a = await t.newAccount({ tokens: o.tokens ?? 100_000, plan: o.plan });
    const e2b = (method: string, url: string, payload?: unknown, headers: Record<string, string> = {}) =>
      t.req({
        method: method as 'GET',
        url: `/e2b${url}`,
        key: null,
        headers: { 'x-api-key': a.key, ...headers },
        ...(payload === undefined ? {} : { payload: payload as object }),
      });
    const own = async () =>
      (await t.req({ method: 'GET', url: '/api/v1/sandboxes?limit=1000', key: a.key })).json().sandboxes as Array<{
        id: string;
        state: string;
        network?: unknown;
      }>;
    const balance = async () => (await t.app.store.balance(a.id)) as number;
    return { ...a, e2b, own, balance };
  }

  it('create: 201 with what the SDK needs for envd; the record keeps template, metadata and env', async () => {
    const u = await user();
    const r = await u.e2b('POST', '/v2/sandboxes', {
      templateID: 'base',
      envVars: { FOO: 'bar' },
      metadata: { user: 'abc', 'odd key=&': 'ü' },
      timeout: 120,
    });
    assert.equal(r.statusCode, 201, r.body);
    const b = r.json();
    assert.match(b.sandboxID, SANDBOX_ID);
    assert.deepEqual(b, {
      sandboxID: b.sandboxID,
      templateID: 'base',
      alias: 'base',
      clientID: 'sandboxd',
      envdVersion: ENVD_VERSION,
      envdAccessToken: await new AccessTokens(t.app.store).tokenFor(b.sandboxID),
      domain: 'sandbox.localhost:8080',
      trafficAccessToken: null,
    });
    const rec = await t.app.store.getSandbox(b.sandboxID);
    assert.equal(rec?.image, 'local/debian:bookworm');
    assert.equal(rec?.template, 'base');
    assert.deepEqual(rec?.metadata, { user: 'abc', 'odd key=&': 'ü' });
    assert.deepEqual(rec?.env, { FOO: 'bar' });
    assert.equal(rec!.stopAt - rec!.createdAt, 120_000);
    assert.equal(rec?.state, 'started');
  });

  it('create with allowPublicTraffic false: private ports and a traffic access token (also from connect)', async () => {
    const u = await user();
    const r = await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', network: { allowPublicTraffic: false } });
    assert.equal(r.statusCode, 201, r.body);
    const b = r.json();
    const tokens = new AccessTokens(t.app.store);
    assert.equal(b.trafficAccessToken, await tokens.trafficTokenFor(b.sandboxID));
    assert.match(b.trafficAccessToken, /^ta_[A-Za-z0-9_-]{43}$/);
    assert.notEqual(b.trafficAccessToken, b.envdAccessToken);
    assert.equal(await tokens.verifyTraffic(b.sandboxID, b.trafficAccessToken), true);
    assert.equal(await tokens.verifyTraffic('other', b.trafficAccessToken), false);
    assert.equal((await t.app.store.getSandbox(b.sandboxID))?.portsPublic, false);
    const c = await u.e2b('POST', `/sandboxes/${b.sandboxID}/connect`, { timeout: 60 });
    assert.equal(c.json().trafficAccessToken, b.trafficAccessToken, c.body);
    const open = await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', network: { allowPublicTraffic: true } });
    assert.equal(open.json().trafficAccessToken, null);
    assert.notEqual((await t.app.store.getSandbox(open.json().sandboxID))?.portsPublic, false);
  });

  it("create: a name that is no template is an image; no timeout takes sandboxd's default; v1 path too", async () => {
    const u = await user();
    const r = await u.e2b('POST', '/v2/sandboxes', { templateID: 'local/busybox:latest' });
    assert.equal(r.statusCode, 201, r.body);
    assert.equal(r.json().templateID, 'local/busybox:latest');
    const rec = await t.app.store.getSandbox(r.json().sandboxID);
    assert.equal(rec?.image, 'local/busybox:latest');
    assert.equal(rec!.stopAt - rec!.createdAt, LIMITS.defaultTimeoutMs);
    assert.equal(rec?.metadata, undefined);
    const v1 = await u.e2b('POST', '/sandboxes', { templateID: 'base', secure: true, timeout: 60 });
    assert.equal(v1.statusCode, 201, v1.body);
  });

  it('create: an unknown image is 404 naming the template; nothing created, no tokens spent', async () => {
    const u = await user();
    const before = await u.balance();
    const r = await u.e2b('POST', '/v2/sandboxes', { templateID: 'local/nope:1' });
    assertError(
      r,
      404,
      'template_not_found',
      /local\/nope:1 not found: it is neither a template of this server \(base, code-interpreter-v1, code-interpreter\)/,
    );
    // E2B's default template for `mcp` (the SDK's mcp-gateway): named as E2B names a missing one, never pulled.
    assertError(
      await u.e2b('POST', '/v2/sandboxes', { templateID: 'mcp-gateway', mcp: { exa: {} } }),
      404,
      'template_not_found',
      /^template 'mcp-gateway' not found: this server has no MCP gateway template/,
    );
    assert.deepEqual(await u.own(), []);
    assert.equal(await u.balance(), before);
  });

  it('create: bad input is 400 naming the field, and creates nothing', async () => {
    const u = await user();
    const before = await u.balance();
    const cases: Array<[unknown, string]> = [
      [{}, '/templateID'],
      [{ templateID: '' }, '/templateID'],
      [{ templateID: 7 }, '/templateID'],
      [{ templateID: 'base', timeout: 0 }, '/timeout'],
      [{ templateID: 'base', timeout: -5 }, '/timeout'],
      [{ templateID: 'base', timeout: 1.5 }, '/timeout'],
      [{ templateID: 'base', timeout: '60' }, '/timeout'],
      [{ templateID: 'base', metadata: { a: 1 } }, '/metadata'],
      [{ templateID: 'base', metadata: 'a=b' }, '/metadata'],
      [{ templateID: 'base', metadata: { ['k'.repeat(129)]: 'v' } }, '/metadata'],
      [{ templateID: 'base', metadata: { k: 'v'.repeat(1025) } }, '/metadata'],
      [
        { templateID: 'base', metadata: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v'])) },
        '/metadata',
      ],
      [{ templateID: 'base', envVars: { A: 1 } }, '/envVars'],
      [{ templateID: 'base', envVars: { 'A=B': 'x' } }, '/envVars'],
      [{ templateID: 'base', autoPause: 'yes' }, '/autoPause'],
      [{ templateID: 'base', network: { allowOut: 'x' } }, '/network'],
      [{ templateID: 'base', network: { futureField: 1 } }, '/network'],
      [{ templateID: 'base', unknownField: 1 }, '/unknownField'],
      [{ templateID: 'base', mcp: 'exa' }, '/mcp'],
      [{ templateID: 'base', mcp: ['exa'] }, '/mcp'],
    ];
    for (const [body, field] of cases) {
      const r = await u.e2b('POST', '/v2/sandboxes', body);
      assertError(r, 400, 'validation', field);
    }
    const notJson = await u.e2b('POST', '/v2/sandboxes', '{"templateID":', { 'content-type': 'application/json' });
    assertError(notJson, 400, 'validation', 'Malformed JSON');
    // Beyond the plan: sandboxd's own rule and message.
    assertError(
      await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 3601 }),
      400,
      'validation',
      'timeoutMs must be at most 3600000 on plan FREE',
    );
    assert.deepEqual(await u.own(), []);
    assert.equal(await u.balance(), before);
  });

  it('create: what sandboxd cannot do is 501 naming it, and creates nothing', async () => {
    const u = await user();
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ autoPause: true, autoPauseMemory: false }, 'filesystem-only pauses (autoPauseMemory: false'],
      [{ autoResume: { enabled: true } }, 'auto-resume'],
      [{ volumeMounts: [{ name: 'v', path: '/data' }] }, 'E2B volumes (volumeMounts)'],
      [{ iam: { tokens: { aws: { audience: 'a', tokenType: 'JWT-SVID' } } } }, 'workload identity'],
      [{ network: { allowOut: ['1.1.1.1'] } }, 'network.allowOut'],
      [{ network: { denyOut: ['8.8.8.8/32'] } }, 'network.denyOut'],
      [{ network: { egressProxy: { address: 'p:1080' } } }, 'network.egressProxy'],
      [{ network: { maskRequestHost: 'x' } }, 'network.maskRequestHost'],
      [{ network: { httpsPorts: [3000] } }, 'network.httpsPorts'],
      [{ allow_internet_access: true, network: { denyOut: ['0.0.0.0/0'] } }, 'allow_internet_access: true'],
    ];
    for (const [extra, text] of cases) {
      const r = await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', ...extra });
      assertError(r, 501, 'unsupported', text);
      assert.ok(r.json().message.startsWith('sandboxd does not support '), r.json().message);
    }
    const two = await u.e2b('POST', '/v2/sandboxes', {
      templateID: 'base',
      autoPause: true,
      autoPauseMemory: false,
      autoResume: { enabled: true },
    });
    assertError(two, 501, 'unsupported', /filesystem-only pauses.*; sandboxd does not support auto-resume/);
    assertError(
      await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', autoPauseMemory: false }),
      400,
      'validation',
      'autoPauseMemory: false only applies when autoPause is true',
    );
    assert.deepEqual(await u.own(), []);
  });

  it("create: what asks for nothing sandboxd lacks is taken; E2B's egress fields map onto sandboxd's", async () => {
    const u = await user();
    for (const [extra, egress] of [
      [{ allow_internet_access: false }, 'none'],
      [{ allow_internet_access: true }, 'internet'],
      [{ network: { denyOut: ['0.0.0.0/0'], allowPublicTraffic: true, allowOut: [], httpsPorts: [] } }, 'none'],
      [
        { network: { denyOut: ['0.0.0.0/0'], allowOut: ['pypi.org', '1.1.1.1'] } },
        { allow: ['pypi.org', '1.1.1.1/32'] },
      ],
      [{ autoPause: false, autoResume: { enabled: false }, volumeMounts: [], mcp: null, secure: false }, 'none'],
      // E2B's API only records `mcp`: its SDK starts the gateway in the sandbox itself.
      [{ allow_internet_access: false, mcp: { exa: { apiKey: 'k' } } }, 'none'],
    ] as const) {
      const r = await u.e2b('POST', '/v2/sandboxes', { templateID: 'local/busybox:latest', timeout: 60, ...extra });
      assert.equal(r.statusCode, 201, `${JSON.stringify(extra)}: ${r.body}`);
      const own = await u.own();
      const rec = own.find((x) => x.id === r.json().sandboxID);
      assert.deepEqual(rec?.network, { egress }, JSON.stringify(extra));
    }
  });

  it("create: the plan's concurrency and the tokens, with sandboxd's messages", async () => {
    const one = await user({ plan: 'ONE' });
    assert.equal((await one.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 })).statusCode, 201);
    assertError(
      await one.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 }),
      403,
      'concurrency',
      'Concurrency limit reached: 1 sandboxes running',
    );
    const poor = await user({ tokens: 5 });
    assertError(
      await poor.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600 }),
      402,
      'tokens',
      'Insufficient tokens: 10 needed, 5 available',
    );
    assert.deepEqual(await poor.own(), []);
  });

  it('list v2: running sandboxes of the caller, metadata filter, pages with x-next-token, order, filters', async () => {
    const u = await user();
    const other = await user();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await u.e2b('POST', '/v2/sandboxes', {
        templateID: 'base',
        metadata: { suite: 'list', 'a b&c': `v=${i}&` },
        timeout: 300,
      });
      ids.push(r.json().sandboxID);
      t.clock.advance(1000);
    }
    const plain = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'local/busybox:latest', timeout: 300 })).json();
    const own = await t.req({
      method: 'POST',
      url: '/api/v1/sandboxes',
      key: u.key,
      payload: { image: 'local/busybox:latest', timeoutMs: 60_000 },
    });
    const gone = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', metadata: { suite: 'list' } })).json();
    assert.equal((await u.e2b('DELETE', `/sandboxes/${gone.sandboxID}`)).statusCode, 204);
    await other.e2b('POST', '/v2/sandboxes', { templateID: 'base', metadata: { suite: 'list' } });

    const all = await u.e2b('GET', '/v2/sandboxes');
    assert.equal(all.statusCode, 200, all.body);
    assert.equal(all.json().length, 5);
    assert.equal(all.headers['x-next-token'], undefined);
    assert.equal(all.headers['x-total-running'], '5');
    const mine = all.json().find((x: { sandboxID: string }) => x.sandboxID === own.json().sandbox.id);
    assert.equal(mine.templateID, 'local/busybox:latest', 'a sandboxd create shows its image');
    assert.equal(mine.alias, undefined);
    assert.deepEqual(mine.metadata, {});

    const q = metadataQuery({ suite: 'list' });
    const p1 = await u.e2b('GET', `/v2/sandboxes?${q}&limit=2`);
    assert.equal(p1.statusCode, 200, p1.body);
    assert.deepEqual(
      p1.json().map((x: { sandboxID: string }) => x.sandboxID),
      [ids[2], ids[1]],
      'newest first',
    );
    assert.equal(p1.headers['x-total-running'], '3');
    const token = p1.headers['x-next-token'];
    assert.equal(typeof token, 'string');
    const p2 = await u.e2b('GET', `/v2/sandboxes?${q}&limit=2&nextToken=${token}`);
    assert.deepEqual(
      p2.json().map((x: { sandboxID: string }) => x.sandboxID),
      [ids[0]],
    );
    assert.equal(p2.headers['x-next-token'], undefined, 'the last page');

    const item = p2.json()[0];
    const rec = await t.app.store.getSandbox(ids[0]);
    assert.deepEqual(item, {
      sandboxID: ids[0],
      templateID: 'base',
      alias: 'base',
      clientID: 'sandboxd',
      startedAt: new Date(rec!.createdAt).toISOString(),
      endAt: new Date(rec!.stopAt).toISOString(),
      state: 'running',
      cpuCount: 1,
      memoryMB: 2048,
      diskSizeMB: 10240,
      metadata: { suite: 'list', 'a b&c': 'v=0&' },
      envdVersion: ENVD_VERSION,
      volumeMounts: [],
    });

    const exact = await u.e2b('GET', `/v2/sandboxes?${metadataQuery({ suite: 'list', 'a b&c': 'v=1&' })}`);
    assert.deepEqual(
      exact.json().map((x: { sandboxID: string }) => x.sandboxID),
      [ids[1]],
    );
    const asc = await u.e2b('GET', `/v2/sandboxes?${q}&order=asc`);
    assert.deepEqual(
      asc.json().map((x: { sandboxID: string }) => x.sandboxID),
      ids,
    );
    const running = await u.e2b('GET', `/v2/sandboxes?${q}&state=running,paused`);
    assert.equal(running.json().length, 3);
    const paused = await u.e2b('GET', `/v2/sandboxes?${q}&state=paused`);
    assert.deepEqual(paused.json(), []);
    assert.equal(paused.headers['x-total-running'], undefined);
    const byTemplate = await u.e2b('GET', '/v2/sandboxes?template=local%2Fbusybox%3Alatest');
    assert.deepEqual(
      byTemplate
        .json()
        .map((x: { sandboxID: string }) => x.sandboxID)
        .sort(),
      [plain.sandboxID, own.json().sandbox.id].sort(),
    );
    const rec1 = await t.app.store.getSandbox(ids[1]);
    const since = await u.e2b(
      'GET',
      `/v2/sandboxes?${q}&startedAfter=${encodeURIComponent(new Date(rec1!.createdAt).toISOString())}`,
    );
    assert.deepEqual(
      since.json().map((x: { sandboxID: string }) => x.sandboxID),
      [ids[2], ids[1]],
    );

    const v1 = await u.e2b('GET', `/sandboxes?${q}`);
    assert.equal(v1.statusCode, 200);
    assert.deepEqual(
      v1.json().map((x: { sandboxID: string }) => x.sandboxID),
      [ids[2], ids[1], ids[0]],
    );

    for (const [query, field] of [
      ['state=stopped', 'state'],
      ['limit=0', 'limit'],
      ['limit=abc', 'limit'],
      ['nextToken=garbage!', 'nextToken'],
      ['order=sideways', 'order'],
      ['startedAfter=soon', 'startedAfter'],
      ['metadata=k%3D%25E0%25A4%25A', 'metadata'],
      ['unknown=1', 'unknown'],
    ]) {
      assertError(await u.e2b('GET', `/v2/sandboxes?${query}`), 400, 'validation', field);
    }
  });

  it('get: SandboxDetail of a running sandbox; 404 for unknown, stopped and other accounts', async () => {
    const u = await user();
    const other = await user();
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', metadata: { a: '1' }, timeout: 90 })).json();
    const r = await u.e2b('GET', `/sandboxes/${c.sandboxID}`);
    assert.equal(r.statusCode, 200, r.body);
    const rec = await t.app.store.getSandbox(c.sandboxID);
    assert.deepEqual(r.json(), {
      sandboxID: c.sandboxID,
      templateID: 'base',
      alias: 'base',
      clientID: 'sandboxd',
      startedAt: new Date(rec!.createdAt).toISOString(),
      endAt: new Date(rec!.createdAt + 90_000).toISOString(),
      state: 'running',
      cpuCount: 1,
      memoryMB: 2048,
      diskSizeMB: 10240,
      metadata: { a: '1' },
      envdVersion: ENVD_VERSION,
      volumeMounts: [],
      envdAccessToken: c.envdAccessToken,
      domain: 'sandbox.localhost:8080',
      lifecycle: { onTimeout: 'kill', autoResume: false },
      network: { denyOut: ['0.0.0.0/0'], allowPublicTraffic: true },
    });
    assertError(
      await other.e2b('GET', `/sandboxes/${c.sandboxID}`),
      404,
      'not_found',
      `Sandbox ${c.sandboxID} not found`,
    );
    assertError(await u.e2b('GET', '/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa'), 404, 'not_found');
    assertError(await u.e2b('GET', '/sandboxes/whatever'), 404, 'not_found');
    // Stopped by its timeout: gone for E2B.
    t.clock.advance(91_000);
    await t.app.reaper.tick();
    assertError(await u.e2b('GET', `/sandboxes/${c.sandboxID}`), 404, 'not_found');
    assertError(await u.e2b('DELETE', `/sandboxes/${c.sandboxID}`), 404, 'not_found');
  });

  it('kill: 204, then 404; another account cannot kill it', async () => {
    const u = await user();
    const other = await user();
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 })).json();
    assertError(await other.e2b('DELETE', `/sandboxes/${c.sandboxID}`), 404, 'not_found');
    assert.equal((await t.app.store.getSandbox(c.sandboxID))?.state, 'started');
    const r = await u.e2b('DELETE', `/sandboxes/${c.sandboxID}`);
    assert.equal(r.statusCode, 204);
    assert.equal(r.body, '');
    assert.equal(await t.app.store.getSandbox(c.sandboxID), null, 'the same delete as sandboxd: record removed');
    assertError(await u.e2b('DELETE', `/sandboxes/${c.sandboxID}`), 404, 'not_found');
  });

  it("timeout: stopAt = now + timeout, sandboxd's plan rule and tokens; 0 stops it", async () => {
    const u = await user();
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600 })).json();
    t.clock.advance(10_000);
    const r = await u.e2b('POST', `/sandboxes/${c.sandboxID}/timeout`, { timeout: 120 });
    assert.equal(r.statusCode, 204, r.body);
    assert.equal((await t.app.store.getSandbox(c.sandboxID))?.stopAt, t.clock.now() + 120_000, 'shortened');
    assertError(
      await u.e2b('POST', `/sandboxes/${c.sandboxID}/timeout`, { timeout: 3600 }),
      400,
      'validation',
      'timeoutMs must be at most 3590000 now',
    );
    for (const [body, field] of [
      [{}, '/timeout'],
      [{ timeout: -1 }, '/timeout'],
      [{ timeout: '5' }, '/timeout'],
      [{ timeout: 5, x: 1 }, 'body/x'],
    ] as const)
      assertError(await u.e2b('POST', `/sandboxes/${c.sandboxID}/timeout`, body), 400, 'validation', field);
    assertError(await u.e2b('POST', '/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/timeout', { timeout: 5 }), 404, 'not_found');
    const poor = await user({ tokens: 2 });
    const p = (await poor.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 })).json();
    assertError(await poor.e2b('POST', `/sandboxes/${p.sandboxID}/timeout`, { timeout: 600 }), 402, 'tokens');
    assert.equal((await u.e2b('POST', `/sandboxes/${c.sandboxID}/timeout`, { timeout: 0 })).statusCode, 204);
    assert.equal((await t.app.store.getSandbox(c.sandboxID))?.state, 'stopped');
  });

  it('connect: 200 with the same token; the lifetime only grows (300 s when none is named)', async () => {
    const u = await user();
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600 })).json();
    const stopAt = async () => (await t.app.store.getSandbox(c.sandboxID))!.stopAt;
    const first = await stopAt();
    const shorter = await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, { timeout: 60 });
    assert.equal(shorter.statusCode, 200, shorter.body);
    assert.deepEqual(shorter.json(), c, 'the same answer as the create');
    assert.equal(await stopAt(), first, 'never shortened');
    const longer = await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, { timeout: 900 });
    assert.equal(longer.statusCode, 200);
    assert.equal(await stopAt(), t.clock.now() + 900_000);
    // No timeout: 300 s from now, unless it already runs longer.
    assert.equal((await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`)).statusCode, 200);
    assert.equal(await stopAt(), t.clock.now() + 900_000);
    t.clock.advance(800_000);
    assert.equal((await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, {})).statusCode, 200);
    assert.equal(await stopAt(), t.clock.now() + 300_000);
    // Near the plan's end, the default is cut to what is left rather than refused...
    t.clock.advance(2_600_000);
    const rec = (await t.app.store.getSandbox(c.sandboxID))!;
    await u.e2b('POST', `/sandboxes/${c.sandboxID}/timeout`, { timeout: 60 });
    assert.equal((await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`)).statusCode, 200);
    assert.equal(await stopAt(), rec.createdAt + 3_600_000);
    // ...while a named one past it is refused with the plan's rule.
    assertError(
      await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, { timeout: 3000 }),
      400,
      'validation',
      'timeoutMs must be at most',
    );
    // v1 connect (timeout required), resume, refreshes.
    assertError(await u.e2b('POST', `/sandboxes/${c.sandboxID}/connect`, {}), 400, 'validation', '/timeout');
    assert.equal((await u.e2b('POST', `/sandboxes/${c.sandboxID}/connect`, { timeout: 1 })).statusCode, 200);
    assertError(await u.e2b('POST', `/sandboxes/${c.sandboxID}/resume`), 409, 'conflict', 'is already running');
    assertError(
      await u.e2b('POST', `/sandboxes/${c.sandboxID}/resume`, { autoPause: true }),
      409,
      'conflict',
      'is already running',
    );
    assertError(await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, { timeout: 'x' }), 400, 'validation');
    await u.e2b('DELETE', `/sandboxes/${c.sandboxID}`);
    assertError(await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, {}), 404, 'not_found');
    assertError(await u.e2b('POST', `/sandboxes/${c.sandboxID}/resume`, {}), 404, 'not_found');
  });

  it('refreshes: extends by duration, never shortens; 404 when gone', async () => {
    const u = await user();
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 })).json();
    const stopAt = async () => (await t.app.store.getSandbox(c.sandboxID))!.stopAt;
    const r = await u.e2b('POST', `/sandboxes/${c.sandboxID}/refreshes`, { duration: 120 });
    assert.equal(r.statusCode, 204, r.body);
    assert.equal(await stopAt(), t.clock.now() + 120_000);
    assert.equal((await u.e2b('POST', `/sandboxes/${c.sandboxID}/refreshes`, { duration: 10 })).statusCode, 204);
    assert.equal(await stopAt(), t.clock.now() + 120_000);
    assert.equal((await u.e2b('POST', `/sandboxes/${c.sandboxID}/refreshes`)).statusCode, 204);
    assert.equal(await stopAt(), t.clock.now() + 300_000);
    assertError(await u.e2b('POST', '/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/refreshes', {}), 404, 'not_found');
  });

  it('pause: 204, then 409 (the SDK answers false); 404 unknown; 501 for memory: false; a paused one is 409 for timeouts', async () => {
    const u = await user();
    const other = await user();
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600 })).json();
    const before = await u.balance();
    assertError(
      await u.e2b('POST', `/sandboxes/${c.sandboxID}/pause`, { memory: false }),
      501,
      'unsupported',
      'filesystem-only pauses',
    );
    assertError(await other.e2b('POST', `/sandboxes/${c.sandboxID}/pause`, {}), 404, 'not_found');
    assertError(await u.e2b('POST', '/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/pause', {}), 404, 'not_found');
    assertError(await u.e2b('POST', `/sandboxes/${c.sandboxID}/pause`, { memory: 'no' }), 400, 'validation');
    assert.equal((await t.app.store.getSandbox(c.sandboxID))?.state, 'started', 'refusals change nothing');
    // The SDK sends {memory: undefined}, i.e. {}; no body at all works too.
    const r = await u.e2b('POST', `/sandboxes/${c.sandboxID}/pause`);
    assert.equal(r.statusCode, 204, r.body);
    assert.equal(r.body, '');
    const rec = (await t.app.store.getSandbox(c.sandboxID))!;
    assert.equal(rec.state, 'paused');
    assert.ok((await u.balance()) > before, "the run's unused minutes are refunded, as sandboxd's own pause does");
    assertError(
      await u.e2b('POST', `/sandboxes/${c.sandboxID}/pause`, {}),
      409,
      'conflict',
      `Sandbox ${c.sandboxID} is already paused`,
    );
    for (const [url, body] of [
      [`/sandboxes/${c.sandboxID}/timeout`, { timeout: 60 }],
      [`/sandboxes/${c.sandboxID}/refreshes`, { duration: 60 }],
    ] as const)
      assertError(await u.e2b('POST', url, body), 409, 'conflict', 'is paused: connect (or resume) it first');
    // Still E2B's sandbox: the not-supported calls on it are 501, not 404.
    assertError(await u.e2b('GET', `/sandboxes/${c.sandboxID}/metrics`), 501, 'unsupported');
    // Stopped (sandboxd's own API): gone for E2B.
    await t.req({ method: 'POST', url: `/api/v1/sandboxes/${c.sandboxID}/stop`, key: u.key, payload: {} });
    assertError(await u.e2b('POST', `/sandboxes/${c.sandboxID}/pause`, {}), 404, 'not_found');
  });

  it('pause at the plan maxPaused: 403 quota, nothing frozen', async () => {
    const u = await user();
    const ids: string[] = [];
    for (let i = 0; i < 6; i++)
      ids.push((await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600 })).json().sandboxID);
    for (const id of ids.slice(0, 5)) assert.equal((await u.e2b('POST', `/sandboxes/${id}/pause`)).statusCode, 204);
    assertError(await u.e2b('POST', `/sandboxes/${ids[5]}/pause`), 403, 'quota', 'Paused sandbox limit');
    assert.equal((await t.app.store.getSandbox(ids[5]))?.state, 'started');
    for (const id of ids) await u.e2b('DELETE', `/sandboxes/${id}`);
    assert.deepEqual(await u.own(), [], 'a paused sandbox can be killed');
  });

  it('get and lists show a paused sandbox as paused; the v1 list and x-total-running count running ones only', async () => {
    const u = await user();
    const q = metadataQuery({ suite: 'paused' });
    const a = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', metadata: { suite: 'paused' } })).json();
    t.clock.advance(1_000); // b starts later: newest first is b, a
    const b = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', metadata: { suite: 'paused' } })).json();
    assert.equal((await u.e2b('POST', `/sandboxes/${a.sandboxID}/pause`)).statusCode, 204);
    const rec = (await t.app.store.getSandbox(a.sandboxID))!;
    const got = await u.e2b('GET', `/sandboxes/${a.sandboxID}`);
    assert.equal(got.statusCode, 200, got.body);
    assert.equal(got.json().state, 'paused');
    assert.equal(got.json().endAt, new Date(rec.expiresAt!).toISOString(), 'a paused one ends at its retention');
    assert.deepEqual(got.json().lifecycle, { onTimeout: 'kill', autoResume: false });
    const ids = (r: LightMyRequestResponse) =>
      r.json().map((x: { sandboxID: string; state: string }) => [x.sandboxID, x.state]);
    const paused = await u.e2b('GET', `/v2/sandboxes?${q}&state=paused`);
    assert.deepEqual(ids(paused), [[a.sandboxID, 'paused']]);
    assert.equal(paused.headers['x-total-running'], undefined);
    const both = await u.e2b('GET', `/v2/sandboxes?${q}&state=running,paused`);
    assert.deepEqual(ids(both), [
      [b.sandboxID, 'running'],
      [a.sandboxID, 'paused'],
    ]);
    assert.equal(both.headers['x-total-running'], '1');
    assert.deepEqual(ids(await u.e2b('GET', `/v2/sandboxes?${q}`)), ids(both), 'no state: both');
    assert.deepEqual(ids(await u.e2b('GET', `/v2/sandboxes?${q}&state=running`)), [[b.sandboxID, 'running']]);
    assert.deepEqual(ids(await u.e2b('GET', `/sandboxes?${q}`)), [[b.sandboxID, 'running']]);
    const page = await u.e2b('GET', `/v2/sandboxes?${q}&limit=1`);
    assert.deepEqual(ids(page), [[b.sandboxID, 'running']]);
    const next = await u.e2b('GET', `/v2/sandboxes?${q}&limit=1&nextToken=${page.headers['x-next-token']}`);
    assert.deepEqual(ids(next), [[a.sandboxID, 'paused']], 'pages run over both states');
  });

  it('connect resumes a paused sandbox (201, the requested timeout); a running one is 200 as before', async () => {
    const u = await user();
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600 })).json();
    await u.e2b('POST', `/sandboxes/${c.sandboxID}/pause`);
    t.clock.advance(5_000);
    assertError(
      await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, { memory: false }),
      501,
      'unsupported',
      "onResume: 'reboot'",
    );
    assertError(
      await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, { timeout: 3601 }),
      400,
      'validation',
      'timeoutMs must be at most',
    );
    assert.equal((await t.app.store.getSandbox(c.sandboxID))?.state, 'paused', 'refusals change nothing');
    const r = await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, { timeout: 120 });
    assert.equal(r.statusCode, 201, r.body);
    assert.deepEqual(r.json(), c, 'the same answer as the create');
    let rec = (await t.app.store.getSandbox(c.sandboxID))!;
    assert.equal(rec.state, 'started');
    assert.equal(rec.stopAt, t.clock.now() + 120_000);
    assert.equal(rec.expiresAt ?? null, null);
    const again = await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, { timeout: 60, memory: false });
    assert.equal(again.statusCode, 200, 'running: memory is moot');
    // No timeout: the keep-alive default. v1 connect too.
    await u.e2b('POST', `/sandboxes/${c.sandboxID}/pause`);
    assert.equal((await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`)).statusCode, 201);
    rec = (await t.app.store.getSandbox(c.sandboxID))!;
    assert.equal(rec.stopAt, t.clock.now() + 300_000);
    await u.e2b('POST', `/sandboxes/${c.sandboxID}/pause`);
    assert.equal((await u.e2b('POST', `/sandboxes/${c.sandboxID}/connect`, { timeout: 30 })).statusCode, 201);
    assert.equal((await t.app.store.getSandbox(c.sandboxID))!.stopAt, t.clock.now() + 30_000);
    // Another account's paused sandbox is not there.
    await u.e2b('POST', `/sandboxes/${c.sandboxID}/pause`);
    const other = await user();
    assertError(await other.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, {}), 404, 'not_found');
    // A resume is a new run: 402 without tokens, as sandboxd's own resume.
    const poor = await user({ tokens: 12 });
    const p = (await poor.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600 })).json();
    assert.equal((await poor.e2b('POST', `/sandboxes/${p.sandboxID}/pause`)).statusCode, 204);
    assertError(await poor.e2b('POST', `/v2/sandboxes/${p.sandboxID}/connect`, { timeout: 3600 }), 402, 'tokens');
    assert.equal((await t.app.store.getSandbox(p.sandboxID))?.state, 'paused');
  });

  it('resume (deprecated): 201 for a paused one, 409 for a running one; autoPause only as created', async () => {
    const u = await user();
    const plain = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600 })).json();
    const auto = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600, autoPause: true })).json();
    for (const s of [plain, auto])
      assert.equal((await u.e2b('POST', `/sandboxes/${s.sandboxID}/pause`)).statusCode, 204);
    assertError(
      await u.e2b('POST', `/sandboxes/${plain.sandboxID}/resume`, { autoPause: true }),
      501,
      'unsupported',
      'changing what a sandbox does at its timeout after create',
    );
    assertError(
      await u.e2b('POST', `/sandboxes/${auto.sandboxID}/resume`, { autoPause: false }),
      501,
      'unsupported',
      'autoPause: false on resume',
    );
    assertError(await u.e2b('POST', `/sandboxes/${plain.sandboxID}/resume`, { memory: false }), 501, 'unsupported');
    const r1 = await u.e2b('POST', `/sandboxes/${plain.sandboxID}/resume`, { timeout: 90, autoPause: false });
    assert.equal(r1.statusCode, 201, r1.body);
    assert.deepEqual(r1.json(), plain);
    assert.equal((await t.app.store.getSandbox(plain.sandboxID))!.stopAt, t.clock.now() + 90_000);
    const r2 = await u.e2b('POST', `/sandboxes/${auto.sandboxID}/resume`, { autoPause: true });
    assert.equal(r2.statusCode, 201, r2.body);
    assert.equal((await t.app.store.getSandbox(auto.sandboxID))!.stopAt, t.clock.now() + 300_000);
    assertError(await u.e2b('POST', `/sandboxes/${auto.sandboxID}/resume`, {}), 409, 'conflict', 'already running');
  });

  it('create with autoPause: onTimeout pause; the reaper pauses it at its timeout, connect resumes it', async () => {
    const u = await user();
    const c = (
      await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60, autoPause: true, autoPauseMemory: true })
    ).json();
    const rec = await t.app.store.getSandbox(c.sandboxID);
    assert.equal(rec?.onTimeout, 'pause');
    assert.deepEqual((await u.e2b('GET', `/sandboxes/${c.sandboxID}`)).json().lifecycle, {
      onTimeout: 'pause',
      autoResume: false,
    });
    const own = (await t.req({ method: 'GET', url: `/api/v1/sandboxes/${c.sandboxID}`, key: u.key })).json();
    assert.equal(own.sandbox.onTimeout, 'pause', "sandboxd's own API shows the same");
    // autoPause: false is E2B's default: kill, i.e. sandboxd's stop (gone for E2B).
    const k = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60, autoPause: false })).json();
    assert.equal((await t.app.store.getSandbox(k.sandboxID))?.onTimeout ?? 'stop', 'stop');
    t.clock.advance(61_000);
    await t.app.reaper.tick();
    assert.equal((await u.e2b('GET', `/sandboxes/${c.sandboxID}`)).json().state, 'paused');
    assertError(await u.e2b('GET', `/sandboxes/${k.sandboxID}`), 404, 'not_found');
    const r = await u.e2b('POST', `/v2/sandboxes/${c.sandboxID}/connect`, { timeout: 60 });
    assert.equal(r.statusCode, 201, r.body);
    assert.equal((await t.app.store.getSandbox(c.sandboxID))?.state, 'started');
  });

  it('what sandboxd does not support is 501 saying so (404 first for a sandbox that is not there)', async () => {
    const u = await user();
    const c = (await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 })).json();
    const id = c.sandboxID;
    const ofSandbox: Array<[string, string, unknown?]> = [
      ['POST', `/sandboxes/${id}/snapshots`, { name: 'x' }],
      ['GET', `/sandboxes/${id}/metrics`],
      ['GET', `/sandboxes/${id}/logs`],
      ['GET', `/v2/sandboxes/${id}/logs`],
    ];
    for (const [method, url, body] of ofSandbox) {
      assertError(await u.e2b(method, url, body), 501, 'unsupported', 'sandboxd does not support ');
      assertError(
        await u.e2b(method, url.replace(id, 'sbx_aaaaaaaaaaaaaaaaaaaa'), body),
        404,
        'not_found',
        'not found',
      );
    }
    const apis: Array<[string, string, unknown?]> = [
      ['GET', '/snapshots'],
      ['GET', `/sandboxes/metrics?sandbox_ids=${id}`],
      ['POST', '/templates', {}],
      ['POST', '/v2/templates', {}],
      ['GET', '/v2/templates/x/builds/y'],
      ['GET', '/templates/x/builds/y/logs'],
      ['GET', '/volumes'],
      ['POST', '/volumes', { name: 'v' }],
      ['DELETE', '/volumes/v1'],
    ];
    for (const [method, url, body] of apis)
      assertError(await u.e2b(method, url, body), 501, 'unsupported', 'sandboxd does not support ');
    assertError(await u.e2b('POST', '/templates', {}), 501, 'unsupported', 'legacy builds');
    assertError(await u.e2b('GET', '/nothing-here'), 404, 'not_found');
    assertError(await u.e2b('GET', '/v2/sandboxes/x/nothing'), 404, 'not_found');
    assert.equal((await t.app.store.getSandbox(id))?.state, 'started', 'untouched');
  });

  it("secrets: E2B shapes over the account's secrets; names lower-cased, stable name-derived ids, metadata kept; never a value", async () => {
    const u = await user();
    const other = await user();
    const VALUE = 'sk-e2b-door-VALUE-1234567890';
    const made = await u.e2b('POST', '/secrets', { name: 'OpenAI-Key', value: VALUE, metadata: { team: 'ml' } });
    assert.equal(made.statusCode, 201, made.body);
    const s = made.json();
    assert.deepEqual(s, {
      secretID: 'sec_6f70656e61692d6b6579',
      name: 'openai-key',
      currentVersion: 1,
      metadata: { team: 'ml' },
      createdAt: s.createdAt,
      updatedAt: s.updatedAt,
    });
    // The same secret through sandboxd's own API: its metadata as JSON in the description.
    const own = await t.req({ method: 'GET', url: '/api/v1/secrets/openai-key', key: u.key });
    assert.equal(own.json().secret.description, '{"team":"ml"}');
    assertError(await u.e2b('POST', '/secrets', { name: 'openai-key', value: 'x' }), 409, 'conflict');
    assertError(await u.e2b('POST', '/secrets', { name: 'sec_x', value: 'x' }), 400, 'validation', 'reserves');
    assertError(await u.e2b('POST', '/secrets', { name: 'has space', value: 'x' }), 400, 'validation');
    const badValue = await u.e2b('POST', '/secrets', { name: 'multi', value: `${VALUE}\n` });
    assertError(badValue, 400, 'validation', 'printable ASCII');
    assertError(
      await u.e2b('POST', '/secrets', { name: 'big', value: 'x', metadata: { k: 'v'.repeat(1020) } }),
      400,
      'validation',
      'at most 1024 characters',
    );
    // A secret made through sandboxd's own API, with capitals and a plain description.
    await t.req({
      method: 'POST',
      url: '/api/v1/secrets',
      key: u.key,
      payload: { name: 'GH', value: 'ghp_x', description: 'ci' },
    });
    for (const ref of ['sec_6f70656e61692d6b6579', 'openai-key', 'OPENAI-KEY']) {
      const g = await u.e2b('GET', `/secrets/${ref}`);
      assert.equal(g.statusCode, 200, `${ref}: ${g.body}`);
      assert.equal(g.json().name, 'openai-key');
    }
    assert.deepEqual((await u.e2b('GET', '/secrets/GH')).json().metadata, { description: 'ci' });
    assertError(await other.e2b('GET', `/secrets/${s.secretID}`), 404, 'not_found');
    assertError(await other.e2b('POST', `/secrets/${s.secretID}`, { value: 'stolen' }), 404, 'not_found');
    assertError(await other.e2b('DELETE', '/secrets/openai-key'), 404, 'not_found');
    assert.deepEqual(await (await other.e2b('GET', '/secrets')).json(), [], "another account's list is its own");
    assert.equal(
      (await u.e2b('GET', '/secrets/openai-key')).json().currentVersion,
      1,
      'untouched by the other account',
    );
    assertError(await u.e2b('GET', '/secrets/nope'), 404, 'not_found');

    const list = await u.e2b('GET', '/secrets?limit=1');
    assert.equal(list.statusCode, 200, list.body);
    assert.deepEqual(
      list.json().map((x: { name: string }) => x.name),
      ['GH'],
    );
    const next = String(list.headers['x-next-token']);
    const rest = await u.e2b('GET', `/secrets?limit=1&nextToken=${next}`);
    assert.deepEqual(
      rest.json().map((x: { name: string }) => x.name),
      ['openai-key'],
    );
    assert.equal(rest.headers['x-next-token'], undefined);
    assertError(await u.e2b('GET', '/secrets?limit=0'), 400, 'validation', 'limit');

    const up = await u.e2b('POST', `/secrets/${s.secretID}`, { value: `${VALUE}-2`, metadata: { team: 'infra' } });
    assert.equal(up.statusCode, 200, up.body);
    assert.equal(up.json().currentVersion, 2);
    assert.deepEqual(up.json().metadata, { team: 'infra' });
    const kept = await u.e2b('POST', '/secrets/openai-key', { value: `${VALUE}-3` });
    assert.deepEqual(kept.json().metadata, { team: 'infra' }, 'metadata kept when not given');
    assertError(await u.e2b('POST', '/secrets/nope', { value: 'x' }), 404, 'not_found');
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/secrets/nope', key: u.key })).statusCode,
      404,
      'no create',
    );

    const gone = await u.e2b('DELETE', `/secrets/${s.secretID}`);
    assert.equal(gone.statusCode, 204);
    assertError(await u.e2b('DELETE', `/secrets/${s.secretID}`), 404, 'not_found');
    for (const r of [made, list, rest, up, kept, badValue]) assert.ok(!r.body.includes(VALUE), r.body);
  });

  it('network.rules: header transforms holding an e2b.secrets reference become injection rules on create and on the network update', async () => {
    const u = await user();
    const ref = (n: string) => ['$', '{e2b.secrets.', n, '}'].join('');
    await u.e2b('POST', '/secrets', { name: 'openai', value: 'sk-1' });
    await t.req({ method: 'POST', url: '/api/v1/secrets', key: u.key, payload: { name: 'GH', value: 'ghp-1' } });
    const c = await u.e2b('POST', '/v2/sandboxes', {
      templateID: 'base',
      timeout: 60,
      network: {
        denyOut: ['0.0.0.0/0'],
        allowOut: ['api.openai.com', 'api.github.com'],
        rules: {
          'API.openai.com': [{ transform: { headers: { Authorization: `Bearer ${ref('OPENAI')}` } } }],
          'api.github.com': [{ transform: { headers: { Authorization: `token ${ref('GH')}` } } }],
        },
      },
    });
    assert.equal(c.statusCode, 201, c.body);
    const id = c.json().sandboxID;
    const rec = await t.app.store.getSandbox(id);
    assert.deepEqual(
      rec?.network?.secrets?.map(({ placeholder, ...r }) => r),
      [
        { secret: 'openai', domains: ['api.openai.com'], header: 'Authorization', format: 'Bearer {value}' },
        { secret: 'GH', domains: ['api.github.com'], header: 'Authorization', format: 'token {value}' },
      ],
    );
    assert.match(rec?.env.openai ?? '', /^sbx-secret-[0-9a-f]{24}$/);
    const info = (await u.e2b('GET', `/sandboxes/${id}`)).json();
    assert.deepEqual(info.network, {
      allowOut: ['api.openai.com', 'api.github.com'],
      denyOut: ['0.0.0.0/0'],
      rules: {
        'api.openai.com': [{ transform: { headers: { Authorization: `Bearer ${ref('openai')}` } } }],
        'api.github.com': [{ transform: { headers: { Authorization: `token ${ref('GH')}` } } }],
      },
      allowPublicTraffic: true,
    });

    // The update replaces both (omitted: cleared).
    const put = await u.e2b('PUT', `/sandboxes/${id}/network`, {
      denyOut: ['0.0.0.0/0'],
      allowOut: ['api.openai.com'],
      rules: { 'api.openai.com': [{ transform: { headers: { 'X-Api-Key': ref('openai') } } }] },
    });
    assert.equal(put.statusCode, 204, put.body);
    const after = await t.app.store.getSandbox(id);
    assert.deepEqual(after?.network?.egress, { allow: ['api.openai.com'] });
    assert.deepEqual(
      after?.network?.secrets?.map((r) => [r.secret, r.header, r.format]),
      [['openai', 'X-Api-Key', '{value}']],
    );
    assert.equal(after?.network?.secrets?.[0].placeholder, rec?.network?.secrets?.[0].placeholder, 'placeholder kept');
    assert.equal((await u.e2b('PUT', `/sandboxes/${id}/network`, { allow_internet_access: false })).statusCode, 204);
    const cleared = await t.app.store.getSandbox(id);
    assert.deepEqual(cleared?.network, { egress: 'none' });

    // Refusals: a fixed header, two references, an unknown secret, a domain the egress denies.
    const bad: Array<[unknown, number, string, string]> = [
      [
        { 'a.example.com': [{ transform: { headers: { 'X-Fixed': 'plain' } } }] },
        400,
        'validation',
        'sandboxd injects secrets only',
      ],
      [
        { 'a.example.com': [{ transform: { headers: { H: `${ref('openai')}${ref('GH')}` } } }] },
        400,
        'validation',
        'more than one',
      ],
      [{ 'a.example.com': [{ transform: { headers: { H: ref('missing') } } }] }, 400, 'validation', 'missing'],
      [{ 'b.example.com': [{ transform: { headers: { H: ref('openai') } } }] }, 400, 'validation', 'b.example.com'],
    ];
    for (const [rules, status, kind, text] of bad) {
      const body = { denyOut: ['0.0.0.0/0'], allowOut: ['a.example.com'], rules };
      assertError(await u.e2b('PUT', `/sandboxes/${id}/network`, body), status, kind, text);
      assertError(await u.e2b('POST', '/v2/sandboxes', { templateID: 'base', network: body }), status, kind, text);
    }
    assertError(
      await u.e2b('PUT', `/sandboxes/${id}/network`, { egressProxy: { address: 'p:1080' } }),
      501,
      'unsupported',
      'egress proxies',
    );
    assertError(await u.e2b('PUT', '/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/network', {}), 404, 'not_found');
    const other = await user();
    assertError(await other.e2b('PUT', `/sandboxes/${id}/network`, {}), 404, 'not_found');
    assert.deepEqual((await t.app.store.getSandbox(id))?.network, { egress: 'none' }, 'refusals change nothing');
    assert.equal((await u.own()).length, 1, 'refused creates make nothing');
  });

  it('needs credentials: none or a bad key is 401; Bearer works like X-API-Key', async () => {
    const u = await user();
    const none = await t.req({ method: 'GET', url: '/e2b/v2/sandboxes', key: null });
    assertError(none, 401, 'unauthorized');
    const bad = await t.req({
      method: 'GET',
      url: '/e2b/v2/sandboxes',
      key: null,
      headers: { 'x-api-key': 'e2b_123' },
    });
    assertError(bad, 401, 'unauthorized');
    assertError(await t.req({ method: 'GET', url: '/e2b/templates', key: null }), 401, 'unauthorized');
    const bearer = await t.req({ method: 'GET', url: '/e2b/v2/sandboxes', key: u.key });
    assert.equal(bearer.statusCode, 200);
  });

  it("is not in sandboxd's own OpenAPI document", async () => {
    const doc = (await t.req({ method: 'GET', url: '/api/v1/openapi.json' })).json();
    const paths = Object.keys(doc.paths);
    assert.ok(paths.length > 20);
    assert.deepEqual(
      paths.filter((p) => p.startsWith('/e2b')),
      [],
    );
  });
});
