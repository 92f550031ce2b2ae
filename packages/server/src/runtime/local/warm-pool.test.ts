/**
 * The warm pool on the real runtime, where it can go wrong: a pooled sandbox that cannot
 * start leaves nothing behind, and a pooled sandbox that died is never handed out.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { makeTestDriver } from '../../../test/local-driver.js';
import { cgroupParentDir } from './bundle/cgroup-fs.js';
import type { LocalDriver } from './driver.js';

const IMAGE = 'local/busybox:latest';
const LIMITS = { memoryBytes: 128 << 20, cpus: 0.5, pids: 64, rootDiskBytes: 64 << 20 };
const made: { driver: LocalDriver; dataDir: string }[] = [];
after(async () => {
  for (const m of made) {
    await m.driver.destroyAll();
    rmSync(m.dataDir, { recursive: true, force: true });
  }
});

/** What of `tag`'s driver is on the host: netns, host veths of its bridge, mounts, sandbox folders, cgroups. */
function traces(bridge: string, dataDir: string, cgroupParent: string): string[] {
  const netns = existsSync('/run/netns') ? readdirSync('/run/netns').filter((n) => n.startsWith('sbx-warm_')) : [];
  const ports = existsSync(`/sys/class/net/${bridge}/brif`) ? readdirSync(`/sys/class/net/${bridge}/brif`) : [];
  // (Not the instance's run dir, a tmpfs of its own that stays while the driver lives.)
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(dataDir) && !l.includes(' - tmpfs sandboxd-run '));
  const dirs = ['sandboxes', 'roots'].flatMap((d) =>
    existsSync(join(dataDir, 'data', d)) ? readdirSync(join(dataDir, 'data', d)).map((n) => `${d}/${n}`) : [],
  );
  const cg = existsSync(cgroupParentDir(cgroupParent))
    ? readdirSync(cgroupParentDir(cgroupParent), { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => `cgroup ${e.name}`)
    : [];
  return [...netns, ...ports.map((p) => `port ${p}`), ...mounts, ...dirs, ...cg];
}

it('a pooled sandbox that fails to start leaves nothing on the host, and creates still work', async () => {
  // A root disk cap below the minimum: the network is made, then the root layer is refused.
  const m = makeTestDriver('warmfail', {
    warmPool: [{ image: IMAGE, size: 2 }],
    warmLimits: { ...LIMITS, rootDiskBytes: 1 << 20 },
    netPoolSize: 0, // no pooled networks or roots: every port and root seen would be the warm pool's
  });
  made.push(m);
  await m.driver.init();
  await m.driver.recover();
  await m.driver.refillPools();
  await m.driver.refillPools();
  assert.deepEqual(m.driver.warmPool(), { [IMAGE]: 0 });
  assert.deepEqual(
    traces(m.options.bridge!, m.dataDir, m.options.cgroupParent!).filter((t) => !t.startsWith('roots/.')),
    [],
  );
  // A create with a valid cap starts its own sandbox; the pool then fills at that cap.
  const s = await m.driver.create({ id: `wf_${process.pid}`, image: IMAGE, env: {}, volumes: [], limits: LIMITS });
  assert.equal((await m.driver.exec(s.id, 'echo ok')).stdout, 'ok\n');
  await m.driver.refillPools();
  assert.deepEqual(m.driver.warmPool(), { [IMAGE]: 2 });
});

it('a pooled sandbox that died is not handed out: the create starts its own and the dead one is removed', async () => {
  const m = makeTestDriver('warmdead', { warmPool: [{ image: IMAGE, size: 1 }], warmLimits: LIMITS });
  made.push(m);
  await m.driver.init();
  await m.driver.recover();
  await m.driver.refillPools();
  assert.deepEqual(m.driver.warmPool(), { [IMAGE]: 1 });
  const cgroups = cgroupParentDir(m.options.cgroupParent!);
  const pooled = readdirSync(cgroups).filter((n) => n.startsWith('warm_'));
  assert.equal(pooled.length, 1);
  for (const pid of readFileSync(join(cgroups, pooled[0], 'cgroup.procs'), 'utf8')
    .split('\n')
    .filter(Boolean))
    process.kill(Number(pid), 'SIGKILL');
  for (let i = 0; i < 100 && readFileSync(join(cgroups, pooled[0], 'cgroup.procs'), 'utf8').trim(); i++)
    await new Promise((r) => setTimeout(r, 20));
  const s = await m.driver.create({
    id: `wd_${process.pid}`,
    image: IMAGE,
    env: { K: 'v' },
    volumes: [],
    limits: LIMITS,
  });
  assert.equal(m.driver.containerIdOf(s.id), s.id, 'started for the create, not claimed');
  assert.equal((await m.driver.exec(s.id, 'echo $K')).stdout, 'v\n');
  assert.ok(!existsSync(`/run/netns/sbx-${pooled[0]}`), 'the dead pooled sandbox network is gone');
  assert.ok(!existsSync(join(m.dataDir, 'data', 'sandboxes', pooled[0])), 'its folder is gone');
  assert.ok(!existsSync(join(cgroups, pooled[0])), 'its cgroup is gone');
});
