import { mkdir, readdir, rm, rmdir, writeFile } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import type {
  ExecOptions,
  ExecResult,
  ImageInfo,
  PtyProcess,
  RecoveryReport,
  RuntimeDriver,
  RuntimeSandbox,
  SandboxSpec,
  TtyOptions,
  VolumeInfo,
} from '../driver.js';
import { buildOciConfig, ID_RANGE_SIZE, SANDBOX_CAPABILITIES } from './bundle/oci-config.js';
import { defaultOciRuntime, OciRuntime, processStart, type OciRuntimeName } from './commands/oci-runtime.js';
import { resolveImageUser } from './images/user.js';
import { ImageStore } from './images/store.js';
import { NetworkManager } from './network/manager.js';
import { spawnTty } from './pty/relay.js';
import { RootfsManager, volumeOciMount } from './rootfs/roots.js';
import { buildSeccompProfile, compileSeccompBpf, type OciSeccomp } from './bundle/seccomp.js';
import { VolumeStore } from './rootfs/volumes.js';
import type { Config } from '../../config.js';
import {
  checkLimits,
  checkMountPath,
  checkMountPathsDisjoint,
  checkTraversable,
  mergeEnv,
  mergeEnvList,
  splitEnv,
} from './sandbox-checks.js';
import { hostNetDevicePaths } from './network/sysfs.js';
import { agentBinary, ExecAgent } from './commands/exec-agent.js';
import { SandboxCommands } from './commands/exec.js';
import { PoolKeeper } from './pools/keeper.js';
import type { PooledRoot } from './pools/roots.js';
import { ID_RE, isAlive, RecordStore, type SandboxRecord } from './records.js';

export interface LocalDriverOptions {
  /** Sandbox state, roots and volumes live here. */
  dataDir: string;
  /** Shared image cache. */
  imageDir: string;
  /** Volatile runtime state (crun's root); default `/run/sandboxd`. */
  runDir?: string;
  bridge?: string;
  subnet?: string;
  egress?: 'none' | 'nat';
  /** First host uid handed to sandboxes; each gets 65536 from there. Default 100000. */
  uidRangeStart?: number;
  /** Name of the cgroup folder that holds every sandbox's cgroup. Default `sandboxd`. */
  cgroupParent?: string;
  registryCredentials?: Record<string, { username: string; password: string }>;
  insecureRegistries?: string[];
  /** OCI runtime; default crun when installed, else runc. */
  ociRuntime?: OciRuntimeName;
  /** Networks kept made ahead of need, so creating a sandbox does not wait for one (crun only). Default 2. */
  netPoolSize?: number;
  /** false: run every command with `<runtime> exec` instead of the exec agent (tests, comparisons). Default true. */
  execAgent?: boolean;
}

/**
 * The local runtime driver: crun sandboxes with user namespaces, seccomp, cgroup limits,
 * an isolated bridge network, size-capped copy-on-write roots and loop-backed volumes.
 */
export class LocalDriver implements RuntimeDriver {
  readonly images: ImageStore;
  private readonly crun: OciRuntime;
  private readonly network: NetworkManager;
  private readonly roots: RootfsManager;
  private readonly volumes: VolumeStore;
  private readonly records = new Map<string, SandboxRecord>();
  private readonly commands: SandboxCommands;
  private agentPath: string | undefined;
  /** Ids between create's first check and its record: a second create of one id must see them. */
  private readonly reserved = new Set<string>();
  private readonly state: RecordStore;
  private readonly pools: PoolKeeper;
  private readonly opts: Required<
    Omit<LocalDriverOptions, 'registryCredentials' | 'insecureRegistries' | 'ociRuntime'>
  >;
  private seccomp: OciSeccomp | undefined;
  /** `seccomp` precompiled for crun (runc compiles the profile itself). */
  private seccompBpf: string | undefined;
  /** Host network device folders in /sys, hidden where the host's sysfs is bound in. */
  private maskedNetPaths: string[] = [];

  constructor(opts: LocalDriverOptions) {
    this.opts = {
      runDir: '/run/sandboxd',
      bridge: 'sbx0',
      subnet: '10.89.0.0/16',
      egress: 'none',
      uidRangeStart: 100_000,
      cgroupParent: 'sandboxd',
      netPoolSize: 2,
      ...opts,
    } as LocalDriver['opts'];
    this.state = new RecordStore(join(opts.dataDir, 'sandboxes'));
    this.images = new ImageStore({
      dir: opts.imageDir,
      credentials: opts.registryCredentials,
      insecureRegistries: opts.insecureRegistries,
    });
    const runtime = opts.ociRuntime ?? defaultOciRuntime();
    this.crun = new OciRuntime({ root: join(this.opts.runDir, runtime), binary: runtime });
    this.commands = new SandboxCommands({
      runtime: this.crun,
      runDir: this.opts.runDir,
      useAgent: this.opts.execAgent !== false,
      cgroupProcs: (id) => this.cgroupProcs(id),
    });
    this.network = new NetworkManager({ bridge: this.opts.bridge, subnet: this.opts.subnet, egress: this.opts.egress });
    this.roots = new RootfsManager({ dir: join(opts.dataDir, 'roots') });
    this.volumes = new VolumeStore({ dir: join(opts.dataDir, 'volumes') });
    // crun joins a netns made beforehand; runc makes its own, so no network is pooled for it.
    this.pools = new PoolKeeper({
      nets: this.crun.binary === 'crun' ? this.opts.netPoolSize : 0,
      roots: this.opts.netPoolSize === 0 ? 0 : 1,
      network: this.network,
      rootfs: this.roots,
      allocSlot: () => this.allocSlot(),
      uidBase: (slot) => this.uidBaseOf(slot),
    });
  }

  async init(): Promise<void> {
    if (process.getuid?.() !== 0)
      throw new SandboxdError('internal', 'the local runtime needs root (run sandboxd as root)');
    await mkdir(this.state.dir, { recursive: true });
    await mkdir(this.crun.root, { recursive: true });
    await mkdir(join(this.opts.runDir, 'exec'), { recursive: true, mode: 0o700 });
    await checkTraversable(this.opts.dataDir);
    await this.network.init();
    this.seccomp = buildSeccompProfile({ capabilities: SANDBOX_CAPABILITIES });
    if (this.crun.binary === 'crun') this.seccompBpf = compileSeccompBpf(this.seccomp).toString('base64');
    this.maskedNetPaths = hostNetDevicePaths();
    this.agentPath = agentBinary();
  }

  async recover(): Promise<RecoveryReport> {
    const report: RecoveryReport = { adopted: [], cleaned: [] };
    const running = new Map((await this.crun.list()).map((c) => [c.id, c]));
    const ids = new Set<string>([...running.keys(), ...(await this.state.ids()), ...(await this.roots.list())]);
    for (const n of await this.network.list()) ids.add(n.id);
    const adopt = new Map<string, SandboxRecord>();
    const found = new Map<string, SandboxRecord | null>();
    for (const id of ids) {
      const rec = await this.state.read(id);
      found.set(id, rec);
      const c = running.get(id);
      if (rec && rec.phase === 'ready' && c && c.status === 'running' && processStart(c.pid) !== null) {
        adopt.set(id, { ...rec, initPid: c.pid, initStart: processStart(c.pid) });
      }
    }
    // A pooled network or root in use by an adopted sandbox stays; every other leftover goes.
    const inUse = new Set([...adopt.values()].flatMap((r) => [r.netId ?? r.spec.id, r.rootId ?? r.spec.id]));
    for (const [id, rec] of found) {
      if (adopt.has(id)) {
        this.records.set(id, adopt.get(id)!);
        report.adopted.push(id);
      } else if (!inUse.has(id)) {
        // One leftover that cannot be removed now must not keep the server from starting.
        try {
          await this.teardown(id, rec);
          if (!this.pools.owns(id)) report.cleaned.push(id);
        } catch (e) {
          report.failed ??= [];
          report.failed.push({ id, message: (e as Error).message });
        }
      }
    }
    const live = new Map([...this.records].map(([id, r]) => [id, r.spec.volumes.map((v) => v.name)]));
    await this.volumes.recover(live);
    void this.pools.refill();
    return report;
  }

  resolveImage(ref: string): Promise<ImageInfo> {
    return this.images.resolve(ref).then(toImageInfo);
  }

  async listImages(): Promise<ImageInfo[]> {
    return (await this.images.list()).map(toImageInfo);
  }

  async create(spec: SandboxSpec): Promise<RuntimeSandbox> {
    if (!ID_RE.test(spec.id) || this.pools.owns(spec.id)) {
      throw new SandboxdError(
        'validation',
        `sandbox id "${spec.id}" must match ${ID_RE} and not start with ${this.pools.prefixes.join(' or ')}`,
      );
    }
    for (const v of spec.volumes) checkMountPath(v.mountPath);
    checkMountPathsDisjoint(spec.volumes.map((v) => v.mountPath));
    checkLimits(spec.limits);
    if (this.records.has(spec.id) || this.reserved.has(spec.id) || this.state.has(spec.id)) {
      throw new SandboxdError('conflict', `sandbox ${spec.id} exists`);
    }
    this.reserved.add(spec.id);
    try {
      return await this.createReserved(spec);
    } finally {
      this.reserved.delete(spec.id);
    }
  }

  private async createReserved(spec: SandboxSpec): Promise<RuntimeSandbox> {
    const image = await this.images.resolve(spec.image);
    // Roots are pooled only for creates without volumes (volumes are staged while preparing).
    let pooledRoot: PooledRoot | undefined;
    if (spec.volumes.length === 0) pooledRoot = this.pools.takeRoot(image.rootfsDir, spec.limits.rootDiskBytes);
    const slot = pooledRoot?.slot ?? this.allocSlot();
    const uidBase = this.uidBaseOf(slot);
    const dir = this.state.dirOf(spec.id);
    const partial: SandboxRecord = {
      spec,
      slot,
      uidBase,
      address: '',
      netnsPath: '',
      imageDigest: image.digest,
      createdAt: new Date().toISOString(),
      workingDir: image.workingDir || '/',
      user: '0:0',
      env: mergeEnv(image.env, spec.env),
      phase: 'creating',
      initPid: 0,
      initStart: null,
      rootId: pooledRoot?.id,
    };
    this.records.set(spec.id, partial);
    try {
      await mkdir(dir, { recursive: true });
      await this.state.write(partial);
      partial.user = resolveImageUser(image.rootfsDir, image.user);
      const volumePaths: string[] = [];
      for (const v of spec.volumes) {
        await this.volumes.ensure(v.name, v.sizeGb);
        volumePaths.push(await this.volumes.acquire(v.name, spec.id));
      }
      // crun joins a netns made beforehand, owned by the host (runtime-made ones showed an
      // intermittent setns EPERM on the first execs). runc joins the user namespace first and
      // cannot enter such a netns, so under runc the runtime makes it and it is wired after start.
      const netFirst = this.crun.binary === 'crun';
      const pooled = netFirst ? this.pools.takeNet() : undefined;
      if (pooled) partial.netId = pooled.id; // from here on, teardown frees it
      const [root, early] = await Promise.all([
        pooledRoot
          ? { rootfs: pooledRoot.rootfs, volumes: [] as string[] }
          : this.roots.prepare({
              id: spec.id,
              lowerDir: image.rootfsDir,
              rootDiskBytes: spec.limits.rootDiskBytes,
              uidBase,
              volumes: volumePaths,
            }),
        netFirst ? (pooled ?? this.network.attach(spec.id)) : null,
      ]);
      const volumes = root.volumes.map((staged, i) => volumeOciMount(staged, spec.volumes[i].mountPath));
      const hostname = spec.hostname ?? spec.id;
      const etc = {
        hosts: join(dir, 'hosts'),
        hostname: join(dir, 'hostname'),
        resolv: undefined as string | undefined,
      };
      // Rewritten in place (same inode, so the bind mount shows it) once the address is known.
      const writeHosts = (address: string) =>
        writeFile(etc.hosts, `127.0.0.1\tlocalhost\n::1\tlocalhost\n${address ? `${address}\t${hostname}\n` : ''}`);
      await writeHosts(early?.address ?? '');
      await writeFile(etc.hostname, `${hostname}\n`);
      if (this.opts.egress === 'nat' && existsSync('/etc/resolv.conf')) {
        etc.resolv = join(dir, 'resolv.conf');
        await writeFile(etc.resolv, readFileSync('/etc/resolv.conf'));
      }
      const config = buildOciConfig({
        id: spec.id,
        hostname,
        rootfs: root.rootfs,
        env: partial.env,
        limits: spec.limits,
        uidBase,
        netnsPath: early?.netnsPath,
        hostSysfs: early !== null,
        maskedNetPaths: this.maskedNetPaths,
        agentPath: this.agentPath!,
        etcFiles: etc,
        volumes,
        seccomp: this.seccomp!,
        seccompBpfBase64: this.seccompBpf,
        cgroupsPath: `/${this.opts.cgroupParent}/${spec.id}`,
      });
      await writeFile(join(dir, 'config.json'), JSON.stringify(config));
      partial.initPid = await this.crun.run(spec.id, dir, {
        // PID 1 is the exec agent: its channel is ready for the first exec without a runtime call.
        onChannel: (channel) => this.commands.adopt(spec.id, ExecAgent.attach(channel, channel)),
      });
      const net = early ?? (await this.network.attach(spec.id, { pid: partial.initPid }));
      partial.netId = net.id;
      if (!early) await writeHosts(net.address);
      partial.address = net.address;
      partial.netnsPath = net.netnsPath;
      partial.initStart = processStart(partial.initPid);
      partial.phase = 'ready';
      await this.state.write(partial);
      return (await this.inspect(spec.id))!;
    } catch (e) {
      await this.teardown(spec.id, partial).catch(() => undefined);
      if (e instanceof SandboxdError) throw e;
      throw new SandboxdError('internal', `sandbox ${spec.id} failed to start: ${(e as Error).message}`);
    }
  }

  async inspect(id: string): Promise<RuntimeSandbox | null> {
    const rec = this.records.get(id);
    if (rec?.phase !== 'ready') return null;
    const running = isAlive(rec);
    return {
      id,
      image: rec.spec.image,
      imageDigest: rec.imageDigest,
      state: running ? 'running' : 'stopped',
      address: rec.address,
      pid: running ? rec.initPid : 0,
      createdAt: new Date(rec.createdAt),
      workingDir: rec.workingDir,
      user: rec.user,
    };
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
    this.commands.drop(id);
    await this.crun.kill(id, 'KILL');
    for (let i = 0; i < 200 && isAlive(rec); i++) await sleep(5);
  }

  async delete(id: string): Promise<void> {
    const rec = this.records.get(id) ?? (await this.state.read(id));
    await this.teardown(id, rec);
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

  async execTty(id: string, options: TtyOptions): Promise<PtyProcess> {
    const rec = await this.requireRunning(id);
    return spawnTty({
      crunArgv: this.crun.argv,
      containerId: id,
      argv: options.argv,
      env: Object.fromEntries(mergeEnvList(rec.env, options.env).map(splitEnv)),
      cwd: options.cwd ?? rec.workingDir,
      user: rec.user,
      cols: options.cols,
      rows: options.rows,
      detach: this.crun.binary === 'runc',
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

  /** Pooled networks stay on the host; the next `recover()` removes them. */
  async close(): Promise<void> {
    const stopped = this.pools.close();
    this.commands.dropAll();
    await stopped;
    this.records.clear();
  }

  /** Removes every trace of the driver from the host: sandboxes, bridge, rules, cgroup folder. For tests and uninstall. */
  async destroyAll(): Promise<void> {
    await this.pools.drain();
    for (const id of [...this.records.keys()]) await this.delete(id);
    await this.recover();
    for (const id of [...this.records.keys()]) await this.delete(id);
    await this.network.teardown();
    for (const ctl of await readdir('/sys/fs/cgroup').catch(() => [] as string[])) {
      await rmdir(`/sys/fs/cgroup/${ctl}/${this.opts.cgroupParent}`).catch(() => undefined);
    }
  }

  /** Frees everything of `id` that exists, in reverse order of creation. Idempotent. */
  private async teardown(id: string, rec: SandboxRecord | null | undefined): Promise<void> {
    this.commands.drop(id);
    await this.crun.delete(id).catch(() => this.crun.kill(id).then(() => this.crun.delete(id)));
    const dir = this.state.dirOf(id);
    const releaseStorage = async () => {
      await this.roots.release(rec?.rootId ?? id);
      for (const v of rec?.spec.volumes ?? []) await this.volumes.release(v.name, id).catch(() => undefined);
    };
    await Promise.all([releaseStorage(), this.network.detach(rec?.netId ?? id)]);
    await rm(dir, { recursive: true, force: true });
    this.records.delete(id);
  }

  private allocSlot(): number {
    const used = new Set([...this.records.values()].map((r) => r.slot).concat(this.pools.slots()));
    let slot = 0;
    while (used.has(slot)) slot++;
    return slot;
  }

  /** First host uid of uid slot `slot`'s range. */
  private uidBaseOf(slot: number): number {
    return this.opts.uidRangeStart + slot * ID_RANGE_SIZE;
  }

  private cgroupProcs(id: string): number[] {
    try {
      return readFileSync(`/sys/fs/cgroup/pids/${this.opts.cgroupParent}/${id}/cgroup.procs`, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map(Number);
    } catch {
      return [];
    }
  }

  private require(id: string): SandboxRecord {
    const rec = this.records.get(id);
    if (rec?.phase !== 'ready') throw new SandboxdError('not_found', `sandbox ${id} not found`);
    return rec;
  }

  private async requireRunning(id: string): Promise<SandboxRecord> {
    const rec = this.require(id);
    if (!isAlive(rec)) throw new SandboxdError('conflict', `sandbox ${id} is not running`);
    return rec;
  }
}

function toImageInfo(i: ImageInfo): ImageInfo {
  return { ref: i.ref, digest: i.digest, env: i.env, workingDir: i.workingDir, user: i.user, sizeBytes: i.sizeBytes };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Builds the local driver from the server config (the composition root calls this). */
export function createLocalDriver(config: Readonly<Config>): LocalDriver {
  return new LocalDriver({
    dataDir: config.dataDir,
    imageDir: config.imageDir,
    runDir: config.runDir,
    bridge: config.bridge,
    subnet: config.subnet,
    egress: config.egress,
    uidRangeStart: config.uidRangeStart,
    cgroupParent: config.cgroupParent,
    ociRuntime: config.ociRuntime,
    insecureRegistries: [...config.insecureRegistries],
    registryCredentials: { ...config.registryCredentials },
  });
}
