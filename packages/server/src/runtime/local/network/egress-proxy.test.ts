import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { EgressProxy } from './egress-proxy.js';

/** Where the allowed name resolves: a real HTTP server on port 80 of a loopback address of this file's own. */
const UPSTREAM = '127.0.77.1';
const NOISY = '127.0.1.5';
const NEIGHBOUR = '127.0.1.6';

/** Connects to the proxy's HTTP side from `from` (a sandbox address, on loopback). */
function open(port: number, from: string): Promise<Socket> {
  return new Promise((res, rej) => {
    const c = connect({ host: '127.0.0.1', port, localAddress: from });
    c.on('error', () => {});
    c.once('connect', () => res(c)).once('error', rej);
  });
}

/** Resolves true once `c` is closed by the other end, false if it still is not after `ms` (a bound, not a timing). */
function closedWithin(c: Socket, ms: number): Promise<boolean> {
  return new Promise((res) => {
    if (c.destroyed || c.readableEnded) return res(true);
    const t = setTimeout(() => res(false), ms);
    const done = () => {
      clearTimeout(t);
      res(true);
    };
    c.once('end', done).once('close', done);
    c.resume();
  });
}

/** One request on `c` (kept alive); resolves the status line, rejects if `c` closes first. */
function request(c: Socket): Promise<string> {
  c.write('GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n');
  return new Promise((res, rej) => {
    let buf = '';
    const onClose = () => rej(new Error(`closed before the answer (read: ${JSON.stringify(buf)})`));
    const onData = (d: Buffer) => {
      buf += d.toString('latin1');
      if (buf.includes('\r\n\r\nok')) {
        c.off('data', onData);
        c.off('close', onClose);
        res(buf.split('\r\n')[0]);
      }
    };
    c.on('data', onData);
    c.once('close', onClose);
  });
}

describe('the egress proxy: each sandbox has its share, idle tunnels go', () => {
  let server: Server;
  const upstreamSockets = new Set<Socket>();
  const proxies: EgressProxy[] = [];
  const start = async (o: { maxPerSandbox?: number; idleTimeoutMs?: number }) => {
    const p = new EgressProxy({
      gateway: '127.0.0.1',
      ...o,
      policy: {
        isRuled: (a) => a.startsWith('127.0.1.'),
        allowsName: (_a, n) => n === 'ok.test',
        addressesFor: async () => [UPSTREAM],
      },
    });
    proxies.push(p);
    return (await p.listen()).http;
  };

  before(async () => {
    server = createServer((_req, res) => res.end('ok'));
    server.keepAliveTimeout = 60_000;
    server.on('connection', (s) => {
      upstreamSockets.add(s);
      s.once('close', () => upstreamSockets.delete(s));
    });
    // A port taken (another run of this file) fails here, loudly.
    await new Promise<void>((r, j) => server.once('error', j).listen(80, UPSTREAM, () => r()));
  });
  after(() => {
    for (const p of proxies) p.close();
    server.closeAllConnections();
    server.close();
  });

  it('a sandbox at its share of connections gets no more; its neighbour is relayed', async () => {
    const port = await start({ maxPerSandbox: 4 });
    // The noisy sandbox holds its 4 (waiting for first bytes), then asks for 20 more.
    const held = await Promise.all(Array.from({ length: 4 }, () => open(port, NOISY)));
    const more = await Promise.all(Array.from({ length: 20 }, () => open(port, NOISY)));
    const refused = await Promise.all(more.map((c) => closedWithin(c, 5000)));
    assert.deepEqual(
      refused.filter((x) => x),
      more.map(() => true),
      'a connection past the share was kept',
    );
    const n = await open(port, NEIGHBOUR);
    assert.equal(await request(n), 'HTTP/1.1 200 OK', "the neighbour's request");
    // The noisy one's held connections are still served: its share, not less.
    assert.equal(await request(held[0]), 'HTTP/1.1 200 OK');
    for (const c of [...held, n]) c.destroy();
    // Once they close, the share is free again.
    for (let i = 0; i < 100; i++) {
      const c = await open(port, NOISY);
      const ok = !(await closedWithin(c, 50));
      c.destroy();
      if (ok) return;
    }
    assert.fail('the share did not come back');
  });

  it('closes a relayed connection with no byte either way for the idle timeout; one in use stays', async () => {
    const port = await start({ idleTimeoutMs: 1000 });
    const idle = await open(port, NEIGHBOUR);
    assert.equal(await request(idle), 'HTTP/1.1 200 OK');
    const busy = await open(port, NEIGHBOUR);
    assert.equal(await request(busy), 'HTTP/1.1 200 OK');
    assert.equal(upstreamSockets.size, 2, 'both relayed');
    // `busy` sends a request every 100 ms for 3 s (three idle timeouts); `idle` sends nothing.
    for (let i = 0; i < 30; i++) {
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(await request(busy), 'HTTP/1.1 200 OK', `request ${i} of the busy tunnel`);
    }
    assert.equal(await closedWithin(idle, 10_000), true, 'the idle tunnel is still open');
    assert.ok(!busy.destroyed && !busy.readableEnded, 'the busy tunnel was closed');
    for (let i = 0; i < 100 && upstreamSockets.size > 1; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(upstreamSockets.size, 1, "the idle tunnel's upstream side went with it");
    busy.destroy();
  });
});
