/**
 * The in-process `fetch` of /mcp's tools (`injectFetch`): an inner answer is streamed with
 * backpressure, not held whole in memory (a code run's NDJSON stream is as long as the
 * sandbox makes it), it errors past its byte bound, and a consumer that gives up ends the
 * inner request as a closed connection would.
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { injectFetch } from './mcp.js';

const MiB = 1024 * 1024;
/** What the endless route makes at most (a bound for the test itself). */
const TOTAL = 64 * MiB;

describe('injectFetch (the tools calling the API in-process)', () => {
  let app: FastifyInstance;
  let produced = 0;
  let closed: Promise<void>;
  let markClosed: () => void;
  before(async () => {
    app = Fastify();
    app.get('/endless', async (_req, reply) => {
      produced = 0;
      closed = new Promise((r) => {
        markClosed = r;
      });
      reply.raw.once('close', () => markClosed());
      const chunk = Buffer.alloc(64 * 1024, 'x');
      const body = new Readable({
        read() {
          if (produced >= TOTAL) return void this.push(null);
          produced += chunk.length;
          this.push(chunk);
        },
      });
      return reply.type('application/x-ndjson').send(body);
    });
    app.get('/small', async () => ({ hello: 'world' }));
    app.get('/whoami', async (req) => ({ ip: req.ip, headers: req.headers }));
    app.delete('/gone', async (_req, reply) => reply.code(204).send());
    await app.ready();
  });
  after(() => app.close());

  it('streams an answer with backpressure: the first bytes arrive while most is still unmade', async () => {
    const f = injectFetch(app.inject.bind(app), { ip: '203.0.113.9' });
    const res = await f('http://api.test/endless');
    assert.equal(res.status, 200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const first = await reader.read();
    assert.ok(first.value && first.value.length > 0);
    assert.ok(produced < TOTAL / 4, `only a window is made ahead of the reader (made ${produced} bytes)`);
    await reader.cancel();
    await closed; // the route's reply closed, as when a client goes away
    assert.ok(produced < TOTAL / 4, `nothing more is made once the reader cancelled (made ${produced})`);
  });

  it('errors past its byte bound instead of growing, and hangs up', async () => {
    const f = injectFetch(app.inject.bind(app), { ip: '203.0.113.9' }, 2 * MiB);
    const res = await f('http://api.test/endless');
    await assert.rejects(res.arrayBuffer(), /larger than 2097152 bytes/);
    await closed;
    assert.ok(produced < TOTAL / 4, `made ${produced}`);
  });

  it('aborting the signal hangs up the inner request', async () => {
    const f = injectFetch(app.inject.bind(app), { ip: '203.0.113.9' });
    const ac = new AbortController();
    const res = await f('http://api.test/endless', { signal: ac.signal });
    ac.abort();
    await closed;
    await assert.rejects(res.arrayBuffer());
  });

  it("carries the caller's address and the SDK's own headers, nothing else (no loopback address, no forwarding headers)", async () => {
    const f = injectFetch(app.inject.bind(app), { ip: '203.0.113.9', host: 'api.example:8080' });
    const res = await f('http://ignored.test/whoami', { headers: { authorization: 'Bearer sk_caller' } });
    const who = (await res.json()) as { ip: string; headers: Record<string, string> };
    assert.equal(who.ip, '203.0.113.9');
    assert.equal(who.headers.host, 'api.example:8080');
    assert.equal(who.headers.authorization, 'Bearer sk_caller');
    for (const h of ['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'cookie', 'x-api-key'])
      assert.equal(who.headers[h], undefined, h);
  });

  it('small and empty answers read as before', async () => {
    const f = injectFetch(app.inject.bind(app), { ip: '203.0.113.9' });
    const small = await f('http://api.test/small');
    assert.deepEqual(await small.json(), { hello: 'world' });
    const gone = await f('http://api.test/gone', { method: 'DELETE' });
    assert.equal(gone.status, 204);
    assert.equal(gone.body, null);
  });
});
