import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { exchange, recordingUpstream, type RecordingUpstream, type StrictRequest } from '../../test/http1-strict.js';
import { get, IDS, startFixture, type Fixture } from '../../test/proxy.js';

const b = (s: string) => Buffer.from(s, 'latin1');
const requests = (u: RecordingUpstream, from: number) =>
  u.seen.slice(from).map((s) => ('req' in s ? s.req : { invalid: s.invalid, bytes: s.bytes }));
const header = (r: StrictRequest, name: string) =>
  r.headers.filter(([k]) => k.toLowerCase() === name).map(([, v]) => v);

describe('port proxy: request framing (smuggling reproductions)', () => {
  let f: Fixture;
  let up: RecordingUpstream;
  let host: string;
  before(async () => {
    f = await startFixture({ timeoutMs: 3000 });
    up = await recordingUpstream();
    host = f.host(IDS.pub, up.port);
  });
  after(async () => {
    await f.close();
    await up.close();
  });

  /** An honest visitor right after: must get its own answer, and the sandbox must see exactly its request. */
  const nextVisitor = async () => {
    const from = up.seen.length;
    const r = await get(f.port, host, { path: '/next-visitor', headers: { cookie: 'session=victim' } });
    assert.equal(r.status, 200);
    const seen = requests(up, from);
    assert.equal(seen.length, 1, `the next visitor's request alone: ${JSON.stringify(seen)}`);
    assert.equal((seen[0] as StrictRequest).target, '/next-visitor');
    assert.equal(r.body, r.headers['x-upstream-seq'], 'the answer to its own request');
    assert.equal(up.pending(), 0, 'no partial request left on a pooled connection');
  };

  for (const nominated of ['Content-Length', 'content-length, keep-alive', 'Transfer-Encoding, Content-Length']) {
    it(`Connection: ${nominated} does not unframe a Content-Length body`, async () => {
      await nextVisitor(); // a pooled connection exists
      const smuggled = `GET /smuggled HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
      const from = up.seen.length;
      const { responses } = await exchange(
        f.port,
        b(
          `POST /upload HTTP/1.1\r\nHost: ${host}\r\nConnection: ${nominated}\r\n` +
            `Content-Length: ${smuggled.length}\r\n\r\n${smuggled}`,
        ),
      );
      const seen = requests(up, from);
      assert.equal(seen.length, 1, `one request reached the sandbox: ${JSON.stringify(seen)}`);
      const r = seen[0] as StrictRequest;
      assert.deepEqual([r.method, r.target, r.body.toString('latin1')], ['POST', '/upload', smuggled]);
      assert.deepEqual(
        responses.map((x) => x.status),
        [200],
      );
      await nextVisitor();
    });
  }

  it('Connection: Content-Length with a partial request as body does not capture the next visitor', async () => {
    await nextVisitor();
    const bait = `GET /capture HTTP/1.1\r\nHost: ${host}\r\nX-Captured: `;
    await exchange(
      f.port,
      b(
        `POST / HTTP/1.1\r\nHost: ${host}\r\nConnection: Content-Length\r\nContent-Length: ${bait.length}\r\n\r\n${bait}`,
      ),
    );
    await nextVisitor();
  });

  it('Connection: Transfer-Encoding does not unframe a chunked body', async () => {
    const smuggled = `GET /smuggled HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
    const from = up.seen.length;
    await exchange(
      f.port,
      b(
        `POST / HTTP/1.1\r\nHost: ${host}\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n` +
          `${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`,
      ),
    );
    const seen = requests(up, from);
    assert.equal(seen.length, 1, JSON.stringify(seen));
    assert.equal((seen[0] as StrictRequest).body.toString('latin1'), smuggled);
    await nextVisitor();
  });

  it('transfer codings the proxy cannot relay as sent are refused with 400, before the sandbox sees anything', async () => {
    const cases = [
      'POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
      'POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
      'POST / HTTP/1.0\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
    ];
    for (const c of cases) {
      const from = up.seen.length;
      const { responses } = await exchange(f.port, b(c.replace('Host: H', `Host: ${host}`)));
      assert.equal(responses[0]?.status, 400, c);
      assert.equal(responses[0].headers['x-sandboxd-proxy'], 'error');
      assert.equal(JSON.parse(responses[0].body).kind, 'validation');
      assert.deepEqual(requests(up, from), [], c);
    }
    await nextVisitor();
  });

  it('an upgrade keeps its framing headers as sent, whatever Connection names: the tunnelled bytes stay its body', async () => {
    const body = `GET /smuggled HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
    const from = up.seen.length;
    await exchange(
      f.port,
      b(
        `POST /ws HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade, Content-Length\r\nUpgrade: x-test\r\n` +
          `Content-Length: ${body.length}\r\n\r\n${body}`,
      ),
    );
    const seen = requests(up, from) as StrictRequest[];
    assert.deepEqual(
      seen.map((r) => [r.target, r.body.toString('latin1')]),
      [['/ws', body]],
    );
  });

  it('header bytes outside ASCII (obs-text) reach the sandbox unchanged', async () => {
    const from = up.seen.length;
    await exchange(f.port, b(`GET / HTTP/1.1\r\nHost: ${host}\r\nX-Latin: caf\xe9 \xff\r\n\r\n`));
    const r = requests(up, from)[0] as StrictRequest;
    assert.deepEqual(header(r, 'x-latin'), ['caf\xe9 \xff']);
  });

  it('the proxy frames the body itself: one Content-Length, or chunked, never both, whatever the client spelled', async () => {
    const from = up.seen.length;
    await exchange(f.port, b(`PUT / HTTP/1.1\r\nHost: ${host}\r\ncontent-LENGTH: 3\r\n\r\nabc`));
    await exchange(
      f.port,
      b(`PUT / HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n`),
    );
    const [a, c] = requests(up, from) as StrictRequest[];
    assert.deepEqual(
      [header(a, 'content-length'), header(a, 'transfer-encoding'), a.body.toString()],
      [['3'], [], 'abc'],
    );
    assert.deepEqual(
      [header(c, 'content-length'), header(c, 'transfer-encoding'), c.body.toString()],
      [[], ['chunked'], 'abc'],
    );
  });
});

/** A raw sandbox answering every request with `answer`, counting connections. */
async function rawSandbox(answer: string) {
  let conns = 0;
  const socks = new Set<Socket>();
  const server = createServer((s) => {
    conns++;
    socks.add(s);
    s.on('close', () => socks.delete(s));
    s.on('error', () => {});
    let buf = '';
    s.on('data', (d) => {
      buf += d.toString('latin1');
      for (let i = buf.indexOf('\r\n\r\n'); i !== -1; i = buf.indexOf('\r\n\r\n')) {
        buf = buf.slice(i + 4);
        s.write(answer);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    conns: () => conns,
    close: () => {
      for (const s of socks) s.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe('port proxy: response framing from the sandbox side', () => {
  let f: Fixture;
  const closers: Array<() => Promise<void>> = [];
  before(async () => (f = await startFixture({ timeoutMs: 3000 })));
  after(async () => {
    for (const c of closers) await c();
    await f.close();
  });
  const sandbox = async (answer: string) => {
    const s = await rawSandbox(answer);
    closers.push(s.close);
    return { ...s, host: f.host(IDS.pub, s.port) };
  };

  it('Connection naming Content-Length in a response does not lose its framing', async () => {
    const s = await sandbox('HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello');
    for (let i = 0; i < 3; i++) {
      const { responses } = await exchange(f.port, b(`GET / HTTP/1.1\r\nHost: ${s.host}\r\n\r\n`));
      assert.equal(responses[0].body, 'hello');
      assert.equal(responses[0].headers['content-length'], '5', 'the client gets the length the sandbox framed with');
      assert.equal(responses[0].headers['transfer-encoding'], undefined);
    }
    assert.equal(s.conns(), 1, 'a well-framed answer keeps its connection');
    const te = await sandbox(
      'HTTP/1.1 200 OK\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
    );
    for (let i = 0; i < 2; i++) {
      const { responses } = await exchange(f.port, b(`GET / HTTP/1.1\r\nHost: ${te.host}\r\n\r\n`));
      assert.equal(responses[0].body, 'hello');
    }
    assert.equal(te.conns(), 1);
  });

  it('a response whose framing is in doubt is relayed once and its connection is not reused', async () => {
    const doubtful = [
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
      'HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc',
      'HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc',
      'HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
    ];
    for (const a of doubtful) {
      const s = await sandbox(a);
      for (let i = 0; i < 2; i++) {
        const { responses } = await exchange(f.port, b(`GET / HTTP/1.1\r\nHost: ${s.host}\r\n\r\n`));
        assert.deepEqual([responses[0].status, responses[0].body], [200, 'abc'], JSON.stringify(a));
        assert.ok(!/,/.test(responses[0].headers['content-length'] ?? ''), 'one Content-Length value');
      }
      assert.equal(s.conns(), 2, `not pooled: ${JSON.stringify(a)}`);
    }
  });
  it('a GET or OPTIONS that carries a body does not leave its connection for the next visitor', async () => {
    // This app, like many, never reads the body of a GET, and it answers one request per
    // read: a request in the body is answered only once more bytes come, on the pooled
    // connection, in the next visitor's place.
    for (const method of ['GET', 'OPTIONS']) {
      let conns = 0;
      let n = 0;
      const socks = new Set<Socket>();
      const app = createServer((sock) => {
        conns++;
        socks.add(sock);
        sock.on('error', () => {});
        let heads = 0;
        sock.on('data', (d) => {
          heads += d.toString('latin1').split('\r\n\r\n').length - 1;
          if (heads > 0) {
            heads--;
            n++;
            sock.write(`HTTP/1.1 200 OK\r\nContent-Length: ${String(n).length}\r\n\r\n${n}`);
          }
        });
      });
      await new Promise<void>((r) => app.listen(0, '127.0.0.1', () => r()));
      closers.push(() => {
        for (const x of socks) x.destroy();
        return new Promise<void>((r) => app.close(() => r()));
      });
      const h = f.host(IDS.pub, (app.address() as AddressInfo).port);
      const smuggled = `GET /smuggled HTTP/1.1\r\nHost: ${h}\r\n\r\n`;
      const first = await exchange(
        f.port,
        b(`${method} / HTTP/1.1\r\nHost: ${h}\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`),
      );
      assert.equal(first.responses[0].status, 200);
      await exchange(f.port, b(`GET /next HTTP/1.1\r\nHost: ${h}\r\n\r\n`));
      assert.equal(conns, 2, `${method} with a body: its connection was pooled for the next visitor`);
    }
  });
});
