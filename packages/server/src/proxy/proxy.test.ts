import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { get, IDS, OTHER_KEY, OWNER_KEY, rawRequest, startFixture, type Fixture } from '../../test/proxy.js';

describe('port proxy: HTTP (127.0.0.1 stands in for the sandbox)', () => {
  let f: Fixture;
  before(async () => (f = await startFixture()));
  after(() => f.close());

  it('forwards by Host, keeps Host, adds X-Forwarded-*, drops hop-by-hop and proxy credentials', async () => {
    const r = await get(f.port, f.host(IDS.pub), {
      path: '/echo?q=1',
      headers: {
        'x-forwarded-for': '203.0.113.9',
        'x-forwarded-proto': 'https',
        'x-sandboxd-key': OWNER_KEY,
        connection: 'keep-alive, x-drop-me',
        'x-drop-me': '1',
        cookie: 'app=1; sandboxd_token=secret; other=2',
        authorization: 'Bearer app-own',
      },
    });
    assert.equal(r.status, 200);
    const echo = JSON.parse(r.body);
    assert.equal(echo.url, '/echo?q=1');
    assert.equal(echo.headers.host, f.host(IDS.pub));
    assert.equal(echo.headers['x-forwarded-for'], '203.0.113.9, 127.0.0.1');
    assert.equal(echo.headers['x-forwarded-proto'], 'http');
    assert.equal(echo.headers['x-forwarded-host'], f.host(IDS.pub));
    assert.equal(echo.headers['x-sandboxd-key'], undefined);
    assert.equal(echo.headers['x-drop-me'], undefined);
    assert.equal(echo.headers.cookie, 'app=1; other=2');
    assert.equal(echo.headers.authorization, 'Bearer app-own', "the app's own auth passes through");
  });

  it('every method, status, reason and repeated response header pass through', async () => {
    for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
      const r = await get(f.port, f.host(IDS.pub), { method, path: '/echo', body: method === 'GET' ? undefined : 'x' });
      assert.equal(JSON.parse(r.body).method, method);
    }
    const head = await get(f.port, f.host(IDS.pub), { method: 'HEAD', path: '/echo' });
    assert.equal(head.status, 200);
    assert.equal(head.body, '');
    const c = await get(f.port, f.host(IDS.pub), { path: '/cookies' });
    assert.equal(c.status, 201);
    assert.deepEqual(c.headers['set-cookie'], ['a=1', 'b=2']);
    assert.equal(c.headers['x-custom'], undefined, 'a header named in Connection is hop-by-hop');
  });

  it('streams a request body through (chunked, 24 MiB) and a response body back (64 MiB)', async () => {
    const chunk = Buffer.alloc(1024 * 1024, 7);
    const want = createHash('sha256');
    const up = await new Promise<string>((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: f.port, method: 'POST', path: '/upload', headers: { host: f.host(IDS.pub) } },
        (res) => {
          let b = '';
          res.on('data', (c) => (b += c));
          res.on('end', () => resolve(b));
        },
      );
      req.on('error', reject);
      let i = 0;
      const pump = () => {
        while (i < 24) {
          i++;
          want.update(chunk);
          if (!req.write(chunk)) return void req.once('drain', pump);
        }
        req.end();
      };
      pump();
    });
    assert.deepEqual(JSON.parse(up), { bytes: 24 * chunk.length, sha256: want.digest('hex') });

    const total = 64 * 1024 * 1024;
    const got = await new Promise<number>((resolve, reject) => {
      request(
        { host: '127.0.0.1', port: f.port, path: `/download?bytes=${total}`, headers: { host: f.host(IDS.pub) } },
        (res) => {
          let n = 0;
          res.on('data', (c: Buffer) => (n += c.length));
          res.on('end', () => resolve(n));
          res.on('error', reject);
        },
      )
        .on('error', reject)
        .end();
    });
    assert.equal(got, total);
  });

  it('server-sent events arrive one by one, before the stream ends', async () => {
    const events: string[] = [];
    await new Promise<void>((resolve, reject) => {
      request(
        {
          host: '127.0.0.1',
          port: f.port,
          path: '/sse',
          headers: { host: f.host(IDS.pub), accept: 'text/event-stream' },
        },
        (res) => {
          assert.equal(res.headers['content-type'], 'text/event-stream');
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            events.push(c);
            if (events.length === 1) f.releaseSse(); // the first event came while the sandbox still holds the stream
          });
          res.on('end', () => resolve());
        },
      )
        .on('error', reject)
        .end();
    });
    assert.deepEqual(events.join('').split('\n\n').filter(Boolean), ['data: one', 'data: two']);
    assert.equal(events[0], 'data: one\n\n');
  });

  it('errors: 404 unknown and stopped, 400 port out of range, 502 nothing listening; JSON or an HTML page', async () => {
    for (const id of [IDS.unknown, IDS.stopped, 'sbx_nope', 'notasandbox']) {
      const r = await get(f.port, f.host(id));
      assert.equal(r.status, 404, id);
      assert.equal(JSON.parse(r.body).code, 404);
    }
    for (const p of [0, 65536, 99999, 1234567]) {
      const r = await get(f.port, f.host(IDS.pub, p));
      assert.equal(r.status, 400, String(p));
      assert.deepEqual(Object.keys(JSON.parse(r.body)).sort(), ['code', 'details', 'kind', 'message']);
    }
    const refused = await get(f.port, f.host(IDS.pub, f.closedPort));
    assert.equal(refused.status, 502);
    const body = JSON.parse(refused.body);
    assert.equal(body.message, `Nothing is listening on port ${f.closedPort} of sandbox ${IDS.pub}`);
    assert.deepEqual(body.details, { sandboxId: IDS.pub, port: f.closedPort, reason: 'ECONNREFUSED' });
    const page = await get(f.port, f.host(IDS.pub, f.closedPort), {
      headers: { accept: 'text/html,application/xhtml+xml' },
    });
    assert.equal(page.status, 502);
    assert.match(String(page.headers['content-type']), /^text\/html/);
    assert.match(page.body, /<h1>502 Bad Gateway<\/h1>/);
    assert.match(page.body, new RegExp(`Nothing is listening on port ${f.closedPort}`));
  });

  it('escape attempts never reach anything but the sandbox address, and most never leave the proxy', async () => {
    const before = f.seen.length;
    const pub = f.host(IDS.pub);
    const attempts: Array<[string, number | 'api']> = [
      [`GET / HTTP/1.1\r\nHost: 127.0.0.1:${f.upPort}\r\n\r\n`, 'api'],
      [`GET / HTTP/1.1\r\nHost: localhost:${f.upPort}\r\n\r\n`, 'api'],
      [`GET http://127.0.0.1:${f.upPort}/ HTTP/1.1\r\nHost: ${pub}\r\n\r\n`, 400],
      [`GET http://${pub}/ HTTP/1.1\r\nHost: ${pub}\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${pub}:22\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${f.upPort}-127.0.0.1.sandbox.localhost:8080\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${f.upPort}-${IDS.pub}.127.0.0.1.sandbox.localhost\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: user@${pub}\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${pub}\r\nHost: 127.0.0.1\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: 0${f.upPort}-${IDS.pub}.sandbox.localhost:8080\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${f.upPort}-${IDS.unknown}.sandbox.localhost:8080\r\n\r\n`, 404],
      [`GET / HTTP/1.1\r\nHost: ${f.upPort}-${IDS.pub}..sandbox.localhost:8080\r\n\r\n`, 400],
      [`GET / HTTP/1.1\r\nHost: ${f.upPort}-${IDS.pub}.sandbox.localhost..:8080\r\n\r\n`, 'api'],
      [`OPTIONS * HTTP/1.1\r\nHost: ${pub}\r\n\r\n`, 400],
    ];
    for (const [raw, want] of attempts) {
      const out = await rawRequest(f.port, raw);
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(out)?.[1]);
      if (want === 'api') assert.match(out, /x-fallback: api/i, raw);
      else assert.equal(status, want, raw);
    }
    assert.equal(f.seen.length, before, 'the stand-in sandbox saw none of them');
  });

  it('case and one trailing dot do not change the target: still the same sandbox', async () => {
    const before = f.seen.length;
    for (const host of [f.host(IDS.pub).toUpperCase(), `${f.upPort}-${IDS.pub}.sandbox.localhost.:8080`]) {
      const r = await get(f.port, host, { path: '/echo' });
      assert.equal(r.status, 200, host);
    }
    assert.equal(f.seen.length, before + 2);
  });

  it("private ports: 401 without credentials, owner key opens, another account's key does not", async () => {
    const none = await get(f.port, f.host(IDS.priv), { path: '/echo' });
    assert.equal(none.status, 401);
    assert.match(JSON.parse(none.body).message, /private/);
    assert.equal(
      (await get(f.port, f.host(IDS.priv), { path: '/echo', headers: { 'x-sandboxd-key': OTHER_KEY } })).status,
      401,
    );
    const ok = await get(f.port, f.host(IDS.priv), { path: '/echo', headers: { 'x-sandboxd-key': OWNER_KEY } });
    assert.equal(ok.status, 200);
    assert.equal(JSON.parse(ok.body).headers['x-sandboxd-key'], undefined, 'the key never reaches the sandbox');
  });

  it('private ports: a link sets a host cookie and redirects; the cookie opens that port only', async () => {
    const token = f.links.sign({ sandboxId: IDS.priv, port: f.upPort, expiresAt: Date.now() + 60_000 });
    const open = await get(f.port, f.host(IDS.priv), { path: `/app/?x=a%20b&sandboxd_token=${token}&y=2` });
    assert.equal(open.status, 302);
    assert.equal(open.headers.location, '/app/?x=a%20b&y=2');
    const cookie = String(open.headers['set-cookie']);
    assert.match(cookie, /^sandboxd_token=[^;]+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax$/);
    assert.doesNotMatch(cookie, /Domain=/i, 'host-only: no other sandbox or port gets it');
    const jar = cookie.split(';')[0];
    const withCookie = await get(f.port, f.host(IDS.priv), {
      path: '/echo',
      headers: { cookie: `sandboxd_token=planted-by-another-sandbox; ${jar}; app=1` },
    });
    assert.equal(withCookie.status, 200);
    assert.equal(JSON.parse(withCookie.body).headers.cookie, 'app=1');
    const post = await get(f.port, f.host(IDS.priv), {
      method: 'POST',
      path: `/echo?sandboxd_token=${token}`,
      body: 'x',
    });
    assert.equal(post.status, 200);
    assert.equal(JSON.parse(post.body).url, '/echo');
    assert.equal(
      (await get(f.port, f.host(IDS.priv, f.closedPort), { headers: { cookie: jar } })).status,
      401,
      'another port',
    );
    const expired = f.links.sign({ sandboxId: IDS.priv, port: f.upPort, expiresAt: Date.now() - 1 });
    assert.equal((await get(f.port, f.host(IDS.priv), { path: `/?sandboxd_token=${expired}` })).status, 401);
    const forged = `${Date.now() + 60_000}.${token.split('.')[1]}`;
    assert.equal(
      (await get(f.port, f.host(IDS.priv), { headers: { cookie: `sandboxd_token=${forged}` } })).status,
      401,
    );
  });
});

describe('port proxy: timeout', () => {
  let f: Fixture;
  before(async () => (f = await startFixture({ timeoutMs: 200 })));
  after(() => f.close());

  it('504 when the sandbox does not answer within proxyTimeoutMs, naming the limit', async () => {
    const r = await get(f.port, f.host(IDS.pub), { path: '/slow' });
    assert.equal(r.status, 504);
    assert.deepEqual(JSON.parse(r.body).details, { sandboxId: IDS.pub, port: f.upPort, timeoutMs: 200 });
  });
});
