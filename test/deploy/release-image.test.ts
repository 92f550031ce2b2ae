/**
 * The release image (`npm run image`), run under crun as a real OCI runtime runs it, with the
 * privileges docs/kubernetes.md asks for: privileged (all capabilities), the host's network
 * and PID namespaces, the host's /sys/fs/cgroup, /dev and /run/netns, the data dir as a host
 * path with Bidirectional propagation. Each server gets an e2e slot of its own (bridge,
 * subnet, run dir, uid range, cgroup folder: test/e2e/local-runtime.ts), its data dir mounted
 * at the same path as on the host, and the test image store (SANDBOXD_TEST_IMAGE_DIR) as its
 * SANDBOXD_IMAGE_DIR, so no image build runs.
 *
 * - as `all` on SQLite: an account, a sandbox, a command and its output, the delete;
 * - as `api` + `runner` (two containers of the image; the api as the manifests run it: not
 *   root, no capabilities, read-only root file system) on a PostgreSQL of
 *   packages/server/test/postgres.ts: the same.
 *
 * The image is built by the same builder as `npm run image` (reused when no input changed).
 * Skips, saying why, without root or SANDBOXD_E2E_RUNTIME=local.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildReleaseImage, type ReleaseImage } from '../../packages/server/src/release/image.js';
import { pgBinDir, startPostgres, type TestPostgres } from '../../packages/server/test/postgres.js';
import { ADMIN_KEY, freePort, IMAGE } from '../e2e/harness.js';
import { localEnv, TEST_IMAGE_DIR, teardownLocal } from '../e2e/local-runtime.js';
import {
  type Container,
  type HostMount,
  imageEnv,
  releaseImageSkip,
  resolveArgv,
  startContainer,
  stopAllContainers,
  type UnpackedImage,
  unpackImage,
} from './oci-run.js';

/** A server running in a container of the image. */
interface ImageServer {
  c: Container;
  baseUrl: string;
  dataDir: string;
  /** Whether it has a runtime slot to tear down. */
  local: boolean;
}

async function api(
  s: ImageServer,
  method: string,
  path: string,
  body?: unknown,
  key = ADMIN_KEY,
): Promise<{ status: number; body: any; text: string }> {
  const res = await fetch(`${s.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(120_000),
  });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed, text };
}

/** The mounts of a runner container, as runner.yaml's (host paths at the same paths here). */
function runtimeMounts(dataDir: string): HostMount[] {
  const all: HostMount[] = [
    { path: '/tmp', source: 'tmpfs' },
    { path: dataDir, source: dataDir, propagation: 'Bidirectional' },
    { path: TEST_IMAGE_DIR, source: TEST_IMAGE_DIR },
    { path: '/run/netns', source: '/run/netns', propagation: 'Bidirectional' },
    { path: '/sys/fs/cgroup', source: '/sys/fs/cgroup' },
    { path: '/dev', source: '/dev' },
    { path: '/lib/modules', source: '/lib/modules', readOnly: true },
  ];
  return all.filter((m) => m.source === 'tmpfs' || existsSync(m.source)); // a kernel without modules has no /lib/modules
}

/** Sandboxes the admin and `keys` own, deleted (a failed test may have left them). */
async function deleteSandboxes(s: ImageServer, keys: string[]): Promise<void> {
  for (const key of [ADMIN_KEY, ...keys]) {
    const list = await api(s, 'GET', '/api/v1/sandboxes?limit=1000', undefined, key).catch(() => null);
    for (const sb of list?.body?.sandboxes ?? [])
      await api(s, 'DELETE', `/api/v1/sandboxes/${sb.id}`, undefined, key).catch(() => {});
  }
}

/** Account, key, sandbox, `echo` in it, its output, delete; through `s`. */
async function sandboxRoundTrip(s: ImageServer, keys: string[], what: string): Promise<void> {
  const email = `image-${randomBytes(4).toString('hex')}@example.com`;
  const acct = await api(s, 'POST', '/api/v1/admin/accounts', { email, password: 'password123', tokens: 1_000_000 });
  assert.equal(acct.status, 201, acct.text);
  // The account's own key, made in its session as a user makes one.
  const login = await fetch(`${s.baseUrl}/api/v1/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password: 'password123' }),
  });
  assert.equal(login.status, 200, await login.text());
  const cookie = String(login.headers.get('set-cookie')).split(';')[0];
  const k = await fetch(`${s.baseUrl}/api/v1/keys`, {
    method: 'POST',
    headers: { cookie, origin: s.baseUrl, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'image' }),
  });
  const kb = (await k.json()) as { key: string };
  assert.equal(k.status, 201, JSON.stringify(kb));
  const key = kb.key;
  keys.push(key);
  const c = await api(s, 'POST', '/api/v1/sandboxes', { image: IMAGE }, key);
  assert.equal(c.status, 201, c.text);
  const id = c.body.sandbox.id as string;
  const e = await api(s, 'POST', `/api/v1/sandboxes/${id}/exec`, { command: `echo ${what} $((6 * 7))` }, key);
  assert.equal(e.status, 200, e.text);
  assert.equal(e.body.stdout, `${what} 42\n`);
  assert.equal(e.body.exitCode, 0);
  const d = await api(s, 'DELETE', `/api/v1/sandboxes/${id}`, undefined, key);
  assert.ok(d.status < 300, `delete: ${d.status} ${d.text}`);
  const g = await api(s, 'GET', `/api/v1/sandboxes/${id}`, undefined, key);
  assert.equal(g.status, 404, g.text);
}

describe('the release image under crun', { skip: releaseImageSkip, timeout: 20 * 60_000 }, () => {
  let release: ReleaseImage;
  let img: UnpackedImage | undefined;
  let pg: TestPostgres | undefined;
  const servers: ImageServer[] = [];
  const keys: string[] = [];

  /** Starts the image's entrypoint in a container with `env`; waits for `ready` (bounded). */
  async function run(
    name: string,
    o: {
      env: Record<string, string>;
      local: boolean;
      ready: { path: string; headers?: Record<string, string> };
    },
  ): Promise<ImageServer> {
    const dataDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
    const port = await freePort();
    const env = imageEnv(img!.config, {
      SANDBOXD_DATA_DIR: dataDir,
      SANDBOXD_HOST: '127.0.0.1',
      SANDBOXD_PORT: String(port),
      SANDBOXD_LOG_LEVEL: 'warn',
      SANDBOXD_WARM_POOL: 'off',
      ...(o.local ? { SANDBOXD_RUNTIME: 'local', ...localEnv(dataDir) } : {}),
      ...o.env,
    });
    const argv = resolveArgv(img!.config);
    const spec = o.local
      ? { privileged: true, hostNetwork: true, hostPID: true, mounts: runtimeMounts(dataDir) }
      : (() => {
          // As api.yaml runs it: uid 65532, no capabilities, read-only root; the data dir and
          // /tmp writable scratch (host network here: its port is a free one of this host).
          chownSync(dataDir, 65532, 65532);
          return {
            uid: 65532,
            gid: 65532,
            readOnlyRoot: true,
            noNewPrivileges: true,
            hostNetwork: true,
            mounts: [
              { path: '/tmp', source: 'tmpfs' },
              { path: dataDir, source: dataDir },
            ] as HostMount[],
          };
        })();
    const c = startContainer(img!.rootfs, { name: `${name}-${randomBytes(3).toString('hex')}`, argv, env, ...spec });
    const s: ImageServer = { c, baseUrl: `http://127.0.0.1:${port}`, dataDir, local: o.local };
    servers.push(s);
    for (let i = 0; ; i++) {
      if (c.proc.exitCode !== null) throw new Error(`${name} exited with ${c.proc.exitCode}: ${c.log()}`);
      const r = await fetch(`${s.baseUrl}${o.ready.path}`, { headers: o.ready.headers }).catch(() => null);
      if (r?.status === 200) return s;
      if (i >= 600) throw new Error(`${name} did not become ready in 120 s: ${c.log()}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  before(async () => {
    const t0 = Date.now();
    release = await buildReleaseImage({ log: (l) => console.log(`# ${l}`) });
    console.log(
      `# ${release.archive} ${release.digest} (${release.reused ? 'reused' : `built in ${Math.round((Date.now() - t0) / 1000)} s`})`,
    );
    img = unpackImage(release.archive, release.version);
  });

  after(async () => {
    for (const s of servers) await deleteSandboxes(s, keys).catch(() => {});
    await stopAllContainers();
    for (const s of servers) {
      if (s.local) await teardownLocal(s.dataDir).catch((e) => console.log(`# teardown ${s.dataDir}: ${e}`));
      rmSync(s.dataDir, { recursive: true, force: true });
    }
    await pg?.stop();
    img?.remove();
  });

  it('is tagged with the version and runs `sandboxd serve` with the documented defaults', () => {
    const c = img!.config;
    assert.deepEqual(c.Entrypoint, ['sandboxd']);
    assert.deepEqual(c.Cmd, ['serve']);
    assert.ok(c.Env?.includes('SANDBOXD_DATA_DIR=/var/lib/sandboxd'));
    assert.ok(c.Env?.includes('SANDBOXD_HOST=0.0.0.0'));
    assert.deepEqual(Object.keys(c.ExposedPorts ?? {}), ['8080/tcp']);
    assert.equal(c.Labels?.['org.opencontainers.image.version'], release.version);
    assert.match(c.Labels?.['org.opencontainers.image.revision'] ?? '', /^[0-9a-f]{40}(-dirty)?$/);
    assert.equal(img!.digest, release.digest);
  });

  it('as `all` on SQLite: creates a sandbox, runs a command in it and deletes it', async () => {
    const s = await run('all', {
      local: true,
      env: { SANDBOXD_BOOTSTRAP_API_KEY: ADMIN_KEY },
      ready: { path: '/readyz' },
    });
    await sandboxRoundTrip(s, keys, 'all');
    // Bidirectional: the run dir's tmpfs the server mounted in its container is on the host too.
    const mine = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .filter((l) => l.split(' ')[4]?.startsWith(`${s.dataDir}/`));
    assert.ok(mine.length > 0, `no mount of the container under ${s.dataDir} reached the host`);
  });

  it('as `api` + `runner` on PostgreSQL: creates a sandbox through the api, runs a command on the runner, deletes it', {
    skip: pgBinDir() === null ? 'needs PostgreSQL (scripts/setup.sh --test)' : false,
  }, async () => {
    pg = await startPostgres();
    const token = `image-runner-${randomBytes(12).toString('hex')}`;
    const runner = await run('runner', {
      local: true,
      env: { SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: token, SANDBOXD_NODE_NAME: 'image-node' },
      ready: { path: '/readyz' },
    });
    const s = await run('api', {
      local: false,
      env: {
        SANDBOXD_ROLE: 'api',
        SANDBOXD_RUNNERS: runner.baseUrl,
        SANDBOXD_RUNNER_TOKEN: token,
        SANDBOXD_DATABASE_URL: await pg.createDatabase(),
        SANDBOXD_BOOTSTRAP_API_KEY: ADMIN_KEY,
      },
      ready: { path: '/readyz' },
    });
    await sandboxRoundTrip(s, keys, 'api');
    await deleteSandboxes(s, keys);
  });
});
