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

/** Removes the folder `parent` from every hierarchy where it is empty; never throws. */
export async function removeCgroupParent(parent: string): Promise<void> {
  for (const ctl of await readdir('/sys/fs/cgroup').catch(() => [] as string[])) {
    await rmdir(`/sys/fs/cgroup/${ctl}/${parent}`).catch(() => undefined);
  }
}
