import { existsSync, readdirSync, readFileSync } from 'node:fs';

/**
 * The host's cgroup file layout, and where each file the runtime reads or writes lives on
 * it. Every sandbox's cgroup is `<parent>/<id>`:
 *
 * - v1 (this project's test machines: "hybrid", v1 hierarchies under /sys/fs/cgroup plus a
 *   cgroup2 mount at /sys/fs/cgroup/unified that holds no sandbox group): one hierarchy per
 *   controller, `<root>/<controller>/<parent>/<id>/<file>`;
 * - v2 (unified only: Debian 12, Ubuntu 22.04+, RHEL 9, Kubernetes nodes):
 *   `<root>/<parent>/<id>/<file>`, with the v2 file names.
 *
 * Every function takes the mount point (`root`), so tests pass a fixture tree.
 */

/** Where the host mounts its cgroups. */
export const CGROUP_ROOT = '/sys/fs/cgroup';

export type CgroupLayout = 'v1' | 'v2';

/**
 * `v2` when `root` is a cgroup2 mount (it has `cgroup.controllers`) and there is no v1
 * `memory` hierarchy; else `v1` (a hybrid host's cgroup2 mount is at `<root>/unified`).
 */
export function cgroupLayout(root = CGROUP_ROOT): CgroupLayout {
  return existsSync(`${root}/cgroup.controllers`) && !existsSync(`${root}/memory`) ? 'v2' : 'v1';
}

/**
 * The files, by what they mean: v1 as `[hierarchy, file]`, v2 as the file of the unified
 * group. Formats differ where the names do (see the readers below).
 */
const FILES = {
  /** Host pids of the group, one a line. */
  procs: { v1: ['pids', 'cgroup.procs'], v2: 'cgroup.procs' },
  /** Memory limit, bytes (v2: or `max`). */
  memoryMax: { v1: ['memory', 'memory.limit_in_bytes'], v2: 'memory.max' },
  /** v1: memory + swap limit, bytes; v2: swap alone (crun writes OCI swap minus memory: 0). */
  memorySwapMax: { v1: ['memory', 'memory.memsw.limit_in_bytes'], v2: 'memory.swap.max' },
  /** Memory in use, bytes. */
  memoryCurrent: { v1: ['memory', 'memory.usage_in_bytes'], v2: 'memory.current' },
  /** Most memory ever in use, bytes (v2: kernel 5.19+). */
  memoryPeak: { v1: ['memory', 'memory.max_usage_in_bytes'], v2: 'memory.peak' },
  /** Has an `oom_kill N` line (v1: kernel 4.13+). */
  memoryEvents: { v1: ['memory', 'memory.oom_control'], v2: 'memory.events' },
  /** Process limit (or `max`). */
  pidsMax: { v1: ['pids', 'pids.max'], v2: 'pids.max' },
  /** Processes (tasks) in the group. */
  pidsCurrent: { v1: ['pids', 'pids.current'], v2: 'pids.current' },
  /** `max N`: forks refused at the limit. */
  pidsEvents: { v1: ['pids', 'pids.events'], v2: 'pids.events' },
  /** v1: quota µs (period in cpu.cfs_period_us); v2: `<quota|max> <period>`. */
  cpuMax: { v1: ['cpu', 'cpu.cfs_quota_us'], v2: 'cpu.max' },
  /** v1: CFS period, µs; v2: the same file as cpuMax. */
  cpuPeriod: { v1: ['cpu', 'cpu.cfs_period_us'], v2: 'cpu.max' },
  /** v1: CPU time used, ns; v2: `usage_usec N` among other lines. */
  cpuUsage: { v1: ['cpuacct', 'cpuacct.usage'], v2: 'cpu.stat' },
  /** Written to freeze/thaw: v1 FROZEN/THAWED, v2 1/0; read: was a freeze asked. */
  freeze: { v1: ['freezer', 'freezer.state'], v2: 'cgroup.freeze' },
  /** Whether every task is frozen: v1 `FROZEN` (not FREEZING), v2 a `frozen 1` line. */
  frozen: { v1: ['freezer', 'freezer.state'], v2: 'cgroup.events' },
} as const satisfies Record<string, { v1: readonly [string, string]; v2: string }>;

export type CgroupFile = keyof typeof FILES;

/** Path of `file` of sandbox cgroup `<parent>/<id>`. */
export function cgroupFilePath(
  file: CgroupFile,
  parent: string,
  id: string,
  root = CGROUP_ROOT,
  layout: CgroupLayout = cgroupLayout(root),
): string {
  const f = FILES[file];
  return layout === 'v2' ? `${root}/${parent}/${id}/${f.v2}` : `${root}/${f.v1[0]}/${parent}/${id}/${f.v1[1]}`;
}

/** The folder `parent` whose sub-folders are the sandbox cgroups (v1: in the pids hierarchy). */
export function cgroupParentDir(parent: string, root = CGROUP_ROOT): string {
  return cgroupLayout(root) === 'v2' ? `${root}/${parent}` : `${root}/pids/${parent}`;
}

/** The folder of sandbox cgroup `<parent>/<id>` that holds its process list (v1: in the pids hierarchy). */
export function sandboxCgroupDir(parent: string, id: string, root = CGROUP_ROOT): string {
  return `${cgroupParentDir(parent, root)}/${id}`;
}

/**
 * Where the folder `parent` may be, present or not: v1 one per entry of `root` (every
 * hierarchy, `unified` included), keyed by hierarchy name; v2 one, keyed `unified`.
 */
export function cgroupParentDirs(parent: string, root = CGROUP_ROOT): { hierarchy: string; dir: string }[] {
  if (cgroupLayout(root) === 'v2') return [{ hierarchy: 'unified', dir: `${root}/${parent}` }];
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return [];
  }
  return names.map((h) => ({ hierarchy: h, dir: `${root}/${h}/${parent}` }));
}

function read(file: CgroupFile, parent: string, id: string, root: string): string | null {
  try {
    return readFileSync(cgroupFilePath(file, parent, id, root), 'utf8');
  } catch {
    return null;
  }
}

/** A number file; null when missing, unreadable or `max`. */
function readNumber(file: CgroupFile, parent: string, id: string, root: string): number | null {
  const t = read(file, parent, id, root)?.trim();
  return t === undefined || t === '' || !/^\d+$/.test(t) ? null : Number(t);
}

/** The number after `key` on a `key N` line of a flat-keyed file; null when absent. */
function keyed(text: string | null, key: string): number | null {
  const m = text === null ? null : new RegExp(`^${key} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
}

/** Host pids in sandbox cgroup `<parent>/<id>`; empty when it has none. */
export function cgroupProcsOf(parent: string, id: string, root = CGROUP_ROOT): number[] {
  return (read('procs', parent, id, root) ?? '').split('\n').filter(Boolean).map(Number);
}

/** Times the cgroup's OOM killer killed a process in it; null when the kernel does not say. */
export function oomKills(parent: string, id: string, root = CGROUP_ROOT): number | null {
  return keyed(read('memoryEvents', parent, id, root), 'oom_kill');
}

/** Processes in the cgroup and forks the kernel refused at pids.max; null each when unknown. */
export function pidsCounters(
  parent: string,
  id: string,
  root = CGROUP_ROOT,
): { current: number | null; refused: number | null } {
  return {
    current: readNumber('pidsCurrent', parent, id, root),
    refused: keyed(read('pidsEvents', parent, id, root), 'max'),
  };
}

/** Memory in use by the cgroup (its processes, page cache), and the most ever used; bytes, null when unknown. */
export function memoryUsage(
  parent: string,
  id: string,
  root = CGROUP_ROOT,
): { currentBytes: number | null; peakBytes: number | null } {
  return {
    currentBytes: readNumber('memoryCurrent', parent, id, root),
    peakBytes: readNumber('memoryPeak', parent, id, root),
  };
}

/** CPU time used by the cgroup's processes, ns; null when unknown. */
export function cpuUsageNs(parent: string, id: string, root = CGROUP_ROOT): number | null {
  if (cgroupLayout(root) === 'v1') return readNumber('cpuUsage', parent, id, root);
  const us = keyed(read('cpuUsage', parent, id, root), 'usage_usec');
  return us === null ? null : us * 1000;
}

/**
 * The limits in force on the cgroup as the kernel reports them: memory bytes, CPUs (quota /
 * period), pids; null each when unlimited or unknown.
 */
export function cgroupLimits(
  parent: string,
  id: string,
  root = CGROUP_ROOT,
): { memoryBytes: number | null; cpus: number | null; pids: number | null } {
  let cpus: number | null = null;
  if (cgroupLayout(root) === 'v1') {
    const quota = Number(read('cpuMax', parent, id, root)?.trim() ?? -1);
    const period = Number(read('cpuPeriod', parent, id, root)?.trim() ?? 0);
    if (quota > 0 && period > 0) cpus = quota / period;
  } else {
    const m = /^(\d+) (\d+)$/.exec(read('cpuMax', parent, id, root)?.trim() ?? '');
    if (m) cpus = Number(m[1]) / Number(m[2]);
  }
  return {
    memoryBytes: readNumber('memoryMax', parent, id, root),
    cpus,
    pids: readNumber('pidsMax', parent, id, root),
  };
}
