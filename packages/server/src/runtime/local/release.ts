/**
 * Taking a sandbox off the host: settling a started one (the host drops its mounts of the
 * root layer and the netns name) and the teardown that frees everything of one. Both run
 * over the driver's parts, as lifecycle.ts and boot.ts do. See driver.ts.
 */
import { rm } from 'node:fs/promises';
import { freezeAsked } from './bundle/freezer.js';
import { checkpointDir, killFrozen, type LifecycleHost } from './lifecycle.js';
import type { SandboxRecord } from './records.js';
import { allRuntimes, runtimeOf } from './tiers.js';

/** What of the driver the release uses. */
export type ReleaseHost = Omit<LifecycleHost, 'images' | 'takeNet' | 'settleHost'> & {
  /** The driver's sandboxes: a torn down one leaves it. */
  records: Map<string, SandboxRecord>;
};

/**
 * Once the sandbox runs, its root layer and netns live in its own namespaces: the host
 * drops its mounts of them (the root layer's, and the netns name), so that the host's mount
 * table, which every new mount namespace copies, does not grow with the sandboxes. runc
 * keeps needing the root on the host (its exec starts in the rootfs directory).
 */
export async function settleHost(h: ReleaseHost, rec: SandboxRecord): Promise<void> {
  const netId = rec.netId ?? rec.spec.id;
  if (runtimeOf(h, rec.spec.isolation).binary === 'crun') {
    // One helper run unmounts the root layer and the netns name; settle drops the name's file.
    const name = h.network.namePath(netId);
    await h.roots.detach(rec.rootId ?? rec.spec.id, name ? [name] : []);
  }
  await h.network.settle(netId);
}

/** Frees everything of `id` that exists, in reverse order of creation. Idempotent. */
export async function teardown(h: ReleaseHost, id: string, rec: SandboxRecord | null | undefined): Promise<void> {
  const cid = rec?.cid ?? id;
  h.commands.drop(cid);
  // A record names its tier; a leftover without one may be in either runtime.
  const runtimes =
    rec && (rec.spec.isolation !== 'gvisor' || h.gvisor) ? [runtimeOf(h, rec.spec.isolation)] : allRuntimes(h);
  for (const rt of runtimes) {
    // A frozen (paused) container: its processes take the SIGKILL once thawed.
    if (await freezeAsked(h.cgroupParent, cid)) await killFrozen(rt, h.cgroupParent, cid);
    await rt.delete(cid).catch(() => rt.kill(cid).then(() => rt.delete(cid)));
  }
  const releaseStorage = async () => {
    await h.roots.release(rec?.rootId ?? id);
    for (const v of rec?.spec.volumes ?? []) await h.volumes.release(v.name, id).catch(() => undefined);
  };
  await Promise.all([releaseStorage(), h.network.detach(rec?.netId ?? id)]);
  await h.bundles.remove(id);
  await rm(checkpointDir(h, id), { recursive: true, force: true }); // paused to disk
  // The state dir goes last: it is what a restart finds a pending release by, so a kill
  // between two of these steps leaves nothing that a restart cannot see and finish.
  await rm(h.state.dirOf(id), { recursive: true, force: true });
  h.records.delete(id);
}
