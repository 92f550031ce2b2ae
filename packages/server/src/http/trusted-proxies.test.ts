import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { DEFAULT_RATE_LIMITS, loadConfig } from '../config.js';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { upstreamHeaders } from '../proxy/headers.js';
import { parseTrustedProxies, TrustedProxies } from './trusted-proxies.js';

describe('SANDBOXD_TRUSTED_PROXIES: parsing and matching', () => {
  it('takes addresses and CIDR ranges, IPv4 and IPv6; none by default', () => {
    assert.deepEqual(parseTrustedProxies('127.0.0.1, 10.0.0.0/8,::1,fd00::/8'), [
      '127.0.0.1',
      '10.0.0.0/8',
      '::1',
      'fd00::/8',
    ]);
    assert.deepEqual(parseTrustedProxies(''), []);
    assert.deepEqual(parseTrustedProxies('none'), []);
    assert.deepEqual(loadConfig({}).trustedProxies, []);
    assert.deepEqual(loadConfig({ SANDBOXD_TRUSTED_PROXIES: '192.0.2.1,198.51.100.0/24' }).trustedProxies, [
      '192.0.2.1',
      '198.51.100.0/24',
    ]);
  });

  it('refuses anything else, naming the entry and the setting', () => {
    for (const bad of ['localhost', '10.0.0.0/33', '::1/129', '10.0.0.1/8/1', '10.0.0', '*', '10.0.0.0/x'])
      assert.throws(
        () => loadConfig({ SANDBOXD_TRUSTED_PROXIES: `127.0.0.1,${bad}` }),
        (e: Error) => e.message.includes('SANDBOXD_TRUSTED_PROXIES') && e.message.includes(`"${bad}"`),
        bad,
      );
  });

  it('matches peers, IPv4-mapped ones too; an empty list trusts no one', () => {
    const t = new TrustedProxies(['10.1.0.0/16', '192.0.2.7', 'fd00::/8']);
    for (const a of ['10.1.2.3', '::ffff:10.1.255.255', '192.0.2.7', 'fd00::1']) assert.equal(t.trusts(a), true, a);
    for (const a of ['10.2.0.1', '192.0.2.8', '::1', 'fe80::1', '', undefined, 'garbage'])
      assert.equal(t.trusts(a), false, String(a));
    const none = new TrustedProxies([]);
    assert.equal(none.trusts('127.0.0.1'), false);
    assert.equal(none.fastifyOption(), false);
  });
});

/** Login attempts from `peer` with `headers`; the per-address failure limit is 2. */
async function app(trustedProxies: string[]): Promise<TestApp> {
  const t = await makeTestApp({
    signupEnabled: true,
    trustedProxies,
    rateLimit: { ...DEFAULT_RATE_LIMITS, ipPerSec: 10_000, ipBurst: 10_000, loginFailuresPerIp: 2 },
  });
  await t.req({
    method: 'POST',
    url: '/api/v1/admin/accounts',
    payload: { email: 'who@example.com', password: 'rightpassword' },
  });
  return t;
}
const wrong = (t: TestApp, remoteAddress: string, headers: Record<string, string>, email: string) =>
  t.req({
    method: 'POST',
    url: '/api/v1/auth/login',
    key: null,
    remoteAddress,
    headers,
    payload: { email, password: 'wrongpassword' },
  });
const login = (t: TestApp, remoteAddress: string, headers: Record<string, string>) =>
  t.req({
    method: 'POST',
    url: '/api/v1/auth/login',
    key: null,
    remoteAddress,
    headers,
    payload: { email: 'who@example.com', password: 'rightpassword' },
  });

describe('forwarding headers from an untrusted peer change nothing (default: no trusted proxy)', () => {
  let t: TestApp;
  before(async () => {
    t = await app([]);
  });
  after(() => t.close());

  it('a spoofed X-Forwarded-For does not escape the per-address login limit', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 4; i++)
      codes.push((await wrong(t, '203.0.113.5', { 'x-forwarded-for': `198.51.100.${i}` }, `u${i}@x.test`)).statusCode);
    assert.deepEqual(codes, [401, 401, 429, 429], 'the third try from one peer is throttled, whatever it claims');
  });

  it('a spoofed X-Forwarded-Proto: https gets the plain-HTTP cookie (no Secure, no __Host-)', async () => {
    const r = await login(t, '203.0.113.9', { 'x-forwarded-proto': 'https' });
    assert.equal(r.statusCode, 200, r.body);
    const cookie = String(r.headers['set-cookie']);
    assert.match(cookie, /^sandboxd_session=/);
    assert.doesNotMatch(cookie, /Secure/);
  });
});

describe('forwarding headers from a trusted proxy set the client address and scheme', () => {
  let t: TestApp;
  before(async () => {
    t = await app(['10.0.0.0/24']);
  });
  after(() => t.close());

  it('each client behind the proxy has its own limit; the proxy itself is not the client', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 4; i++)
      codes.push((await wrong(t, '10.0.0.2', { 'x-forwarded-for': `198.51.100.${i}` }, `v${i}@x.test`)).statusCode);
    assert.deepEqual(codes, [401, 401, 401, 401], 'four clients, one try each');
    const same: number[] = [];
    for (let i = 0; i < 3; i++)
      same.push((await wrong(t, '10.0.0.3', { 'x-forwarded-for': '192.0.2.50, 10.0.0.9' }, `w${i}@x.test`)).statusCode);
    assert.deepEqual(same, [401, 401, 429], 'one client through two trusted hops: its own limit');
    const spoof: number[] = [];
    for (let i = 0; i < 3; i++)
      spoof.push(
        (await wrong(t, '10.0.0.2', { 'x-forwarded-for': `203.0.113.${i}, 192.0.2.60` }, `z${i}@x.test`)).statusCode,
      );
    assert.deepEqual(spoof, [401, 401, 429], 'what a client prepends left of the proxy-added address is not believed');
  });

  it('X-Forwarded-Proto: https from the proxy gets the Secure __Host- cookie; from another peer it does not', async () => {
    const viaProxy = await login(t, '10.0.0.2', { 'x-forwarded-proto': 'https' });
    assert.match(String(viaProxy.headers['set-cookie']), /^__Host-sandboxd_session=.*; Secure/);
    const direct = await login(t, '10.0.1.2', { 'x-forwarded-proto': 'https' });
    assert.match(String(direct.headers['set-cookie']), /^sandboxd_session=/);
  });
});

describe('the port proxy: X-Forwarded-Proto to the sandbox and the link cookie', () => {
  /** A raw request from `peer` with headers `h` (name, value, ...). */
  const raw = (peer: string, h: string[], encrypted = false) =>
    ({
      socket: { remoteAddress: peer, encrypted },
      rawHeaders: h,
      headers: Object.fromEntries(
        Array.from({ length: h.length / 2 }, (_, i) => [h[2 * i].toLowerCase(), h[2 * i + 1]]),
      ),
    }) as unknown as IncomingMessage;
  const sent = (req: IncomingMessage, trusted: TrustedProxies) => {
    const out = upstreamHeaders(req, { upgrade: false, trusted });
    const m: Record<string, string> = {};
    for (let i = 0; i < out.length; i += 2) m[out[i]] = out[i + 1];
    return m;
  };
  const proxy = new TrustedProxies(['10.0.0.2']);

  it("a trusted proxy's scheme reaches the sandbox; another peer's claim does not", () => {
    const h = ['Host', '8000-sbx_a.sbx.example.com', 'X-Forwarded-Proto', 'https', 'X-Forwarded-For', '198.51.100.1'];
    assert.equal(sent(raw('10.0.0.2', h), proxy)['X-Forwarded-Proto'], 'https');
    assert.equal(sent(raw('::ffff:10.0.0.2', h), proxy)['X-Forwarded-Proto'], 'https');
    assert.equal(sent(raw('203.0.113.9', h), proxy)['X-Forwarded-Proto'], 'http');
    assert.equal(sent(raw('10.0.0.2', h), new TrustedProxies([]))['X-Forwarded-Proto'], 'http');
    assert.equal(sent(raw('203.0.113.9', h, true), proxy)['X-Forwarded-Proto'], 'https', 'TLS at sandboxd');
    const odd = ['Host', 'h', 'X-Forwarded-Proto', 'gopher'];
    assert.equal(sent(raw('10.0.0.2', odd), proxy)['X-Forwarded-Proto'], 'http');
    const chain = ['Host', 'h', 'X-Forwarded-Proto', 'https, http'];
    assert.equal(proxy.proto(raw('10.0.0.2', chain)), 'http', 'the last value: what the nearest proxy saw');
    assert.equal(sent(raw('10.0.0.2', h), proxy)['X-Forwarded-For'], '198.51.100.1, 10.0.0.2');
  });
});
