import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import { PublicHosts, validPort } from './host.js';
import { ProxyError } from './reply.js';

const ID = `sbx_${'a'.repeat(20)}`;
const req = (...hosts: string[]) =>
  ({ headers: { host: hosts[0] }, rawHeaders: hosts.flatMap((h) => ['Host', h]) }) as unknown as IncomingMessage;
const status = (h: PublicHosts, r: IncomingMessage) => {
  try {
    h.parse(r);
    return 200;
  } catch (e) {
    assert.ok(e instanceof ProxyError);
    return e.status;
  }
};

describe('PublicHosts', () => {
  const hosts = new PublicHosts('sandbox.localhost:8080');

  it('claims *.publicHost only, whatever the case, port or one trailing dot', () => {
    for (const h of [
      `8000-${ID}.sandbox.localhost:8080`,
      `8000-${ID}.SANDBOX.localhost`,
      `x.sandbox.localhost.:1`,
      'junk@x.sandbox.localhost',
    ]) {
      assert.equal(hosts.claims(req(h)), true, h);
    }
    for (const h of [
      'sandbox.localhost:8080',
      '.sandbox.localhost',
      '127.0.0.1:8080',
      'localhost',
      'evilsandbox.localhost',
      `8000-${ID}.sandbox.localhost.evil`,
      '[::1]:8080',
      '',
    ]) {
      assert.equal(hosts.claims(req(h)), false, h);
    }
  });

  it('names <label>.publicHost exactly, whatever the case, port or one trailing dot', () => {
    for (const h of ['api.sandbox.localhost:8080', 'API.Sandbox.localhost', 'api.sandbox.localhost.:1'])
      assert.equal(hosts.names(req(h), 'api'), true, h);
    for (const h of ['sandbox.localhost', 'x.api.sandbox.localhost', 'api.sandbox.localhost.evil', 'api', ''])
      assert.equal(hosts.names(req(h), 'api'), false, h);
  });

  it('parses <port>-<sandboxId> and nothing else', () => {
    assert.deepEqual(hosts.parse(req(`8000-${ID}.sandbox.localhost:8080`)), { sandboxId: ID, port: 8000 });
    assert.deepEqual(hosts.parse(req(`1-${ID.toUpperCase()}.Sandbox.Localhost.`)), { sandboxId: ID, port: 1 });
    assert.deepEqual(
      hosts.parse(req(`65535-${ID}.sandbox.localhost:9999`)),
      { sandboxId: ID, port: 65535 },
      'the Host port is not checked against publicHost',
    );
    const cases: Array<[string, number]> = [
      [`0-${ID}.sandbox.localhost:8080`, 400],
      [`65536-${ID}.sandbox.localhost`, 400],
      [`08000-${ID}.sandbox.localhost`, 400],
      [`-1-${ID}.sandbox.localhost`, 400],
      [`8000-${ID}.sandbox.localhost:8080:22`, 400],
      [`8000-${ID}.sandbox.localhost:0`, 400],
      [`8000-${ID}.sandbox.localhost:99999`, 400],
      [`8000-${ID}.x.sandbox.localhost`, 400],
      [`${ID}.sandbox.localhost`, 400],
      [`8000-${ID}-x.sandbox.localhost`, 400],
      [`8000-${ID}%2e.sandbox.localhost`, 400],
      [`8000-10.0.0.1.sandbox.localhost`, 400],
      [`8000-sbx_short.sandbox.localhost`, 404],
      [`8000-sbx_${'1'.repeat(20)}.sandbox.localhost`, 404],
      [`8000-root.sandbox.localhost`, 404],
    ];
    for (const [h, want] of cases) assert.equal(status(hosts, req(h)), want, h);
    assert.equal(status(hosts, req(`8000-${ID}.sandbox.localhost`, '127.0.0.1')), 400, 'two Host headers');
  });

  it('a publicHost without a port accepts any Host port', () => {
    const h = new PublicHosts('sbx.example.com');
    assert.deepEqual(h.parse(req(`80-${ID}.sbx.example.com`)), { sandboxId: ID, port: 80 });
    assert.deepEqual(h.parse(req(`80-${ID}.sbx.example.com:443`)), { sandboxId: ID, port: 80 });
    assert.equal(h.claims(req(`80-${ID}.sandbox.localhost`)), false);
  });

  it('validPort: canonical 1..65535', () => {
    assert.deepEqual(['1', '80', '65535'].map(validPort), [true, true, true]);
    assert.deepEqual(['0', '65536', '080', '+80', '8e3', '', '1 '].map(validPort), [
      false,
      false,
      false,
      false,
      false,
      false,
      false,
    ]);
  });
});
