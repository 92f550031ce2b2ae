/**
 * Pause, resume, stop and start of the local driver's sandboxes (see RuntimeDriver in
 * ../driver.ts for the contract, docs/runtime.md for the design).
 *
 * - pause/resume: the sandbox cgroup's freezer (bundle/freezer.ts), written directly: no
 *   process per call. The state lives in the kernel, so a restarted driver reads it back.
 * - stop: every process is killed (a frozen cgroup is thawed after the SIGKILL so that it
 *   lands), the container, its cgroups, network and volume mounts are freed, and the
 *   writable root layer (`<roots>/<rootId>.img`) and the uid slot it is owned by are kept.
 * - start: the kept layer is mounted again (no template copy; overlayfs's `volatile`
 *   marker removed), with the same uid range, env, hostname and volumes, a fresh network
 *   and `crun run` under the sandbox's own id.
 *
 * Crash safety comes from the order of the `phase` writes in state.json: `stopping` before
 * anything is killed and `starting` before anything is made, `stopped` / `ready` once done.
 * {@link settleKept} (called by `recover()`) turns a record left in `stopping` or `starting`
 * into `stopped`, removing whatever half-made container or network is left.
 */
import { mkdir, rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxdError } from '@sandboxd/protocol';
import type { ResourceLimits, RuntimeState } from '../driver.js';
import { cgroupProcs } from './bundle/cgroups.js';
import { freeze, freezeAsked, thaw } from './bundle/freezer.js';
import type { BundleWriter } from './bundle/writer.js';
import { ExecAgent } from './commands/exec-agent.js';
import type { SandboxCommands } from './commands/exec.js';
import { type OciRuntime, processStart } from './commands/oci-runtime.js';
import { ANONYMOUS } from './images/pull-policy.js';
import type { ImageStore } from './images/store.js';
import type { NetworkManager, SandboxNet } from './network/manager.js';
import { isAlive, isKept, type RecordStore, type SandboxRecord } from './records.js';
import { type RootfsManager, volumeOciMount } from './rootfs/roots.js';
import type { VolumeStore } from './rootfs/volumes.js';
import { checkLimits } from './sandbox-checks.js';
import { runtimeOf } from './tiers.js';
import { bootService } from './service.js';

/** What of the driver the lifecycle operations use. */
export interface LifecycleHost {
  cgroupParent: string;
  /** The `container` tier's runtime (crun or runc). */
  crun: OciRuntime;
  /** The `gvisor` tier's runtime (runsc), when this host offers it. */
  gvisor?: OciRuntime;
  /** Where gVisor sandboxes paused to disk keep their checkpoints: `<dir>/<id>/`. */
  checkpointsDir: string;
  network: NetworkManager;
  roots: RootfsManager;
  volumes: VolumeStore;
  state: RecordStore;
  commands: SandboxCommands;
  bundles: BundleWriter;
  images: ImageStore;
  /** A network made ahead of need, or undefined (never for runc: it makes its own). */
  takeNet(): SandboxNet | undefined;
  /** How long a boot waits for the image's service to answer its health check (service.ts). */
  serviceStartTimeoutMs: number;
  /** Takes the started sandbox's root layer and netns off the host's tables (driver.settleHost). */
  settleHost(rec: SandboxRecord): Promise<void>;
}

/** The state a live record is in now: the freezer is read from the kernel. */
export async function runtimeState(parent: string, rec: SandboxRecord): Promise<RuntimeState> {
  if (!isAlive(rec)) return 'stopped';
  return (await freezeAsked(parent, rec.cid)) ? 'paused' : 'running';
}

/** Throws `conflict` unless a command can run in `rec` now (alive, not frozen). */
export async function checkRunnable(parent: string, rec: SandboxRecord): Promise<void> {
  const s = await runtimeState(parent, rec);
  if (s === 'paused' || (rec.checkpoint && rec.phase === 'stopped'))
    throw new SandboxdError('conflict', 'Sandbox is paused');
  if (s === 'stopped') throw new SandboxdError('conflict', `sandbox ${rec.spec.id} is not running`);
}

/** Freezes every process of `rec`; frozen already: no-op. */
export async function pause(h: LifecycleHost, rec: SandboxRecord): Promise<void> {
  if (!isAlive(rec)) throw new SandboxdError('conflict', 'Sandbox is stopped');
  await freeze(h.cgroupParent, rec.cid);
}

/** Thaws every process of `rec`; running already: no-op. */
export async function resume(h: LifecycleHost, rec: SandboxRecord): Promise<void> {
  if (!isAlive(rec)) throw new SandboxdError('conflict', 'Sandbox is stopped');
  await thaw(h.cgroupParent, rec.cid);
}

/**
 * Kills every process of `rec` (PID 1 of its pid namespace, then a thaw: a frozen v1 task
 * takes its SIGKILL only once thawed) and waits up to 5 s for its init to be gone.
 */
export async function killAll(h: LifecycleHost, rec: SandboxRecord): Promise<void> {
  h.commands.drop(rec.cid);
  if (isAlive(rec)) {
    try {
      process.kill(rec.initPid, 'SIGKILL');
    } catch {
      /* gone meanwhile */
    }
  }
  if (await freezeAsked(h.cgroupParent, rec.cid))
    await killFrozen(runtimeOf(h, rec.spec.isolation), h.cgroupParent, rec.cid);
  for (let i = 0; i < 1000 && isAlive(rec); i++) await sleep(5);
}

/**
 * Kills every process of frozen container `cid`, then thaws it (a frozen v1 task takes its
 * SIGKILL only once thawed). runsc cannot be asked: its sandbox, frozen, answers nothing,
 * so its host processes (the user-space kernel) are killed directly.
 */
export async function killFrozen(runtime: OciRuntime, cgroupParent: string, cid: string): Promise<void> {
  if (runtime.binary === 'runsc') {
    for (const pid of cgroupProcs(cgroupParent, cid)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone meanwhile */
      }
    }
  } else await runtime.kill(cid, 'KILL');
  await thaw(cgroupParent, cid).catch(() => undefined);
}

/**
 * Stops `rec` keeping its root layer. Order (for crash safety): phase `stopping` written,
 * processes killed, container, network and volume mounts freed, the layer put away
 * (written back, its loop device gone), phase `stopped` written.
 */
export async function stop(h: LifecycleHost, rec: SandboxRecord): Promise<void> {
  rec.phase = 'stopping';
  await h.state.write(rec);
  await killAll(h, rec);
  await releaseRuntime(h, rec);
  rec.phase = 'stopped';
  await h.state.write(rec);
}

/** The folder of sandbox `id`'s checkpoint (pause to disk). */
export function checkpointDir(h: Pick<LifecycleHost, 'checkpointsDir'>, id: string): string {
  return join(h.checkpointsDir, id);
}

/**
 * Pauses gVisor sandbox `rec` to disk: runsc saves every process, its memory and open files
 * into {@link checkpointDir} and the sandbox's processes end; then everything a running
 * sandbox holds is freed as by {@link stop} (the root layer and uid slot kept) and the record
 * says `stopped` with `checkpoint`, which `start(..., {restore: true})` restores. Order as
 * stop's (phase `stopping` first, after the processes holding a file of the host ended: see
 * OciRuntime.endHostFileHolders), and the checkpoint is recorded only once whole (a crash
 * before that leaves it `stopped` with its files, as a crash in a stop does). Open TCP
 * connections are dropped by the save (runsc's --net-disconnect-ok). When runsc cannot save
 * it, the processes are gone all the same: the sandbox ends `stopped` with its files, and
 * this throws `conflict` saying so.
 */
export async function pauseToDisk(h: LifecycleHost, rec: SandboxRecord): Promise<void> {
  if (rec.spec.isolation !== 'gvisor')
    throw new SandboxdError('validation', 'Only a gVisor sandbox can be paused to disk (memory: "disk")', {
      isolation: rec.spec.isolation ?? 'container',
    });
  if (!isAlive(rec)) throw new SandboxdError('conflict', 'Sandbox is stopped');
  if (await freezeAsked(h.cgroupParent, rec.cid))
    throw new SandboxdError('conflict', 'Sandbox is paused in memory: resume it first', { pausedMemory: 'ram' });
  const runtime = runtimeOf(h, rec.spec.isolation);
  const dir = checkpointDir(h, rec.spec.id);
  // A process holding a file of the host (a terminal's shell, a second agent after a restart)
  // would make a save runsc cannot restore: those end first, and their clients see them exit.
  await runtime.endHostFileHolders(rec.cid).catch((e: Error) => {
    throw new SandboxdError(
      'conflict',
      'The sandbox could not be paused to disk: a process holding a terminal of the host would not end. It runs on.',
      { runtime: e.message.slice(0, 300) },
    );
  });
  rec.phase = 'stopping';
  await h.state.write(rec);
  // PID 1 without its channel (lost in a server restart) has none after the restore either.
  const unserved = !h.commands.servedByInit(rec.cid);
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // The agent's channel stays open while runsc saves: its PID 1, idle in its read, goes on
  // serving the channel a restore hands it. A command in flight is saved with the sandbox
  // and goes on after the restore; its caller sees the channel close.
  let failure: Error | null = null;
  await runtime.checkpoint(rec.cid, dir).catch((e: Error) => {
    failure = e;
  });
  h.commands.drop(rec.cid);
  await killAll(h, rec); // runsc ended them; a failed save may leave some
  await releaseRuntime(h, rec);
  rec.phase = 'stopped';
  if (!failure) Object.assign(rec, { checkpoint: true, checkpointUnserved: unserved || undefined });
  else await rm(dir, { recursive: true, force: true });
  await h.state.write(rec);
  if (failure)
    throw new SandboxdError(
      'conflict',
      'The sandbox could not be paused to disk: gVisor could not save its state. Its processes ended; its files are kept: it is stopped, and start boots it again.',
      { runtime: (failure as Error).message.slice(0, 300) },
    );
}

/**
 * Frees what a sandbox without processes holds but its layer and uid slot: its container
 * (under its current and, after a crash in start, its own id) and bundle, network, volume mounts;
 * unmounts whatever of its layer the host still has, cleanly. Leaves `rec` with no init,
 * address or network. Idempotent.
 */
async function releaseRuntime(h: LifecycleHost, rec: SandboxRecord): Promise<void> {
  const id = rec.spec.id;
  for (const cid of new Set([rec.cid, id])) {
    h.commands.drop(cid);
    if (await freezeAsked(h.cgroupParent, cid)) await thaw(h.cgroupParent, cid).catch(() => undefined);
    const rt = runtimeOf(h, rec.spec.isolation);
    await rt.delete(cid).catch(() => rt.kill(cid).then(() => rt.delete(cid)));
  }
  await h.bundles.remove(id); // written again by start
  await Promise.all([
    rec.netId !== undefined || rec.address ? h.network.detach(rec.netId ?? id) : undefined,
    ...rec.spec.volumes.map((v) => h.volumes.release(v.name, id).catch(() => undefined)),
  ]);
  await h.roots.putAway(rec.rootId ?? id);
  Object.assign(rec, { initPid: 0, initStart: null, address: '', netnsPath: '', netId: undefined });
}

/**
 * Boots stopped sandbox `rec` again from its kept layer with `limits` (the root disk cap
 * stays the layer's). Order: phase `starting` written, volumes, network, layer mounted,
 * bundle, `crun run` (container id: the sandbox's own), host tables settled, phase `ready`.
 * On failure everything it made is removed and the record is `stopped` again.
 */
export async function start(
  h: LifecycleHost,
  rec: SandboxRecord,
  limits: ResourceLimits,
  /** Restore the checkpoint of a sandbox paused to disk instead of booting it afresh. */
  opts: { restore?: boolean } = {},
): Promise<void> {
  checkLimits(limits);
  const restore = opts.restore === true && rec.checkpoint === true;
  const id = rec.spec.id;
  rec.spec = { ...rec.spec, limits: { ...limits, rootDiskBytes: rec.spec.limits.rootDiskBytes } };
  rec.cid = id;
  rec.phase = 'starting';
  await h.state.write(rec);
  try {
    const lowerDir = await imageRootfs(h.images, rec);
    const volumePaths: string[] = [];
    for (const v of rec.spec.volumes) {
      await h.volumes.ensure(v.name, v.sizeGb);
      volumePaths.push(await h.volumes.acquire(v.name, id));
    }
    const runtime = runtimeOf(h, rec.spec.isolation);
    const netFirst = runtime.binary !== 'runc';
    const pooled = netFirst ? h.takeNet() : undefined;
    if (netFirst) rec.netId = pooled?.id ?? id; // from here on, a failure frees it
    const [root, early] = await Promise.all([
      h.roots.remount({ id: rec.rootId ?? id, lowerDir, uidBase: rec.uidBase, volumes: volumePaths }),
      netFirst ? (pooled ?? h.network.attach(id)) : null,
    ]);
    const bundle = h.bundles.write({
      id,
      hostname: rec.spec.hostname ?? id,
      rootfs: root.rootfs,
      env: rec.env,
      limits: rec.spec.limits,
      uidBase: rec.uidBase,
      net: early,
      volumes: root.volumes.map((staged, i) => volumeOciMount(staged, rec.spec.volumes[i].mountPath)),
      allowSetuid: rec.setuid === true,
      isolation: rec.spec.isolation,
    });
    const onChannel = (channel: Socket) => h.commands.adopt(id, ExecAgent.attach(channel, channel));
    // A restored agent says no hello on its new channel: the first command finds out. One
    // that had lost its channel when saved serves none: the first command starts a second.
    rec.initPid = restore
      ? await runtime.restore(id, bundle.dir, checkpointDir(h, id), {
          onChannel: h.commands.restoredChannel(id, rec.checkpointUnserved === true),
        })
      : await runtime.run(id, bundle.dir, { onChannel });
    h.bundles.shed(id, rec.spec.isolation);
    const net = early ?? (await h.network.attach(id, { pid: rec.initPid }));
    rec.netId = net.id;
    await h.settleHost(rec);
    if (!early) bundle.setAddress(net.address);
    rec.address = net.address;
    rec.netnsPath = net.netnsPath;
    rec.initStart = processStart(rec.initPid);
    await h.network.egress.apply(id, net.address, rec.spec.egress, rec.spec.secrets);
    // Restored processes are where they were, the image's service among them.
    if (!restore) await bootService(h.commands, rec, h.serviceStartTimeoutMs);
    rec.phase = 'ready';
    rec.checkpoint = undefined;
    rec.checkpointUnserved = undefined;
    await h.state.write(rec);
    if (restore) await rm(checkpointDir(h, id), { recursive: true, force: true });
  } catch (e) {
    await killAll(h, rec).catch(() => undefined);
    await releaseRuntime(h, rec).catch(() => undefined);
    rec.phase = 'stopped'; // a failed restore keeps its checkpoint: resume may be tried again
    await h.state.write(rec).catch(() => undefined);
    if (e instanceof SandboxdError) throw e;
    throw new SandboxdError('internal', `sandbox ${id} failed to start: ${(e as Error).message}`);
  }
}

/**
 * Recovery of a record found in a kept phase: one left in `stopping` or `starting` by a
 * crash (or `stopped` with a container of its left) is made `stopped`: its processes are
 * killed, container and network removed, layer put away. A `stopped` one without a
 * container is left as it is.
 */
export async function settleKept(h: LifecycleHost, rec: SandboxRecord, hasContainer: boolean): Promise<void> {
  if (!isKept(rec)) return;
  if (rec.phase === 'stopped' && !hasContainer && !rec.address && rec.netId === undefined) return;
  await killAll(h, rec);
  await releaseRuntime(h, rec);
  rec.phase = 'stopped';
  await h.state.write(rec);
}

/**
 * The unpacked rootfs of the image `rec` was made from (its digest, even when its tag moved
 * since: the kept layer lies over that one): the one in the cache, else its ref resolved
 * again as the sandbox's account (a pull if need be). Throws `conflict` when it is gone.
 * The cached digest is used as it is, without the pull policy: the sandbox already holds
 * that image, whatever the policy says of its ref now.
 */
async function imageRootfs(images: ImageStore, rec: SandboxRecord): Promise<string> {
  const cached = await images.byDigest(rec.imageDigest);
  if (cached) return cached.rootfsDir;
  const now = await images.resolve(rec.spec.image, { puller: rec.spec.pullAs ?? ANONYMOUS }).catch(() => null);
  if (now?.digest === rec.imageDigest) return now.rootfsDir;
  throw new SandboxdError('conflict', `the image ${rec.spec.image} (${rec.imageDigest}) of this sandbox is gone`);
}
