/**
 * The readiness probe of image-declared services (service.ts `waitHealthy`) against hostile
 * services played by servers on loopback: the service is the image author's (any image a
 * tenant may pull), so its answers must not hold the host's boot or its sockets past the
 * probe's bounds.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { waitHealthy } from './service.js';

/** How long a test waits for an outcome before calling the probe stuck (far above its bounds). */
const STUCK_MS = 20_000;

let server: Server | null = null;
const sockets = new Set<Socket>();
const timers = new Set<NodeJS.Timeout>();

afterEach(async () => {
  for (const t of timers) clearInterval(t);
  timers.clear();
  for (const s of sockets) s.destroy();
  sockets.clear();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = null;
});

/** A raw TCP "service" on loopback: `onConnection` plays it. Resolves with its port. */
async function hostile(onConnection: (s: Socket) => void): Promise<number> {
  const srv = createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.once('close', () => sockets.delete(s));
    onConnection(s);
  });
  server = srv;
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return (srv.address() as AddressInfo).port;
}

/** Writes `chunk` to `s` every `everyMs` until the test ends (bounded by afterEach) or `s` closes. */
function drip(s: Socket, chunk: string, everyMs: number): void {
  const t = setInterval(() => {
    if (s.destroyed) return clearInterval(t);
    s.write(chunk);
  }, everyMs);
  timers.add(t);
}

function stuck<T>(p: Promise<T>, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise<T>((_r, reject) => {
      t = setTimeout(() => reject(new Error(`stuck: ${what}`)), STUCK_MS);
    }),
  ]);
}

const svc = (port: number) => ({ argv: ['/srv'], port, health: '/health' });

describe('service readiness probe against a hostile service', () => {
  it('headers dripped a byte at a time never end the wait: the boot still fails at its deadline', async () => {
    const port = await hostile((s) => {
      s.write('HTTP/1.1 200 OK\r\n');
      drip(s, 'X', 100);
    });
    await assert.rejects(
      stuck(waitHealthy('127.0.0.1', svc(port), { timeoutMs: 1500, sandboxId: 'sbx' }), 'waitHealthy'),
      (e) => e instanceof SandboxdError && e.kind === 'upstream_timeout',
    );
  });

  it('a 2xx with an endless body: the probe closes its connection instead of reading it forever', async () => {
    const closed: Array<Promise<void>> = [];
    const port = await hostile((s) => {
      closed.push(new Promise((r) => s.once('close', () => r())));
      s.write('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n');
      drip(s, `4000\r\n${'x'.repeat(0x4000)}\r\n`, 5);
    });
    await stuck(waitHealthy('127.0.0.1', svc(port), { timeoutMs: 5000, sandboxId: 'sbx' }), 'waitHealthy');
    assert.equal(closed.length, 1);
    await stuck(closed[0] as Promise<void>, 'the probe connection to close');
  });

  it('a service that accepts and never answers: each probe is bounded, the boot fails at its deadline', async () => {
    const port = await hostile(() => {});
    await assert.rejects(
      stuck(waitHealthy('127.0.0.1', svc(port), { timeoutMs: 1000, sandboxId: 'sbx' }), 'waitHealthy'),
      (e) => e instanceof SandboxdError && e.kind === 'upstream_timeout',
    );
  });

  it('a redirect is not followed and is not ready', async () => {
    let probes = 0;
    const port = await hostile((s) => {
      probes++;
      s.end('HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/\r\nContent-Length: 0\r\n\r\n');
    });
    await assert.rejects(
      stuck(waitHealthy('127.0.0.1', svc(port), { timeoutMs: 600, sandboxId: 'sbx' }), 'waitHealthy'),
      (e) => e instanceof SandboxdError && e.kind === 'upstream_timeout' && /answered 302/.test(e.message),
    );
    assert.ok(probes >= 1);
  });
});
