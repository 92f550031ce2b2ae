import { randomBytes } from 'node:crypto';
import { mkdir, rm, rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  type Egress,
  type PauseMemory,
  SandboxdError,
  SECRET_PLACEHOLDER_PATTERN,
  secretEnvName,
} from '@sandboxd/protocol';
import { imageBundle, installTrust, SYSTEM_BUNDLES, trustEnv, withTrustEnv } from './trust.js';
import type { Logger } from 'pino';
import type { Config } from '../../config.js';
import { instanceKey } from '../../instance.js';
import type {
  ExecOptions,
  ExecResult,
  ImageConfigOverride,
  ImageInfo,
  ForkSpec,
  InjectionEvent,
  IsolationSupport,
  PtyProcess,
  RecoveryReport,
  ResourceLimits,
  RuntimeCapacity,
  RuntimeDriver,
  RuntimeSandbox,
  SandboxSpec,
  SecretInjection,
  SpawnOptions,
  StreamedProcess,
  TtyOptions,
  VolumeInfo,
} from '../driver.js';
import type { DriverFiles } from '../files.js';
import { numericUser } from '../passwd.js';
import { removeCgroupParent } from './bundle/cgroups.js';
import { freezeAsked } from './bundle/freezer.js';
import { ID_RANGE_SIZE } from './bundle/oci-config.js';
import { ensureRunTmpfs, removeRunDir } from './run-dir.js';
import { AgentFiles } from './files.js';
import { readHostCapacity } from './host-capacity.js';
import type { Leftovers } from './leftovers.js';
import { localDriverOptions, type LocalDriverOptions, type ResolvedOptions, withDefaults } from './options.js';
import { PoolKeeper } from './pools/keeper.js';
import { spawnTty } from './pty/relay.js';
import { ContainerOwnership } from './ownership.js';
import { allRuntimes, runtimeOf, type TierRuntimes } from './tiers.js';
import { Snapshots } from './snapshot.js';
import * as lifecycle from './lifecycle.js';
import { boot, claim, type StartHost } from './boot.js';
import { recoverInstance } from './recover.js';
import { type ReleaseHost, settleHost, teardown } from './release.js';
import { ID_RE, isAlive, isKept, isVisible, recordView, type SandboxRecord } from './records.js';
import { type DriverParts, makeParts } from './parts.js';
import { ANONYMOUS } from './images/pull-policy.js';
import { imageInfoOf } from './images/store.js';
import { keyedLock } from './rootfs/mounts.js';
import {
  checkLimits,
  checkMountPath,
  checkMountPathsDisjoint,
  checkTraversable,
  mergeEnv,
  mergeEnvList,
  splitEnv,
} from './sandbox-checks.js';

export type { LocalDriverOptions } from './options.js';

/** A secret rule's placeholder (an env value of this shape was put there by a rule). */
const PLACEHOLDER = new RegExp(SECRET_PLACEHOLDER_PATTERN);

/**
 * The local runtime driver: crun sandboxes with user namespaces, seccomp, cgroup limits,
 * an isolated bridge network, size-capped copy-on-write roots and loop-backed volumes.
 */
export class LocalDriver implements RuntimeDriver {
  /** The instance key (instance.ts): names the run dir, the default cgroup folder, the containers' marker. */
  readonly key: string;
  /** `<runDir>/<key>`: this instance's volatile state (crun's root, exec pid files). */
  readonly runDir: string;
  readonly images: DriverParts['images'];
  readonly files: DriverFiles = new AgentFiles((id, argv, o) => this.spawn(id, argv, o));
  private readonly crun: DriverParts['crun'];
  private readonly gvisor: DriverParts['gvisor'];
  /** The runtimes of the isolation tiers (tiers.ts). */
  private get tiers(): TierRuntimes {
    return { crun: this.crun, gvisor: this.gvisor };
  }
  private readonly network: DriverParts['network'];
  private readonly roots: DriverParts['roots'];
  private readonly volumes: DriverParts['volumes'];
  private readonly records = new Map<string, SandboxRecord>();
  /** Warm-pooled sandboxes (being started, or ready to be claimed), by container id. */
  private readonly pooled = new Map<string, SandboxRecord>();
  /** Creates in progress: the pools' refill waits while there are any. */
  private creating = 0;
  private readonly commands: DriverParts['commands'];
  /**
   * Ids between create's first check and its record (a second create of one id must see
   * them), and leftovers being removed (their names must not be taken meanwhile).
   */
  private readonly reserved = new Set<string>();
  /** Leftovers of an earlier process that the last `recover()` is removing. */
  private leftovers: Leftovers | null = null;
  /** Uid slots of containers in this runtime root that are not this instance's: never handed out. */
  private foreignSlots: number[] = [];
  /** Deleted sandboxes whose release runs in the background: their uid slots stay taken. */
  private readonly releasing = new Map<string, { slot: number | undefined; done: Promise<void> }>();
  private readonly state: DriverParts['state'];
  private readonly pools: PoolKeeper;
  private readonly opts: ResolvedOptions;
  private readonly bundles: DriverParts['bundles'];
  private readonly snaps: Snapshots;
  private readonly ownership: ContainerOwnership;
  /** What lifecycle.ts (pause, resume, stop, start) uses of the driver. */
  private readonly life: lifecycle.LifecycleHost;
  /** What boot.ts (boot, claim) uses of the driver. */
  private readonly starts: StartHost;
  /** What release.ts (settle, teardown) uses of the driver. */
  private readonly release: ReleaseHost;
  /** Per sandbox id: pause, resume, stop, start and delete run one at a time. */
  private readonly serial = keyedLock();

  constructor(opts: LocalDriverOptions) {
    this.key = instanceKey(opts.dataDir);
    this.opts = withDefaults(opts, this.key);
    this.runDir = join(this.opts.runDir, this.key);
    const p = makeParts(opts, this.opts, this.key, this.runDir, (cid) => this.records.get(cid)?.spec.isolation);
    this.state = p.state;
    this.images = p.images;
    this.crun = p.crun;
    this.gvisor = p.gvisor;
    this.commands = p.commands;
    this.network = p.network;
    this.roots = p.roots;
    this.volumes = p.volumes;
    this.bundles = p.bundles;
    // crun joins a netns made beforehand; runc makes its own, so no network is pooled for it.
    this.pools = new PoolKeeper({
      nets: this.crun.binary !== 'runc' ? this.opts.netPoolSize : 0,
      roots: this.opts.netPoolSize === 0 ? 0 : 1,
      network: this.network,
      rootfs: this.roots,
      allocSlot: () => this.allocSlot(),
      uidBase: (slot) => this.uidBaseOf(slot),
      warm: {
        entries: this.opts.warmPool,
        limits: this.opts.warmLimits,
        start: (cid, image, limits) => this.startPooled(cid, image, limits),
        release: (cid) => teardown(this.release, cid, this.pooled.get(cid)).finally(() => this.pooled.delete(cid)),
      },
      busy: () => this.creating > 0,
    });
    this.snaps = new Snapshots({
      images: this.images,
      instance: this.key,
      cgroupParent: this.opts.cgroupParent,
      rootsDir: this.roots.dir,
      record: (id) => {
        const rec = this.records.get(id);
        return rec && rec.phase !== 'creating' ? rec : undefined;
      },
      imagesInUse: async () => {
        const recs = [...this.records.values(), ...this.pooled.values()];
        for (const id of await this.state.ids()) {
          const rec = await this.state.read(id);
          if (rec) recs.push(rec);
        }
        return new Set(recs.map((r) => r.imageDigest));
      },
    });
    this.ownership = new ContainerOwnership({
      crun: this.crun,
      gvisor: this.gvisor,
      instance: this.key,
      runDirBase: this.opts.runDir,
      uidRangeStart: this.opts.uidRangeStart,
      bundleDirs: [this.state.dir, this.bundles.dir],
    });
    this.life = {
      ...p,
      cgroupParent: this.opts.cgroupParent,
      checkpointsDir: join(this.opts.dataDir, 'checkpoints'),
      serviceStartTimeoutMs: this.opts.serviceStartTimeoutMs,
      takeNet: () => (this.crun.binary !== 'runc' ? this.pools.takeNet() : undefined),
      settleHost: (rec) => settleHost(this.release, rec),
    };
    this.release = { ...this.life, records: this.records };
    this.starts = {
      ...this.life,
      pools: this.pools,
      records: this.records,
      serial: this.serial,
      allocSlot: () => this.allocSlot(),
      uidBaseOf: (slot) => this.uidBaseOf(slot),
      teardown: (id, rec) => teardown(this.release, id, rec),
    };
  }

  async init(): Promise<void> {
    if (process.getuid?.() !== 0)
      throw new SandboxdError('internal', 'the local runtime needs root (run sandboxd as root)');
    await mkdir(this.state.dir, { recursive: true });
    await ensureRunTmpfs(this.runDir);
    for (const rt of allRuntimes(this.tiers)) await mkdir(rt.root, { recursive: true });
    await mkdir(this.bundles.dir, { recursive: true });
    await mkdir(join(this.runDir, 'exec'), { recursive: true, mode: 0o700 });
    await checkTraversable(this.opts.dataDir);
    await this.network.init();
    this.unsubscribeInjections ??= this.network.egress.onInjection((e) => {
      for (const l of this.injectionListeners) l(e);
    });
    this.bundles.init();
    await this.snaps.init();
  }

  /** See recover.ts. */
  async recover(): Promise<RecoveryReport> {
    // A recovery before (destroyAll recovers again): its leftovers not yet removed are found anew.
    const earlier = this.leftovers?.ids() ?? [];
    await this.leftovers?.stop();
    for (const id of earlier) this.reserved.delete(id);
    const { report, leftovers } = await recoverInstance({
      ...this.starts,
      ownership: this.ownership,
      reserved: this.reserved,
      foreignSlots: (slots) => {
        this.foreignSlots = slots;
      },
      recoveryConcurrency: this.opts.recoveryConcurrency,
      holdLeftovers: this.opts.holdLeftovers,
    });
    this.leftovers = leftovers;
    void this.pools.refill();
    return report;
  }

  resolveImage(ref: string): Promise<ImageInfo> {
    return this.images.resolve(ref).then(imageInfoOf);
  }

  async listImages(): Promise<ImageInfo[]> {
    return (await this.images.list()).map(imageInfoOf);
  }

  async create(input: SandboxSpec): Promise<RuntimeSandbox> {
    let spec = input;
    if (!ID_RE.test(spec.id) || this.pools.owns(spec.id)) {
      throw new SandboxdError(
        'validation',
        `sandbox id "${spec.id}" must match ${ID_RE} and not start with ${this.pools.prefixes.join(' or ')}`,
      );
    }
    runtimeOf(this.tiers, spec.isolation); // a tier this host does not offer: `validation`
    for (const v of spec.volumes) checkMountPath(v.mountPath);
    checkMountPathsDisjoint(spec.volumes.map((v) => v.mountPath));
    checkLimits(spec.limits);
    if (this.records.has(spec.id) || this.reserved.has(spec.id) || this.state.has(spec.id)) {
      throw new SandboxdError('conflict', `sandbox ${spec.id} exists`);
    }
    this.reserved.add(spec.id);
    this.creating++;
    try {
      const image = await this.images.resolve(spec.image, { puller: spec.pullAs ?? ANONYMOUS });
      // Injection rules: the sandbox trusts the egress CA (its variables now, its files once it runs).
      if (spec.secrets?.length && this.network.egress.caCertPem) {
        spec = { ...spec, env: withTrustEnv(spec.env, imageBundle(image.rootfsDir)) };
      }
      // A pooled sandbox ran what its image starts at boot: not one for a create that skips it.
      // The pool's sandboxes are containers: a gVisor create boots its own.
      const warm =
        spec.skipImageStart || spec.isolation === 'gvisor'
          ? undefined
          : this.pools.takeWarm(spec.image, image.digest, spec.limits);
      const pooled = warm ? this.pooled.get(warm) : undefined;
      if (warm) this.pooled.delete(warm);
      const claimed = warm && pooled ? await claim(this.starts, spec, image, warm, pooled) : null;
      if (!claimed) await boot(this.starts, spec, image, this.records, false);
      const rec = this.records.get(spec.id) as SandboxRecord;
      if (spec.secrets?.length) {
        try {
          await this.ensureTrust(rec);
        } catch (e) {
          await this.delete(spec.id).catch(() => undefined);
          throw new SandboxdError(
            'internal',
            `sandbox ${spec.id}: the egress CA could not be installed: ${(e as Error).message}`,
          );
        }
      }
      return claimed ?? recordView(rec, false); // not frozen: just started
    } finally {
      this.creating--;
      this.reserved.delete(spec.id);
    }
  }

  /**
   * Starts a sandbox for the warm pool: container id `cid`, no env of any account, hostname
   * `cid`; kept in `pooled` until claimed or released. Resolves with its image's digest.
   */
  private async startPooled(cid: string, ref: string, limits: ResourceLimits): Promise<string> {
    const image = await this.images.resolve(ref);
    const spec: SandboxSpec = { id: cid, image: ref, env: {}, volumes: [], limits };
    return (await boot(this.starts, spec, image, this.pooled, true)).imageDigest;
  }

  /**
   * gVisor: N sandboxes from a checkpoint of running sandbox `id` (see RuntimeDriver.fork).
   * The source is paused to disk (lifecycle.pauseToDisk), its files become a temporary
   * snapshot image, each fork boots from that image with its own id, uid range, network and
   * writable layer and restores the checkpoint instead of starting anew, then the source is
   * restored (with a new address, like any resume from disk) and the temporary image
   * dropped (the forks keep its files). On failure no fork is left and the source runs again.
   */
  fork(id: string, specs: ForkSpec[]): Promise<RuntimeSandbox[]> {
    return this.serial(id, async () => {
      const src = this.require(id);
      if (src.spec.isolation !== 'gvisor')
        throw new SandboxdError('validation', 'Only a gVisor sandbox can be forked', {
          isolation: src.spec.isolation ?? 'container',
        });
      if (src.spec.volumes.length > 0)
        throw new SandboxdError(
          'conflict',
          'A sandbox with volumes cannot be forked (a volume is mounted in one sandbox at a time)',
        );
      if (!isAlive(src) || src.phase !== 'ready') throw new SandboxdError('conflict', 'Sandbox is not running');
      for (const f of specs) {
        if (!ID_RE.test(f.id) || this.pools.owns(f.id))
          throw new SandboxdError('validation', `sandbox id "${f.id}" must match ${ID_RE}`);
        if (this.records.has(f.id) || this.reserved.has(f.id) || this.state.has(f.id))
          throw new SandboxdError('conflict', `sandbox ${f.id} exists`);
      }
      for (const f of specs) this.reserved.add(f.id);
      const ref = `snapshot/_fork/_f.${id}.${randomBytes(6).toString('hex')}`;
      const made: string[] = [];
      try {
        await lifecycle.pauseToDisk(this.life, src).catch(async (e) => {
          // The save failed: the source's processes are gone; it boots again from its files.
          // (Refused before anything was done: it runs as it was.)
          if (!isAlive(src)) await lifecycle.start(this.life, src, src.spec.limits).catch(() => undefined);
          throw e;
        });
        try {
          await this.snaps.snapshot(id, ref);
          const image = await this.images.resolve(ref);
          const from = lifecycle.checkpointDir(this.life, id);
          await Promise.all(
            specs.map(async (f) => {
              const spec: SandboxSpec = { ...src.spec, id: f.id, hostname: f.hostname ?? f.id };
              const rec = await boot(this.starts, spec, image, this.records, false, from, src.checkpointUnserved);
              made.push(f.id);
              rec.env = [...src.env];
              rec.user = src.user;
              rec.workingDir = src.workingDir;
              await this.state.write(rec);
              await this.gvisor!.setHostname(rec.cid, spec.hostname!).catch(() => undefined);
            }),
          );
        } finally {
          await lifecycle.start(this.life, src, src.spec.limits, { restore: true });
          await this.ensureTrust(src).catch(() => undefined);
        }
        await this.snaps.deleteImage(ref).catch(() => undefined);
        return specs.map((f) => recordView(this.records.get(f.id)!, false));
      } catch (e) {
        for (const f of made) await this.deleteNow(f).catch(() => undefined);
        await this.snaps.deleteImage(ref).catch(() => undefined);
        throw e;
      } finally {
        for (const f of specs) this.reserved.delete(f.id);
      }
    });
  }

  /** The `container` tier, and `gvisor` when runsc is installed (its platform chosen at start). */
  isolations(): IsolationSupport[] {
    const out: IsolationSupport[] = [{ isolation: 'container', runtime: this.crun.binary, memorySnapshots: false }];
    if (this.gvisor) {
      const platform = this.gvisor.flags.find((f) => f.startsWith('--platform='))?.slice('--platform='.length);
      out.push({ isolation: 'gvisor', runtime: 'runsc', platform, memorySnapshots: true });
    }
    return out;
  }

  /** `paused` is read from the kernel (the cgroup freezer), so it holds across restarts. */
  async inspect(id: string): Promise<RuntimeSandbox | null> {
    const rec = this.records.get(id);
    if (!isVisible(rec)) return null;
    return recordView(rec, isAlive(rec) && (await freezeAsked(this.opts.cgroupParent, rec.cid)));
  }

  async list(): Promise<RuntimeSandbox[]> {
    const out: RuntimeSandbox[] = [];
    for (const id of this.records.keys()) {
      const s = await this.inspect(id);
      if (s) out.push(s);
    }
    return out;
  }

  async kill(id: string): Promise<void> {
    const rec = this.require(id);
    if (isKept(rec)) return;
    this.commands.drop(rec.cid);
    // A frozen (paused) sandbox takes the signal once thawed.
    if (await freezeAsked(this.opts.cgroupParent, rec.cid)) await lifecycle.killAll(this.life, rec);
    else await runtimeOf(this.tiers, rec.spec.isolation).kill(rec.cid, 'KILL');
    for (let i = 0; i < 200 && isAlive(rec); i++) await sleep(5);
  }

  /** The cgroup freezer, or (gVisor, `memory: "disk"`) a checkpoint to disk; see lifecycle.ts. */
  pause(id: string, opts: { memory?: PauseMemory } = {}): Promise<void> {
    return this.serial(id, async () => {
      const rec = this.require(id);
      if (opts.memory === 'disk') {
        if (rec.checkpoint && rec.phase === 'stopped') return; // paused to disk already
        await lifecycle.pauseToDisk(this.life, rec);
      } else {
        if (rec.checkpoint && rec.phase === 'stopped') return; // paused (to disk) already
        await lifecycle.pause(this.life, rec);
      }
    });
  }

  resume(id: string): Promise<void> {
    return this.serial(id, async () => {
      const rec = this.require(id);
      if (rec.checkpoint && rec.phase === 'stopped')
        await lifecycle.start(this.life, rec, rec.spec.limits, { restore: true });
      else await lifecycle.resume(this.life, rec);
      await this.ensureTrust(rec).catch(() => undefined);
    });
  }

  /** Kills, frees all but the root layer and uid slot, records `stopped`; see lifecycle.ts. */
  stop(id: string): Promise<void> {
    return this.serial(id, async () => {
      const rec = this.require(id);
      if (rec.phase !== 'stopped') await lifecycle.stop(this.life, rec);
      else if (rec.checkpoint) {
        // Paused to disk: stopping drops the saved memory, keeps the files.
        rec.checkpoint = undefined;
        await this.state.write(rec);
        await rm(lifecycle.checkpointDir(this.life, id), { recursive: true, force: true });
      }
    });
  }

  /** Boots a stopped sandbox from its kept root layer; see lifecycle.ts. */
  start(id: string, opts: { limits: ResourceLimits }): Promise<RuntimeSandbox> {
    return this.serial(id, async () => {
      const rec = this.require(id);
      if (rec.phase === 'ready') {
        if (!isAlive(rec))
          throw new SandboxdError('conflict', `sandbox ${id} was killed, not stopped: it has no kept root layer`);
        if (await freezeAsked(this.opts.cgroupParent, rec.cid))
          throw new SandboxdError('conflict', 'Sandbox is paused');
      } else {
        if (rec.checkpoint) throw new SandboxdError('conflict', 'Sandbox is paused', { pausedMemory: 'disk' });
        await lifecycle.start(this.life, rec, opts.limits);
        await this.ensureTrust(rec).catch(() => undefined);
      }
      return (await this.inspect(id))!;
    });
  }

  /**
   * Kills the sandbox and drops it from the driver's view at once; the rest of its release
   * (runtime state and cgroups, network, root layer, state dir) runs in the background and
   * holds its uid slot (and the network its address) until done. A crash meanwhile leaves
   * its state dir, which the next recovery finds and tears down. A sandbox with volumes is
   * released before delete resolves (so that the volume is free for a delete right after),
   * as is one that never got ready.
   */
  delete(id: string): Promise<void> {
    return this.serial(id, () => this.deleteNow(id));
  }

  private async deleteNow(id: string): Promise<void> {
    if (this.leftovers?.has(id)) return this.leftovers.expedite(id);
    if (this.releasing.has(id)) return;
    const rec = this.records.get(id) ?? (await this.state.read(id));
    if (rec?.phase !== 'ready' || rec.spec.volumes.length > 0) {
      await teardown(this.release, id, rec);
      return;
    }
    this.commands.drop(rec.cid);
    // PID 1 of the sandbox's pid namespace: the kernel kills every other process with it.
    if (isAlive(rec)) process.kill(rec.initPid, 'SIGKILL');
    const done = teardown(this.release, id, rec)
      .catch(() => undefined) // what is left is the next recovery's
      .finally(() => this.releasing.delete(id));
    this.releasing.set(id, { slot: rec.slot, done });
    this.records.delete(id);
  }

  /** Resolves once every background release started by {@link delete} has finished. */
  async released(): Promise<void> {
    while (this.releasing.size > 0) await Promise.all([...this.releasing.values()].map((r) => r.done));
  }

  /** Through the sandbox's exec agent; see commands/exec.ts. */
  async exec(id: string, command: string, options: ExecOptions = {}): Promise<ExecResult> {
    return this.commands.exec(await this.requireRunning(id), command, options);
  }

  async execBackground(
    id: string,
    command: string,
    options: Omit<ExecOptions, 'timeoutMs' | 'maxOutputBytes'> = {},
  ): Promise<{ pid: number }> {
    return this.commands.execBackground(await this.requireRunning(id), command, options);
  }

  async spawn(id: string, argv: string[], options: SpawnOptions = {}): Promise<StreamedProcess> {
    return this.commands.spawn(await this.requireRunning(id), argv, options);
  }

  async execTty(id: string, options: TtyOptions): Promise<PtyProcess> {
    // gVisor: a PTY is a file of the host, which a save must not find (lifecycle.pauseToDisk
    // ends those first): one is started one at a time with the sandbox's pause and fork.
    if (this.records.get(id)?.spec.isolation === 'gvisor') return this.serial(id, () => this.startTty(id, options));
    return this.startTty(id, options);
  }

  private async startTty(id: string, options: TtyOptions): Promise<PtyProcess> {
    const rec = await this.requireRunning(id);
    const runtime = runtimeOf(this.tiers, rec.spec.isolation);
    return spawnTty({
      crunArgv: runtime.argv,
      containerId: rec.cid,
      argv: options.argv,
      env: Object.fromEntries(mergeEnvList(rec.env, options.env).map(splitEnv)),
      cwd: options.cwd ?? rec.workingDir,
      user: await numericUser(this.files, id, rec.user, options.user),
      cols: options.cols,
      rows: options.rows,
      // runc takes a console socket only when detaching; runsc uses it only then.
      detach: runtime.binary !== 'crun',
    });
  }

  async ensureVolume(name: string, sizeGb: number): Promise<VolumeInfo> {
    await this.volumes.ensure(name, sizeGb);
    return (await this.listVolumes()).find((v) => v.name === name)!;
  }

  listVolumes(): Promise<VolumeInfo[]> {
    return this.volumes.list();
  }

  deleteVolume(name: string): Promise<void> {
    return this.volumes.delete(name);
  }

  /** The runtime's container id of sandbox `id` (its own, or the warm-pooled one it claimed). */
  containerIdOf(id: string): string | undefined {
    return this.records.get(id)?.cid;
  }

  warmPool(): Record<string, number> {
    return this.pools.warmCounts();
  }

  /** Runs the pools' refill until they are full (or a step fails); for tests and benchmarks. */
  refillPools(): Promise<void> {
    return this.pools.refill();
  }

  /**
   * MemAvailable, free space of the data dir's file system, and the network's free addresses
   * (with the pooled networks, which a create takes).
   */
  async capacity(): Promise<RuntimeCapacity> {
    const addresses = await this.network.freeAddresses();
    return {
      ...readHostCapacity(this.opts.dataDir),
      addresses: { ...addresses, free: addresses.free + this.pools.readyNets() },
    };
  }

  /**
   * Sandboxes keep running (the next `recover()` adopts them); what the pools hold is
   * removed from the host (a failure there leaves it to the next `recover()`), the
   * background removal of leftovers stops after the removals in progress, and the
   * background releases of deleted sandboxes are waited for.
   */
  async close(): Promise<void> {
    const drained = this.pools.drain().catch(() => undefined);
    this.commands.dropAll();
    await Promise.all([drained, this.leftovers?.stop(), this.released()]);
    this.network.close();
    this.records.clear();
  }

  /**
   * Replaces sandbox `id`'s egress: recorded (a start after a stop, a restart of the server
   * apply it again) and, while it has an address, applied to its nft set elements at once.
   */
  async setEgress(id: string, egress: Egress): Promise<void> {
    await this.serial(id, async () => {
      const rec = this.records.get(id);
      if (!isVisible(rec)) throw new SandboxdError('not_found', `sandbox ${id} not found`);
      if (rec.address) await this.network.egress.apply(id, rec.address, egress, rec.spec.secrets);
      rec.spec = { ...rec.spec, egress };
      await this.state.write(rec);
    });
  }

  /**
   * Replaces sandbox `id`'s secret injection rules: recorded (values sealed, see
   * sealed-secrets.ts) and, while it has an address, given to the egress proxy at once. When
   * rules first appear on a running sandbox, the egress CA is installed in it now (trust.ts)
   * and its later commands get the trust variables; a paused or stopped one gets them at its
   * next resume or start.
   */
  async setSecrets(id: string, secrets: SecretInjection[]): Promise<void> {
    await this.serial(id, async () => {
      const rec = this.records.get(id);
      if (!isVisible(rec)) throw new SandboxdError('not_found', `sandbox ${id} not found`);
      if (rec.address) await this.network.egress.apply(id, rec.address, rec.spec.egress, secrets);
      // A rule's placeholder in the env of later commands, unless the env has that name with a
      // value of the caller's own (a placeholder there, of an earlier rule, is replaced).
      const add = Object.fromEntries(
        secrets
          .map((r) => [secretEnvName(r.secret), r.placeholder])
          .filter(([k, v]) => rec.spec.env[k] !== v && (!(k in rec.spec.env) || PLACEHOLDER.test(rec.spec.env[k]))),
      );
      if (Object.keys(add).length) {
        rec.env = mergeEnvList(rec.env, add);
        rec.spec = { ...rec.spec, env: { ...rec.spec.env, ...add } };
      }
      rec.spec = { ...rec.spec, secrets };
      await this.state.write(rec);
      await this.ensureTrust(rec);
    });
  }

  onInjection(listener: (e: InjectionEvent) => void): () => void {
    this.injectionListeners.add(listener);
    return () => this.injectionListeners.delete(listener);
  }

  private readonly injectionListeners = new Set<(e: InjectionEvent) => void>();
  private unsubscribeInjections: (() => void) | undefined;

  /**
   * Installs the egress CA in `rec` (running, not paused) when it has injection rules and
   * does not have it yet; adds the trust variables to its env. Best effort for a sandbox
   * that cannot take it now (paused, stopped): tried again at its resume and start.
   */
  private async ensureTrust(rec: SandboxRecord): Promise<void> {
    const ca = this.network.egress.caCertPem;
    if (!ca || rec.trusted || !rec.spec.secrets?.length || !isAlive(rec)) return;
    if (await freezeAsked(this.opts.cgroupParent, rec.cid)) return;
    const env = Object.fromEntries(rec.env.map(splitEnv));
    const image = await this.images.byDigest(rec.imageDigest).catch(() => undefined);
    const bundle = image ? imageBundle(image.rootfsDir) : SYSTEM_BUNDLES[0];
    rec.env = mergeEnv(trustEnv(bundle), env);
    rec.spec = { ...rec.spec, env: withTrustEnv(rec.spec.env, bundle) };
    await installTrust(this.commands, rec, ca);
    rec.trusted = true;
    await this.state.write(rec);
  }

  /**
   * Removes every trace of this instance from the host: sandboxes (containers and their
   * processes, roots, loop devices, networks, folders), leftovers of earlier processes,
   * volume mounts (the volumes' files stay), the bridge, its route and nft table, the cgroup
   * folder and the run dir. For tests and `npm run teardown`; no other process may drive
   * the instance meanwhile. Throws `internal` naming what could not be removed.
   */
  async destroyAll(): Promise<void> {
    await this.pools.drain();
    for (const id of [...this.records.keys()]) await this.delete(id);
    await this.released();
    const report = await this.recover();
    const left = await report.background?.done;
    for (const id of [...this.records.keys()]) await this.delete(id);
    await this.released();
    await this.snaps.collect(); // deleted snapshots kept for a sandbox just deleted
    await this.volumes.recover(new Map());
    await this.network.teardown();
    await removeCgroupParent(this.opts.cgroupParent);
    // The runtime root goes only when empty: a container that is not this instance's keeps it.
    const others: { id: string; root: string }[] = [];
    for (const rt of allRuntimes(this.tiers))
      others.push(...(await rt.list()).map((c) => ({ id: c.id, root: rt.root })));
    if (others.length === 0) {
      await removeRunDir(this.runDir);
      await rmdir(this.opts.runDir).catch(() => undefined); // the base, unless another instance uses it
    }
    const problems = [
      ...(left?.failed ?? []).map((f) => `${f.id} (${f.message})`),
      ...others.map((c) => `container ${c.id} (not this instance's, left alone in ${c.root})`),
    ];
    if (problems.length) throw new SandboxdError('internal', `could not remove ${problems.join(', ')}`);
  }

  private allocSlot(): number {
    const used = new Set(
      [...this.records.values(), ...this.pooled.values()]
        .map((r) => r.slot)
        .concat(this.pools.slots(), this.leftovers?.slots() ?? [], this.foreignSlots),
    );
    for (const r of this.releasing.values()) if (r.slot !== undefined) used.add(r.slot);
    let slot = 0;
    while (used.has(slot)) slot++;
    return slot;
  }

  /** First host uid of uid slot `slot`'s range. */
  private uidBaseOf(slot: number): number {
    return this.opts.uidRangeStart + slot * ID_RANGE_SIZE;
  }

  private require(id: string): SandboxRecord {
    const rec = this.records.get(id);
    if (!isVisible(rec)) throw new SandboxdError('not_found', `sandbox ${id} not found`);
    return rec;
  }

  /** The record of a sandbox a command can run in now: `conflict` when stopped or paused (a frozen agent would never answer). */
  private async requireRunning(id: string): Promise<SandboxRecord> {
    const rec = this.require(id);
    await lifecycle.checkRunnable(this.opts.cgroupParent, rec);
    return rec;
  }

  /** See snapshot.ts; one at a time with the sandbox's pause, resume, stop, start and delete. */
  snapshot(id: string, ref: string, opts: { config?: ImageConfigOverride } = {}): Promise<ImageInfo> {
    return this.serial(id, () => this.snaps.snapshot(id, ref, opts.config));
  }

  /** A snapshot image of `from`'s files with `config` over its config; see snapshot.ts. */
  deriveImage(
    from: string,
    to: string,
    config: ImageConfigOverride,
    opts: { pullAs?: SandboxSpec['pullAs'] } = {},
  ): Promise<ImageInfo> {
    return this.snaps.derive(from, to, config, opts.pullAs);
  }

  /** See snapshot.ts; files still used by a sandbox go once it is gone (next deleteImage, snapshot or restart). */
  deleteImage(ref: string): Promise<void> {
    return this.snaps.deleteImage(ref);
  }

  listSnapshots(): Promise<ImageInfo[]> {
    return this.snaps.listSnapshots();
  }
}

/**
 * Builds the local driver from the server config (the composition root calls this); its
 * parts report to `logger` (component `images`: the image store) when given.
 */
export function createLocalDriver(config: Readonly<Config>, logger?: Logger): LocalDriver {
  const images = logger?.child({ component: 'images' });
  const log = images && ((msg: string, level: 'info' | 'warn' = 'info') => images[level](msg));
  return new LocalDriver({ ...localDriverOptions(config), log });
}
