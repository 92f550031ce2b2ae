import { type Egress, type Isolation, type PauseMemory, SandboxdError } from '@sandboxd/protocol';
import type {
  ExecOptions,
  ExecResult,
  ForkSpec,
  InjectionEvent,
  IsolationSupport,
  SecretInjection,
  SpawnOptions,
  StreamedProcess,
  ImageConfigOverride,
  ImageInfo,
  PtyProcess,
  RecoveryReport,
  RuntimeCapacity,
  RuntimeDriver,
  RuntimeSandbox,
  SandboxSpec,
  TtyOptions,
  VolumeInfo,
} from '../driver.js';
import { mountPathProblem } from '../../domain/sandbox.js';
import { fakeDigest, fakeImage, FakeImageStore } from './images.js';
import type { DriverFiles } from '../files.js';
import { SNAPSHOT_REF_RE } from '../local/images/ref.js';
import { fakeFiles, type FakeNode } from './files.js';
import { FakeStreamedProcess } from './process.js';
import { FakePty } from './pty.js';
import { runFakeCommand, type FakeFs } from './shell.js';

/** Images the fake driver knows. */
export const FAKE_IMAGES = ['local/busybox:latest', 'local/debian:bookworm'] as const;

/** Knobs for tests of the layers above the driver. */
export interface FakeDriverOptions {
  /** Delay of `create`, ms (default 0). */
  createDelayMs?: number;
  /** Extra image references to accept. */
  images?: string[];
  /** Labels of images it knows, by reference (default none). */
  imageLabels?: Record<string, Record<string, string>>;
  /**
   * The tiers it offers (default both: `container`, and `gvisor` with memory snapshots);
   * `null`: no `isolations()` at all, as a driver from before tiers (container only).
   */
  isolations?: Isolation[] | null;
}

/** What the fake says of each tier in `isolations()`. */
const FAKE_TIERS: Record<Isolation, IsolationSupport> = {
  container: { isolation: 'container', runtime: 'fake', memorySnapshots: false },
  gvisor: { isolation: 'gvisor', runtime: 'fake-runsc', platform: 'fake', memorySnapshots: true },
};

interface FakeSandbox {
  info: RuntimeSandbox;
  spec: SandboxSpec;
  nextPid: number;
  /** The writable root layer: path -> content. */
  files: Map<string, string>;
  /** What copies (`files.unpack`) made, with modes and owners (see files.ts). */
  tree: Map<string, FakeNode>;
  /** The env of its image, under the spec's (images made by snapshot or deriveImage have one). */
  imageEnv: Record<string, string>;
  ptys: Set<FakePty>;
  /** Stopped by `stop` (root layer kept for `start`) rather than killed. */
  kept?: boolean;
}

/**
 * An in-memory {@link RuntimeDriver} for fast unit tests of services and HTTP. It runs no
 * process: exec and PTYs understand the small vocabulary of shell.ts (`echo`, `exit N`,
 * `printenv X`, `true`, `false`, `cat`, `pwd`, `sleep S`, ...), files live in memory and
 * volumes outlive sandboxes. It passes runtime/conformance.ts. Never proof that a feature
 * works on a real runtime.
 */
export class FakeDriver implements RuntimeDriver {
  private readonly sandboxes = new Map<string, FakeSandbox>();
  private readonly volumes = new Map<string, { sizeGb: number; files: Map<string, string> }>();
  private readonly known: Set<string>;
  /** Images made by `snapshot` and `deriveImage`: ref -> the files of the sandbox's root layer then. */
  private readonly snapshots = new Map<
    string,
    { info: ImageInfo; files: Map<string, string>; tree: Map<string, FakeNode> }
  >();
  /** Pull, import and build against a fake registry; see {@link FakeImageStore}. */
  readonly images: FakeImageStore;
  /** Next `create` fails with this error (then it is cleared); for tests. */
  failNextCreate: Error | null = null;
  /**
   * Next `resume` fails with this error (then it is cleared), after thawing when `applied`
   * (a runner that thawed, then went away before answering); for tests.
   */
  failNextResume: { error: Error; applied?: boolean } | null = null;
  /** Calls seen, for assertions. */
  readonly calls: string[] = [];
  /**
   * What `capacity()` reports; tests change it. By default a roomy host: 16 GiB of memory,
   * 100 GiB of disk, and a /16 of addresses of which each sandbox holds one.
   */
  hostCapacity: { memoryAvailableBytes: number | null; diskFreeBytes: number | null; addressTotal: number | null } = {
    memoryAvailableBytes: 16 * 2 ** 30,
    diskFreeBytes: 100 * 2 ** 30,
    addressTotal: 65_533,
  };

  /** Next `fork` fails with this error (then it is cleared), after making the first fork; for tests. */
  failNextFork: Error | null = null;
  /** Forks made so far (each gets its own address). */
  private forks = 0;
  /** `isolations()`, or absent when the options say `null` (a driver from before tiers). */
  readonly isolations?: () => IsolationSupport[];

  constructor(private readonly opts: FakeDriverOptions = {}) {
    this.known = new Set([...FAKE_IMAGES, ...(opts.images ?? [])]);
    this.images = new FakeImageStore(this.known);
    if (opts.isolations !== null) {
      const tiers = opts.isolations ?? (['container', 'gvisor'] as const);
      this.isolations = () => tiers.map((t) => ({ ...FAKE_TIERS[t] }));
    }
  }

  /** The tier's support, or `validation` naming what is offered. */
  private tier(isolation: Isolation): IsolationSupport {
    const offered = this.isolations?.() ?? [FAKE_TIERS.container];
    const t = offered.find((x) => x.isolation === isolation);
    if (!t)
      throw new SandboxdError(
        'validation',
        `Isolation ${isolation} is not offered by this runtime (it offers ${offered.map((x) => x.isolation).join(', ')})`,
      );
    return t;
  }

  async init(): Promise<void> {}
  async recover(): Promise<RecoveryReport> {
    return { adopted: [...this.sandboxes.keys()], cleaned: [] };
  }

  async resolveImage(ref: string): Promise<ImageInfo> {
    const snap = this.snapshots.get(ref);
    if (snap) return { ...snap.info };
    if (!this.known.has(ref)) throw new SandboxdError('template_not_found', 'Template not found', { image: ref });
    const labels = this.opts.imageLabels?.[ref];
    return labels ? { ...fakeImage(ref), labels: { ...labels } } : fakeImage(ref);
  }
  async listImages(): Promise<ImageInfo[]> {
    return Promise.all([...this.known].map((r) => this.resolveImage(r)));
  }

  async create(spec: SandboxSpec): Promise<RuntimeSandbox> {
    this.calls.push(`create ${spec.id}`);
    if (this.opts.createDelayMs) await new Promise((r) => setTimeout(r, this.opts.createDelayMs));
    if (this.failNextCreate) {
      const e = this.failNextCreate;
      this.failNextCreate = null;
      throw e;
    }
    const image = await this.resolveImage(spec.image);
    this.tier(spec.isolation ?? 'container');
    if (this.sandboxes.has(spec.id)) throw new SandboxdError('conflict', `Sandbox ${spec.id} exists`);
    for (const v of spec.volumes) {
      const problem = mountPathProblem(v.mountPath);
      if (problem) throw new SandboxdError('validation', `Mount path ${v.mountPath} ${problem}`);
    }
    for (const v of spec.volumes) {
      const have = this.volumes.get(v.name);
      if (have && have.sizeGb !== v.sizeGb)
        throw new SandboxdError('conflict', `Volume ${v.name} exists with sizeGb ${have.sizeGb}`);
    }
    for (const v of spec.volumes)
      if (!this.volumes.has(v.name)) this.volumes.set(v.name, { sizeGb: v.sizeGb, files: new Map() });
    const snap = this.snapshots.get(spec.image);
    const info: RuntimeSandbox = {
      id: spec.id,
      image: spec.image,
      imageDigest: image.digest,
      state: 'running',
      address: '10.88.0.2',
      pid: 4242,
      createdAt: new Date(),
      workingDir: snap ? snap.info.workingDir || '/' : '/',
      user: snap ? snap.info.user || '0:0' : '0:0',
      ...(spec.isolation === 'gvisor' ? { isolation: 'gvisor' as const } : {}),
    };
    const files = new Map(snap?.files ?? []);
    const tree = cloneTree(snap?.tree);
    const imageEnv = snap ? { ...snap.info.env } : {};
    this.sandboxes.set(spec.id, { info, spec, nextPid: 100, files, tree, imageEnv, ptys: new Set() });
    return { ...info };
  }

  private existing(id: string): FakeSandbox {
    const s = this.sandboxes.get(id);
    if (!s) throw new SandboxdError('not_found', 'Sandbox not found');
    return s;
  }

  async pause(id: string, opts: { memory?: PauseMemory } = {}): Promise<void> {
    const memory = opts.memory ?? 'ram';
    this.calls.push(memory === 'disk' ? `pause ${id} disk` : `pause ${id}`);
    const s = this.existing(id);
    if (s.info.state === 'stopped') throw new SandboxdError('conflict', 'Sandbox is stopped');
    if (memory === 'disk') {
      const isolation = s.info.isolation ?? 'container';
      if (!this.tier(isolation).memorySnapshots)
        throw new SandboxdError('validation', `A ${isolation} sandbox cannot pause to disk`);
      if (s.info.state === 'paused' && s.info.pausedMemory !== 'disk')
        throw new SandboxdError('conflict', 'Sandbox is paused in RAM');
    }
    if (s.info.state === 'paused') return;
    s.info.state = 'paused';
    s.info.pausedMemory = memory;
    for (const p of s.ptys) p.pause();
  }
  async resume(id: string): Promise<void> {
    this.calls.push(`resume ${id}`);
    const fail = this.failNextResume;
    this.failNextResume = null;
    if (fail && !fail.applied) throw fail.error;
    const s = this.existing(id);
    if (s.info.state === 'stopped') throw new SandboxdError('conflict', 'Sandbox is stopped');
    s.info.state = 'running';
    delete s.info.pausedMemory;
    for (const p of s.ptys) p.resume();
    if (fail) throw fail.error;
  }
  async stop(id: string): Promise<void> {
    this.calls.push(`stop ${id}`);
    const s = this.existing(id);
    await this.kill(id);
    s.kept = true;
  }
  async start(id: string, opts: { limits: SandboxSpec['limits'] }): Promise<RuntimeSandbox> {
    this.calls.push(`start ${id}`);
    const s = this.existing(id);
    if (s.info.state === 'paused') throw new SandboxdError('conflict', 'Sandbox is paused');
    if (s.info.state === 'stopped' && !s.kept) throw new SandboxdError('conflict', 'Sandbox has no kept root layer');
    s.spec = { ...s.spec, limits: opts.limits };
    Object.assign(s.info, { state: 'running', pid: 4242 });
    s.kept = false;
    return { ...s.info };
  }
  async snapshot(id: string, ref: string, opts: { config?: ImageConfigOverride } = {}): Promise<ImageInfo> {
    this.calls.push(`snapshot ${id} ${ref}`);
    const s = this.existing(id);
    checkSnapshotRef(ref);
    if (this.snapshots.has(ref)) throw new SandboxdError('conflict', `Image ${ref} exists`);
    const files = new Map(s.files);
    const sizeBytes = [...files.values()].reduce((n, v) => n + Buffer.byteLength(v), 0);
    const base = await this.resolveImage(s.spec.image);
    const info: ImageInfo = withConfig(
      { ...base, ref, digest: fakeDigest(`${ref}@${Date.now()}`), sizeBytes },
      opts.config,
    );
    this.snapshots.set(ref, { info, files, tree: cloneTree(s.tree) });
    return { ...info };
  }
  /** A snapshot with the files of `from` (a snapshot's, or none for another image) and `config` over its config. */
  async deriveImage(from: string, to: string, config: ImageConfigOverride): Promise<ImageInfo> {
    this.calls.push(`deriveImage ${from} ${to}`);
    checkSnapshotRef(to);
    const base = await this.resolveImage(from);
    if (this.snapshots.has(to)) throw new SandboxdError('conflict', `Image ${to} exists`);
    const src = this.snapshots.get(from);
    const info = withConfig({ ...base, ref: to, digest: fakeDigest(`${to}@${Date.now()}`), sizeBytes: 0 }, config);
    this.snapshots.set(to, { info, files: new Map(src?.files ?? []), tree: cloneTree(src?.tree) });
    return { ...info };
  }
  async deleteImage(ref: string): Promise<void> {
    this.snapshots.delete(ref);
  }
  async listSnapshots(): Promise<ImageInfo[]> {
    return [...this.snapshots.values()].map((x) => ({ ...x.info }));
  }

  /**
   * One copy of running gVisor sandbox `id` per spec: its files, spec (env, limits, egress,
   * secret rules) and image, each with its own id, hostname and address. `failNextFork`
   * fails it after the first copy is made, which is then removed (none is left).
   */
  async fork(id: string, specs: ForkSpec[]): Promise<RuntimeSandbox[]> {
    this.calls.push(`fork ${id} ${specs.map((x) => x.id).join(',')}`);
    const src = this.existing(id);
    if (src.info.state !== 'running') throw new SandboxdError('conflict', `Sandbox is ${src.info.state}`);
    const isolation = src.info.isolation ?? 'container';
    if (!this.tier(isolation).memorySnapshots)
      throw new SandboxdError('validation', `A ${isolation} sandbox cannot be forked`);
    if (src.spec.volumes.length) throw new SandboxdError('conflict', 'A sandbox with volumes cannot be forked');
    const made: string[] = [];
    try {
      for (const f of specs) {
        if (this.sandboxes.has(f.id)) throw new SandboxdError('conflict', `Sandbox ${f.id} exists`);
        const n = ++this.forks;
        const info: RuntimeSandbox = {
          ...src.info,
          id: f.id,
          address: `10.88.${1 + (n >> 8)}.${n & 255}`,
          createdAt: new Date(),
        };
        const spec: SandboxSpec = {
          ...src.spec,
          id: f.id,
          hostname: f.hostname ?? f.id,
          ...(src.spec.secrets ? { secrets: src.spec.secrets.map((x) => ({ ...x, domains: [...x.domains] })) } : {}),
        };
        this.sandboxes.set(f.id, {
          info,
          spec,
          nextPid: src.nextPid,
          files: new Map(src.files),
          tree: cloneTree(src.tree),
          imageEnv: { ...src.imageEnv },
          ptys: new Set(),
        });
        made.push(f.id);
        if (this.failNextFork) throw this.failNextFork;
      }
    } catch (e) {
      for (const m of made) this.sandboxes.delete(m);
      throw e;
    } finally {
      this.failNextFork = null;
    }
    return made.map((m) => ({ ...this.sandboxes.get(m)!.info }));
  }

  /** The spec the fake holds for sandbox `id` (test hook), or undefined. */
  specOf(id: string): SandboxSpec | undefined {
    return this.sandboxes.get(id)?.spec;
  }

  async inspect(id: string): Promise<RuntimeSandbox | null> {
    const s = this.sandboxes.get(id);
    return s ? { ...s.info } : null;
  }
  async list(): Promise<RuntimeSandbox[]> {
    return [...this.sandboxes.values()].map((s) => ({ ...s.info }));
  }
  /** Records the egress (the fake has no network to apply it to). */
  async setEgress(id: string, egress: Egress): Promise<void> {
    const s = this.sandboxes.get(id);
    if (!s) throw new SandboxdError('not_found', `sandbox ${id} not found`);
    this.calls.push(`setEgress ${id}`);
    s.spec = { ...s.spec, egress };
  }

  /**
   * Records the rules with their values (the fake has no proxy): `secretsOf` reads them, and
   * `setSecretsCalls` counts the calls. A sandbox's spec keeps them across stop and start.
   */
  async setSecrets(id: string, secrets: SecretInjection[]): Promise<void> {
    const s = this.sandboxes.get(id);
    if (!s) throw new SandboxdError('not_found', `sandbox ${id} not found`);
    if (this.failSetSecrets) throw new SandboxdError('unavailable', 'the fake runtime fails setSecrets (test knob)');
    this.calls.push(`setSecrets ${id}`);
    s.spec = { ...s.spec, secrets: secrets.map((x) => ({ ...x, domains: [...x.domains] })) };
  }
  /** Test knob: `setSecrets` fails with `unavailable` while true (a runner that does not answer). */
  failSetSecrets = false;
  /** The rules (with values) the driver holds for sandbox `id` (test hook), or undefined. */
  secretsOf(id: string): SecretInjection[] | undefined {
    return this.sandboxes.get(id)?.spec.secrets;
  }
  private readonly injectionListeners = new Set<(e: InjectionEvent) => void>();
  onInjection(listener: (e: InjectionEvent) => void): () => void {
    this.injectionListeners.add(listener);
    return () => this.injectionListeners.delete(listener);
  }
  /** Test hook: reports an injection as the egress proxy would. */
  emitInjection(e: InjectionEvent): void {
    for (const l of this.injectionListeners) l(e);
  }

  async kill(id: string): Promise<void> {
    const s = this.sandboxes.get(id);
    if (!s) return;
    Object.assign(s.info, { state: 'stopped', pid: 0 });
    for (const p of s.ptys) p.kill('SIGKILL');
    s.ptys.clear();
  }
  async delete(id: string): Promise<void> {
    this.calls.push(`delete ${id}`);
    await this.kill(id);
    this.sandboxes.delete(id);
  }

  private running(id: string): FakeSandbox {
    const s = this.sandboxes.get(id);
    if (!s) throw new SandboxdError('not_found', 'Sandbox not found');
    if (s.info.state !== 'running') throw new SandboxdError('conflict', 'Sandbox is not running');
    return s;
  }

  async exec(id: string, command: string, options: ExecOptions = {}): Promise<ExecResult> {
    const s = this.running(id);
    return runFakeCommand(command, {
      env: { ...s.imageEnv, ...s.spec.env, ...options.env },
      cwd: options.cwd ?? s.info.workingDir,
      fs: this.fsOf(s),
      timeoutMs: options.timeoutMs ?? 60_000,
      maxOutputBytes: options.maxOutputBytes ?? 1_048_576,
    });
  }
  async execBackground(
    id: string,
    command: string,
    options: Omit<ExecOptions, 'timeoutMs' | 'maxOutputBytes'> = {},
  ): Promise<{ pid: number }> {
    const s = this.running(id);
    void runFakeCommand(command, {
      env: { ...s.imageEnv, ...s.spec.env, ...options.env },
      cwd: options.cwd ?? s.info.workingDir,
      fs: this.fsOf(s),
      timeoutMs: 0,
      maxOutputBytes: 1_048_576,
      background: true,
    });
    return { pid: s.nextPid++ };
  }
  async spawn(id: string, argv: string[], options: SpawnOptions = {}): Promise<StreamedProcess> {
    const s = this.running(id);
    if (argv.length !== 3 || argv[0] !== '/bin/sh' || argv[1] !== '-c')
      throw new SandboxdError(
        'validation',
        `Cannot start ${argv[0]} in the sandbox: the fake runtime runs only /bin/sh -c`,
      );
    const run = runFakeCommand(argv[2], {
      env: { ...s.imageEnv, ...s.spec.env, ...options.env },
      cwd: options.cwd ?? s.info.workingDir,
      fs: this.fsOf(s),
      timeoutMs: options.timeoutMs ?? 0,
      maxOutputBytes: 1_048_576,
    });
    return new FakeStreamedProcess(s.nextPid++, run);
  }

  /** Copies (unpack, pack) in memory; the other file operations are not simulated (proven on the real runtime only). */
  readonly files: DriverFiles = fakeFiles((id) => this.running(id));

  async execTty(id: string, options: TtyOptions): Promise<PtyProcess> {
    const s = this.running(id);
    const pty = new FakePty(s.nextPid++, {
      env: { ...s.imageEnv, ...s.spec.env, ...options.env },
      cwd: options.cwd ?? s.info.workingDir,
      fs: this.fsOf(s),
      timeoutMs: 60_000,
      maxOutputBytes: 1_048_576,
      tty: { cols: options.cols, rows: options.rows },
    });
    s.ptys.add(pty);
    pty.onExit(() => s.ptys.delete(pty));
    return pty;
  }

  /** Files of a sandbox: volume mounts first, then its own root layer. */
  private fsOf(s: FakeSandbox): FakeFs {
    const locate = (path: string): [Map<string, string>, string] => {
      for (const v of s.spec.volumes) {
        if (path === v.mountPath || path.startsWith(`${v.mountPath}/`))
          return [this.volumes.get(v.name)!.files, path.slice(v.mountPath.length)];
      }
      return [s.files, path];
    };
    return {
      read: (path) => {
        const [m, k] = locate(path);
        return m.get(k);
      },
      write: (path, data, append) => {
        const [m, k] = locate(path);
        m.set(k, (append ? (m.get(k) ?? '') : '') + data);
      },
    };
  }

  async ensureVolume(name: string, sizeGb: number): Promise<VolumeInfo> {
    const have = this.volumes.get(name);
    if (have && have.sizeGb !== sizeGb)
      throw new SandboxdError('conflict', `Volume ${name} exists with sizeGb ${have.sizeGb}`);
    if (!have) this.volumes.set(name, { sizeGb, files: new Map() });
    return { name, sizeGb, mountedBy: this.mountedBy(name) };
  }
  async listVolumes(): Promise<VolumeInfo[]> {
    return [...this.volumes].map(([name, v]) => ({ name, sizeGb: v.sizeGb, mountedBy: this.mountedBy(name) }));
  }
  async deleteVolume(name: string): Promise<void> {
    if (!this.volumes.has(name)) throw new SandboxdError('not_found', 'Volume not found');
    if (this.mountedBy(name).length) throw new SandboxdError('conflict', `Volume ${name} is in use`);
    this.volumes.delete(name);
  }
  private mountedBy(name: string): string[] {
    return [...this.sandboxes.values()]
      .filter((s) => s.info.state === 'running' && s.spec.volumes.some((v) => v.name === name))
      .map((s) => s.info.id);
  }

  async capacity(): Promise<RuntimeCapacity> {
    const { memoryAvailableBytes, diskFreeBytes, addressTotal } = this.hostCapacity;
    const held = this.sandboxes.size; // a killed sandbox keeps its network until deleted
    return {
      memoryAvailableBytes,
      diskFreeBytes,
      addresses: addressTotal === null ? null : { free: Math.max(0, addressTotal - held), total: addressTotal },
    };
  }

  /** Forgets a sandbox as a crashed runtime would; for tests. */
  lose(id: string): void {
    this.sandboxes.delete(id);
  }
  async close(): Promise<void> {}
}

function cloneTree(tree: Map<string, FakeNode> | undefined): Map<string, FakeNode> {
  return new Map([...(tree ?? [])].map(([k, v]) => [k, { ...v }]));
}

function checkSnapshotRef(ref: string): void {
  if (!SNAPSHOT_REF_RE.test(ref)) throw new SandboxdError('validation', `Invalid snapshot reference "${ref}"`);
}

/** `info` with each field of `c` given in its place. */
function withConfig(info: ImageInfo, c: ImageConfigOverride = {}): ImageInfo {
  return {
    ...info,
    env: c.env !== undefined ? { ...c.env } : info.env,
    workingDir: c.workingDir !== undefined ? c.workingDir : info.workingDir,
    user: c.user !== undefined ? c.user : info.user,
    entrypoint: c.entrypoint !== undefined ? [...(c.entrypoint ?? [])] : info.entrypoint,
    cmd: c.cmd !== undefined ? [...(c.cmd ?? [])] : info.cmd,
    labels: c.labels !== undefined ? { ...c.labels } : info.labels,
  };
}

/** Builds a fake driver. */
export function createFakeDriver(opts: FakeDriverOptions = {}): FakeDriver {
  return new FakeDriver(opts);
}
