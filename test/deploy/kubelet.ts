/**
 * What the kubelet does with the probes of a rendered manifest, for test/deploy/probes.test.ts:
 * finds every httpGet probe of every container of every workload, and runs one the way the
 * kubelet does: a GET of the probe's path on the probe's port (by name or number, through the
 * container's ports) with its scheme (HTTPS without verifying the certificate, as the kubelet
 * does) and its `httpHeaders` only, no credentials. The kubelet counts 200-399 as success.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { parseAllDocuments } from 'yaml';

export type Obj = Record<string, any>;
export type Env = { name: string; value?: string; valueFrom?: Obj };

export const PROBE_KINDS = ['startupProbe', 'readinessProbe', 'livenessProbe'] as const;
export type ProbeKind = (typeof PROBE_KINDS)[number];

/** One httpGet probe of one container of one workload. */
export interface HttpProbe {
  workload: string;
  container: Obj;
  kind: ProbeKind;
  probe: Obj;
  /** The container's `SANDBOXD_ROLE` (`all` when unset). */
  role: string;
}

const WORKLOADS = new Set(['Deployment', 'DaemonSet', 'StatefulSet', 'ReplicaSet', 'Job', 'CronJob', 'Pod']);

/** `kubectl kustomize <dir>`, parsed. */
export function render(dir: string): Obj[] {
  const out = execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8', timeout: 60_000 });
  const docs = parseAllDocuments(out);
  for (const d of docs) assert.deepEqual(d.errors, [], 'the rendered YAML parses');
  return docs.map((d) => d.toJS() as Obj).filter((o) => o !== null);
}

/** The pod spec of a workload object (null for other kinds). */
export function podSpecOf(o: Obj): Obj | null {
  if (!WORKLOADS.has(o.kind)) return null;
  if (o.kind === 'Pod') return o.spec;
  if (o.kind === 'CronJob') return o.spec.jobTemplate.spec.template.spec;
  return o.spec.template.spec;
}

/** Every workload's containers (init containers have no probes but restartable ones: included). */
export function containersOf(objs: Obj[]): Array<{ workload: string; container: Obj }> {
  return objs.flatMap((o) => {
    const pod = podSpecOf(o);
    if (!pod) return [];
    return [...(pod.initContainers ?? []), ...pod.containers].map((c: Obj) => ({
      workload: `${o.kind}/${o.metadata.name}`,
      container: c,
    }));
  });
}

/** Every httpGet probe of `objs`. */
export function httpProbes(objs: Obj[]): HttpProbe[] {
  return containersOf(objs).flatMap(({ workload, container }) =>
    PROBE_KINDS.filter((k) => container[k]?.httpGet).map((kind) => ({
      workload,
      container,
      kind,
      probe: container[kind],
      role: envValue(container, 'SANDBOXD_ROLE') ?? 'all',
    })),
  );
}

/** A plain `value` of the container's env (`$(NAME)` of earlier ones expanded, `fieldRef`s from `fields`). */
export function envValue(c: Obj, name: string, fields: Record<string, string> = {}): string | undefined {
  const values = new Map<string, string>();
  for (const e of (c.env ?? []) as Env[]) {
    let v: string | undefined;
    if (e.value !== undefined) v = e.value.replace(/\$\((\w+)\)/g, (m, n) => values.get(n) ?? m);
    else if (e.valueFrom?.fieldRef?.fieldPath) v = fields[e.valueFrom.fieldRef.fieldPath];
    if (v !== undefined) values.set(e.name, v);
  }
  return values.get(name);
}

/** The container port a probe names (by name or number). */
export function probePort(c: Obj, probe: Obj): number {
  const p = probe.httpGet.port;
  if (typeof p === 'number') return p;
  if (/^\d+$/.test(p)) return Number(p);
  const named = (c.ports ?? []).find((x: Obj) => x.name === p);
  assert.ok(named, `the probe's port ${p} is a port of container ${c.name}`);
  return named.containerPort;
}

/**
 * Runs `probe` as the kubelet would against the container whose ports listen on
 * `127.0.0.1:<ports.get(containerPort)>`: no credentials, the probe's headers only.
 */
export function kubeletGet(
  c: Obj,
  probe: Obj,
  ports: Map<number, number>,
): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  const g = probe.httpGet;
  const containerPort = probePort(c, probe);
  const port = ports.get(containerPort);
  assert.ok(port, `container ${c.name}: nothing of the test listens for container port ${containerPort}`);
  const scheme = String(g.scheme ?? 'HTTP').toUpperCase();
  const headers: Record<string, string> = { 'user-agent': 'kube-probe/1.32', accept: '*/*' };
  for (const h of (g.httpHeaders ?? []) as Array<{ name: string; value: string }>)
    headers[h.name.toLowerCase()] = h.value;
  const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000;
  const request = scheme === 'HTTPS' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: g.path ?? '/',
        method: 'GET',
        headers,
        rejectUnauthorized: false,
        timeout: timeoutMs,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer in ${timeoutMs} ms (the probe's timeoutSeconds)`)));
    req.on('error', reject);
    req.end();
  });
}
