/**
 * Two e2e servers side by side on the local runtime, as the escape suite runs them (its
 * second server imports hostile images): stopping one must leave the other whole.
 *
 * Regression: a soak run's escape suite answered 500 "The runtime failed to start the
 * sandbox" to its three volume tests, the only tests after its second server stopped. The
 * harness derived each server's bridge, subnet, uid range and cgroup folder from a hash of
 * its data dir (50 slots): the two dirs met on one slot about once in 50 runs, and the second
 * server's teardown took the first one's bridge, veths and pooled netns (crun: "open
 * /run/netns/sbx-netpool_...: No such file or directory", then "network: ... bridge fdb
 * replace ..." failures). The dirs here are picked to collide under that old rule, so the
 * old harness fails this test every time, not once in 50.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { IMAGE, newAccount, RUNTIME, startServer } from './harness.js';
import { CLAIMS, localEnv, localOptions, teardownLocal } from './local-runtime.js';

/** The slot the harness used to give a data dir: a hash of its path. */
const oldSlot = (dir: string) => [...dir].reduce((a, c) => (a * 33 + c.charCodeAt(0)) % 50, 5) + 200;

/** A fresh data dir on the same old slot as `dir` (~50 tries on average; bounded). */
function collidingDir(dir: string): string {
  for (let i = 0; i < 5000; i++) {
    const d = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
    if (oldSlot(d) === oldSlot(dir)) return d;
    rmSync(d, { recursive: true, force: true });
  }
  throw new Error('no temp dir with the same old slot in 5000 tries');
}

function collidingDirs(): [string, string] {
  const first = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
  return [first, collidingDir(first)];
}

const slotOf = (dir: string) => Number(localOptions(dir).bridge!.slice('sbxe'.length));

describe('two servers side by side (local runtime)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 180_000,
}, () => {
  it('a slot claimed by a live server dir is never given to another; a claim whose dir or process is gone is taken over', async () => {
    const dirs: string[] = [];
    const fresh = () => {
      dirs.push(mkdtempSync(join(tmpdir(), 'sandboxd-e2e-')));
      return dirs[dirs.length - 1];
    };
    try {
      const a = fresh();
      const b = collidingDir(a);
      dirs.push(b);
      assert.notEqual(slotOf(a), slotOf(b), 'two live dirs on one slot');
      assert.equal(slotOf(a), slotOf(a), "a dir's slot is stable");
      assert.equal(JSON.parse(readFileSync(join(CLAIMS, String(slotOf(a))), 'utf8')).dataDir, a);

      // Dir gone (a run killed before its teardown): the next dir of that hash takes the slot.
      const gone = fresh();
      const n = slotOf(gone);
      rmSync(gone, { recursive: true, force: true });
      const heir = collidingDir(gone);
      dirs.push(heir);
      assert.equal(slotOf(heir), n, 'the claim of a removed dir was not taken over');

      // Claimed by another process that ended without its teardown, dir still there, no bridge.
      const orphan = fresh();
      execFileSync(process.execPath, [
        '--import',
        'tsx',
        '-e',
        `import('${join(import.meta.dirname, 'local-runtime.ts')}').then((m) => m.localOptions(${JSON.stringify(orphan)}))`,
      ]);
      const m = Number(readFileSync(join(orphan, '.e2e-slot'), 'utf8'));
      assert.notEqual(JSON.parse(readFileSync(join(CLAIMS, String(m)), 'utf8')).pid, process.pid);
      const next = collidingDir(orphan);
      dirs.push(next);
      assert.equal(slotOf(next), m, 'the claim of an ended process was not taken over');
      assert.throws(
        () => localEnv(orphan),
        /claimed by/,
        'a server started again on the orphan dir would share a slot',
      );
    } finally {
      for (const d of dirs) {
        await teardownLocal(d);
        rmSync(d, { recursive: true, force: true });
      }
    }
  });

  it("stopping a second server leaves the first one's network whole: its creates, with and without volumes, answer 201", async () => {
    const [d1, d2] = collidingDirs();
    let s: Awaited<ReturnType<typeof startServer>> | undefined;
    try {
      s = await startServer({ dataDir: d1 });
      const { key } = await newAccount(s, { tokens: 10_000, plan: 'PRO' });
      const create = (volumes?: Record<string, string>) =>
        s!.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, ...(volumes ? { volumes } : {}) } });
      const exec = (id: string, command: string) =>
        s!.api('POST', `/api/v1/sandboxes/${id}/exec`, { key, body: { command } });
      const before = await create({ '/data': 'kept' });
      assert.equal(before.status, 201, before.text);
      assert.equal((await exec(before.body.sandbox.id, 'echo one > /data/f && sync')).status, 200);

      const s2 = await startServer({ dataDir: d2 });
      try {
        const other = await s2.api('POST', '/api/v1/sandboxes', { body: { image: IMAGE, volumes: { '/data': 'x' } } });
        assert.equal(other.status, 201, other.text);
      } finally {
        await s2.stop(); // cleanup, SIGTERM, teardown of its host set-up, data dir removed
      }
      // Right after: a new volume, the existing one (held by a live sandbox), none.
      for (const volumes of [{ '/data': 'fresh' }, { '/data': 'kept' }, undefined]) {
        const r = await create(volumes);
        assert.equal(r.status, 201, `create ${JSON.stringify(volumes)}: ${r.text}`);
        const id = r.body.sandbox.id;
        const cmd = volumes?.['/data'] === 'kept' ? 'cat /data/f' : 'echo ok';
        const e = await exec(id, cmd);
        assert.equal(e.status, 200, e.text);
        assert.equal(e.body.stdout, volumes?.['/data'] === 'kept' ? 'one\n' : 'ok\n');
        assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key })).status, 204);
      }
      const still = await exec(before.body.sandbox.id, 'cat /data/f');
      assert.equal(still.body.stdout, 'one\n', still.text);
      const o1 = localOptions(d1);
      assert.ok(existsSync(`/sys/class/net/${o1.bridge}`), "the first server's bridge is gone");
      const o2 = localOptions(d2);
      for (const k of ['bridge', 'subnet', 'uidRangeStart', 'cgroupParent'] as const)
        assert.notEqual(o1[k], o2[k], `both servers got ${k} ${o1[k]}`);
    } finally {
      await s?.stop(); // also removes d1
      rmSync(d1, { recursive: true, force: true });
      rmSync(d2, { recursive: true, force: true });
    }
  });
});
