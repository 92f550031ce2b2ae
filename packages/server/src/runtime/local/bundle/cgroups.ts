import { existsSync, readFileSync } from 'node:fs';
import { readdir, rmdir, writeFile } from 'node:fs/promises';
import type { ResourceLimits } from '../../driver.js';

// Every sandbox's cgroup is `<parent>/<id>` in each hierarchy (cgroup v1 layout).

/** The OCI `cgroupsPath` of sandbox `id`: relative to each hierarchy's root. */
export function cgroupsPath(parent: string, id: string): string {
  return `/${parent}/${id}`;
}

/** Host pids in sandbox `id`'s cgroup (its pids hierarchy); empty when it has none. */
export function cgroupProcs(parent: string, id: string): number[] {
  try {
    return readFileSync(`/sys/fs/cgroup/pids/${parent}/${id}/cgroup.procs`, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

/**
 * Removes the folder `parent` from every hierarchy, with the sandbox cgroups left in it
 * (a runtime that died before removing one); never throws, never kills: a cgroup that
 * still holds a process stays, and with it `parent`.
 */
export async function removeCgroupParent(parent: string): Promise<void> {
  for (const ctl of await readdir('/sys/fs/cgroup').catch(() => [] as string[])) {
    const dir = `/sys/fs/cgroup/${ctl}/${parent}`;
    const children = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const c of children) if (c.isDirectory()) await rmdir(`${dir}/${c.name}`).catch(() => undefined);
    await rmdir(dir).catch(() => undefined);
  }
}

/** Hierarchies (e.g. `pids`) in which the folder `parent` exists. */
export async function cgroupParentLeft(parent: string): Promise<string[]> {
  const out: string[] = [];
  for (const ctl of await readdir('/sys/fs/cgroup').catch(() => [] as string[])) {
    if (
      await readdir(`/sys/fs/cgroup/${ctl}/${parent}`).then(
        () => true,
        () => false,
      )
    )
      out.push(ctl);
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
  root = '/sys/fs/cgroup',
): Promise<void> {
  const v2 = !existsSync(`${root}/memory`) && existsSync(`${root}/cgroup.controllers`);
  const at = (ctl: string, file: string) =>
    v2 ? `${root}/${parent}/${id}/${file}` : `${root}/${ctl}/${parent}/${id}/${file}`;
  const writes: Promise<void>[] = [];
  if (limits.memoryBytes !== was.memoryBytes) {
    const mem = String(limits.memoryBytes);
    if (v2) {
      writes.push(writeFile(at('memory', 'memory.max'), mem));
    } else {
      // memsw (memory + swap) may never be below the memory limit: raise it first, lower it last.
      const memsw = at('memory', 'memory.memsw.limit_in_bytes');
      const hasMemsw = existsSync(memsw);
      writes.push(
        (async () => {
          if (hasMemsw && limits.memoryBytes > was.memoryBytes) await writeFile(memsw, mem);
          await writeFile(at('memory', 'memory.limit_in_bytes'), mem);
          if (hasMemsw && limits.memoryBytes < was.memoryBytes) await writeFile(memsw, mem);
        })(),
      );
    }
  }
  if (limits.cpus !== was.cpus) {
    const quota = cpuQuotaUs(limits.cpus);
    writes.push(
      v2
        ? writeFile(at('cpu', 'cpu.max'), `${quota} ${CPU_PERIOD_US}`)
        : writeFile(at('cpu', 'cpu.cfs_quota_us'), String(quota)),
    );
  }
  if (limits.pids !== was.pids) writes.push(writeFile(at('pids', 'pids.max'), String(limits.pids)));
  await Promise.all(writes);
}
