import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { UpstreamPool } from './upstream.js';

describe('UpstreamPool: idle connections are bounded per port and per sandbox', () => {
  const servers: Server[] = [];
  const socks = new Set<Socket>();
  const ports: number[] = [];
  before(async () => {
    for (let i = 0; i < 6; i++) {
      const s = createServer((c) => {
        socks.add(c);
        c.on('close', () => socks.delete(c));
      });
      await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
      servers.push(s);
      ports.push((s.address() as AddressInfo).port);
    }
  });
  after(async () => {
    for (const c of socks) c.destroy();
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  });

  it('walking many ports keeps at most maxIdle connections in all (8 per port, 32 by default)', async () => {
    const pool = new UpstreamPool('127.0.0.1');
    const conns = ports.flatMap((p) => Array.from({ length: 10 }, () => pool.acquire(p)));
    await Promise.all(
      conns.map((c) => (c.socket.connecting ? new Promise((r) => c.socket.once('connect', r)) : undefined)),
    );
    for (const c of conns) pool.release(c);
    assert.equal(pool.idleCount, 32);
    assert.equal(conns.filter((c) => !c.socket.destroyed).length, 32, 'the others are closed');
    const again = pool.acquire(ports[0]);
    assert.equal(again.reused, true);
    assert.equal(pool.idleCount, 31);
    again.socket.destroy();
    pool.destroy();
    assert.equal(pool.idleCount, 0);
  });
});
