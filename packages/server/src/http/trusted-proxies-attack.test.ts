/**
 * Attacks on the trusted-proxy setting (docs/security.md, "Operator surfaces"): the client
 * address fastify derives through {@link TrustedProxies.fastifyOption} (what rate limits and
 * the access log key on) for IPv4-mapped peers, malformed and very long `X-Forwarded-For`
 * chains; and what the port proxy tells a sandbox when an untrusted peer sends forwarding
 * headers of its own.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { after, before, describe, it } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { upstreamHeaders } from '../proxy/headers.js';
import { parseTrustedProxies, TrustedProxies } from './trusted-proxies.js';

describe("the client address fastify derives (req.ip, req.protocol) with the proxy's trust function", () => {
  let app: FastifyInstance;
  before(async () => {
    app = Fastify({ trustProxy: new TrustedProxies(['10.0.0.0/24', 'fd00::/64']).fastifyOption() });
    app.get('/ip', async (req) => ({ ip: req.ip, protocol: req.protocol }));
    await app.ready();
  });
  after(() => app.close());
  const ask = async (remoteAddress: string, headers: Record<string, string>) =>
    (await app.inject({ url: '/ip', remoteAddress, headers })).json() as { ip: string; protocol: string };

  it('an untrusted peer, IPv4-mapped or IPv6, is the client whatever it sends', async () => {
    const spoof = { 'x-forwarded-for': '10.0.0.9, 192.0.2.1', 'x-forwarded-proto': 'https' };
    assert.deepEqual(await ask('203.0.113.9', spoof), { ip: '203.0.113.9', protocol: 'http' });
    assert.deepEqual(await ask('::ffff:203.0.113.9', spoof), { ip: '::ffff:203.0.113.9', protocol: 'http' });
    assert.deepEqual(await ask('fd00:0:0:1::5', spoof), { ip: 'fd00:0:0:1::5', protocol: 'http' }, 'outside the /64');
    assert.deepEqual(
      await ask('::ffff:10.0.1.2', spoof),
      { ip: '::ffff:10.0.1.2', protocol: 'http' },
      'outside the /24',
    );
  });

  it('a trusted peer, plain, IPv4-mapped or IPv6: the first untrusted address from the right', async () => {
    const h = { 'x-forwarded-for': '10.0.0.77, 198.51.100.4, 10.0.0.3', 'x-forwarded-proto': 'https' };
    for (const peer of ['10.0.0.2', '::ffff:10.0.0.2', 'fd00::2'])
      assert.deepEqual(await ask(peer, h), { ip: '198.51.100.4', protocol: 'https' }, peer);
    // An IPv4-mapped address inside the chain is matched as the IPv4 one it is.
    assert.equal((await ask('10.0.0.2', { 'x-forwarded-for': '198.51.100.4, ::ffff:10.0.0.3' })).ip, '198.51.100.4');
  });

  it('malformed entries stop the walk: they are never skipped to reach an address further left', async () => {
    for (const xff of ['198.51.100.4, garbage', '198.51.100.4, [10.0.0.3]', '198.51.100.4, 10.0.0.3:80'])
      assert.notEqual((await ask('10.0.0.2', { 'x-forwarded-for': xff })).ip, '198.51.100.4', xff);
  });

  it('a chain as long as a header may be (thousands of entries) is answered, the right address found', async () => {
    const xff = `${Array.from({ length: 1500 }, (_, i) => `192.0.2.${i % 250}`).join(',')}, 198.51.100.4, 10.0.0.3`;
    assert.ok(xff.length > 15_000);
    assert.equal((await ask('10.0.0.2', { 'x-forwarded-for': xff })).ip, '198.51.100.4');
  });
});

describe('the port proxy: forwarding headers an untrusted peer sends reach the sandbox only left of its own address', () => {
  const raw = (peer: string, h: string[]) =>
    ({
      socket: { remoteAddress: peer, encrypted: false },
      rawHeaders: h,
      headers: Object.fromEntries(
        Array.from({ length: h.length / 2 }, (_, i) => [h[2 * i].toLowerCase(), h[2 * i + 1]]),
      ),
    }) as unknown as IncomingMessage;
  const sent = (req: IncomingMessage, trusted: TrustedProxies) => {
    const out = upstreamHeaders(req, { upgrade: false, trusted });
    const all: Array<[string, string]> = [];
    for (let i = 0; i < out.length; i += 2) all.push([out[i].toLowerCase(), out[i + 1]]);
    return all;
  };

  it('one X-Forwarded-For/-Proto/-Host each; the rightmost address is the peer; Proto and Host are replaced', () => {
    const h = [
      'Host',
      '8000-sbx_a.sbx.example.com',
      'X-Forwarded-For',
      '127.0.0.1',
      'x-forwarded-for',
      '10.0.0.2, 127.0.0.1',
      'X-Forwarded-Proto',
      'https',
      'X-Forwarded-Host',
      'admin.internal',
    ];
    const got = sent(raw('::ffff:203.0.113.9', h), new TrustedProxies(['10.0.0.2']));
    const of = (name: string) => got.filter(([k]) => k === name).map(([, v]) => v);
    assert.deepEqual(of('x-forwarded-for'), ['127.0.0.1, 10.0.0.2, 127.0.0.1, 203.0.113.9']);
    assert.equal(of('x-forwarded-for')[0].split(', ').at(-1), '203.0.113.9');
    assert.deepEqual(of('x-forwarded-proto'), ['http']);
    assert.deepEqual(of('x-forwarded-host'), ['8000-sbx_a.sbx.example.com']);
  });
});

describe('a /0 range (the guide warns against it)', () => {
  it('is accepted as written and then trusts every peer: the operator chose that every client picks its address', () => {
    const all = new TrustedProxies(parseTrustedProxies('0.0.0.0/0, ::/0'));
    for (const a of ['203.0.113.9', '::ffff:203.0.113.9', '2001:db8::1']) assert.equal(all.trusts(a), true, a);
  });
});
