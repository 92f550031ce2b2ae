/**
 * Black-box, real runtime: one `api` process over TWO `runner` processes (each its own data
 * dir, so its own bridge, subnet and uid range), on SQLite. Everything goes through the
 * api's public HTTP API, and each runner is asked what it holds (its own `list`):
 * - creates spread over both runners; exec, files and the port proxy reach sandboxes on both;
 * - the sandboxes of a volume land where the volume lives, and see its files;
 * - kill -9 of the runner holding the volume: after SANDBOXD_RUNNER_DOWN_MS its sandboxes
 *   are `error` with their unused minutes refunded (the ledger), new creates go to the other
 *   runner, a create with the volume answers 503 naming the runner;
 * - once it is back (same data dir and port) it holds nothing the records do not: the
 *   sandboxes it adopted are deleted, and the volume's data is still there.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { IMAGE, newAccount, RUNTIME, type Server, startServer, until } from './harness.js';
import { hget, waitListening } from './proxy-support.js';

const TOKEN = `e2e-fleet-token-${randomBytes(8).toString('hex')}`;
const auth = { authorization: `Bearer ${TOKEN}` };
const runnerReady = { path: '/runner/v1/health', headers: auth };
// A runner is down once silent this long; a health check waits half of it (a runner slowed by
// a loaded CI host must not count as down, or placement skips it and the spread test fails).
const DOWN_MS = 6000;

describe('api over two runners: placement, volumes, a runner killed and back (real runtime)', {
  skip: RUNTIME !== 'local' ? 'needs SANDBOXD_E2E_RUNTIME=local' : undefined,
  timeout: 600_000,
}, () => {
  const dirs = {
    a: mkdtempSync(join(tmpdir(), 'sandboxd-e2e-fleet-a-')),
    b: mkdtempSync(join(tmpdir(), 'sandboxd-e2e-fleet-b-')),
  };
  const env = (node: string) => ({ SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: TOKEN, SANDBOXD_NODE_NAME: node });
  const runners: Record<'a' | 'b', Server> = {} as never;
  let api: Server;
  let key: string;
  const call = (method: string, path: string, body?: unknown) => api.api(method, path, { key, body });
  /** Ids of the sandboxes runner `r` holds, as it says itself. */
  const held = async (r: 'a' | 'b'): Promise<string[]> => {
    const res = await fetch(`${runners[r].baseUrl}/runner/v1/list`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: '{"args":[]}',
    });
    assert.equal(res.status, 200);
    return ((await res.json()) as { result: Array<{ id: string }> }).result.map((s) => s.id).sort();
  };
  const whereIs = async (id: string): Promise<'a' | 'b'> => {
    const [onA, onB] = [await held('a'), await held('b')];
    assert.ok(onA.includes(id) !== onB.includes(id), `${id} is on exactly one runner`);
    return onA.includes(id) ? 'a' : 'b';
  };
  const create = async (body: Record<string, unknown> = {}) => {
    const c = await call('POST', '/api/v1/sandboxes', { image: IMAGE, timeoutMs: 1_800_000, ...body });
    assert.equal(c.status, 201, c.text);
    return c.body.sandbox.id as string;
  };
  const exec = async (id: string, command: string) => {
    const e = await call('POST', `/api/v1/sandboxes/${id}/exec`, { command });
    assert.equal(e.status, 200, e.text);
    return e.body as { stdout: string; exitCode: number };
  };

  const made: string[] = [];
  const volumeSandboxes: string[] = [];
  let volumeRunner: 'a' | 'b';
  let other: 'a' | 'b';

  before(async () => {
    runners.a = await startServer({ dataDir: dirs.a, env: env('e2e-fleet-a'), ready: runnerReady });
    runners.b = await startServer({ dataDir: dirs.b, env: env('e2e-fleet-b'), ready: runnerReady });
    api = await startServer({
      env: {
        SANDBOXD_ROLE: 'api',
        SANDBOXD_RUNNERS: `${runners.a.baseUrl},${runners.b.baseUrl}`,
        SANDBOXD_RUNNER_TOKEN: TOKEN,
        SANDBOXD_RUNNER_DOWN_MS: String(DOWN_MS),
      },
    });
    key = (await newAccount(api, { tokens: 1_000_000, plan: 'PRO' })).key;
  });
  after(async () => {
    await api?.stop();
    await runners.a?.stop();
    await runners.b?.stop();
  });

  it('/healthz lists both runners up, by node name, to an admin', async () => {
    const h = await api.api('GET', '/healthz');
    assert.equal(h.status, 200);
    assert.deepEqual(
      h.body.runners.map((r: { node: string; state: string }) => [r.node, r.state]),
      [
        ['e2e-fleet-a', 'up'],
        ['e2e-fleet-b', 'up'],
      ],
    );
    assert.ok(h.body.capacity.addresses.free > 0);
  });

  it('spreads creates over both runners; exec, files and the port proxy reach each', async () => {
    for (let i = 0; i < 4; i++) made.push(await create());
    const [onA, onB] = [await held('a'), await held('b')];
    assert.equal(onA.length, 2, `a holds ${onA}`);
    assert.equal(onB.length, 2, `b holds ${onB}`);
    assert.deepEqual([...onA, ...onB].sort(), [...made].sort());
    for (const id of [onA[0], onB[0]]) {
      assert.equal((await exec(id, 'echo "hi from $(hostname)"')).stdout.startsWith('hi from '), true);
      const data = randomBytes(256 * 1024 + 3);
      const url = `${api.baseUrl}/api/v1/sandboxes/${id}/files/content?path=${encodeURIComponent('/tmp/f.bin')}`;
      const put = await fetch(url, { method: 'PUT', headers: { authorization: `Bearer ${key}` }, body: data });
      assert.ok(put.status === 200 || put.status === 201, `${put.status}`);
      const got = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
      assert.ok(Buffer.from(await got.arrayBuffer()).equals(data), 'download = upload');
      await exec(id, `mkdir -p /www && echo "page of ${id}" > /www/index.html`);
      await call('POST', `/api/v1/sandboxes/${id}/exec`, {
        command: 'busybox httpd -f -p 8000 -h /www',
        options: { background: true },
      });
      const sb = await call('GET', `/api/v1/sandboxes/${id}`);
      const host = String(sb.body.sandbox.publicAccessUrlTemplate).replace('{{PORT}}', '8000').split('/')[0];
      await waitListening(api, host);
      const r = await hget(api.port, host, { path: '/' });
      assert.equal(r.status, 200);
      assert.equal(r.body, `page of ${id}\n`);
    }
  });

  it("a volume's sandboxes land on the runner it lives on and share its files", async () => {
    const first = await create({ volumes: { '/data': 'shared' } });
    volumeSandboxes.push(first);
    volumeRunner = await whereIs(first);
    other = volumeRunner === 'a' ? 'b' : 'a';
    await exec(first, 'echo kept > /data/note');
    // The other runner is now less loaded: the volume still decides.
    for (let i = 0; i < 2; i++) {
      const id = await create({ volumes: { '/mnt/v': 'shared' } });
      volumeSandboxes.push(id);
      assert.equal(await whereIs(id), volumeRunner);
      assert.equal((await exec(id, 'cat /mnt/v/note')).stdout, 'kept\n');
    }
    const free = await create();
    assert.equal(await whereIs(free), other, 'without the volume: the less loaded runner');
    made.push(free);
  });

  it('kill -9 of that runner: its sandboxes turn error with refunds, creates go to the other, its volume answers 503', async () => {
    const doomed = [...(await held(volumeRunner))];
    assert.ok(doomed.length >= 5, `${doomed}`);
    await runners[volumeRunner].kill('SIGKILL');
    for (const id of doomed)
      await until(`${id} to be error`, async () => {
        const s = await call('GET', `/api/v1/sandboxes/${id}`);
        return s.body?.sandbox?.state === 'error' ? true : undefined;
      });
    const ledger = await call('GET', '/api/v1/account/ledger?limit=200');
    for (const id of doomed) {
      const refunds = ledger.body.entries.filter(
        (e: { sandboxId: string; reason: string }) => e.sandboxId === id && e.reason === 'sandbox.refund',
      );
      assert.equal(refunds.length, 1, `one refund for ${id}`);
      assert.ok(refunds[0].delta >= 20, `most of the 30 minutes back: ${refunds[0].delta}`);
    }
    for (const id of await held(other)) {
      const s = await call('GET', `/api/v1/sandboxes/${id}`);
      assert.equal(s.body.sandbox.state, 'started', 'the other runner is untouched');
    }
    const h = await api.api('GET', '/healthz');
    const down = h.body.runners.find((r: { node: string }) => r.node === `e2e-fleet-${volumeRunner}`);
    assert.equal(down.state, 'down');
    assert.ok(down.downForMs >= DOWN_MS);
    const next = await create();
    assert.ok((await held(other)).includes(next));
    made.push(next);
    const refused = await call('POST', '/api/v1/sandboxes', { image: IMAGE, volumes: { '/data': 'shared' } });
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.body.kind, 'unavailable');
    assert.match(refused.body.message, new RegExp(`Runner e2e-fleet-${volumeRunner}, where volume shared lives`));
  });

  it('back after a restart: it holds nothing the records do not, and the volume kept its data', async () => {
    const before = { port: runners[volumeRunner].port, dir: dirs[volumeRunner] };
    // The kill above did not happen when that test failed first: this restart replaces the
    // runner, so the old process must not be left running untracked.
    await runners[volumeRunner].kill('SIGKILL');
    runners[volumeRunner] = await startServer({
      dataDir: before.dir,
      port: before.port,
      env: env(`e2e-fleet-${volumeRunner}`),
      ready: runnerReady,
    });
    await until('the runner to be up again', async () => {
      const h = await api.api('GET', '/healthz');
      return h.body.runners.every((r: { state: string }) => r.state === 'up') ? true : undefined;
    });
    // The api's reconcile (nudged when the runner answers) deletes what the records say is gone.
    await until('the adopted error sandboxes to be deleted', async () =>
      (await held(volumeRunner)).length === 0 ? true : undefined,
    );
    const live = await call('GET', '/api/v1/sandboxes?state=started&limit=100');
    const started = live.body.sandboxes.map((s: { id: string }) => s.id).sort();
    assert.deepEqual(started, await held(other), 'every started record is on the runner that answered all along');
    const again = await create({ volumes: { '/data': 'shared' } });
    assert.equal(await whereIs(again), volumeRunner, 'the volume still lives there');
    assert.equal((await exec(again, 'cat /data/note')).stdout, 'kept\n');
  });
});
