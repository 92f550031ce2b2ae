/**
 * Black-box, real runtime: secrets across the fleet. Two api replicas on one PostgreSQL (one
 * secrets key) in front of a runner whose egress goes to the fake internet. A secret set on
 * replica A injects, at the runner's proxy, into requests of a sandbox created through replica
 * B; the audit trail (fetched from the runner) is read through either replica; a new value
 * set through B reaches the runner before the answer; after a kill -9 of the runner, its
 * restart keeps injecting (values sealed on its disk, never in clear); deleting the secret
 * through A stops injection at once.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type FakeInternet, NET, startFakeInternet } from './fake-internet.js';
import { type Server, startServer, until } from './harness.js';
import { localOptions } from './local-runtime.js';
import { ReplicaPair, replicasSkip, runnerReady } from './replicas-support.js';

const DEBIAN = 'local/debian:bookworm';
const VALUE = 'sk-fleet-e2e-5a4b3c2d1e0f9a8b';
const VALUE2 = 'sk-fleet-e2e-rotated-77665544';

describe('secrets across api replicas and a runner (real runtime)', { skip: replicasSkip, timeout: 600_000 }, () => {
  const pair = new ReplicaPair();
  let fi: FakeInternet | undefined;
  let a: Server;
  let b: Server;
  let key: string;
  let id: string;
  let runnerEnv: Record<string, string>;

  const call = (s: Server, method: string, path: string, body?: unknown) => s.api(method, path, { key, body });
  const seen = async (tag: string) =>
    until(
      `a request ${tag} at the fake internet`,
      async () => {
        const got = fi!.log.filter((l) => l.http?.target?.includes(tag)).map((l) => l.http!);
        return got.length ? got : undefined;
      },
      10_000,
    );
  const curl = async (s: Server, tag: string) => {
    const r = await call(s, 'POST', `/api/v1/sandboxes/${id}/exec`, {
      command: `curl -sS --max-time 10 -H "X-Key: $OPENAI" "https://allowed.fake.test/echo?t=${tag}"`,
      options: { timeoutMs: 60_000 },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.exitCode, 0, r.body.stderr);
    assert.ok(!r.text.includes(VALUE) && !r.text.includes(VALUE2), 'the sandbox saw a value');
    return (await seen(`t=${tag}`))[0];
  };

  before(async () => {
    const runnerDataDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
    const o = localOptions(runnerDataDir);
    fi = await startFakeInternet(Number(o.subnet!.split('.')[2]));
    runnerEnv = { SANDBOXD_EGRESS_VIA: fi.via, SANDBOXD_EGRESS_DNS: NET.dns, SANDBOXD_EGRESS_CA_FILE: fi.caFile };
    const started = await pair.start({ nodeName: 'secrets-node', image: DEBIAN, runnerDataDir, runnerEnv });
    a = started.apiA;
    b = started.apiB;
    key = started.key;
  });

  after(async () => {
    await pair.stop();
    await fi?.close();
  });

  it('a secret set on one replica injects into a sandbox made through the other; the audit trail reads on both', async () => {
    const made = await call(a, 'POST', '/api/v1/secrets', { name: 'OPENAI', value: VALUE });
    assert.equal(made.status, 201, made.text);
    const c = await call(b, 'POST', '/api/v1/sandboxes', {
      image: DEBIAN,
      timeoutMs: 600_000,
      network: {
        egress: { allow: [NET.allowed.name] },
        secrets: [{ secret: 'OPENAI', domains: [NET.allowed.name], header: 'Authorization', format: 'Bearer {value}' }],
      },
    });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    const placeholder = c.body.sandbox.network.secrets[0].placeholder;
    const h = await curl(a, 'f1');
    assert.equal(h.headers?.authorization, `Bearer ${VALUE}`);
    assert.equal(h.headers?.['x-key'], placeholder, 'a header rule sets its header only');
    for (const s of [a, b]) {
      const rows = await until('the audit rows from the runner', async () => {
        const l = await call(s, 'GET', `/api/v1/secrets/injections?sandboxId=${id}`);
        assert.equal(l.status, 200, l.text);
        return l.body.injections.length >= 1 ? l.body.injections : undefined;
      });
      assert.deepEqual([rows[0].secret, rows[0].destination, rows[0].status], ['OPENAI', 'allowed.fake.test:443', 200]);
    }
    const env = await call(b, 'POST', `/api/v1/sandboxes/${id}/exec`, { command: 'echo "$OPENAI"' });
    assert.equal(env.body.stdout, `${placeholder}\n`);
  });

  it('a new value through the other replica reaches the runner before the answer', async () => {
    const put = await call(b, 'PUT', '/api/v1/secrets/OPENAI', { value: VALUE2 });
    assert.equal(put.status, 200, put.text);
    assert.equal((await curl(a, 'f2')).headers?.authorization, `Bearer ${VALUE2}`);
  });

  it('a runner killed with -9 and restarted keeps injecting; its disk holds no value in clear', async () => {
    const old = pair.runner!;
    await old.kill('SIGKILL');
    pair.runner = await startServer({
      dataDir: old.dataDir,
      port: old.port,
      env: {
        ...runnerEnv,
        SANDBOXD_ROLE: 'runner',
        SANDBOXD_RUNNER_TOKEN: pair.token,
        SANDBOXD_NODE_NAME: 'secrets-node',
      },
      ready: runnerReady(pair.token),
    });
    const h = await until('the runner to serve the sandbox again', async () => {
      const r = await call(a, 'POST', `/api/v1/sandboxes/${id}/exec`, { command: 'true' });
      return r.status === 200 ? true : undefined;
    });
    assert.ok(h);
    assert.equal((await curl(b, 'f3')).headers?.authorization, `Bearer ${VALUE2}`);
    let inClear = '';
    try {
      inClear = execFileSync('grep', ['-rlI', '-e', VALUE, '-e', VALUE2, old.dataDir], { encoding: 'utf8' });
    } catch {
      // grep found nothing (exit 1)
    }
    assert.equal(inClear, '', "the runner's data dir holds a value in clear");
  });

  it('deleting the secret through one replica stops injection at once', async () => {
    assert.equal((await call(a, 'DELETE', '/api/v1/secrets/OPENAI')).status, 204);
    const h = await curl(b, 'f4');
    assert.equal(h.headers?.authorization, undefined);
    assert.match(String(h.headers?.['x-key']), /^sbx-secret-/);
  });
});
