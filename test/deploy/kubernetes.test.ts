/**
 * deploy/kubernetes, offline: renders the example overlay with `kubectl kustomize` (no
 * cluster), checks every object against the vendored strict schemas of its kind
 * (deploy/kubernetes/schemas, scripts/gen-k8s-schemas.ts) and asserts how the pieces are
 * wired: the API's settings, the runner DaemonSet's privileges and host paths, the headless
 * runner Service, the RBAC that discovery needs and the Ingress's wildcard host.
 * Skips, saying why, only when kubectl is not installed.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Ajv, type ValidateFunction } from 'ajv';
import { parseAllDocuments } from 'yaml';
import { writeE2eOverlay } from './e2e-overlay.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const overlay = join(root, 'deploy', 'kubernetes', 'overlays', 'example');
const schemaDir = join(root, 'deploy', 'kubernetes', 'schemas');

const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8', timeout: 20_000 });
const skip =
  kubectl.error || kubectl.status !== 0
    ? `kubectl is not installed: ${kubectl.error?.message ?? kubectl.stderr}`
    : false;

type Obj = Record<string, any>;
type Env = { name: string; value?: string; valueFrom?: Obj };

function render(dir: string): Obj[] {
  const out = execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8', timeout: 60_000 });
  const docs = parseAllDocuments(out);
  for (const d of docs) assert.deepEqual(d.errors, [], 'the rendered YAML parses');
  return docs.map((d) => d.toJS() as Obj).filter((o) => o !== null);
}

function validators(): Map<string, ValidateFunction> {
  const ajv = new Ajv({ allErrors: true, strict: false });
  const out = new Map<string, ValidateFunction>();
  for (const file of readdirSync(schemaDir).filter((f) => f.endsWith('.json'))) {
    const schema = JSON.parse(readFileSync(join(schemaDir, file), 'utf8'));
    const [, head] = schema.allOf as [
      unknown,
      { properties: { apiVersion: { const: string }; kind: { const: string } } },
    ];
    out.set(`${head.properties.apiVersion.const}/${head.properties.kind.const}`, ajv.compile(schema));
  }
  return out;
}

function check(validate: Map<string, ValidateFunction>, o: Obj): string[] {
  const v = validate.get(`${o.apiVersion}/${o.kind}`);
  if (!v) return [`no schema for ${o.apiVersion} ${o.kind}: add it to scripts/gen-k8s-schemas.ts`];
  return v(o) ? [] : (v.errors ?? []).map((e) => `${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);
}

const find = (objs: Obj[], kind: string, name: string) => {
  const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(o, `${kind} ${name} is rendered`);
  return o;
};
const envOf = (c: Obj): Map<string, Env> => new Map((c.env as Env[]).map((e) => [e.name, e]));
const selects = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([k, v]) => labels?.[k] === v);

/** The value Kubernetes gives an env var: `$(NAME)` of an earlier one is expanded. */
function resolveEnv(env: Env[], name: string, pod: { namespace: string }): string {
  const values = new Map<string, string>();
  for (const e of env) {
    let v: string | undefined;
    if (e.value !== undefined) v = e.value.replace(/\$\((\w+)\)/g, (m, n) => values.get(n) ?? m);
    else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.namespace') v = pod.namespace;
    if (v !== undefined) values.set(e.name, v);
  }
  const v = values.get(name);
  assert.ok(v !== undefined, `${name} has a value`);
  return v;
}

/** The Secret a secretKeyRef names, which must be rendered and hold the key. */
function secretRef(objs: Obj[], e: Env | undefined): { name: string; key: string } {
  const ref = e?.valueFrom?.secretKeyRef;
  assert.ok(ref, `${e?.name} comes from a Secret`);
  const secret = find(objs, 'Secret', ref.name);
  assert.ok(
    ref.key in (secret.data ?? {}) || ref.key in (secret.stringData ?? {}),
    `Secret ${ref.name} has ${ref.key}`,
  );
  return { name: ref.name, key: ref.key };
}

describe('deploy/kubernetes (offline render + schema check)', { skip }, () => {
  const objs = skip ? [] : render(overlay);
  const validate = skip ? new Map() : validators();

  it('renders every kind the deployment needs, all in one namespace', () => {
    const kinds = objs.map((o) => o.kind).sort();
    for (const k of [
      'Namespace',
      'Deployment',
      'DaemonSet',
      'Service',
      'Ingress',
      'ServiceAccount',
      'Role',
      'RoleBinding',
      'Secret',
    ])
      assert.ok(kinds.includes(k), `${k} is rendered (have ${kinds.join(', ')})`);
    const ns = objs.find((o) => o.kind === 'Namespace')!.metadata.name;
    for (const o of objs.filter((x) => x.kind !== 'Namespace'))
      assert.equal(o.metadata.namespace, ns, `${o.kind} ${o.metadata.name}`);
  });

  it('every object passes the strict schema of its kind', () => {
    const problems = objs.flatMap((o) => check(validate, o).map((p) => `${o.kind} ${o.metadata?.name}: ${p}`));
    assert.deepEqual(problems, []);
  });

  it('the schema check catches a misspelt field, a wrong type and a missing required field', () => {
    const ds = structuredClone(find(objs, 'DaemonSet', 'sandboxd-runner'));
    ds.spec.template.spec.hostPid = true;
    assert.match(check(validate, ds).join('\n'), /additionalProperty.*hostPid/);
    const dep = structuredClone(find(objs, 'Deployment', 'sandboxd-api'));
    dep.spec.replicas = 'three';
    delete dep.spec.template.spec.containers[0].name;
    const errs = check(validate, dep).join('\n');
    assert.match(errs, /\/spec\/replicas must be integer/);
    assert.match(errs, /missingProperty":"name"/);
    assert.match(
      check(validate, { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x' } }).join(),
      /no schema for v1 Pod/,
    );
  });

  it('the API: N replicas with role api, the database URL and runner token from the Secret, runners from the k8s Service, /readyz and /livez probes', () => {
    const dep = find(objs, 'Deployment', 'sandboxd-api');
    assert.ok(dep.spec.replicas >= 2, 'several replicas');
    const pod = dep.spec.template.spec;
    const [c] = pod.containers;
    const env = envOf(c);
    assert.equal(env.get('SANDBOXD_ROLE')?.value, 'api');
    secretRef(objs, env.get('SANDBOXD_DATABASE_URL'));
    const apiToken = secretRef(objs, env.get('SANDBOXD_RUNNER_TOKEN'));
    const runners = resolveEnv(c.env, 'SANDBOXD_RUNNERS', { namespace: dep.metadata.namespace });
    assert.equal(runners, `k8s:${dep.metadata.namespace}/sandboxd-runner`);
    find(objs, 'Service', 'sandboxd-runner');
    const ports = new Set(c.ports.flatMap((p: Obj) => [p.name, p.containerPort]));
    // What each probe answers, without credentials, is run in test/deploy/probes.test.ts.
    assert.equal(c.readinessProbe.httpGet.path, '/readyz');
    assert.equal(c.livenessProbe.httpGet.path, '/livez');
    for (const probe of [c.startupProbe, c.readinessProbe, c.livenessProbe])
      assert.ok(ports.has(probe.httpGet.port), 'the probe names a container port');
    assert.ok(c.resources.requests.cpu && c.resources.requests.memory && c.resources.limits.memory);
    // The runners and the replicas share one token.
    const runnerC = find(objs, 'DaemonSet', 'sandboxd-runner').spec.template.spec.containers[0];
    assert.deepEqual(secretRef(objs, envOf(runnerC).get('SANDBOXD_RUNNER_TOKEN')), apiToken);
    // The image is the overlay's, not the base's placeholder name.
    for (const x of [c, runnerC]) assert.match(x.image, /^registry\.example\.com\/sandboxd:/);
  });

  it('the API Service selects the API pods on a named container port', () => {
    const dep = find(objs, 'Deployment', 'sandboxd-api');
    const svc = find(objs, 'Service', 'sandboxd-api');
    assert.ok(selects(svc.spec.selector, dep.spec.template.metadata.labels));
    const names = dep.spec.template.spec.containers[0].ports.map((p: Obj) => p.name);
    for (const p of svc.spec.ports) assert.ok(names.includes(p.targetPort), `targetPort ${p.targetPort}`);
  });

  it('the runner DaemonSet: labelled nodes, privileged, host PID and network, host data dir, node name from the downward API', () => {
    const ds = find(objs, 'DaemonSet', 'sandboxd-runner');
    const pod = ds.spec.template.spec;
    assert.deepEqual(pod.nodeSelector, { 'sandboxd.io/runner': 'true' });
    assert.equal(pod.hostPID, true);
    assert.equal(pod.hostNetwork, true);
    assert.equal(pod.dnsPolicy, 'ClusterFirstWithHostNet');
    const [c] = pod.containers;
    assert.equal(c.securityContext.privileged, true);
    const env = envOf(c);
    assert.equal(env.get('SANDBOXD_ROLE')?.value, 'runner');
    assert.equal(env.get('SANDBOXD_NODE_NAME')?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName');
    const dataDir = env.get('SANDBOXD_DATA_DIR')?.value;
    const mount = c.volumeMounts.find((m: Obj) => m.mountPath === dataDir);
    assert.ok(mount, 'the data dir is a mounted volume');
    assert.equal(mount.mountPropagation, 'Bidirectional', 'mounts made under it reach the host');
    const vol = pod.volumes.find((v: Obj) => v.name === mount.name);
    assert.ok(vol.hostPath?.path, 'the data dir is a host directory');
    for (const path of ['/sys/fs/cgroup', '/dev', '/run/netns'])
      assert.ok(
        pod.volumes.some((v: Obj) => v.hostPath?.path === path),
        `${path} of the host is mounted`,
      );
    assert.equal(c.command[0], 'nsenter', 'it enters the host cgroup namespace');
    assert.ok(c.ports.some((p: Obj) => p.name === 'runner'));
    // The probes need no token (the runner's /healthz needs it: test/deploy/probes.test.ts).
    assert.equal(c.readinessProbe.httpGet.path, '/readyz');
    assert.equal(c.livenessProbe.httpGet.path, '/livez');
    assert.equal(c.startupProbe.httpGet.path, '/livez');
  });

  it('the runner Service is headless and selects the DaemonSet pods (and not the API pods)', () => {
    const ds = find(objs, 'DaemonSet', 'sandboxd-runner');
    const dep = find(objs, 'Deployment', 'sandboxd-api');
    const svc = find(objs, 'Service', 'sandboxd-runner');
    assert.equal(svc.spec.clusterIP, 'None');
    assert.ok(selects(svc.spec.selector, ds.spec.template.metadata.labels));
    assert.ok(!selects(svc.spec.selector, dep.spec.template.metadata.labels));
    const names = ds.spec.template.spec.containers[0].ports.map((p: Obj) => p.name);
    for (const p of svc.spec.ports) assert.ok(names.includes(p.targetPort), `targetPort ${p.targetPort}`);
  });

  it('RBAC: the API service account may list and watch EndpointSlices in its namespace', () => {
    const dep = find(objs, 'Deployment', 'sandboxd-api');
    const sa = dep.spec.template.spec.serviceAccountName;
    find(objs, 'ServiceAccount', sa);
    const binding = objs.find(
      (o) =>
        o.kind === 'RoleBinding' &&
        o.subjects.some(
          (s: Obj) => s.kind === 'ServiceAccount' && s.name === sa && s.namespace === dep.metadata.namespace,
        ),
    );
    assert.ok(binding, 'a RoleBinding names the service account');
    assert.equal(binding.roleRef.kind, 'Role');
    const role = find(objs, 'Role', binding.roleRef.name);
    const rule = role.rules.find(
      (r: Obj) => r.apiGroups.includes('discovery.k8s.io') && r.resources.includes('endpointslices'),
    );
    assert.ok(rule, 'a rule covers endpointslices');
    for (const verb of ['list', 'watch']) assert.ok(rule.verbs.includes(verb), verb);
    assert.ok(!role.rules.some((r: Obj) => r.verbs.includes('*') || r.resources.includes('*')), 'no wildcard');
  });

  it('the Ingress serves the API host and the wildcard host of SANDBOXD_PUBLIC_HOST, both to the API Service', () => {
    const ing = find(objs, 'Ingress', 'sandboxd');
    const dep = find(objs, 'Deployment', 'sandboxd-api');
    const publicHost = envOf(dep.spec.template.spec.containers[0]).get('SANDBOXD_PUBLIC_HOST')?.value;
    assert.ok(publicHost && !publicHost.includes(':'), 'SANDBOXD_PUBLIC_HOST is a bare host name');
    const hosts = ing.spec.rules.map((r: Obj) => r.host);
    assert.ok(hosts.includes(`*.${publicHost}`), `the wildcard host *.${publicHost} (have ${hosts.join(', ')})`);
    assert.ok(
      hosts.some((h: string) => !h.startsWith('*.')),
      'an API host',
    );
    assert.ok(!hosts.includes(publicHost), 'the API host is not the public host (docs/proxy.md)');
    const svc = find(objs, 'Service', 'sandboxd-api');
    for (const r of ing.spec.rules)
      for (const p of r.http.paths) {
        assert.equal(p.backend.service.name, svc.metadata.name);
        assert.ok(svc.spec.ports.some((sp: Obj) => sp.name === p.backend.service.port.name));
      }
    assert.deepEqual([...ing.spec.tls[0].hosts].sort(), [...hosts].sort(), 'the TLS certificate covers both hosts');
  });

  it("the real-cluster suite's overlay (test/deploy/cluster.test.ts) renders and passes the schemas", () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandboxd-k8s-overlay-'));
    try {
      writeE2eOverlay(dir, {
        namespace: 'sandboxd-e2e-0',
        image: 'registry.example.com:5000/team/sandboxd:1.2.3',
        databaseUrl: 'postgres://u:p@db.example.internal:5432/sandboxd_e2e',
        apiKey: `sk_${'0'.repeat(40)}`,
        publicHost: 'sbx.e2e.example.com',
        apiHost: 'api.e2e.example.com',
      });
      const rendered = render(dir);
      const problems = rendered.flatMap((o) => check(validate, o).map((p) => `${o.kind} ${o.metadata?.name}: ${p}`));
      assert.deepEqual(problems, []);
      for (const o of rendered)
        assert.equal(o.kind === 'Namespace' ? o.metadata.name : o.metadata.namespace, 'sandboxd-e2e-0');
      const dep = find(rendered, 'Deployment', 'sandboxd-api');
      const c = dep.spec.template.spec.containers[0];
      assert.equal(c.image, 'registry.example.com:5000/team/sandboxd:1.2.3');
      assert.equal(
        resolveEnv(c.env, 'SANDBOXD_RUNNERS', { namespace: 'sandboxd-e2e-0' }),
        'k8s:sandboxd-e2e-0/sandboxd-runner',
      );
      secretRef(rendered, envOf(c).get('SANDBOXD_BOOTSTRAP_API_KEY'));
      assert.equal(envOf(c).get('SANDBOXD_PUBLIC_HOST')?.value, 'sbx.e2e.example.com');
      const hosts = find(rendered, 'Ingress', 'sandboxd').spec.rules.map((r: Obj) => r.host);
      assert.deepEqual(hosts, ['api.e2e.example.com', '*.sbx.e2e.example.com']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
