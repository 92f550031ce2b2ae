import assert from 'node:assert/strict';
import { request, type ClientRequest } from 'node:http';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import { get, IDS, OWNER_KEY, startFixture, type Fixture } from '../../test/proxy.js';

const LIMIT = 4;

/** Waits (bounded: 200 tries of 25 ms) until `cond` holds. */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 25));
  assert.ok(cond(), `timed out waiting for ${what}`);
}

describe('port proxy: each sandbox gets a bounded share of proxied connections', () => {
  let f: Fixture;
  const held: ClientRequest[] = [];
  before(async () => (f = await startFixture({ maxConnsPerSandbox: LIMIT })));
  after(async () => {
    for (const r of held) r.destroy();
    await f.close();
  });

  /** A request to the noisy sandbox that the stand-in never answers (it holds `/slow`). */
  const hold = () => {
    const r = request({
      host: '127.0.0.1',
      port: f.port,
      path: '/slow',
      headers: { host: f.host(IDS.pub) },
      agent: false,
    });
    r.on('error', () => {});
    r.end();
    held.push(r);
  };
  const slowSeen = () => f.seen.filter((s) => s.url === '/slow').length;

  it('a noisy sandbox at its share gets 503 capacity with Retry-After; a neighbour (same account) still answers', async () => {
    for (let i = 0; i < LIMIT; i++) hold();
    await until(() => slowSeen() === LIMIT, `${LIMIT} held requests at the sandbox`);

    const over = await get(f.port, f.host(IDS.pub), { path: '/echo' });
    assert.equal(over.status, 503);
    assert.equal(over.headers['x-sandboxd-proxy'], 'error');
    assert.equal(over.headers['retry-after'], '1');
    const body = JSON.parse(over.body);
    assert.equal(body.kind, 'capacity');
    assert.deepEqual(
      [body.details.resource, body.details.sandboxId, body.details.limit, body.details.retryAfterMs],
      ['proxy_connections', IDS.pub, LIMIT, 1000],
    );
    assert.match(body.message, new RegExp(`${LIMIT} proxied connections`));

    const ws = await new Promise<number>((resolve) => {
      const w = new WebSocket(`ws://127.0.0.1:${f.port}/ws`, { headers: { host: f.host(IDS.pub) } });
      w.once('unexpected-response', (_q, res) => resolve(res.statusCode ?? 0));
      w.once('open', () => {
        w.close();
        resolve(101);
      });
      w.once('error', () => resolve(-1));
    });
    assert.equal(ws, 503, 'upgrades count against the same share');

    const neighbour = await get(f.port, f.host(IDS.priv), { path: '/echo', headers: { 'x-sandboxd-key': OWNER_KEY } });
    assert.equal(neighbour.status, 200, 'the neighbour is unaffected');
    assert.equal(slowSeen(), LIMIT, 'the refused request never reached the sandbox');
  });

  it('the share comes back as its connections end', async () => {
    held.shift()?.destroy();
    let r = await get(f.port, f.host(IDS.pub), { path: '/echo' });
    for (let i = 0; i < 200 && r.status === 503; i++) {
      await new Promise((res) => setTimeout(res, 25));
      r = await get(f.port, f.host(IDS.pub), { path: '/echo' });
    }
    assert.equal(r.status, 200);
  });
});
