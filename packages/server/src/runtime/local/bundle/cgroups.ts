import { existsSync } from 'node:fs';
import { readdir, rmdir, writeFile } from 'node:fs/promises';
import type { ResourceLimits } from '../../driver.js';
import {
  CGROUP_ROOT,
  type CgroupFile,
  cgroupFilePath,
  cgroupLayout,
  cgroupParentDirs,
  cgroupProcsOf,
} from './cgroup-fs.js';

// Every sandbox's cgroup is `<parent>/<id>`: in each v1 hierarchy, or in the unified one
// (v2); cgroup-fs.ts knows where each file is.

/**
 * The OCI `cgroupsPath` of sandbox `id`: relative to each hierarchy's root, the same on v1
 * and v2 (crun's cgroupfs manager, its default: no systemd slice, no sub-group).
 */
export function cgroupsPath(parent: string, id: string): string {
  return `/${parent}/${id}`;
}

/** Host pids in sandbox `id`'s cgroup (v1: its pids hierarchy); empty when it has none. */
export function cgroupProcs(parent: string, id: string, root = CGROUP_ROOT): number[] {
  return cgroupProcsOf(parent, id, root);
}

/**
 * Removes the folder `parent` from every hierarchy (v2: the unified one), with the sandbox
 * cgroups left in it (a runtime that died before removing one); never throws, never kills:
 * a cgroup that still holds a process stays, and with it `parent`.
 */
export async function removeCgroupParent(parent: string, root = CGROUP_ROOT): Promise<void> {
  for (const { dir } of cgroupParentDirs(parent, root)) {
    const children = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const c of children) if (c.isDirectory()) await rmdir(`${dir}/${c.name}`).catch(() => undefined);
    await rmdir(dir).catch(() => undefined);
  }
}

/** Hierarchies (e.g. `pids`; v2: `unified`) in which the folder `parent` exists. */
export async function cgroupParentLeft(parent: string, root = CGROUP_ROOT): Promise<string[]> {
  const out: string[] = [];
  for (const { hierarchy, dir } of cgroupParentDirs(parent, root)) {
    if (
      await readdir(dir).then(
        () => true,
        () => false,
      )
    )
      out.push(hierarchy);
  }
  return out;
}

/** CFS period of every sandbox (µs). */
export const CPU_PERIOD_US = 100_000;

/** CFS quota (µs per {@link CPU_PERIOD_US}) for `cpus` CPUs; at least 1 ms. */
export function cpuQuotaUs(cpus: number): number {
  return Math.max(1000, Math.round(cpus * CPU_PERIOD_US));
}

/**
 * Writes the memory (with swap = memory, as the OCI config asks), CPU and pid limits of a
 * running sandbox's cgroup `<parent>/<id>`, as the runtime wrote `was` at start: on cgroup
 * v1 (memory, cpu, pids hierarchies) or, where only the unified hierarchy is mounted, v2.
 * Limits equal to `was` are not written. Rejects when the kernel refuses one (e.g. memory
 * below what the sandbox uses).
 */
export async function applyCgroupLimits(
  parent: string,
  id: string,
  limits: ResourceLimits,
  was: ResourceLimits,
  root = CGROUP_ROOT,
): Promise<void> {
  const layout = cgroupLayout(root);
  const v2 = layout === 'v2';
  const at = (file: CgroupFile) => cgroupFilePath(file, parent, id, root, layout);
  const writes: Promise<void>[] = [];
  if (limits.memoryBytes !== was.memoryBytes) {
    const mem = String(limits.memoryBytes);
    if (v2) {
      // memory.swap.max is swap alone (0: crun wrote OCI swap minus memory), so it follows.
      writes.push(writeFile(at('memoryMax'), mem));
    } else {
      // memsw (memory + swap) may never be below the memory limit: raise it first, lower it last.
      const memsw = at('memorySwapMax');
      const hasMemsw = existsSync(memsw);
      writes.push(
        (async () => {
          if (hasMemsw && limits.memoryBytes > was.memoryBytes) await writeFile(memsw, mem);
          await writeFile(at('memoryMax'), mem);
          if (hasMemsw && limits.memoryBytes < was.memoryBytes) await writeFile(memsw, mem);
        })(),
      );
    }
  }
  if (limits.cpus !== was.cpus) {
    const quota = cpuQuotaUs(limits.cpus);
    writes.push(v2 ? writeFile(at('cpuMax'), `${quota} ${CPU_PERIOD_US}`) : writeFile(at('cpuMax'), String(quota)));
  }
  if (limits.pids !== was.pids) writes.push(writeFile(at('pidsMax'), String(limits.pids)));
  await Promise.all(writes);
}
