/**
 * Black-box, real runtime: creates of a pooled image claim already-started sandboxes, and a
 * claimed sandbox is the sandbox the create asked for (env in every exec, hostname, limits,
 * volumes, own uid range); a kill -9 with pooled and claimed sandboxes alive loses nothing.
 */
import assert from 'node:assert/strict';
import { type Dirent, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { IMAGE, newAccount, RUNTIME, type Server, startServer } from './harness.js';

const POOL = { SANDBOXD_WARM_POOL: `${IMAGE}=3` };

/** Ready sandboxes of IMAGE's pool, from /metrics. */
async function ready(s: Server): Promise<number> {
  const text = await (await fetch(`${s.baseUrl}/metrics`)).text();
  const m = new RegExp(`sandboxd_warm_pool_ready\\{image="${IMAGE.replace(/[/.]/g, '\\$&')}"\\} (\\d+)`).exec(text);
  return Number(m?.[1] ?? 0);
}

/** Waits (bounded) until the pool holds `n` started sandboxes. */
async function poolHolds(s: Server, n: number): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if ((await ready(s)) >= n) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`the warm pool did not fill to ${n} (has ${await ready(s)})`);
}

/** Container ids in the server's crun root (a `crun` folder under its run dir): pooled ones are `warm_*`. */
function containers(s: Server): string[] {
  const walk = (dir: string, depth: number): string[] => {
    let entries: Dirent[] = [];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return [];
    }
    if (dir.endsWith('/crun')) return entries.filter((e) => e.isDirectory()).map((e) => e.name);
    return depth > 0 ? entries.filter((e) => e.isDirectory()).flatMap((e) => walk(join(dir, e.name), depth - 1)) : [];
  };
  return walk(join(s.dataDir, 'run'), 3);
}

const create = async (s: Server, key: string, body: Record<string, unknown>) => {
  const r = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, timeoutMs: 600_000, ...body } });
  assert.equal(r.status, 201, r.text);
  return r.body.sandbox as { id: string; name: string };
};
const sh = async (s: Server, key: string, id: string, command: string) => {
  const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key, body: { command } });
  assert.equal(r.status, 200, r.text);
  return r.body as { stdout: string; stderr: string; exitCode: number };
};

describe('warm pool', { skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local', timeout: 300_000 }, () => {
  it('a create claims a started sandbox, which gets its env, hostname, limits and uid range; no account sees another through the pool', async () => {
    const s = await startServer({ env: POOL });
    try {
      await poolHolds(s, 3);
      const a = await newAccount(s, { tokens: 10_000 });
      const b = await newAccount(s, { tokens: 10_000 });
      const before = containers(s).filter((c) => c.startsWith('warm_'));
      assert.equal(before.length, 3, `pooled containers: ${before}`);
      const x = await create(s, a.key, { env: { SECRET_A: 'alpha' } });
      const y = await create(s, b.key, { env: { SECRET_B: 'beta' } });
      // Both came from the pool: no container was started under their own ids.
      const after = containers(s);
      assert.ok(!after.includes(x.id) && !after.includes(y.id), `claimed, not started: ${after}`);

      const outX = await sh(
        s,
        a.key,
        x.id,
        'echo "$SECRET_A/$SECRET_B"; hostname; cat /etc/hostname; cat /proc/self/uid_map',
      );
      const outY = await sh(s, b.key, y.id, 'echo "$SECRET_A/$SECRET_B"; hostname; cat /proc/self/uid_map');
      const [envX, hostX, etcX, mapX] = outX.stdout.trim().split('\n');
      const [envY, hostY, mapY] = outY.stdout.trim().split('\n');
      assert.equal(envX, 'alpha/');
      assert.equal(envY, '/beta');
      assert.equal(hostX, x.name);
      assert.equal(etcX, x.name);
      assert.equal(hostY, y.name);
      assert.notEqual(mapX.trim().split(/\s+/)[1], mapY.trim().split(/\s+/)[1], 'each has its own uid range');
      // The env reaches background commands too.
      const bg = await s.api('POST', `/api/v1/sandboxes/${x.id}/exec`, {
        key: a.key,
        body: { command: 'echo "$SECRET_A" > /tmp/bg', options: { background: true } },
      });
      assert.equal(bg.status, 200, bg.text);
      let seen = '';
      for (let i = 0; i < 50 && seen !== 'alpha\n'; i++) {
        seen = (await sh(s, a.key, x.id, 'cat /tmp/bg 2>/dev/null')).stdout;
        if (seen !== 'alpha\n') await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(seen, 'alpha\n');
      // Limits are the plan's (FREE: 2 GiB / 512 pids), read from inside.
      const lim = async (key: string, id: string) =>
        (await sh(s, key, id, 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max')).stdout
          .trim()
          .split('\n');
      assert.deepEqual(await lim(a.key, x.id), [String(2 * 1024 ** 3), '512']);
      assert.deepEqual(await lim(b.key, y.id), [String(2 * 1024 ** 3), '512']);
      // Another account cannot reach the claimed sandbox.
      const other = await s.api('POST', `/api/v1/sandboxes/${x.id}/exec`, { key: b.key, body: { command: 'true' } });
      assert.equal(other.status, 404);
    } finally {
      await s.stop();
    }
  });

  it('a create naming volumes is joined to them; kill -9 with pooled and claimed sandboxes alive: claimed ones are adopted, pooled ones replaced', async () => {
    let s = await startServer({ env: POOL });
    try {
      await poolHolds(s, 3);
      const a = await newAccount(s, { tokens: 10_000 });
      const x = await create(s, a.key, { env: { K: 'v1' } });
      const v = await create(s, a.key, { env: { K: 'v2' }, volumes: { '/data': 'warmvol' } });
      await sh(s, a.key, v.id, 'echo kept > /data/f && sync');
      const pooledBefore = containers(s).filter((c) => c.startsWith('warm_'));
      await s.kill('SIGKILL');
      s = await startServer({ dataDir: s.dataDir, env: POOL });
      for (const [id, k] of [
        [x.id, 'v1'],
        [v.id, 'v2'],
      ]) {
        const g = await s.api('GET', `/api/v1/sandboxes/${id}`, { key: a.key });
        assert.equal(g.body.sandbox.state, 'started', `${id} after the restart`);
        assert.equal((await sh(s, a.key, id, 'echo $K; hostname')).stdout, `${k}\n${g.body.sandbox.name}\n`);
      }
      assert.equal((await sh(s, a.key, v.id, 'cat /data/f')).stdout, 'kept\n');
      await poolHolds(s, 3);
      const pooledAfter = containers(s).filter((c) => c.startsWith('warm_'));
      // Two of the old pooled ids were claimed (x and v): they stay; the unclaimed ones were replaced.
      const claimed = pooledBefore.filter((c) => pooledAfter.includes(c));
      assert.ok(claimed.length === 2, `claimed containers stay; unclaimed pooled ones were removed: ${claimed}`);
      const y = await create(s, a.key, {});
      assert.equal((await sh(s, a.key, y.id, 'echo ok')).stdout, 'ok\n');
    } finally {
      await s.stop();
    }
  });
});
