/**
 * The runner's probes (finding 10 of the review): `/livez` and `/readyz` answer the kubelet
 * without the token and reveal nothing; everything else on the port, `/healthz` and the
 * runner's own health (capacity figures) included, still needs the token.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { FakeDriver } from '../runtime/fake/driver.js';
import { ProcessHost } from '../runtime/processes/host.js';
import { TerminalHost } from '../runtime/terminals/host.js';
import { RunnerServer } from './server.js';

const TOKEN = 'test-runner-token-probes-0123456';
const log = pino({ level: 'silent' });

/** One request with no credentials (unless `headers` has some); the status and body. */
function get(url: string, o: { method?: string; headers?: Record<string, string> } = {}) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(url, { method: o.method ?? 'GET', headers: o.headers }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('runner probes', () => {
  const driver = new FakeDriver();
  const terminals = new TerminalHost({ execTty: (id, o) => driver.execTty(id, o), log });
  const server = new RunnerServer({
    driver,
    terminals,
    processes: ProcessHost.over(driver),
    token: TOKEN,
    nodeName: 'probe-unit-node',
    tls: null,
    log,
  });
  let url = '';
  before(async () => {
    url = await server.listen('127.0.0.1', 0);
  });
  after(() => server.close());

  it('/livez and /readyz answer 200 {"status":"ok"} without the token (and with a wrong one), query strings ignored', async () => {
    for (const path of ['/livez', '/readyz', '/readyz?verbose=1'])
      for (const headers of [{}, { authorization: 'Bearer wrong' }] as Record<string, string>[]) {
        const a = await get(`${url}${path}`, { headers });
        assert.equal(a.status, 200, `${path} ${JSON.stringify(headers)}`);
        assert.deepEqual(JSON.parse(a.body), { status: 'ok' });
      }
    assert.equal((await get(`${url}/readyz`, { method: 'HEAD' })).status, 200);
  });

  it('everything else needs the token: /healthz, the health with its figures, a POST to a probe path', async () => {
    for (const [method, path] of [
      ['GET', '/healthz'],
      ['GET', '/runner/v1/health'],
      ['POST', '/readyz'],
      ['GET', '/livez/x'],
      ['GET', '/runner/v1/livez'],
    ]) {
      const a = await get(`${url}${path}`, { method });
      assert.equal(a.status, 401, `${method} ${path}: ${a.body}`);
    }
    const h = await get(`${url}/runner/v1/health`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(h.status, 200);
    assert.equal(JSON.parse(h.body).node, 'probe-unit-node');
  });

  it('once shutdown begins (drain), /readyz answers 503 `unavailable` with nothing in it; /livez stays 200', async () => {
    server.drain();
    const r = await get(`${url}/readyz`);
    assert.equal(r.status, 503);
    assert.deepEqual(JSON.parse(r.body), { code: 503, kind: 'unavailable', message: 'Not ready' });
    assert.equal((await get(`${url}/livez`)).status, 200);
  });
});
