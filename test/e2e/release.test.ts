/**
 * Sandbox release in the background (local runtime): a delete answers once the sandbox is
 * killed and gone from view, while its netns, veth, root layer and state dir are released
 * behind it; what is being released keeps its address and uid slot until done; a server
 * killed mid-release finishes the release after its restart, leaving nothing behind.
 *
 * A process of the test holds a deleted sandbox's netns (as any host process could): the
 * kernel cannot free its veth while it lives, which keeps that release pending for as long
 * as the test needs, without depending on timing.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { sandboxCgroupDir } from '../../packages/server/src/runtime/local/bundle/cgroup-fs.js';
import { instanceGroup } from '../../packages/server/src/runtime/local/network/addr.js';
import {
  destroyScope,
  eventually,
  freshDataDir,
  sandboxTraces,
  type Scope,
  scopeOf,
} from '../security/faults-support.js';
import { IMAGE, newAccount, RUNTIME, type Server, startServer } from './harness.js';

const local = RUNTIME === 'local';

/**
 * Host veths of the scope's instance that belong to sandboxes (not to the network pool,
 * whose networks keep their netns name until a sandbox takes one).
 */
function sandboxVeths(scope: Scope): string[] {
  const group = String(instanceGroup(scope.bridge));
  return readdirSync('/sys/class/net').filter((n) => {
    try {
      if (!/^sv[0-9a-f]{10}$/.test(n)) return false;
      if (readFileSync(`/sys/class/net/${n}/netdev_group`, 'utf8').trim() !== group) return false;
      const id = readFileSync(`/sys/class/net/${n}/ifalias`, 'utf8')
        .trim()
        .replace(/^sandboxd:/, '');
      return !existsSync(`/run/netns/sbx-${id}`);
    } catch {
      return false; // gone meanwhile
    }
  });
}

/** The host veth of the netns process `pid` is in (the peer of its eth0). */
function vethOf(pid: string): string {
  const link = execFileSync('nsenter', [`--net=/proc/${pid}/ns/net`, 'ip', '-o', 'link', 'show', 'eth0'], {
    encoding: 'utf8',
  });
  const ifindex = /eth0@if(\d+)/.exec(link)?.[1];
  const veth = readdirSync('/sys/class/net').find(
    (n) => /^sv/.test(n) && readFileSync(`/sys/class/net/${n}/ifindex`, 'utf8').trim() === ifindex,
  );
  assert.ok(veth, `no host veth for ${link}`);
  return veth;
}

/** A host process in the netns of sandbox `id` (found through its cgroup), until killed; and its veth. */
async function holdNetns(scope: Scope, id: string): Promise<{ holder: ChildProcess; veth: string }> {
  const pid = readFileSync(`${sandboxCgroupDir(scope.cgroupParent, id)}/cgroup.procs`, 'utf8').split('\n')[0];
  assert.match(pid, /^\d+$/);
  const ns = readlinkSync(`/proc/${pid}/ns/net`);
  const veth = vethOf(pid);
  const holder = spawn('nsenter', [`--net=/proc/${pid}/ns/net`, 'sleep', '300'], { stdio: 'ignore' });
  const inside = () => {
    try {
      return readlinkSync(`/proc/${holder.pid}/ns/net`) === ns;
    } catch {
      return false;
    }
  };
  assert.ok(await eventually(inside, 100, 50), 'the holder did not enter the netns');
  return { holder, veth };
}

const kill = (p: ChildProcess) => p.exitCode === null && p.signalCode === null && process.kill(p.pid!, 'SIGKILL');

describe('background release of deleted sandboxes', { skip: !local && 'needs SANDBOXD_E2E_RUNTIME=local' }, () => {
  it('delete answers before the release; a sandbox being released keeps its address and uid range', async () => {
    const s = await startServer({ dataDir: freshDataDir() });
    const scope = scopeOf(s.dataDir);
    const holders: ChildProcess[] = [];
    try {
      const { key } = await newAccount(s, { plan: 'PRO', tokens: 10_000 });
      const make = async () => {
        const r = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE } });
        assert.equal(r.status, 201, r.text);
        const id = r.body.sandbox.id as string;
        const map = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
          key,
          body: { command: "ip -4 -o addr show dev eth0 | awk '{print $4}'; cat /proc/self/uid_map" },
        });
        const [addr, uids] = map.body.stdout.trim().split('\n');
        return { id, addr: addr.replace(/\/32$/, ''), uidBase: Number(uids.trim().split(/\s+/)[1]) };
      };
      const old = await make();
      const { holder, veth: oldVeth } = await holdNetns(scope, old.id);
      holders.push(holder);
      assert.ok(sandboxVeths(scope).includes(oldVeth), 'the sandbox has its own veth, in the group');

      const del = await s.api('DELETE', `/api/v1/sandboxes/${old.id}`, { key });
      assert.equal(del.status, 204, del.text);
      // Answered while the host still holds its network (the holder keeps it): released behind.
      assert.ok(existsSync(`/sys/class/net/${oldVeth}`), 'delete waited for the release');
      assert.equal((await s.api('GET', `/api/v1/sandboxes/${old.id}`, { key })).status, 404);
      const procs = () => {
        try {
          return readFileSync(`${sandboxCgroupDir(scope.cgroupParent, old.id)}/cgroup.procs`, 'utf8').trim();
        } catch {
          return '';
        }
      };
      assert.ok(await eventually(() => procs() === '', 100, 50), 'the sandbox was not killed');

      // New sandboxes meanwhile get neither its address nor its uid range.
      const fresh = await Promise.all([make(), make(), make()]);
      for (const f of fresh) {
        assert.notEqual(f.addr, old.addr, 'the address of a sandbox being released was handed out');
        assert.notEqual(f.uidBase, old.uidBase, 'the uid range of a sandbox being released was handed out');
      }
      assert.ok(existsSync(`/sys/class/net/${oldVeth}`));

      // Once nothing holds it, the release completes and leaves nothing.
      kill(holders[0]);
      assert.ok(
        await eventually(() => [...sandboxTraces(scope, [old.id]).values()].every((t) => t.length === 0), 300, 100),
        `left: ${JSON.stringify([...sandboxTraces(scope, [old.id])])}`,
      );
      assert.ok(!existsSync(`/sys/class/net/${oldVeth}`));
      for (const f of fresh) assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${f.id}`, { key })).status, 204);
      assert.ok(await eventually(() => sandboxVeths(scope).length === 0, 300, 100), 'veths left after the deletes');
    } finally {
      for (const h of holders) kill(h);
      await s.stop({ keepData: true });
      await destroyScope(s.dataDir);
      rmSync(s.dataDir, { recursive: true, force: true });
    }
  });

  it('a server killed mid-release finishes the release after its restart; nothing is left', async () => {
    let s: Server = await startServer({ dataDir: freshDataDir() });
    const scope = scopeOf(s.dataDir);
    const holders: ChildProcess[] = [];
    const ids: string[] = [];
    try {
      const { key } = await newAccount(s, { plan: 'PRO', tokens: 10_000 });
      for (let i = 0; i < 6; i++) {
        const r = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE } });
        assert.equal(r.status, 201, r.text);
        ids.push(r.body.sandbox.id);
      }
      // Two releases cannot finish before the kill; the others may or may not have.
      const held: string[] = [];
      for (const id of ids.slice(0, 2)) {
        const h = await holdNetns(scope, id);
        holders.push(h.holder);
        held.push(h.veth);
      }
      for (const id of ids) assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key })).status, 204);
      assert.ok(
        held.every((v) => v && existsSync(`/sys/class/net/${v}`)),
        'the held releases are pending',
      );
      assert.ok(existsSync(join(s.dataDir, 'sandboxes', ids[0])), 'a pending release keeps its state dir');
      await s.kill('SIGKILL');
      for (const h of holders) kill(h);

      s = await startServer({ dataDir: s.dataDir });
      assert.deepEqual((await s.api('GET', '/api/v1/sandboxes', { key })).body.sandboxes, []);
      assert.ok(
        await eventually(() => [...sandboxTraces(scope, ids).values()].every((t) => t.length === 0), 300, 100),
        `left: ${JSON.stringify([...sandboxTraces(scope, ids)].filter(([, t]) => t.length))}`,
      );
      assert.ok(await eventually(() => sandboxVeths(scope).length === 0, 300, 100), 'veths left');
      for (const v of held) assert.ok(!existsSync(`/sys/class/net/${v}`));
    } finally {
      for (const h of holders) kill(h);
      await s.stop({ keepData: true });
      await destroyScope(s.dataDir);
      rmSync(s.dataDir, { recursive: true, force: true });
    }
  });
});
