import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import {
  Agent,
  createServer as httpServer,
  type IncomingMessage,
  request as httpRequest,
  type Server,
} from 'node:http';
import { connect as h2connect } from 'node:http2';
import { Agent as HttpsAgent, createServer as httpsServer, request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { type ConnectionOptions, connect as tlsConnect } from 'node:tls';
import { after, before, describe, it } from 'node:test';
import type { SecretInjection } from '../../driver.js';
import { EgressCa } from './ca.js';
import { EgressProxy } from './egress-proxy.js';
import { hostName, type Injection, rulesAllowing, Scrubber } from './intercept.js';

/** The upstream (a fake API that echoes requests) on a loopback address of this file's own. */
const UPSTREAM = '127.0.79.1';
const SANDBOX = '127.0.2.5';
const VALUE = 'sk-live-VALUE-1234567890';
const PH = 'sbx-secret-000000000000000000000001';
const PH2 = 'sbx-secret-000000000000000000000002';

describe('secret injection at the egress proxy', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'intercept-'));
  const ca = EgressCa.open(join(tmp, 'ca'));
  /** The upstream's own CA (the fake internet's role), which the proxy is told to trust. */
  const upCa = EgressCa.open(join(tmp, 'up-ca'));
  const seen: { method: string; url: string; headers: Record<string, unknown>; body: string; via: number }[] = [];
  const events: Injection[] = [];
  let rules: SecretInjection[] = [];
  let http: Server;
  let https: Server;
  let proxy: EgressProxy;
  let ports: { http: number; tls: number };
  const answers: string[] = [];

  const echo = (req: IncomingMessage, res: import('node:http').ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
        // The proxy's upstream connection (its source port).
        via: req.socket.remotePort ?? 0,
      };
      seen.push(r);
      // Reflects the request in a header and in the body, as echo services do.
      res.setHeader('x-echo-auth', String(req.headers.authorization ?? ''));
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(r));
    });
  };

  before(async () => {
    http = httpServer(echo);
    const leaf = upCa.leaf('api.test');
    const plain = upCa.leaf('plain.test');
    https = httpsServer(
      { SNICallback: (n, cb) => cb(null, (n === 'plain.test' ? plain : leaf).context), cert: leaf.cert, key: leaf.key },
      echo,
    );
    await new Promise<void>((r) => http.listen(0, UPSTREAM, () => r()));
    await new Promise<void>((r) => https.listen(0, UPSTREAM, () => r()));
    proxy = new EgressProxy({
      gateway: '127.0.0.1',
      ca,
      extraCa: [upCa.certPem],
      upstreamPorts: {
        http: (http.address() as { port: number }).port,
        tls: (https.address() as { port: number }).port,
      },
      onInjection: (e) => events.push(e),
      policy: {
        isRuled: (a) => a === SANDBOX,
        allowsName: (_a, n) => n === 'api.test' || n === 'other.test' || n === 'plain.test',
        addressesFor: async () => [UPSTREAM],
        secretsFor: (_a, n) =>
          rules.filter((r) => r.domains.some((d) => d === n || (d.startsWith('*.') && n.endsWith(d.slice(1))))),
      },
    });
    ports = await proxy.listen();
  });
  after(() => {
    proxy.close();
    http.closeAllConnections();
    http.close();
    https.closeAllConnections();
    https.close();
    rmSync(tmp, { recursive: true, force: true });
    // Nothing any answer carried holds the value.
    for (const a of answers) assert.ok(!a.includes(VALUE), 'an answer carried the value');
  });

  const setRules = (r: SecretInjection[]) => {
    rules = r;
  };
  const bearer: SecretInjection = {
    secret: 'API',
    domains: ['api.test'],
    header: 'Authorization',
    format: 'Bearer {value}',
    placeholder: PH,
    value: VALUE,
  };
  /** The same secret without header: its placeholder replaced in the request head. */
  const anywhere: SecretInjection = {
    secret: 'API',
    domains: ['api.test'],
    format: '{value}',
    placeholder: PH,
    value: VALUE,
  };

  /** One request through the proxy; resolves status, headers and body (all recorded in `answers`). */
  function req(o: {
    tls?: boolean;
    host?: string;
    servername?: string;
    path?: string;
    method?: string;
    headers?: Record<string, string>;
    body?: string[];
    agent?: Agent;
  }): Promise<{ status: number; headers: IncomingMessage['headers']; body: string; reused: boolean }> {
    return new Promise((res, rej) => {
      const opts = {
        host: '127.0.0.1',
        port: o.tls ? ports.tls : ports.http,
        localAddress: SANDBOX,
        path: o.path ?? '/',
        method: o.method ?? 'GET',
        headers: { host: o.host ?? 'api.test', ...o.headers },
        agent: o.agent ?? false,
        setHost: false,
      };
      const r = o.tls
        ? httpsRequest({ ...opts, servername: o.servername ?? 'api.test', ca: ca.certPem })
        : httpRequest(opts);
      r.on('response', (m) => {
        const chunks: Buffer[] = [];
        m.on('data', (c: Buffer) => chunks.push(c));
        m.on('end', () => {
          const body = Buffer.concat(chunks).toString();
          answers.push(JSON.stringify(m.headers) + body);
          res({ status: m.statusCode ?? 0, headers: m.headers, body, reused: r.reusedSocket });
        });
      });
      r.on('error', rej);
      if (o.body) Readable.from(o.body).pipe(r);
      else r.end();
    });
  }

  it('HTTP/1.1 keep-alive: several requests, each injected (header and placeholder in target and headers)', async () => {
    setRules([bearer, anywhere]);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    seen.length = 0;
    events.length = 0;
    for (let i = 0; i < 3; i++) {
      const r = await req({ path: `/v1/x?key=${PH}`, headers: { 'x-api-key': `k ${PH}` }, agent });
      assert.equal(r.status, 200);
      if (i > 0) assert.equal(r.reused, true, 'the connection was kept');
      assert.ok(!r.body.includes(VALUE));
      assert.ok(r.body.includes(PH), 'the reflected value came back as the placeholder');
      assert.equal(r.headers['x-echo-auth'], `Bearer ${PH}`);
      assert.equal(r.headers['content-length'], undefined);
    }
    agent.destroy();
    assert.equal(seen.length, 3);
    assert.equal(new Set(seen.map((s) => s.via)).size, 1, 'one upstream connection for the kept-alive client');
    for (const s of seen) {
      assert.equal(s.url, `/v1/x?key=${VALUE}`);
      assert.equal(s.headers.authorization, `Bearer ${VALUE}`);
      assert.equal(s.headers['x-api-key'], `k ${VALUE}`);
      assert.equal(s.headers.host, 'api.test');
    }
    assert.equal(events.length, 6, 'one event a rule a request');
    assert.deepEqual(
      { ...events[0] },
      { from: SANDBOX, secret: 'API', destination: 'api.test:80', method: 'GET', status: 200, error: undefined },
    );
  });

  it("TLS keep-alive: a client connection keeps its upstream connection, never another client's", async () => {
    setRules([bearer]);
    seen.length = 0;
    const a = new HttpsAgent({ keepAlive: true, maxSockets: 1 });
    const b = new HttpsAgent({ keepAlive: true, maxSockets: 1 });
    for (let i = 0; i < 3; i++) {
      for (const agent of [a, b]) {
        const r = await req({ tls: true, path: '/k', agent: agent as unknown as Agent });
        assert.equal(r.status, 200);
        if (i > 0) assert.equal(r.reused, true);
      }
    }
    a.destroy();
    b.destroy();
    assert.equal(seen.length, 6);
    const byClient = [0, 1].map((k) => new Set(seen.filter((_, i) => i % 2 === k).map((s) => s.via)));
    assert.deepEqual(
      byClient.map((x) => x.size),
      [1, 1],
      'each client connection kept one upstream connection',
    );
    assert.notDeepEqual([...byClient[0]], [...byClient[1]], 'two clients never share an upstream connection');
    for (const s of seen) assert.equal(s.headers.authorization, `Bearer ${VALUE}`);
  });

  it('a Host switch on a kept-alive connection gets 421 and nothing is forwarded', async () => {
    setRules([bearer, anywhere]);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    seen.length = 0;
    assert.equal((await req({ agent })).status, 200);
    const r = await req({ agent, host: 'other.test', headers: { authorization: PH } });
    assert.equal(r.status, 421);
    assert.equal(r.reused, true);
    // The same with the other name in an absolute-form target (Host left right).
    const abs = await req({ path: 'http://other.test/x' });
    assert.equal(abs.status, 421);
    const same = await req({ path: `http://api.test/y?k=${PH}` });
    assert.equal(same.status, 200);
    assert.equal(seen.at(-1)?.url, `/y?k=${VALUE}`);
    seen.pop();
    assert.equal(seen.length, 1, 'the switched request reached upstream');
    agent.destroy();
  });

  it('TLS: terminated with a leaf for the name; an SNI/Host mismatch gets 421', async () => {
    setRules([bearer]);
    seen.length = 0;
    const ok = await req({ tls: true, method: 'POST', body: ['{"a":', `"${PH}"}`] });
    assert.equal(ok.status, 200);
    assert.equal(seen[0].headers.authorization, `Bearer ${VALUE}`);
    assert.equal(seen[0].body, `{"a":"${PH}"}`, 'a body is never rewritten');
    assert.equal(seen[0].headers['transfer-encoding'], 'chunked', 'the chunked body went on chunked');
    const bad = await req({ tls: true, servername: 'api.test', host: 'other.test' });
    assert.equal(bad.status, 421);
    assert.equal(seen.length, 1);
  });

  it('HTTP/2 from the client: injected, the answer scrubbed', async () => {
    setRules([bearer, anywhere]);
    seen.length = 0;
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
    const one = (authority: string) =>
      new Promise<{ status: number; body: string; headers: Record<string, unknown> }>((res, rej) => {
        const s = session.request({ ':path': `/h2?${PH}`, ':authority': authority });
        let status = 0;
        let headers = {};
        const chunks: Buffer[] = [];
        s.on('response', (h) => {
          status = Number(h[':status']);
          headers = h;
        });
        s.on('data', (c: Buffer) => chunks.push(c));
        s.on('end', () => {
          const body = Buffer.concat(chunks).toString();
          answers.push(JSON.stringify(headers) + body);
          res({ status, body, headers });
        });
        s.on('error', rej);
        s.end();
      });
    const a = await one('api.test');
    assert.equal(a.status, 200);
    assert.equal(seen[0].url, `/h2?${VALUE}`);
    assert.equal(seen[0].headers.authorization, `Bearer ${VALUE}`);
    assert.ok(!a.body.includes(VALUE));
    const b = await one('other.test');
    assert.equal(b.status, 421);
    assert.equal(seen.length, 1);
    session.close();
  });

  it('a rule without value injects nothing; a name without rules is relayed untouched', async () => {
    setRules([
      { ...bearer, value: undefined },
      { ...bearer, secret: 'B', domains: ['*.test'], header: undefined, placeholder: PH2, value: undefined },
    ]);
    seen.length = 0;
    events.length = 0;
    const r = await req({ tls: true, headers: { authorization: PH } });
    assert.equal(r.status, 200);
    assert.equal(seen[0].headers.authorization, PH);
    assert.equal(events.length, 0);
    // plain.test: no rule names it: TLS end to end, with the upstream's own certificate.
    setRules([bearer]);
    const cert = await new Promise<string>((res, rej) => {
      const s = tlsConnect(
        {
          host: '127.0.0.1',
          port: ports.tls,
          localAddress: SANDBOX,
          servername: 'plain.test',
          ca: upCa.certPem,
        } as ConnectionOptions,
        () => {
          res(String(s.getPeerCertificate().subject.CN));
          s.destroy();
        },
      );
      s.on('error', rej);
    });
    assert.equal(cert, 'plain.test');
    seen.length = 0;
    const p = await req({ host: 'plain.test', headers: { authorization: PH } });
    assert.equal(p.status, 200);
    assert.equal(seen[0].headers.authorization, PH, 'the placeholder went as it was');
  });

  it('several rules for one name: each applied, one event each', async () => {
    setRules([
      bearer,
      {
        secret: 'B',
        domains: ['*.test'],
        header: 'X-Other',
        format: '{value}',
        placeholder: PH2,
        value: 'other-value-42',
      },
    ]);
    seen.length = 0;
    events.length = 0;
    const r = await req({ path: `/?a=${PH}&b=${PH2}` });
    assert.equal(r.status, 200);
    assert.equal(seen[0].url, `/?a=${PH}&b=${PH2}`, 'header rules set their headers only');
    assert.equal(seen[0].headers.authorization, `Bearer ${VALUE}`);
    assert.equal(seen[0].headers['x-other'], 'other-value-42');
    assert.ok(!r.body.includes('other-value-42'));
    assert.deepEqual(events.map((e) => e.secret).sort(), ['API', 'B']);
  });

  it('upstream TLS is verified: without the upstream CA trusted, a 502 naming the error', async () => {
    setRules([bearer]);
    const saved = ports;
    const untrusting = new EgressProxy({
      gateway: '127.0.0.1',
      ca,
      upstreamPorts: {
        http: (http.address() as { port: number }).port,
        tls: (https.address() as { port: number }).port,
      },
      policy: {
        isRuled: () => true,
        allowsName: () => true,
        addressesFor: async () => [UPSTREAM],
        secretsFor: () => [bearer],
      },
    });
    ports = await untrusting.listen();
    seen.length = 0;
    try {
      const r = await req({ tls: true });
      assert.equal(r.status, 502);
      assert.match(
        r.body,
        /upstream api.test failed: UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED|UNABLE_TO_GET_ISSUER/,
      );
      assert.equal(seen.length, 0, 'nothing reached an unverified upstream');
    } finally {
      untrusting.close();
      ports = saved;
    }
  });

  it('CONNECT and upgrades are refused; an upstream failure is a 502 without the value', async () => {
    setRules([bearer]);
    const up = await req({ headers: { connection: 'upgrade', upgrade: 'websocket' } });
    assert.equal(up.status, 501);
    events.length = 0;
    const saved = ports;
    const dead = new EgressProxy({
      gateway: '127.0.0.1',
      ca,
      upstreamPorts: { http: 1, tls: 1 },
      onInjection: (e) => events.push(e),
      policy: {
        isRuled: () => true,
        allowsName: () => true,
        addressesFor: async () => [UPSTREAM],
        secretsFor: () => [bearer],
      },
    });
    const dp = await dead.listen();
    ports = dp;
    try {
      const r = await req({});
      assert.equal(r.status, 502);
      assert.match(r.body, /upstream api.test failed: ECONNREFUSED/);
      assert.equal(events[0].status, null);
      assert.equal(events[0].error, 'ECONNREFUSED');
    } finally {
      dead.close();
      ports = saved;
    }
  });
});

describe('rulesAllowing and hostName', () => {
  it('matches domains as egress rules do; Host values lose port, case and trailing dot', () => {
    const r = (domains: string[]): SecretInjection => ({ secret: 'S', domains, format: '{value}', placeholder: 'p' });
    const rules = [r(['api.test']), r(['*.wild.test']), r(['10.0.0.0/8'])];
    assert.deepEqual(rulesAllowing(rules, 'api.test'), [rules[0]]);
    assert.deepEqual(rulesAllowing(rules, 'x.wild.test'), [rules[1]]);
    assert.deepEqual(rulesAllowing(rules, 'wild.test'), []);
    assert.deepEqual(rulesAllowing(rules, 'sub.api.test'), []);
    assert.equal(hostName('API.Test.:443'), 'api.test');
    assert.equal(hostName('api.test'), 'api.test');
    assert.equal(hostName(undefined), null);
    assert.equal(hostName('a:b:c'), null);
  });
});

describe('Scrubber', () => {
  it('replaces values across chunk boundaries', async () => {
    const chunks = ['xxsec', 'ret-va', 'lue yy secret-value', 'secret-', 'valu', 'e', 'z secret-valu'];
    const s = Readable.from(chunks.map((c) => Buffer.from(c))).pipe(new Scrubber([['secret-value', 'PH']]));
    const out: Buffer[] = [];
    for await (const c of s) out.push(c as Buffer);
    assert.equal(Buffer.concat(out).toString(), 'xxPH yy PHPHz secret-valu');
  });
});
