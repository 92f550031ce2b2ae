import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import {
  cgroupFilePath,
  cgroupLayout,
  cgroupLimits,
  cgroupParentDirs,
  cpuUsageNs,
  memoryUsage,
  oomKills,
  pidsCounters,
  sandboxCgroupDir,
} from './cgroup-fs.js';
import { applyCgroupLimits, cgroupParentLeft, cgroupProcs, removeCgroupParent } from './cgroups.js';
import { freeze, freezeAsked, isFrozen, thaw } from './freezer.js';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const V1_HIERARCHIES = ['blkio', 'cpu', 'cpuacct', 'cpuset', 'devices', 'freezer', 'memory', 'pids', 'systemd'];

/**
 * A fixture cgroup mount with sandbox group `par/c1` as the kernel shows it after a start
 * with 512 MiB, 1.5 CPUs and 64 pids, two processes (41, 42), one OOM kill, 3 refused forks:
 * v1 "hybrid" (one folder per hierarchy plus `unified`, a cgroup2 mount holding no sandbox
 * group) or v2 (unified only). A file in a folder stands for a populated group: rmdir fails
 * on it as the kernel's does on a group with processes.
 */
function tree(v: 'v1' | 'v2'): string {
  const root = mkdtempSync(join(tmpdir(), `cgroup-fs-${v}-`));
  dirs.push(root);
  const put = (rel: string, text: string) => {
    mkdirSync(join(root, rel, '..'), { recursive: true });
    writeFileSync(join(root, rel), text);
  };
  if (v === 'v1') {
    for (const h of V1_HIERARCHIES) mkdirSync(join(root, h, 'par/c1'), { recursive: true });
    put('unified/cgroup.controllers', '\n');
    put('pids/par/c1/cgroup.procs', '41\n42\n');
    put('memory/par/c1/cgroup.procs', '41\n42\n');
    put('memory/par/c1/memory.limit_in_bytes', '536870912\n');
    put('memory/par/c1/memory.memsw.limit_in_bytes', '536870912\n');
    put('memory/par/c1/memory.usage_in_bytes', '10485760\n');
    put('memory/par/c1/memory.max_usage_in_bytes', '20971520\n');
    put('memory/par/c1/memory.oom_control', 'oom_kill_disable 0\nunder_oom 0\noom_kill 1\n');
    put('pids/par/c1/pids.max', '64\n');
    put('pids/par/c1/pids.current', '2\n');
    put('pids/par/c1/pids.events', 'max 3\n');
    put('cpu/par/c1/cpu.cfs_quota_us', '150000\n');
    put('cpu/par/c1/cpu.cfs_period_us', '100000\n');
    put('cpuacct/par/c1/cpuacct.usage', '2500000000\n');
    put('freezer/par/c1/freezer.state', 'THAWED\n');
  } else {
    put('cgroup.controllers', 'cpuset cpu io memory hugetlb pids rdma misc\n');
    put('par/c1/cgroup.procs', '41\n42\n');
    put('par/c1/memory.max', '536870912\n');
    put('par/c1/memory.swap.max', '0\n');
    put('par/c1/memory.current', '10485760\n');
    put('par/c1/memory.peak', '20971520\n');
    put('par/c1/memory.events', 'low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n');
    put('par/c1/pids.max', '64\n');
    put('par/c1/pids.current', '2\n');
    put('par/c1/pids.events', 'max 3\n');
    put('par/c1/cpu.max', '150000 100000\n');
    put('par/c1/cpu.stat', 'usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n');
    put('par/c1/cgroup.freeze', '0\n');
    put('par/c1/cgroup.events', 'populated 1\nfrozen 0\n');
  }
  return root;
}

const LIMITS = { memoryBytes: 512 * 1024 ** 2, cpus: 1.5, pids: 64, rootDiskBytes: 0 };

for (const v of ['v1', 'v2'] as const) {
  describe(`cgroup files on ${v}`, () => {
    const at = (root: string, rel1: string, rel2: string) => join(root, v === 'v1' ? rel1 : rel2);

    it('the layout is read from the mount', () => {
      assert.equal(cgroupLayout(tree(v)), v);
    });

    it('the process list of a sandbox; none for a missing one', () => {
      const root = tree(v);
      assert.deepEqual(cgroupProcs('par', 'c1', root), [41, 42]);
      assert.deepEqual(cgroupProcs('par', 'nope', root), []);
      assert.equal(sandboxCgroupDir('par', 'c1', root), at(root, 'pids/par/c1', 'par/c1'));
    });

    it('limits: written where the kernel reads them, read back; equal ones are not written', async () => {
      const root = tree(v);
      assert.deepEqual(cgroupLimits('par', 'c1', root), { memoryBytes: 512 * 1024 ** 2, cpus: 1.5, pids: 64 });
      await applyCgroupLimits('par', 'c1', { ...LIMITS, memoryBytes: 1024 ** 3, cpus: 2, pids: 128 }, LIMITS, root);
      assert.deepEqual(cgroupLimits('par', 'c1', root), { memoryBytes: 1024 ** 3, cpus: 2, pids: 128 });
      const file = (a: string, b: string) => readFileSync(at(root, a, b), 'utf8');
      if (v === 'v1') {
        assert.equal(file('memory/par/c1/memory.memsw.limit_in_bytes', ''), String(1024 ** 3), 'memsw follows');
        assert.equal(file('cpu/par/c1/cpu.cfs_quota_us', ''), '200000');
      } else {
        assert.equal(file('', 'par/c1/memory.swap.max'), '0\n', 'swap alone stays 0');
        assert.equal(file('', 'par/c1/cpu.max'), '200000 100000');
      }
      // Lowering: v1 writes memsw after the memory limit (both end equal).
      await applyCgroupLimits('par', 'c1', LIMITS, { ...LIMITS, memoryBytes: 1024 ** 3, cpus: 2, pids: 128 }, root);
      assert.deepEqual(cgroupLimits('par', 'c1', root), { memoryBytes: 512 * 1024 ** 2, cpus: 1.5, pids: 64 });
      // Nothing changed: nothing written (a missing group would reject otherwise).
      await applyCgroupLimits('par', 'nope', LIMITS, LIMITS, root);
      await assert.rejects(applyCgroupLimits('par', 'nope', { ...LIMITS, pids: 1 }, LIMITS, root), /ENOENT/);
    });

    it('OOM kills, pids counters, memory and CPU figures', () => {
      const root = tree(v);
      assert.equal(oomKills('par', 'c1', root), 1);
      assert.deepEqual(pidsCounters('par', 'c1', root), { current: 2, refused: 3 });
      assert.deepEqual(memoryUsage('par', 'c1', root), { currentBytes: 10 * 1024 ** 2, peakBytes: 20 * 1024 ** 2 });
      assert.equal(cpuUsageNs('par', 'c1', root), 2.5e9);
      // A missing group: unknown, never a throw.
      assert.equal(oomKills('par', 'nope', root), null);
      assert.deepEqual(pidsCounters('par', 'nope', root), { current: null, refused: null });
      assert.deepEqual(memoryUsage('par', 'nope', root), { currentBytes: null, peakBytes: null });
      assert.equal(cpuUsageNs('par', 'nope', root), null);
    });

    it('unlimited values read as null', () => {
      const root = tree(v);
      writeFileSync(cgroupFilePath('pidsMax', 'par', 'c1', root), 'max\n');
      if (v === 'v2') writeFileSync(join(root, 'par/c1/cpu.max'), 'max 100000\n');
      else writeFileSync(join(root, 'cpu/par/c1/cpu.cfs_quota_us'), '-1\n');
      const l = cgroupLimits('par', 'c1', root);
      assert.equal(l.pids, null);
      assert.equal(l.cpus, null);
    });

    it('freeze and thaw', async () => {
      const root = tree(v);
      const p = freeze('par', 'c1', root);
      // The kernel's answer on v2 (v1's freezer.state reads back what was written here).
      if (v === 'v2')
        setTimeout(() => writeFileSync(join(root, 'par/c1/cgroup.events'), 'populated 1\nfrozen 1\n'), 20);
      await p;
      assert.equal(await isFrozen('par', 'c1', root), true);
      assert.equal(await freezeAsked('par', 'c1', root), true);
      assert.equal(readFileSync(cgroupFilePath('freeze', 'par', 'c1', root), 'utf8'), v === 'v1' ? 'FROZEN' : '1');
      await thaw('par', 'c1', root);
      assert.equal(await freezeAsked('par', 'c1', root), false);
    });

    it('parent cleanup: empty groups and the parent go; a populated group stays, and its parent with it', async () => {
      const root = tree(v);
      // Empty groups (the kernel's files aside, which rmdir ignores): c2 in every hierarchy.
      for (const { dir } of cgroupParentDirs('par', root))
        if (existsSync(dir)) mkdirSync(join(dir, 'c2'), { recursive: true });
      // Another instance's folder is never touched.
      mkdirSync(join(root, v === 'v1' ? 'pids/other/c9' : 'other/c9'), { recursive: true });
      const before = (await cgroupParentLeft('par', root)).sort();
      assert.deepEqual(before, v === 'v1' ? V1_HIERARCHIES : ['unified']);
      await removeCgroupParent('par', root);
      // c1 holds files (stands for processes): it stays where it has some, with `par`.
      const left = (await cgroupParentLeft('par', root)).sort();
      assert.deepEqual(left, v === 'v1' ? ['cpu', 'cpuacct', 'freezer', 'memory', 'pids'] : ['unified']);
      for (const { dir } of cgroupParentDirs('par', root)) assert.equal(existsSync(join(dir, 'c2')), false);
      assert.ok(existsSync(join(root, v === 'v1' ? 'pids/other/c9' : 'other/c9')));
      // Once emptied everywhere, the parent goes.
      for (const { dir } of cgroupParentDirs('par', root)) rmSync(join(dir, 'c1'), { recursive: true, force: true });
      await removeCgroupParent('par', root);
      assert.deepEqual(await cgroupParentLeft('par', root), []);
      // No parent at all: no throw.
      await removeCgroupParent('par', root);
    });
  });
}

describe('cgroup layout', () => {
  it('a cgroup2 mount at the root with v1 hierarchies beside it is not v2; nothing mounted reads v1', () => {
    const root = mkdtempSync(join(tmpdir(), 'cgroup-fs-odd-'));
    dirs.push(root);
    assert.equal(cgroupLayout(root), 'v1');
    mkdirSync(join(root, 'memory'));
    writeFileSync(join(root, 'cgroup.controllers'), '');
    assert.equal(cgroupLayout(root), 'v1');
    rmSync(join(root, 'memory'), { recursive: true });
    assert.equal(cgroupLayout(root), 'v2');
  });

  it('paths: v1 in the controller hierarchy, v2 in the one group', () => {
    assert.equal(cgroupFilePath('memoryMax', 'p', 'c', '/r', 'v1'), '/r/memory/p/c/memory.limit_in_bytes');
    assert.equal(cgroupFilePath('memoryMax', 'p', 'c', '/r', 'v2'), '/r/p/c/memory.max');
    assert.equal(cgroupFilePath('cpuUsage', 'p', 'c', '/r', 'v1'), '/r/cpuacct/p/c/cpuacct.usage');
    assert.equal(cgroupFilePath('memoryEvents', 'p', 'c', '/r', 'v2'), '/r/p/c/memory.events');
    assert.equal(cgroupFilePath('freeze', 'p', 'c', '/r', 'v1'), '/r/freezer/p/c/freezer.state');
    assert.equal(cgroupFilePath('frozen', 'p', 'c', '/r', 'v2'), '/r/p/c/cgroup.events');
  });
});
