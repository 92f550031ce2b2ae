import assert from 'node:assert/strict';
import { request } from 'node:http';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { get, IDS, startFixture, type Fixture } from '../../test/proxy.js';

/** A TCP server playing a sandbox byte for byte: `answer` gets each request head and its index on that connection. */
async function rawSandbox(
  answer: (sock: Socket, head: string, nth: number) => void,
): Promise<{ port: number; conns: () => number; close: () => Promise<void> }> {
  let conns = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((sock) => {
    conns++;
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => {});
    let buf = '';
    let nth = 0;
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      for (let i = buf.indexOf('\r\n\r\n'); i !== -1; i = buf.indexOf('\r\n\r\n')) {
        const head = buf.slice(0, i);
        buf = buf.slice(i + 4);
        answer(sock, head, nth++);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    conns: () => conns,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

describe('port proxy: its HTTP/1.1 client towards the sandbox', () => {
  let f: Fixture;
  const closers: Array<() => Promise<void>> = [];
  before(async () => (f = await startFixture({ timeoutMs: 5000 })));
  after(async () => {
    for (const c of closers) await c();
    await f.close();
  });
  const sandbox = async (answer: Parameters<typeof rawSandbox>[0]) => {
    const r = await rawSandbox(answer);
    closers.push(r.close);
    return { ...r, host: f.host(IDS.pub, r.port) };
  };

  it('reuses one keep-alive connection, also after a HEAD whose Content-Length has no body', async () => {
    const s = await sandbox((sock, head) =>
      sock.write(
        head.startsWith('HEAD')
          ? 'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n'
          : 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
      ),
    );
    for (let i = 0; i < 4; i++) assert.equal((await get(f.port, s.host)).body, 'ok');
    const h = await get(f.port, s.host, { method: 'HEAD' });
    assert.deepEqual([h.status, h.headers['content-length'], h.body], [200, '1000', '']);
    assert.equal((await get(f.port, s.host)).body, 'ok');
    assert.equal(s.conns(), 1);
  });

  it('a pooled connection the sandbox drops is retried once for a request without a body, never for one with a body', async () => {
    const s = await sandbox((sock, _head, nth) =>
      nth === 0 ? sock.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok') : sock.destroy(),
    );
    assert.equal((await get(f.port, s.host)).status, 200);
    assert.equal((await get(f.port, s.host)).status, 200, 'retried on a fresh connection');
    assert.equal(s.conns(), 2);
    const post = await get(f.port, s.host, { method: 'POST', body: 'data' });
    assert.equal(post.status, 502);
  });

  it('chunked, close-delimited and 103-preceded answers reach the client re-framed', async () => {
    const chunked = await sandbox((sock) =>
      sock.write(
        'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 999\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: x\r\n\r\n',
      ),
    );
    const c = await get(f.port, chunked.host);
    assert.deepEqual([c.status, c.body, c.headers['content-length']], [200, 'abcde', undefined]);
    const closing = await sandbox((sock) => sock.end('HTTP/1.0 200 OK\r\nX-Old: 1\r\n\r\nuntil the end'));
    const e = await get(f.port, closing.host);
    assert.deepEqual([e.status, e.body, e.headers['x-old']], [200, 'until the end', '1']);
    const hints = await sandbox((sock) =>
      sock.write('HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody'),
    );
    const h = await get(f.port, hints.host);
    assert.deepEqual([h.status, h.body], [200, 'body']);
  });

  it('an answer that is not valid HTTP/1.x is a 502 that says so', async () => {
    const answers = [
      'SSH-2.0-OpenSSH_9.2\r\n\r\n',
      'HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx',
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n',
      'HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n',
      `HTTP/1.1 200 OK\r\nX-Big: ${'b'.repeat(70 * 1024)}\r\n\r\n`,
      'HTTP/1.1 200 OK\r\nBad\x01Name: x\r\n\r\n',
    ];
    for (const a of answers) {
      const s = await sandbox((sock) => sock.write(a));
      const r = await get(f.port, s.host);
      assert.equal(r.status, 502, JSON.stringify(a.slice(0, 40)));
      assert.equal(JSON.parse(r.body).details.reason, 'invalid_response');
    }
    const silent = await sandbox((sock) => sock.end());
    const eof = await get(f.port, silent.host);
    assert.equal(eof.status, 502);
    assert.match(JSON.parse(eof.body).message, /closed the connection/);
  });

  it('a body cut short by the sandbox cuts the client response', async () => {
    const s = await sandbox((sock) => sock.end('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789'));
    const outcome = await new Promise<string>((resolve) => {
      request({ host: '127.0.0.1', port: f.port, headers: { host: s.host }, agent: false }, (res) => {
        let n = 0;
        res.on('data', (c: Buffer) => (n += c.length));
        res.on('end', () => resolve(`ended after ${n}`));
        res.on('error', () => resolve('cut'));
        res.on('aborted', () => resolve('cut'));
      })
        .on('error', () => resolve('cut'))
        .end();
    });
    assert.equal(outcome, 'cut');
  });

  it('an answer sent before the upload finished reaches the client', async () => {
    const s = await sandbox((sock) =>
      sock.end('HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'),
    );
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: f.port, method: 'PUT', headers: { host: s.host }, agent: false },
        (res) => resolve(res.statusCode ?? 0),
      );
      req.on('error', (e) => (req.writableEnded ? undefined : reject(e)));
      const chunk = Buffer.alloc(256 * 1024);
      let i = 0;
      const pump = (): void => {
        while (i++ < 40) if (!req.write(chunk)) return void req.once('drain', pump);
        req.end();
      };
      pump();
    });
    assert.equal(status, 413);
  });
});
