import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { get, IDS, startFixture, type Fixture } from '../../test/proxy.js';
import { cookieForHostOnly, hostCookiesOnly } from './set-cookie.js';

describe('cookies a sandbox may set through the port proxy', () => {
  const host = '8000-sbx_a.sandbox.localhost';

  it('its own host only: no Domain, or Domain naming that host exactly', () => {
    for (const ok of ['a=1', 'a=1; Path=/; HttpOnly', `a=1; Domain=${host}`, `a=1; domain=.${host.toUpperCase()}.`])
      assert.equal(cookieForHostOnly(ok, host), true, ok);
    for (const bad of [
      'a=1; Domain=sandbox.localhost',
      'a=1; Domain=.sandbox.localhost; Path=/',
      'a=1; Domain=localhost',
      `a=1; Domain=${host}; Domain=sandbox.localhost`,
      'a=1; Domain=9000-sbx_b.sandbox.localhost',
      'a=1;domain=example.com',
    ])
      assert.equal(cookieForHostOnly(bad, host), false, bad);
  });

  it("never this server's own cookie names, in any prefix or case, even for its own host", () => {
    for (const bad of [
      'sandboxd_session=x',
      '__Host-sandboxd_session=x; Path=/; Secure',
      '__Secure-sandboxd_session=x; Secure',
      'SANDBOXD_SESSION=x',
      ' sandboxd_token=x; Path=/',
    ])
      assert.equal(cookieForHostOnly(bad, host), false, bad);
    assert.equal(cookieForHostOnly('sandboxd_session_app=x', host), true, 'a name that only starts alike');
  });

  it('drops those headers from a header list, keeps the others in order', () => {
    assert.deepEqual(
      hostCookiesOnly(
        ['Set-Cookie', 'a=1', 'X-A', '1', 'set-cookie', 'b=2; Domain=sandbox.localhost', 'Set-Cookie', 'c=3'],
        `${host}:8080`,
      ),
      ['Set-Cookie', 'a=1', 'X-A', '1', 'Set-Cookie', 'c=3'],
    );
  });

  describe('through the proxy (127.0.0.1 stands in for the sandbox)', () => {
    let f: Fixture;
    let app: Server;
    let appPort: number;
    before(async () => {
      f = await startFixture();
      app = createServer((req, res) => {
        res.writeHead(
          200,
          [
            ['Set-Cookie', 'app=1; Path=/'],
            ['Set-Cookie', 'tossed=1; Domain=sandbox.localhost; Path=/'],
            ['Set-Cookie', 'sandboxd_session=planted; Path=/'],
            ['Set-Cookie', 'sandboxd_session=planted; Domain=sandbox.localhost; Path=/api'],
            ['Set-Cookie', `own=1; Domain=${String(req.headers.host).split(':')[0]}`],
          ].flat(),
        );
        res.end('ok');
      });
      await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
      appPort = (app.address() as AddressInfo).port;
    });
    after(async () => {
      await new Promise((r) => app.close(r));
      await f.close();
    });

    it("a sandbox's answer sets cookies for its own port host only", async () => {
      const r = await get(f.port, f.host(IDS.pub, appPort));
      assert.equal(r.status, 200);
      assert.deepEqual(r.headers['set-cookie'], [
        'app=1; Path=/',
        `own=1; Domain=${f.host(IDS.pub, appPort).split(':')[0]}`,
      ]);
    });
  });
});
