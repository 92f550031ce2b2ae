/**
 * The probes of deploy/kubernetes, run as the kubelet runs them (review finding 10: the
 * runner's probes asked `/healthz` of a port that answers 401 without the runner token, so
 * in a cluster no runner pod would ever be ready, the liveness probe would restart it, the
 * api would discover none and refuse every create).
 *
 * Renders the example overlay, starts a server in the role of each container (the runner as
 * a real process on the runtime of SANDBOXD_E2E_RUNTIME, the api in this process with its
 * discovery pointed at a fake Kubernetes API), and GETs every httpGet probe (startup,
 * readiness, liveness) of every container of every workload on the probe's port with the
 * probe's scheme and `httpHeaders` only: no credentials. Each must answer 200 once the server
 * is ready, with a body that reveals nothing (no token, node name, figures or version). The
 * runner's endpoint in the fake API turns ready only once its readiness probe passed; the
 * api then finds it, turns ready itself, and a sandbox is created through it.
 * Skips, saying why, only when kubectl is not installed.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { buildApp, type Sandboxd } from '../../packages/server/src/app.js';
import { loadConfig } from '../../packages/server/src/config.js';
import { parseK8sRunners } from '../../packages/server/src/runtime/remote/k8s-discovery.js';
import { FakeKubeApi, kubeConfig, slice } from '../../packages/server/test/fake-kube-api.js';
import { ADMIN_KEY, freePort, IMAGE, RUNTIME, type Server, startServer } from '../e2e/harness.js';
import {
  containersOf,
  type Env,
  envValue,
  type HttpProbe,
  httpProbes,
  kubeletGet,
  type Obj,
  probePort,
  render,
} from './kubelet.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const overlay = join(root, 'deploy', 'kubernetes', 'overlays', 'example');
const VERSION = JSON.parse(readFileSync(join(root, 'packages', 'server', 'package.json'), 'utf8')).version as string;

const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8', timeout: 20_000 });
const skip =
  kubectl.error || kubectl.status !== 0
    ? `kubectl is not installed: ${kubectl.error?.message ?? kubectl.stderr}`
    : false;

const TOKEN = `probe-test-token-${randomBytes(12).toString('hex')}`;
const NODE = `probe-node-${randomBytes(3).toString('hex')}`;
/** The roles this test starts a server for. */
const ROLES = ['api', 'runner'];

const label = (p: HttpProbe) => `${p.workload} ${p.container.name} ${p.kind} ${p.probe.httpGet.path}`;

/**
 * A probe's answer reveals nothing: 200 is exactly `{"status":"ok"}`, 503 the error body of
 * `unavailable` with a fixed message; neither holds a digit but the error's status code
 * (no capacity figures, versions, addresses, ports) nor any of `secrets`.
 */
function assertRevealsNothing(what: string, a: { status: number; body: string }, secrets: string[]): void {
  if (a.status === 200) assert.deepEqual(JSON.parse(a.body), { status: 'ok' }, `${what}: the body of a 200`);
  else assert.deepEqual(JSON.parse(a.body), { code: 503, kind: 'unavailable', message: 'Not ready' }, what);
  assert.doesNotMatch(a.body.replace(`"code":${a.status}`, ''), /\d/, `${what}: no figures in ${a.body}`);
  for (const s of secrets) assert.ok(!a.body.includes(s), `${what}: ${a.body} holds ${s}`);
}

/** Polls `fn` every 100 ms until it returns true, at most `tries` times. */
async function until(what: string, fn: () => Promise<boolean>, tries = 300): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (await fn()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('deploy/kubernetes probes, as the kubelet runs them', { skip, timeout: 300_000 }, () => {
  const objs = skip ? [] : render(overlay);
  const probes = httpProbes(objs);
  const of = (role: string) => probes.filter((p) => p.role === role);
  const containerOf = (role: string): Obj => {
    const p = of(role)[0];
    assert.ok(p, `a probed container has SANDBOXD_ROLE=${role}`);
    return p.container;
  };
  /** Container port -> where this test's server of that role listens. */
  const ports = new Map<string, Map<number, number>>();
  const kube = new FakeKubeApi(skip ? undefined : runnersOf().namespace);
  let runner: Server | undefined;
  let api: Sandboxd | undefined;
  let apiPort = 0;
  const apiDir = mkdtempSync(join(tmpdir(), 'sandboxd-probes-api-'));
  const secrets = [TOKEN, NODE, VERSION, ADMIN_KEY, apiDir];
  const probe = (p: HttpProbe) => kubeletGet(p.container, p.probe, ports.get(p.role)!);
  const endpoint = (ready: boolean) => {
    const svcPort = objs.find((o) => o.kind === 'Service' && o.metadata.name === runnersOf().service)?.spec.ports[0];
    return slice(`${runnersOf().service}-x1`, [{ ip: '127.0.0.1', node: NODE, ready }], {
      namespace: runnersOf().namespace,
      service: runnersOf().service,
      port: runner!.port,
      portName: svcPort?.name,
    });
  };

  /** Where the api container's SANDBOXD_RUNNERS points (k8s:<namespace>/<service>). */
  function runnersOf(): { namespace: string; service: string } {
    const dep = objs.find(
      (o) => o.kind === 'Deployment' && envValue(o.spec.template.spec.containers[0], 'SANDBOXD_ROLE') === 'api',
    );
    assert.ok(dep, 'an api Deployment is rendered');
    const value = envValue(dep.spec.template.spec.containers[0], 'SANDBOXD_RUNNERS', {
      'metadata.namespace': dep.metadata.namespace,
    });
    const parsed = parseK8sRunners(value ?? '');
    assert.ok(parsed, `SANDBOXD_RUNNERS=${value} names a Kubernetes Service`);
    return parsed;
  }

  before(async () => {
    await kube.start();
    // The runner, in the role its container names; its readiness is polled with the token here.
    const rc = containerOf('runner');
    runner = await startServer({
      env: { SANDBOXD_ROLE: envValue(rc, 'SANDBOXD_ROLE')!, SANDBOXD_RUNNER_TOKEN: TOKEN, SANDBOXD_NODE_NAME: NODE },
      ready: { path: '/runner/v1/health', headers: { authorization: `Bearer ${TOKEN}` } },
    });
    ports.set('runner', new Map(of('runner').map((p) => [probePort(rc, p.probe), runner!.port])));
    // Its pod is not ready until its readiness probe passes: the endpoint is listed not ready.
    kube.apply('ADDED', endpoint(false));

    // The api, with the env its container sets (secrets from the test, host paths and the
    // database replaced by a temporary dir), its discovery asking the fake Kubernetes API.
    const ac = containerOf('api');
    const dep = objs.find((o) => o.kind === 'Deployment' && o.spec.template.spec.containers.includes(ac))!;
    const env: Record<string, string> = {};
    for (const e of ac.env as Env[]) {
      const v = envValue(ac, e.name, { 'metadata.namespace': dep.metadata.namespace });
      if (v !== undefined) env[e.name] = v;
    }
    apiPort = await freePort();
    Object.assign(env, {
      SANDBOXD_HOST: '127.0.0.1',
      SANDBOXD_PORT: String(apiPort),
      SANDBOXD_DATA_DIR: apiDir,
      SANDBOXD_RUNNER_TOKEN: TOKEN,
      SANDBOXD_BOOTSTRAP_API_KEY: ADMIN_KEY,
      SANDBOXD_WARM_POOL: 'off',
    });
    delete env.SANDBOXD_DATABASE_URL;
    const config = loadConfig(env);
    assert.equal(config.role, 'api');
    api = await buildApp({
      config,
      logger: pino({ level: 'silent' }),
      runners: { kubeConfig: kubeConfig(kube.url) },
    });
    await api.start();
    await api.http.listen({ host: '127.0.0.1', port: apiPort });
    ports.set('api', new Map(of('api').map((p) => [probePort(ac, p.probe), apiPort])));
  });

  after(async () => {
    if (api) {
      // A test that failed half-way may have left a sandbox: delete it through the api, which
      // needs the runner's endpoint ready again (the last test takes it out).
      if (runner) {
        kube.apply('MODIFIED', endpoint(true));
        await until('the api to see the runner again', async () =>
          api!.fleet!.runners().some((r) => r.state === 'up'),
        ).catch(() => {});
      }
      const auth = { authorization: `Bearer ${ADMIN_KEY}` };
      const list = await fetch(`http://127.0.0.1:${apiPort}/api/v1/sandboxes`, { headers: auth }).catch(() => null);
      const body = ((await list?.json().catch(() => null)) ?? {}) as { sandboxes?: Array<{ id: string }> };
      for (const s of body.sandboxes ?? [])
        await fetch(`http://127.0.0.1:${apiPort}/api/v1/sandboxes/${s.id}`, { method: 'DELETE', headers: auth });
      await api.close();
    }
    await runner?.stop();
    await kube.close();
    rmSync(apiDir, { recursive: true, force: true });
  });

  it('every container of every workload has httpGet readiness and liveness probes on its ports, in the scheme it serves', () => {
    const containers = containersOf(objs);
    assert.ok(containers.length >= 2, 'the api and runner containers are rendered');
    for (const { workload, container: c } of containers) {
      for (const k of ['readinessProbe', 'livenessProbe'])
        assert.ok(c[k]?.httpGet, `${workload} ${c.name} has an httpGet ${k}`);
      const tls = (c.env as Env[]).some((e) => e.name === 'SANDBOXD_TLS_CERT');
      for (const p of probes.filter((x) => x.container === c)) {
        probePort(c, p.probe);
        assert.equal(
          String(p.probe.httpGet.scheme ?? 'HTTP').toUpperCase(),
          tls ? 'HTTPS' : 'HTTP',
          `${label(p)}: the scheme of a server ${tls ? 'with' : 'without'} SANDBOXD_TLS_CERT`,
        );
        assert.ok(ROLES.includes(p.role), `${label(p)}: role ${p.role} has a server in this test`);
      }
    }
  });

  it('no probe names a path that answers 401 or 403 without credentials', async () => {
    assert.ok(probes.length > 0);
    for (const p of probes) {
      const a = await probe(p);
      assert.ok(a.status !== 401 && a.status !== 403, `${label(p)} answers ${a.status} without credentials: ${a.body}`);
    }
  });

  it("the runner's probes answer 200 without credentials and reveal nothing; only then is its endpoint ready", async () => {
    // No runner is ready yet: the api cannot create sandboxes, and says so without details.
    for (const p of of('api').filter((x) => x.kind === 'readinessProbe')) {
      const a = await probe(p);
      assert.equal(a.status, 503, `${label(p)} before any runner is ready: ${a.body}`);
      assertRevealsNothing(label(p), a, secrets);
    }
    for (const p of of('runner')) {
      const a = await probe(p);
      assert.equal(a.status, 200, `${label(p)}: ${a.body}`);
      assertRevealsNothing(label(p), a, secrets);
    }
    // The kubelet reports the pod ready; the EndpointSlice controller marks its endpoint ready.
    kube.apply('MODIFIED', endpoint(true));
  });

  it('the api finds the ready runner, turns ready, answers its probes with nothing in them, and creates a sandbox on it', async () => {
    const readiness = of('api').find((p) => p.kind === 'readinessProbe')!;
    await until('the api readiness probe to pass', async () => (await probe(readiness)).status === 200);
    for (const p of of('api')) {
      const a = await probe(p);
      assert.equal(a.status, 200, `${label(p)}: ${a.body}`);
      assertRevealsNothing(label(p), a, secrets);
    }
    const auth = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' };
    const base = `http://127.0.0.1:${apiPort}`;
    const created = await fetch(`${base}/api/v1/sandboxes`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ image: IMAGE }),
    });
    const body = (await created.json()) as { sandbox: { id: string } };
    assert.equal(created.status, 201, JSON.stringify(body));
    const id = body.sandbox.id;
    assert.equal((await api!.store.getSandbox(id))?.runner, NODE, 'the sandbox lives on the discovered runner');
    if (RUNTIME === 'local') {
      const exec = await fetch(`${base}/api/v1/sandboxes/${id}/exec`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ command: 'echo hello from the probed runner' }),
      });
      const out = (await exec.json()) as { stdout: string };
      assert.equal(exec.status, 200, JSON.stringify(out));
      assert.equal(out.stdout, 'hello from the probed runner\n');
    }
    const del = await fetch(`${base}/api/v1/sandboxes/${id}`, { method: 'DELETE', headers: auth });
    assert.ok(del.status < 300, `delete answered ${del.status}`);
  });

  it("/healthz keeps its contracts: the api's reports capacity to anyone and its runners to an admin, the runner's stays behind the token", async () => {
    const anon = await fetch(`http://127.0.0.1:${apiPort}/healthz`);
    const anonHealth = (await anon.json()) as Record<string, unknown>;
    assert.equal(anon.status, 200);
    assert.ok(anonHealth.capacity, 'capacity is reported to anyone');
    assert.equal(anonHealth.runners, undefined, "runners' addresses and node names are not");
    const h = await fetch(`http://127.0.0.1:${apiPort}/healthz`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    const health = (await h.json()) as { status: string; capacity?: unknown; runners?: Array<{ node: string }> };
    assert.equal(h.status, 200);
    assert.deepEqual(
      health.runners?.map((r) => r.node),
      [NODE],
    );
    const r = await fetch(`${runner!.baseUrl}/healthz`);
    assert.equal(r.status, 401);
    const rh = await fetch(`${runner!.baseUrl}/runner/v1/health`);
    assert.equal(rh.status, 401, 'the runner health (capacity figures) needs the token');
  });

  it('once the runner endpoint is not ready again, the api leaves it and is not ready either', async () => {
    kube.apply('MODIFIED', endpoint(false));
    const readiness = of('api').find((p) => p.kind === 'readinessProbe')!;
    await until('the api readiness probe to fail', async () => (await probe(readiness)).status === 503);
    assertRevealsNothing(label(readiness), await probe(readiness), secrets);
    for (const p of of('api').filter((x) => x.kind !== 'readinessProbe'))
      assert.equal((await probe(p)).status, 200, `${label(p)}: alive, only not ready`);
  });
});
