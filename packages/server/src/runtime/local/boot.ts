/**
 * How the local driver starts a sandbox: {@link boot} starts one from its image (cold, or
 * for the warm pool), {@link claim} makes a warm-pooled one the create's. See
 * docs/runtime.md for the design and driver.ts for the rest of the driver.
 */
import { mkdirSync, renameSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { SandboxdError } from '@sandboxd/protocol';
import type { RuntimeSandbox, SandboxSpec } from '../driver.js';
import { applyCgroupLimits } from './bundle/cgroups.js';
import { ExecAgent } from './commands/exec-agent.js';
import { processStart } from './commands/oci-runtime.js';
import { HostSpawner } from './commands/spawner.js';
import type { ImageStore } from './images/store.js';
import { resolveImageUser } from './images/user.js';
import type { LifecycleHost } from './lifecycle.js';
import type { PoolKeeper } from './pools/keeper.js';
import { isAlive, newRecord, recordView, type SandboxRecord } from './records.js';
import { type keyedLock, mountHelper } from './rootfs/mounts.js';
import { volumeOciMount } from './rootfs/roots.js';
import { mergeEnv } from './sandbox-checks.js';
import { bootService, declaredService, declaredStart, waitHealthy, waitReady, writeEnvsFile } from './service.js';
import { allowsSetuid } from './setuid.js';
import { runtimeOf } from './tiers.js';

/** The longest a claim waits for the service of a pooled sandbox to answer again. */
const CLAIM_HEALTH_MS = 10_000;

/** An image as the image store resolves it. */
export type ResolvedImage = Awaited<ReturnType<ImageStore['resolve']>>;

/** What of the driver starting a sandbox uses. */
export interface StartHost extends LifecycleHost {
  pools: PoolKeeper;
  /** The driver's sandboxes (a claim records its sandbox there). */
  records: Map<string, SandboxRecord>;
  /** Per sandbox id: what runs one at a time with its pause, stop, snapshot and delete. */
  serial: ReturnType<typeof keyedLock>;
  /** A free uid slot. */
  allocSlot(): number;
  /** First host uid of uid slot `slot`'s range. */
  uidBaseOf(slot: number): number;
  /** Frees everything of `id` that exists (driver.teardown). */
  teardown(id: string, rec: SandboxRecord | null | undefined): Promise<void>;
}

/**
 * Makes warm-pooled sandbox `cid` sandbox `spec.id`: its folder is renamed, the memory,
 * CPU and pid limits of `spec` are applied to its cgroup, its hostname (UTS namespace and
 * /etc files) becomes the sandbox's, the volumes of `spec` are mounted into it (as a cold
 * start binds them: idmapped for its uid range, nosuid, nodev), and its record (with the env of `spec` over the
 * image's, which every command gets) is written. When its image declares a service or a
 * start, the env of `spec` is written to /run/sandboxd/envs.json and the service's health
 * and the ready check are checked again, once each (service.ts). The pooled sandbox ran
 * nothing but its init (and the service and start command its image declares). Null when
 * it cannot be claimed (it died, or does not answer again): it is removed and the create
 * starts one.
 */
export async function claim(
  h: StartHost,
  spec: SandboxSpec,
  image: ResolvedImage,
  cid: string,
  w: SandboxRecord,
): Promise<RuntimeSandbox | null> {
  const rec: SandboxRecord = {
    ...w,
    spec,
    env: mergeEnv(image.env, spec.env),
    netId: w.netId ?? cid,
    rootId: w.rootId ?? cid,
    createdAt: new Date().toISOString(),
    phase: 'creating',
  };
  h.records.set(spec.id, rec);
  try {
    if (!isAlive(w)) throw new Error('the pooled sandbox is not running');
    // Two renames of folders (records, bundle): synchronous, each a few microseconds.
    renameSync(h.state.dirOf(cid), h.state.dirOf(spec.id));
    h.bundles.move(cid, spec.id);
    const hostname = spec.hostname ?? spec.id;
    const volumes: string[] = [];
    for (const v of spec.volumes) {
      await h.volumes.ensure(v.name, v.sizeGb);
      volumes.push(await h.volumes.acquire(v.name, spec.id), v.mountPath);
    }
    h.bundles.writeEtc(spec.id, hostname, w.address);
    await Promise.all([
      volumes.length ? mountHelper(['inject', String(w.initPid), String(w.uidBase), ...volumes]) : null,
      applyCgroupLimits(h.cgroupParent, cid, spec.limits, w.spec.limits),
      setHostname(w.initPid, hostname),
      // The pooled sandbox had `none`: the create's egress holds before it answers.
      h.network.egress.apply(spec.id, w.address, spec.egress, spec.secrets),
    ]);
    // The service runs since the pool's boot (healthy then); what it learns of this sandbox
    // is its env. It is asked again (one probe, ~1 ms) so that a claim, too, hands out a
    // sandbox whose service answers (its supervisor may be restarting it).
    if (rec.service || rec.start) {
      const svc = rec.service;
      const ready = rec.start?.ready;
      await Promise.all([
        writeEnvsFile(h.commands, rec, spec.env),
        svc &&
          waitHealthy(w.address, svc, {
            // A service that does not answer soon is not waited for here: a cold boot is.
            timeoutMs: Math.min(h.serviceStartTimeoutMs, CLAIM_HEALTH_MS),
            alive: () => isAlive(w),
            sandboxId: spec.id,
          }),
        // The ready check passed at the fill: one run says it still holds (else a cold boot).
        ready && waitReady(h.commands, rec, ready, { timeoutMs: CLAIM_HEALTH_MS, once: true, sandboxId: spec.id }),
      ]);
    }
    rec.phase = 'ready';
    await h.state.write(rec);
    return recordView(rec, false); // not frozen: the pool never pauses its sandboxes
  } catch {
    h.records.delete(spec.id);
    await h.teardown(spec.id, rec).catch(() => undefined);
    // When the renames did not happen:
    await h.bundles.remove(cid);
    await rm(h.state.dirOf(cid), { recursive: true, force: true });
    return null;
  }
}

/**
 * Starts sandbox `spec` from `image` and records it in `home` (the driver's sandboxes, or
 * the warm pool's; `forPool` says which). Whatever it made is removed again when it fails.
 */
export async function boot(
  h: StartHost,
  spec: SandboxSpec,
  image: ResolvedImage,
  home: Map<string, SandboxRecord>,
  forPool: boolean,
  /**
   * gVisor fork: restore the processes and memory of this checkpoint (another sandbox's)
   * instead of starting the image's init, service or start command.
   */
  restoreFrom?: string,
  /** With `restoreFrom`: its PID 1 had lost its channel (see SandboxRecord.checkpointUnserved). */
  restoreUnserved = false,
): Promise<SandboxRecord> {
  // A malformed service or start declaration fails the create before anything is made; an
  // image build's step sandbox (skipImageStart) starts neither.
  const service = spec.skipImageStart ? null : declaredService(image.labels, spec.image);
  const start = spec.skipImageStart ? null : declaredStart(image.labels, spec.image);
  const setuid = allowsSetuid(image.labels, spec.image);
  // Roots are pooled only for creates without volumes (volumes are staged while preparing).
  // Warm-pooled sandboxes make their own: they are made in the background anyway.
  const pooledRoot =
    spec.volumes.length === 0 && !forPool ? h.pools.takeRoot(image.rootfsDir, spec.limits.rootDiskBytes) : undefined;
  const slot = pooledRoot?.slot ?? h.allocSlot();
  const uidBase = h.uidBaseOf(slot);
  const dir = h.state.dirOf(spec.id);
  const partial = newRecord(spec, image, mergeEnv(image.env, spec.env), { slot, uidBase, rootId: pooledRoot?.id });
  if (service) partial.service = { ...service, env: mergeEnv(image.env, {}) };
  if (start) partial.start = start;
  if (setuid) partial.setuid = true;
  home.set(spec.id, partial);
  // The create's egress, set while crun runs when the address is known before (crun).
  let egress: Promise<void> | undefined;
  try {
    mkdirSync(dir, { recursive: true });
    await h.state.write(partial);
    partial.user = resolveImageUser(image.rootfsDir, image.user);
    const volumePaths: string[] = [];
    for (const v of spec.volumes) {
      await h.volumes.ensure(v.name, v.sizeGb);
      volumePaths.push(await h.volumes.acquire(v.name, spec.id));
    }
    // crun joins a netns made beforehand, owned by the host (runtime-made ones showed an
    // intermittent setns EPERM on the first execs). runc joins the user namespace first and
    // cannot enter such a netns, so under runc the runtime makes it and it is wired after start.
    const runtime = runtimeOf(h, spec.isolation);
    const netFirst = runtime.binary !== 'runc';
    let pooled = netFirst && !forPool ? h.pools.takeNet() : undefined;
    // No address left: the net pool's refill may be making a network with the last one.
    if (netFirst && !forPool && !pooled && !h.network.hasFreeAddress()) pooled = await h.pools.takeNetBeingMade();
    if (pooled) partial.netId = pooled.id; // from here on, teardown frees it
    const [root, early] = await Promise.all([
      pooledRoot
        ? { rootfs: pooledRoot.rootfs, volumes: [] as string[] }
        : h.roots.prepare({
            id: spec.id,
            lowerDir: image.rootfsDir,
            rootDiskBytes: spec.limits.rootDiskBytes,
            uidBase,
            volumes: volumePaths,
          }),
      netFirst ? (pooled ?? h.network.attach(spec.id)) : null,
    ]);
    const bundle = h.bundles.write({
      id: spec.id,
      hostname: spec.hostname ?? spec.id,
      rootfs: root.rootfs,
      env: partial.env,
      limits: spec.limits,
      uidBase,
      net: early,
      volumes: root.volumes.map((staged, i) => volumeOciMount(staged, spec.volumes[i].mountPath)),
      allowSetuid: partial.setuid === true,
      isolation: spec.isolation,
    });
    if (early && !forPool) {
      egress = h.network.egress.apply(spec.id, early.address, spec.egress, spec.secrets);
      egress.catch(() => undefined); // awaited below, or before the teardown
    }
    partial.initPid = restoreFrom
      ? // The checkpointed agent (PID 1) serves the new channel without a new hello.
        await runtime.restore(spec.id, bundle.dir, restoreFrom, {
          onChannel: h.commands.restoredChannel(spec.id, restoreUnserved),
        })
      : await runtime.run(spec.id, bundle.dir, {
          // PID 1 is the exec agent: its channel is ready for the first exec without a runtime call.
          onChannel: (channel) => h.commands.adopt(spec.id, ExecAgent.attach(channel, channel)),
        });
    h.bundles.shed(spec.id, spec.isolation);
    const net = early ?? (await h.network.attach(spec.id, { pid: partial.initPid }));
    partial.netId = net.id;
    // Taking the root layer and the netns off the host's tables runs two helper programs
    // (~1.7 ms). A create's answer does not wait for it: it runs next, one at a time with
    // the sandbox's pause, stop, snapshot and delete, which all go through `serial`. Until
    // it ran (or after a crash before it did) the host holds both a while longer, which
    // the sandbox's teardown handles (it unmounts whatever is left). Boots for the warm
    // pool, which nobody waits for, and runc's late attach wait for it as before.
    if (forPool || !early) await h.settleHost(partial);
    else void h.serial(spec.id, () => h.settleHost(partial)).catch(() => undefined);
    if (!early) bundle.setAddress(net.address);
    partial.address = net.address;
    partial.netnsPath = net.netnsPath;
    partial.initStart = processStart(partial.initPid);
    if (!forPool) await (egress ?? h.network.egress.apply(spec.id, net.address, spec.egress, spec.secrets));
    if (!restoreFrom) await bootService(h.commands, partial, h.serviceStartTimeoutMs);
    partial.phase = 'ready';
    await h.state.write(partial);
    return partial;
  } catch (e) {
    // An egress still being set would land after the teardown released the address's.
    await egress?.catch(() => undefined);
    home.delete(spec.id);
    await h.teardown(spec.id, partial).catch(() => undefined);
    if (e instanceof SandboxdError) throw e;
    throw new SandboxdError('internal', `sandbox ${spec.id} failed to start: ${(e as Error).message}`);
  }
}

/**
 * Sets the hostname of the UTS namespace of host process `pid` (a sandbox's init) from the
 * host (setns + sethostname, as crun sets it): the sandbox's own root lacks CAP_SYS_ADMIN
 * for it. The spawner does it itself, with no program started: ~0.2 ms of a claim, where the
 * mount helper took ~1.2 ms (and nsenter + sh before it ~2 ms).
 */
function setHostname(pid: number, hostname: string): Promise<void> {
  return HostSpawner.shared().setHostname(pid, hostname);
}
