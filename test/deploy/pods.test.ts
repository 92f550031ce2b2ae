/**
 * The example overlay's pods, started FROM THE RELEASE IMAGE the way each pod spec says, as a
 * node would run them (crun, test/deploy/oci-run.ts): the container's command and args over
 * the image's entrypoint, its env (fieldRefs from the downward API, secretKeyRefs from the
 * rendered Secret's keys, `$(VAR)` expanded), its volume mounts (hostPath volumes as host
 * dirs of this test, emptyDirs as fresh dirs, propagation as written), its pod's and its own
 * securityContext (privileged, runAsUser/Group, readOnlyRootFilesystem,
 * allowPrivilegeEscalation, capabilities), hostNetwork and hostPID; the api gets its service
 * account's token and CA at the in-cluster path and KUBERNETES_SERVICE_HOST/PORT pointing at a
 * fake Kubernetes API over HTTPS (packages/server/test/fake-kube-api.ts).
 *
 * Then every startup/readiness/liveness probe is GET as the kubelet does (test/deploy/kubelet.ts:
 * no credentials); the runner's readiness feeds its endpoint in the runner Service's
 * EndpointSlice, the api discovers it, turns ready, and a sandbox is created through the api
 * pod and runs a command on the runner pod.
 *
 * What differs from a node, and why: the api pod shares this host's network (no pod network
 * here), so both pods' listening ports are free ports of this host given through
 * SANDBOXD_PORT (probes and the EndpointSlice use those), and the api's data volume is mounted
 * at /var/lib/sandboxd-api-pod (sandboxd's instance lock, an abstract socket of the network
 * namespace named from the data dir's path, would otherwise be the runner's); the runner's node IP is 127.0.0.1;
 * the runner gets an e2e slot (bridge, subnet, uid range, cgroup folder:
 * test/e2e/local-runtime.ts) and the test image store as SANDBOXD_IMAGE_DIR, so it does not
 * clash with other tests and builds no image; the database is a PostgreSQL of
 * packages/server/test/postgres.ts; the runtime's default seccomp profile is not applied.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildReleaseImage } from '../../packages/server/src/release/image.js';
import { parseK8sRunners } from '../../packages/server/src/runtime/remote/k8s-discovery.js';
import { FakeKubeApi, slice, TOKEN as KUBE_TOKEN } from '../../packages/server/test/fake-kube-api.js';
import { pgBinDir, startPostgres, type TestPostgres } from '../../packages/server/test/postgres.js';
import { ADMIN_KEY, freePort, IMAGE } from '../e2e/harness.js';
import { localEnv, TEST_IMAGE_DIR, teardownLocal } from '../e2e/local-runtime.js';
import { type Env, type HttpProbe, httpProbes, kubeletGet, type Obj, podSpecOf, probePort, render } from './kubelet.js';
import {
  type Container,
  type ContainerSpec,
  type HostMount,
  imageEnv,
  releaseImageSkip,
  resolveArgv,
  startContainer,
  stopAllContainers,
  type UnpackedImage,
  unpackImage,
} from './oci-run.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const overlay = join(root, 'deploy', 'kubernetes', 'overlays', 'example');

const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8', timeout: 20_000 });
const skip =
  releaseImageSkip ||
  (kubectl.error || kubectl.status !== 0
    ? `kubectl is not installed: ${kubectl.error?.message ?? kubectl.stderr}`
    : false) ||
  (pgBinDir() === null ? 'needs PostgreSQL (scripts/setup.sh --test)' : false) ||
  (spawnSync('openssl', ['version']).error ? 'needs openssl (scripts/setup.sh --test)' : false);

const RUNNER_TOKEN = `pods-test-token-${randomBytes(12).toString('hex')}`;
const NODE = `pods-node-${randomBytes(3).toString('hex')}`;
const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

const label = (p: HttpProbe) => `${p.workload} ${p.container.name} ${p.kind} ${p.probe.httpGet.path}`;

/**
 * Whether this host lets root enter pid 1's cgroup namespace (the runner's `nsenter` prefix):
 * a host whose pid 1 holds capabilities this process lacks refuses it (EACCES).
 */
const canEnterPid1 = spawnSync('nsenter', ['--cgroup=/proc/1/ns/cgroup', 'true']).status === 0;

/** Containers of the test: a wait fails at once, with their logs, when one has exited. */
const started: Container[] = [];

async function until(what: string, fn: () => Promise<boolean>, tries = 600): Promise<void> {
  for (let i = 0; i < tries; i++) {
    const gone = started.find((c) => c.proc.exitCode !== null || c.proc.signalCode !== null);
    if (gone)
      throw new Error(`container ${gone.name} exited (${gone.proc.exitCode}) while waiting for ${what}: ${gone.log()}`);
    if (await fn().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('deploy/kubernetes pods, started from the release image', { skip, timeout: 20 * 60_000 }, () => {
  const objs = skip ? [] : render(overlay);
  const probes = httpProbes(objs);
  const of = (role: string) => probes.filter((p) => p.role === role);
  const workloadOf = (role: string): Obj => {
    const w = objs.find((o) => podSpecOf(o)?.containers.some((c: Obj) => c === of(role)[0]?.container));
    assert.ok(w, `a workload runs SANDBOXD_ROLE=${role}`);
    return w;
  };
  const secret = objs.find((o) => o.kind === 'Secret');
  let img: UnpackedImage | undefined;
  let pg: TestPostgres | undefined;
  const kube = new FakeKubeApi(skip ? undefined : runnersOf().namespace);
  const tmp = mkdtempSync(join(tmpdir(), 'sandboxd-pods-'));
  /** Host dir of the runner's hostPath volumes (its data dir's slot is this dir's). */
  const hostDir = join(tmp, 'node');
  /** Container port -> the host port a role's container listens on. */
  const ports = new Map<string, Map<number, number>>();
  const containers: Container[] = [];
  let runnerPort = 0;
  let apiPort = 0;
  let slotEnv: Record<string, string> = {};
  let runnerSpec: ContainerSpec | undefined;
  const probe = (p: HttpProbe) => kubeletGet(p.container, p.probe, ports.get(p.role)!);

  function runnersOf(): { namespace: string; service: string } {
    const dep = objs.find((o) => o.kind === 'Deployment');
    const c = dep?.spec.template.spec.containers[0];
    const v = (c?.env as Env[] | undefined)?.find((e) => e.name === 'SANDBOXD_RUNNERS')?.value ?? '';
    const parsed = parseK8sRunners(v.replace('$(POD_NAMESPACE)', dep?.metadata.namespace));
    assert.ok(parsed, `SANDBOXD_RUNNERS=${v} names a Kubernetes Service`);
    return parsed;
  }

  const endpoint = (ready: boolean) =>
    slice(`${runnersOf().service}-pods`, [{ ip: '127.0.0.1', node: NODE, ready }], {
      namespace: runnersOf().namespace,
      service: runnersOf().service,
      port: runnerPort,
      portName: objs.find((o) => o.kind === 'Service' && o.metadata.name === runnersOf().service)?.spec.ports[0].name,
    });

  /**
   * The container's env as the kubelet makes it: values with `$(VAR)` of earlier ones,
   * fieldRefs from `fields`, secretKeyRefs from the rendered Secret (`secrets` replaces the
   * overlay's placeholders), then `extra` on top.
   */
  function envOf(c: Obj, fields: Record<string, string>, secrets: Record<string, string>): Record<string, string> {
    const out: Record<string, string> = {};
    for (const e of (c.env ?? []) as Env[]) {
      let v: string | undefined;
      if (e.value !== undefined) v = e.value.replace(/\$\((\w+)\)/g, (m, n) => out[n] ?? m);
      else if (e.valueFrom?.fieldRef) v = fields[e.valueFrom.fieldRef.fieldPath];
      else if (e.valueFrom?.secretKeyRef) {
        const ref = e.valueFrom.secretKeyRef;
        assert.equal(ref.name, secret?.metadata.name, `${c.name}: ${e.name} reads the rendered Secret`);
        assert.ok(ref.key in (secret?.data ?? {}), `${c.name}: the Secret has key ${ref.key}`);
        v = secrets[ref.key];
      }
      assert.ok(v !== undefined, `${c.name}: env ${e.name} resolves`);
      out[e.name] = v;
    }
    return out;
  }

  /** The container's mounts: hostPath volumes under `hostDir`, emptyDirs fresh (owned by `uid`). */
  function mountsOf(pod: Obj, c: Obj, name: string, uid: number | undefined): HostMount[] {
    const mounts: HostMount[] = [];
    for (const m of (c.volumeMounts ?? []) as Obj[]) {
      const v = (pod.volumes as Obj[]).find((x) => x.name === m.name);
      assert.ok(v, `${c.name}: volume ${m.name} is declared`);
      let source: string;
      if (v.hostPath) {
        // The node's own trees are the node's; a sandboxd dir is this test's.
        const p = v.hostPath.path as string;
        if (['/sys/fs/cgroup', '/dev', '/lib/modules', '/run/netns'].includes(p)) {
          if (!existsSync(p)) continue; // a kernel without modules has no /lib/modules
          source = p;
        } else {
          source = join(hostDir, p.replaceAll('/', '_'));
          mkdirSync(source, { recursive: true, mode: 0o711 });
        }
      } else if (v.emptyDir) {
        source = mkdtempSync(join(tmp, `${name}-${m.name}-`));
        if (uid !== undefined) chownSync(source, uid, uid);
      } else throw new Error(`${c.name}: volume ${m.name} is neither hostPath nor emptyDir`);
      mounts.push({ path: m.mountPath, source, readOnly: m.readOnly, propagation: m.mountPropagation });
    }
    return mounts;
  }

  /** The pod's container as the kubelet starts it. */
  function specOf(
    role: string,
    o: {
      fields: Record<string, string>;
      secrets: Record<string, string>;
      extraEnv: Record<string, string>;
      extraMounts: HostMount[];
    },
  ): ContainerSpec {
    const c = of(role)[0].container;
    const pod = podSpecOf(workloadOf(role))!;
    const psc = pod.securityContext ?? {};
    const sc = c.securityContext ?? {};
    const uid = sc.runAsUser ?? psc.runAsUser;
    const gid = sc.runAsGroup ?? psc.runAsGroup;
    if (sc.capabilities?.add?.length) throw new Error(`${c.name}: capabilities.add is not modelled by this test`);
    const name = `${role}-${randomBytes(3).toString('hex')}`;
    let argv = resolveArgv(img!.config, c.command, c.args);
    if (argv[0] === 'nsenter' && !canEnterPid1) {
      // The container is in this host's cgroup namespace already (crun makes it none of its
      // own), which is what the prefix is for; this host refuses the prefix itself.
      console.log(
        `# ${c.name}: this host refuses nsenter into pid 1's namespaces; running ${argv.slice(argv.indexOf('--') + 1).join(' ')} without the prefix`,
      );
      argv = argv.slice(argv.indexOf('--') + 1);
    }
    return {
      name,
      argv,
      env: imageEnv(img!.config, { ...envOf(c, o.fields, o.secrets), ...o.extraEnv }),
      cwd: c.workingDir,
      privileged: sc.privileged === true,
      uid,
      gid,
      readOnlyRoot: sc.readOnlyRootFilesystem === true,
      noNewPrivileges: sc.allowPrivilegeEscalation === false,
      hostNetwork: true, // the api's pod network is this host's here (see the file's comment)
      hostPID: pod.hostPID === true,
      mounts: [...mountsOf(pod, c, name, psc.fsGroup ?? uid), ...o.extraMounts],
    };
  }

  before(async () => {
    const release = await buildReleaseImage({ log: (l) => console.log(`# ${l}`) });
    console.log(`# ${release.archive} ${release.digest}${release.reused ? ' (reused)' : ''}`);
    img = unpackImage(release.archive, release.version);
    pg = await startPostgres();
    const secrets = {
      'database-url': await pg.createDatabase(),
      'runner-token': RUNNER_TOKEN,
      'secrets-key': randomBytes(32).toString('base64'),
    };

    // The fake Kubernetes API over HTTPS, and the api's service account as the kubelet mounts it.
    const sa = join(tmp, 'serviceaccount');
    mkdirSync(sa);
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=kubernetes',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
        '-keyout',
        join(tmp, 'kube.key'),
        '-out',
        join(sa, 'ca.crt'),
      ],
      { stdio: 'ignore' },
    );
    await kube.start({
      tls: { key: readFileSync(join(tmp, 'kube.key'), 'utf8'), cert: readFileSync(join(sa, 'ca.crt'), 'utf8') },
    });
    writeFileSync(join(sa, 'token'), KUBE_TOKEN);
    writeFileSync(join(sa, 'namespace'), runnersOf().namespace);
    kube.apply('ADDED', endpoint(false)); // replaced below once the runner's port is known

    // The runner pod on this "node".
    mkdirSync(hostDir, { mode: 0o711 });
    slotEnv = localEnv(hostDir);
    runnerPort = await freePort();
    const rc = of('runner')[0].container;
    const runnerEnv = {
      SANDBOXD_PORT: String(runnerPort),
      // The e2e slot of hostDir (the runtime's host resources) and the test image store.
      SANDBOXD_IMAGE_DIR: slotEnv.SANDBOXD_IMAGE_DIR,
      SANDBOXD_BRIDGE: slotEnv.SANDBOXD_BRIDGE,
      SANDBOXD_SUBNET: slotEnv.SANDBOXD_SUBNET,
      SANDBOXD_UID_RANGE_START: slotEnv.SANDBOXD_UID_RANGE_START,
      SANDBOXD_CGROUP_PARENT: slotEnv.SANDBOXD_CGROUP_PARENT,
      SANDBOXD_WARM_POOL: 'off',
      SANDBOXD_LOG_LEVEL: 'warn',
    };
    runnerSpec = specOf('runner', {
      fields: { 'status.podIP': '127.0.0.1', 'spec.nodeName': NODE, 'metadata.namespace': runnersOf().namespace },
      secrets,
      extraEnv: runnerEnv,
      extraMounts: [{ path: TEST_IMAGE_DIR, source: TEST_IMAGE_DIR }],
    });
    assert.equal(runnerSpec.env.SANDBOXD_ROLE, 'runner');
    assert.equal(runnerSpec.env.SANDBOXD_HOST, '127.0.0.1', 'the runner listens on its pod IP (the node IP)');
    containers.push(startContainer(img.rootfs, runnerSpec));
    started.push(...containers);
    ports.set('runner', new Map(of('runner').map((p) => [probePort(rc, p.probe), runnerPort])));
    kube.apply('MODIFIED', endpoint(false));

    // The api pod.
    apiPort = await freePort();
    const ac = of('api')[0].container;
    const apiSpec = specOf('api', {
      fields: { 'metadata.namespace': runnersOf().namespace, 'status.podIP': '127.0.0.1' },
      secrets,
      extraEnv: {
        SANDBOXD_HOST: '127.0.0.1',
        SANDBOXD_PORT: String(apiPort),
        SANDBOXD_BOOTSTRAP_API_KEY: ADMIN_KEY,
        SANDBOXD_LOG_LEVEL: 'warn',
        KUBERNETES_SERVICE_HOST: '127.0.0.1',
        KUBERNETES_SERVICE_PORT: new URL(kube.url).port,
      },
      extraMounts: [{ path: SA_DIR, source: sa, readOnly: true }],
    });
    assert.equal(apiSpec.env.SANDBOXD_ROLE, 'api');
    // sandboxd's instance lock is an abstract socket named from the data dir's path, and
    // abstract sockets belong to a network namespace: in a pod of its own the api's
    // /var/lib/sandboxd is no concern of the runner's, here (one network) it would be. Its
    // data volume is mounted one path over.
    const data = apiSpec.mounts.find((m) => m.path === apiSpec.env.SANDBOXD_DATA_DIR);
    assert.ok(data, "the api's data dir is a volume of its pod");
    data.path = `${data.path}-api-pod`;
    apiSpec.env.SANDBOXD_DATA_DIR = data.path;
    containers.push(startContainer(img.rootfs, apiSpec));
    started.push(containers[1]);
    ports.set('api', new Map(of('api').map((p) => [probePort(ac, p.probe), apiPort])));
  });

  after(async () => {
    const base = `http://127.0.0.1:${apiPort}`;
    const auth = { authorization: `Bearer ${ADMIN_KEY}` };
    if (apiPort) {
      kube.apply('MODIFIED', endpoint(true));
      const list = await fetch(`${base}/api/v1/sandboxes`, { headers: auth }).catch(() => null);
      const body = ((await list?.json().catch(() => null)) ?? {}) as { sandboxes?: Array<{ id: string }> };
      for (const s of body.sandboxes ?? [])
        await fetch(`${base}/api/v1/sandboxes/${s.id}`, { method: 'DELETE', headers: auth }).catch(() => {});
    }
    for (const c of containers) {
      if (process.env.SANDBOXD_E2E_KEEP || c.proc.exitCode !== null) console.log(`# ${c.name}:\n${c.log()}`);
      await c.stop();
    }
    // The runner's host resources (bridge, nft table, cgroups, mounts of its run dir), removed
    // by the image's own teardown in a container with the runner's mounts and env.
    if (runnerSpec && img) {
      const t = startContainer(img.rootfs, {
        ...runnerSpec,
        name: `teardown-${randomBytes(3).toString('hex')}`,
        argv: ['node', '--import', 'tsx', 'packages/server/src/teardown.ts'],
        cwd: '/opt/sandboxd',
      });
      await new Promise((r) => t.proc.once('exit', r));
      if (t.proc.exitCode !== 0) console.log(`# teardown: ${t.log()}`);
      await t.stop();
    }
    await stopAllContainers();
    await teardownLocal(hostDir).catch((e) => console.log(`# teardownLocal: ${e}`));
    await kube.close();
    await pg?.stop();
    img?.remove();
    rmSync(tmp, { recursive: true, force: true });
  });

  it("the runner pod's probes answer 200 without credentials; only then is its endpoint ready", async () => {
    // As long as the kubelet waits: its startup probe's period times its failure threshold.
    const startup = of('runner').find((p) => p.kind === 'startupProbe')?.probe;
    const budgetMs = (startup?.periodSeconds ?? 10) * (startup?.failureThreshold ?? 3) * 1000;
    const readiness = of('runner').find((p) => p.kind === 'readinessProbe')!;
    await until(
      'the runner readiness probe to pass',
      async () => (await probe(readiness)).status === 200,
      budgetMs / 200,
    );
    for (const p of of('runner')) {
      const a = await probe(p);
      assert.equal(a.status, 200, `${label(p)}: ${a.body}`);
      assert.deepEqual(JSON.parse(a.body), { status: 'ok' }, label(p));
    }
    // Not ready yet, the api cannot place sandboxes and says so.
    for (const p of of('api').filter((x) => x.kind !== 'readinessProbe')) {
      await until(`${label(p)} to pass`, async () => (await probe(p)).status === 200);
    }
    const a = await probe(of('api').find((p) => p.kind === 'readinessProbe')!);
    assert.equal(a.status, 503, `the api before any runner is ready: ${a.body}`);
    kube.apply('MODIFIED', endpoint(true));
  });

  it('the api pod discovers the runner, turns ready, and a sandbox made through it runs a command on the runner', async () => {
    const readiness = of('api').find((p) => p.kind === 'readinessProbe')!;
    await until('the api readiness probe to pass', async () => (await probe(readiness)).status === 200);
    for (const p of of('api')) {
      const a = await probe(p);
      assert.equal(a.status, 200, `${label(p)}: ${a.body}`);
      assert.deepEqual(JSON.parse(a.body), { status: 'ok' }, label(p));
    }
    const headers = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' };
    const base = `http://127.0.0.1:${apiPort}`;
    const created = await fetch(`${base}/api/v1/sandboxes`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ image: IMAGE }),
    });
    const body = (await created.json()) as { sandbox: { id: string } };
    assert.equal(created.status, 201, JSON.stringify(body));
    const id = body.sandbox.id;
    const exec = await fetch(`${base}/api/v1/sandboxes/${id}/exec`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ command: 'echo hello from the runner pod' }),
    });
    const out = (await exec.json()) as { stdout: string };
    assert.equal(exec.status, 200, JSON.stringify(out));
    assert.equal(out.stdout, 'hello from the runner pod\n');
    const health = (await (await fetch(`${base}/healthz`, { headers })).json()) as {
      runners?: Array<{ node: string }>;
    };
    assert.deepEqual(
      health.runners?.map((r) => r.node),
      [NODE],
      'the sandbox went to the discovered runner',
    );
    const del = await fetch(`${base}/api/v1/sandboxes/${id}`, { method: 'DELETE', headers });
    assert.ok(del.status < 300, `delete answered ${del.status}`);
  });

  it('once the runner endpoint is not ready, the api pod is not ready either but stays alive', async () => {
    kube.apply('MODIFIED', endpoint(false));
    const readiness = of('api').find((p) => p.kind === 'readinessProbe')!;
    await until('the api readiness probe to fail', async () => (await probe(readiness)).status === 503);
    for (const p of of('api').filter((x) => x.kind !== 'readinessProbe'))
      assert.equal((await probe(p)).status, 200, `${label(p)}: alive, only not ready`);
  });
});
