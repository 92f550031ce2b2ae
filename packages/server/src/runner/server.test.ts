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
import { CONFORMANCE_LIMITS } from '../runtime/conformance.js';
import { RemoteDriver } from '../runtime/remote/driver.js';
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

describe('runner wire: isolation tiers', () => {
  const driver = new FakeDriver();
  const server = new RunnerServer({
    driver,
    terminals: new TerminalHost({ execTty: (id, o) => driver.execTty(id, o), log }),
    processes: ProcessHost.over(driver),
    token: TOKEN,
    nodeName: 'tiers-unit-node',
    tls: null,
    log,
  });
  let remote: RemoteDriver;
  before(async () => {
    remote = new RemoteDriver({ url: await server.listen('127.0.0.1', 0), token: TOKEN });
    await remote.init();
  });
  after(async () => {
    await remote.close();
    await server.close();
  });

  it("carries the tier of a create, pause to disk, fork and the runner's tiers (health) over the wire", async () => {
    assert.deepEqual(
      remote.isolations().map((t) => [t.isolation, t.memorySnapshots]),
      [
        ['container', false],
        ['gvisor', true],
      ],
    );
    assert.deepEqual((await remote.health()).isolations, driver.isolations!());
    const s = await remote.create({
      id: 'sbx_tierwire',
      image: 'local/busybox:latest',
      env: {},
      volumes: [],
      limits: CONFORMANCE_LIMITS,
      isolation: 'gvisor',
    });
    assert.equal(s.isolation, 'gvisor');
    await remote.pause(s.id, { memory: 'disk' });
    assert.equal((await remote.inspect(s.id))?.pausedMemory, 'disk');
    await remote.resume(s.id);
    await remote.exec(s.id, 'echo 7 > /n');
    const forks = await remote.fork(s.id, [{ id: 'sbx_tierfork', hostname: 'f1' }]);
    assert.equal(forks[0].id, 'sbx_tierfork');
    assert.ok(forks[0].createdAt instanceof Date);
    assert.equal((await remote.exec('sbx_tierfork', 'cat /n')).stdout, '7\n');
    const c = await remote.create({
      id: 'sbx_tiercont',
      image: 'local/busybox:latest',
      env: {},
      volumes: [],
      limits: CONFORMANCE_LIMITS,
    });
    await assert.rejects(remote.pause(c.id, { memory: 'disk' }), { kind: 'validation' });
    await assert.rejects(remote.fork(c.id, [{ id: 'sbx_tierx' }]), { kind: 'validation' });
    for (const id of ['sbx_tierwire', 'sbx_tierfork', 'sbx_tiercont']) await remote.delete(id);
  });
});
