import { readFileSync } from 'node:fs';
import { readdir, rmdir } from 'node:fs/promises';

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
