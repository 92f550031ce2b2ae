/**
 * deploy/kubernetes on a real cluster: applies the base (as an overlay made for the run, in
 * a namespace of its own) to the cluster KUBECONFIG points at, waits for the API Deployment
 * and the runner DaemonSet to roll out, checks that the runner Service's EndpointSlices list
 * a ready runner per labelled node, then creates a sandbox through the Ingress (or, without
 * one, the API Service through `kubectl port-forward`), runs a command in it and deletes it,
 * and finally deletes everything it applied.
 *
 * Skips, saying why, when no cluster is reachable (`kubectl version` bounded to 10 s), and
 * when one is but the run was not asked for: it deploys only when given
 *   SANDBOXD_K8S_IMAGE         the sandboxd image, pushed where the nodes can pull it
 *   SANDBOXD_K8S_DATABASE_URL  a PostgreSQL database the API replicas may use (a throwaway one)
 * and optionally
 *   SANDBOXD_K8S_SANDBOX_IMAGE the image of the test sandbox (default local/busybox:latest)
 *   SANDBOXD_K8S_INGRESS_URL   e.g. https://ingress.example.com: requests go there with
 *   SANDBOXD_K8S_API_HOST      this Host header (the API host of the Ingress)
 *   SANDBOXD_K8S_PUBLIC_HOST   SANDBOXD_PUBLIC_HOST of the run (default sbx.example.com)
 * Nodes must already carry `sandboxd.io/runner=true` (docs/kubernetes.md).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { writeE2eOverlay } from './e2e-overlay.js';

const env = process.env;

function kubectl(args: string[], timeoutMs = 60_000): { ok: boolean; out: string; err: string } {
  const r = spawnSync('kubectl', args, { encoding: 'utf8', timeout: timeoutMs });
  return { ok: !r.error && r.status === 0, out: r.stdout ?? '', err: r.error?.message ?? r.stderr ?? '' };
}

function reason(): string | false {
  const v = kubectl(['version', '--request-timeout=10s', '-o', 'json'], 20_000);
  if (!v.ok) {
    const why = v.err.trim().split('\n').at(-1) || 'kubectl version failed';
    return `no Kubernetes cluster reachable: ${why}`;
  }
  const missing = ['SANDBOXD_K8S_IMAGE', 'SANDBOXD_K8S_DATABASE_URL'].filter((k) => !env[k]);
  if (missing.length) return `a cluster is reachable but the run was not asked for: set ${missing.join(' and ')}`;
  return false;
}

const skip = reason();
if (skip) process.stdout.write(`# test/deploy/cluster.test.ts skipped: ${skip}\n`);

describe('deploy/kubernetes on a real cluster', { skip }, () => {
  const ns = `sandboxd-e2e-${randomBytes(3).toString('hex')}`;
  const apiKey = `sk_${randomBytes(20).toString('hex')}`;
  const publicHost = env.SANDBOXD_K8S_PUBLIC_HOST ?? 'sbx.example.com';
  let dir = '';
  let forward: ChildProcess | null = null;
  let baseUrl = '';
  const headers: Record<string, string> = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' };

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sandboxd-k8s-e2e-'));
    writeE2eOverlay(dir, {
      namespace: ns,
      image: env.SANDBOXD_K8S_IMAGE!,
      databaseUrl: env.SANDBOXD_K8S_DATABASE_URL!,
      apiKey,
      publicHost,
      apiHost: env.SANDBOXD_K8S_API_HOST,
    });
    const applied = kubectl(['apply', '-k', dir], 120_000);
    assert.ok(applied.ok, `kubectl apply -k: ${applied.err}`);
  });

  after(async () => {
    forward?.kill();
    if (dir) {
      const del = kubectl(['delete', '-k', dir, '--ignore-not-found', '--wait=true', '--timeout=300s'], 360_000);
      if (!del.ok) process.stderr.write(`# cleanup: kubectl delete -k failed: ${del.err}\n`);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rolls out the API replicas and a runner on every labelled node', () => {
    for (const what of ['deployment/sandboxd-api', 'daemonset/sandboxd-runner']) {
      const r = kubectl(['-n', ns, 'rollout', 'status', what, '--timeout=600s'], 660_000);
      assert.ok(r.ok, `${what}: ${r.err}`);
    }
    const nodes = kubectl(['get', 'nodes', '-l', 'sandboxd.io/runner=true', '-o', 'name'])
      .out.trim()
      .split('\n')
      .filter(Boolean);
    assert.ok(nodes.length > 0, 'at least one node is labelled sandboxd.io/runner=true');
    const slices = JSON.parse(
      kubectl(['-n', ns, 'get', 'endpointslices', '-l', 'kubernetes.io/service-name=sandboxd-runner', '-o', 'json'])
        .out,
    );
    const ready = slices.items.flatMap((s: any) =>
      (s.endpoints ?? []).filter((e: any) => e.conditions?.ready !== false),
    );
    assert.equal(ready.length, nodes.length, 'one ready runner endpoint per labelled node');
  });

  it('creates a sandbox through the Ingress or the API Service and runs a command in it', async () => {
    if (env.SANDBOXD_K8S_INGRESS_URL && env.SANDBOXD_K8S_API_HOST) {
      baseUrl = env.SANDBOXD_K8S_INGRESS_URL.replace(/\/$/, '');
      headers.host = env.SANDBOXD_K8S_API_HOST;
    } else {
      ({ child: forward, url: baseUrl } = await portForward(ns));
    }
    const health = await fetch(`${baseUrl}/healthz`, { headers: headers.host ? { host: headers.host } : {} });
    assert.equal(health.status, 200);
    const created = await fetch(`${baseUrl}/api/v1/sandboxes`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ image: env.SANDBOXD_K8S_SANDBOX_IMAGE ?? 'local/busybox:latest' }),
    });
    const body = (await created.json()) as any;
    assert.equal(created.status, 201, JSON.stringify(body));
    const id = body.sandbox.id as string;
    assert.equal(body.sandbox.publicAccessUrlTemplate, `{{PORT}}-${id}.${publicHost}`);
    try {
      const exec = await fetch(`${baseUrl}/api/v1/sandboxes/${id}/exec`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ command: 'echo hello from kubernetes' }),
      });
      const out = (await exec.json()) as any;
      assert.equal(exec.status, 200, JSON.stringify(out));
      assert.equal(out.stdout, 'hello from kubernetes\n');
      assert.equal(out.exitCode, 0);
    } finally {
      const del = await fetch(`${baseUrl}/api/v1/sandboxes/${id}`, { method: 'DELETE', headers });
      assert.ok(del.status < 300, `delete answered ${del.status}`);
    }
  });
});

/** `kubectl port-forward svc/sandboxd-api :80`; resolves with the local URL it prints. */
function portForward(ns: string): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn('kubectl', ['-n', ns, 'port-forward', 'svc/sandboxd-api', ':80'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => {
      child.kill();
      reject(new Error(`port-forward printed no port in 60 s: ${seen}`));
    }, 60_000);
    const onData = (b: Buffer) => {
      seen += b.toString();
      const m = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(seen);
      if (m) {
        clearTimeout(timer);
        resolve({ child, url: `http://127.0.0.1:${m[1]}` });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`port-forward exited ${code}: ${seen}`));
    });
  });
}
