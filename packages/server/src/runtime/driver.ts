import type { Egress, Isolation, PauseMemory } from '@sandboxd/protocol';
import type { DriverFiles } from './files.js';
import type { DriverProcesses } from './processes/types.js';
import type { PtyProcess, TtyOptions } from './pty.js';
import type { SpawnOptions, StreamedProcess } from './spawn.js';
import type { DriverTerminals } from './terminals/types.js';

export type { PtyProcess, TtyOptions } from './pty.js';
export type { ProcessExit, SpawnOptions, StreamedProcess } from './spawn.js';

/**
 * The narrow interface between sandboxd's services and whatever runs sandboxes.
 *
 * A driver does runtime work only: it turns an image reference into a running, isolated,
 * resource-limited sandbox, runs processes in it, and tears it down. Lifetimes, billing,
 * names, owners and records live above it. Every driver passes `conformance.ts`.
 *
 * Errors: drivers throw `SandboxdError` from `@sandboxd/protocol` with kind
 * `template_not_found` (unknown image), `not_found` (unknown sandbox or volume),
 * `conflict` (wrong state, volume in use or of another size), `validation` (bad argument)
 * or `internal` (the runtime failed; message says why, no secrets). A create that fails
 * because the host is full keeps the runtime's words in its message (`Exchange full`,
 * `no free address`, EAGAIN, ENOSPC): the service maps them to `capacity` or a 507.
 */

/** Resource limits applied to one sandbox. All are enforced by the kernel. */
export interface ResourceLimits {
  /** Memory limit in bytes (cgroup memory.limit). */
  memoryBytes: number;
  /** CPU quota in cores, e.g. 1 or 0.5. */
  cpus: number;
  /** Maximum number of processes/threads (cgroup pids.max). */
  pids: number;
  /** Size cap of the writable root layer in bytes; a write past it fails with ENOSPC. */
  rootDiskBytes: number;
}

/** A named volume mounted into a sandbox. */
export interface VolumeMount {
  /** Volume name, unique per driver; callers scope it (e.g. `<accountId>__<name>`). */
  name: string;
  /** Absolute path inside the sandbox. */
  mountPath: string;
  /** Size cap in GiB, 1..100; used when the volume is created. */
  sizeGb: number;
}

/**
 * One secret injection rule of a sandbox, as the driver's egress proxy applies it: requests to
 * a name `domains` allow (egress-rule syntax: `a.b` or `*.b`) get `placeholder` replaced by
 * `value` wherever it appears in the request head and, with `header`, that header set to
 * `format` with `{value}` replaced. Over TLS the proxy terminates the connection with the
 * driver's CA (which the sandbox trusts) and verifies the upstream; every other destination
 * is relayed untouched.
 */
export interface SecretInjection {
  /** The secret's name (for the audit trail). */
  secret: string;
  /** Lowercase, checked names (`parseEgressRule` kinds `domain` / `wildcard`). */
  domains: string[];
  header?: string;
  /** Contains `{value}`; default `{value}`. */
  format: string;
  /** What the sandbox holds in place of the value. */
  placeholder: string;
  /** The value; absent when the secret is gone (the rule then injects nothing). */
  value?: string;
}

/** One request the egress proxy put a secret into (or tried to). */
export interface InjectionEvent {
  sandboxId: string;
  secret: string;
  /** `name:port` the request went to. */
  destination: string;
  method: string;
  /** The upstream's status, or null when no answer came (`error` says why). */
  status: number | null;
  error?: string;
  /** Epoch ms. */
  at: number;
}

/** What a sandbox is made from. Immutable once created. */
export interface SandboxSpec {
  /** Caller-chosen id, `^[a-z0-9_]{1,64}$`, unique among live sandboxes of this driver. */
  id: string;
  /** OCI image reference, e.g. `local/busybox:latest` or `127.0.0.1:5000/x:1`. */
  image: string;
  /** Environment for every process, layered over the image's own Env. */
  env: Record<string, string>;
  volumes: VolumeMount[];
  limits: ResourceLimits;
  /** Hostname inside the sandbox; defaults to the id. */
  hostname?: string;
  /**
   * What the sandbox may reach outside (rules already checked: see `parseEgressRule`);
   * absent means `none`. The only part of a spec that changes later ({@link RuntimeDriver.setEgress}).
   */
  egress?: Egress;
  /**
   * Secret injection rules with their values (see {@link SecretInjection}); absent or empty:
   * none. Changes later only by {@link RuntimeDriver.setSecrets}. A driver never writes a
   * value to disk in clear, never logs one, and puts none in the sandbox (only the
   * placeholders, which the caller put in `env`).
   */
  secrets?: SecretInjection[];
  /**
   * Whose pull it is should the image have to be pulled: the pull policy decides by it which
   * registries may be pulled from and whose registry credentials serve (see
   * runtime/local/images/pull-policy.ts). Absent: an unnamed account's (allowed registries,
   * no credentials).
   */
  pullAs?: { accountId: string; admin: boolean };
  /**
   * True: what the image declares to run at every boot (a service, a start command, a ready
   * check: runtime/local/service.ts) is not run in this sandbox, neither at create nor at a
   * later start: an image build's step sandboxes. Never a warm-pooled one (which ran it).
   */
  skipImageStart?: boolean;
  /**
   * The isolation tier: `container` (the default when absent) or `gvisor`. A driver that
   * does not offer the tier (see {@link RuntimeDriver.isolations}) throws `validation`.
   */
  isolation?: Isolation;
}

/** One isolation tier a driver offers, as `/healthz` reports it. */
export interface IsolationSupport {
  isolation: Isolation;
  /** The OCI runtime that runs it (`crun`, `runc`, `runsc`). */
  runtime: string;
  /** gVisor: the platform runsc uses here (`kvm`, `systrap` or `ptrace`). */
  platform?: string;
  /** What a sandbox of this tier can do beyond the conformance suite. */
  memorySnapshots: boolean;
}

/** A sandbox made by {@link RuntimeDriver.fork}: its own id (and hostname); all else is the source's. */
export interface ForkSpec {
  id: string;
  /** Default: the id. */
  hostname?: string;
}

/**
 * `running`; `paused` (every process frozen by the cgroup freezer, memory kept);
 * `stopped` (no process: killed, or stopped by {@link RuntimeDriver.stop} with its writable
 * root layer kept for {@link RuntimeDriver.start}).
 */
export type RuntimeState = 'running' | 'paused' | 'stopped';

/** What the driver knows about one sandbox. */
export interface RuntimeSandbox {
  id: string;
  image: string;
  /** Content digest of the resolved image (`sha256:...`). */
  imageDigest: string;
  state: RuntimeState;
  /** IPv4 address on the host bridge, reachable from the host (for the port proxy). */
  address: string;
  /** Host pid of the sandbox's init process, or 0 when not running. */
  pid: number;
  createdAt: Date;
  /** Absent: `container`. */
  isolation?: Isolation;
  /** A paused sandbox: where its memory is kept (`ram`: frozen; `disk`: checkpointed). */
  pausedMemory?: PauseMemory;
  /** Image config as resolved at create time. */
  workingDir: string;
  user: string;
}

export interface ExecOptions {
  /** Merged over the sandbox env. */
  env?: Record<string, string>;
  /** Working directory inside the sandbox; default the image's WorkingDir, else `/`. */
  cwd?: string;
  /** Foreground timeout in ms; on expiry the process tree is killed and exitCode is 124. Default 60000. */
  timeoutMs?: number;
  /** Per-stream cap in bytes; output past it is dropped and `truncated` set. Default 1 MiB. */
  maxOutputBytes?: number;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  /** Exit code; 128 + signal for a process killed by a signal; 124 on timeout. */
  exitCode: number;
  truncated: boolean;
  timedOut: boolean;
}

export type { DriverFiles } from './files.js';

export interface ImageInfo {
  /** The reference as given. */
  ref: string;
  digest: string;
  env: Record<string, string>;
  workingDir: string;
  user: string;
  sizeBytes: number;
  /**
   * The rest of its config, where the driver knows it (every driver of this repository
   * does): an image build starts a stage's config from its base image's.
   */
  entrypoint?: string[];
  cmd?: string[];
  labels?: Record<string, string>;
}

/**
 * Config fields an image build sets on the images it makes (see builds/plan.ts); each one
 * given replaces the base image's. Labels are the image's whole label set.
 */
export interface ImageConfigOverride {
  env?: Record<string, string>;
  workingDir?: string;
  user?: string;
  entrypoint?: string[] | null;
  cmd?: string[] | null;
  labels?: Record<string, string>;
}

export interface VolumeInfo {
  name: string;
  sizeGb: number;
  /** Ids of running sandboxes that mount it. */
  mountedBy: string[];
}

/** Progress of an image pull or build; `bytes` counts what was downloaded or written so far. */
export interface ImageProgress {
  phase: 'pulling' | 'bootstrapping' | 'packing' | 'unpacking' | 'done';
  bytes?: number;
  totalBytes?: number;
}

/**
 * Image operations an administrator triggers explicitly. Throws like the driver:
 * `template_not_found` (unknown image or tag), `validation` (bad ref, unreadable archive),
 * `internal` (the tool failed). Concurrent calls for one ref share the work.
 */
export interface DriverImageStore {
  /** Pulls `ref` from its registry even if cached, so a moved tag is followed. */
  pull(ref: string, opts?: { onProgress?: (p: ImageProgress) => void }): Promise<ImageInfo>;
  /** Imports an OCI archive or `docker save` tar at `path`, named `ref` (default: the name it records). */
  importArchive(path: string, ref?: string): Promise<ImageInfo>;
  /** (Re)builds one of the images this host builds offline (`local/...`). */
  build(ref: string, opts?: { onProgress?: (p: ImageProgress) => void }): Promise<ImageInfo>;
}

/**
 * What the host has left for new sandboxes, as the runtime measures it now (uncached; the
 * service caches). `null`: the runtime cannot tell, or has no such limit.
 */
export interface RuntimeCapacity {
  /** Memory the kernel can give without swapping (`MemAvailable` of /proc/meminfo), bytes. */
  memoryAvailableBytes: number | null;
  /** Bytes free for the server on the file system of the runtime's data (sandbox roots, volumes). */
  diskFreeBytes: number | null;
  /** Sandbox network addresses: left for new sandboxes, and the most there can be. */
  addresses: { free: number; total: number } | null;
}

/** What {@link RuntimeDriver.survey} found. */
export interface RuntimeSurvey {
  /** The sandboxes of every host that answered (as `list()` gives them). */
  sandboxes: RuntimeSandbox[];
  /**
   * Null when host `host` (a runner's node name; null: a sandbox whose host is not recorded)
   * answered this survey, so a sandbox of it missing from `sandboxes` is gone; else how long
   * that host has not answered (ms) and why.
   */
  absent(host: string | null): HostAbsence | null;
}

/** A host that did not answer: since when (`forMs`, ms) and the last error's words. */
export interface HostAbsence {
  host: string;
  forMs: number;
  reason: string;
}

/** What `recover()` found after a restart. */
export interface RecoveryReport {
  adopted: string[];
  /** Leftovers removed before `recover()` resolved. */
  cleaned: string[];
  /** Leftovers whose removal failed this time (the next start tries again). */
  failed?: Array<{ id: string; message: string }>;
  /**
   * Leftovers still being removed in the background once `recover()` resolved. Until each
   * is gone, nothing it holds (id, address, uid range) is given to a new sandbox.
   */
  background?: LeftoverRemoval;
}

/** The background removal of an earlier process's leftovers. */
export interface LeftoverRemoval {
  /** How many are not removed yet. */
  pending(): number;
  /** Settles when none is pending (or the driver closed); never rejects. */
  readonly done: Promise<{ cleaned: string[]; failed: Array<{ id: string; message: string }> }>;
}

export interface RuntimeDriver {
  /** Prepares the driver (host state, recovery is separate). Idempotent. */
  init(): Promise<void>;
  /**
   * Finds every sandbox left by an earlier process: adopts the running ones and removes
   * whatever is half made or dead (possibly in the background, see
   * {@link RecoveryReport.background}). Call once after `init()`.
   */
  recover(): Promise<RecoveryReport>;

  /** Resolves an image, pulling or building it if needed. Throws `template_not_found`. */
  resolveImage(ref: string): Promise<ImageInfo>;
  listImages(): Promise<ImageInfo[]>;
  /** Explicit image management (pull, import, build); absent when the runtime has none. */
  readonly images?: DriverImageStore;

  /**
   * Creates and starts a sandbox; resolves once a command can run in it.
   * On failure nothing is left behind. Throws `template_not_found`, `conflict` (id taken,
   * or a volume exists with another size), `validation`.
   */
  create(spec: SandboxSpec): Promise<RuntimeSandbox>;
  inspect(id: string): Promise<RuntimeSandbox | null>;
  list(): Promise<RuntimeSandbox[]>;
  /** Kills every process of the sandbox; it stays inspectable as `stopped` until deleted. */
  kill(id: string): Promise<void>;

  /**
   * Freezes every process of a running sandbox (cgroup freezer): no CPU, memory and open
   * files and connections kept, PTYs and streams stay open and silent. Resolves once every
   * process is frozen; `inspect` then says `paused`, also after a restart of the driver's
   * process. Paused already: no-op. Throws `not_found`, `conflict` (stopped).
   *
   * `memory: "disk"` (a tier with `memorySnapshots`): the sandbox is checkpointed to disk
   * instead (every process, its memory, open files and sockets), its processes end and its
   * RAM is freed; `resume` restores it where it was, also after a restart of the driver's
   * process or the host. Connections from outside are closed. Paused to RAM already, or a
   * tier without memory snapshots: `conflict` / `validation`.
   */
  pause(id: string, opts?: { memory?: PauseMemory }): Promise<void>;
  /** Thaws a paused sandbox: every process continues where it was. Running already: no-op. `not_found`, `conflict` (stopped). */
  resume(id: string): Promise<void>;
  /**
   * Kills every process (paused or not) and frees what a running sandbox holds (network
   * address, cgroup, runtime state) but keeps its writable root layer (and the uid range it
   * is owned by) for {@link start}; `inspect`/`list` show it `stopped` until deleted, also
   * after a restart. Stopped already: no-op. `not_found`.
   */
  stop(id: string): Promise<void>;
  /**
   * Boots a stopped sandbox again from its kept root layer (same id, image, volumes, env;
   * fresh processes), with `limits` (the plan's now); resolves once a command can run.
   * Running already: returns it. `not_found`, `conflict` (paused), `capacity`-like failures
   * as create (`Exchange full`, EAGAIN, ENOSPC in the message).
   */
  start(id: string, opts: { limits: ResourceLimits }): Promise<RuntimeSandbox>;
  /**
   * Makes the sandbox's filesystem (its image with its writable layer applied; volumes,
   * /proc, /sys, /dev excluded) a new image `ref` (`snapshot/...`, never pulled), usable in
   * {@link create} at once. A running sandbox is frozen for the copy and thawed after (a
   * paused or stopped one is copied as it is). The image appears whole or not at all (a
   * crash mid-copy leaves nothing `resolveImage` finds). `sizeBytes` of the result is what
   * the snapshot adds on disk over its base. Its config is the sandbox's image's, each field
   * of `opts.config` given replacing that one (an image build's layer: see builds/plan.ts).
   * Throws `not_found`, `conflict` (`ref` exists), `validation` (bad ref).
   */
  snapshot(id: string, ref: string, opts?: { config?: ImageConfigOverride }): Promise<ImageInfo>;
  /**
   * Makes image `to` (`snapshot/...`) with the files of image `from` (any image the driver
   * resolves, pulled if need be as a create would for `opts.pullAs`) and the config
   * `config` (each field given replaces the one of `from`): an image build's config-only
   * steps. Whole or nothing like {@link snapshot}, and a snapshot like the others after
   * (listed by {@link listSnapshots}, removed by {@link deleteImage}); `sizeBytes` 0 (it
   * adds no file). Throws `validation` (bad `to`), `template_not_found` (`from`),
   * `conflict` (`to` exists).
   */
  deriveImage(
    from: string,
    to: string,
    config: ImageConfigOverride,
    opts?: { pullAs?: SandboxSpec['pullAs'] },
  ): Promise<ImageInfo>;
  /**
   * Optional (tiers with `memorySnapshots`): makes one new sandbox per spec from a
   * checkpoint of running sandbox `id`: every process and its memory, the root layer's files,
   * the same image, env, limits, egress and secret rules; each with its own id, network
   * address and writable root layer (a copy). The source keeps running. Sandboxes with
   * volumes cannot be forked (`conflict`: a volume is mounted in one sandbox at a time).
   * Resolves once every fork runs; on failure none is left. `not_found`, `conflict` (not
   * running), `validation` (tier).
   */
  fork?(id: string, specs: ForkSpec[]): Promise<RuntimeSandbox[]>;
  /** The isolation tiers this driver offers (absent: `container` only). */
  isolations?(): IsolationSupport[];
  /** Removes image `ref` made by {@link snapshot} (a sandbox running from it keeps its files). Missing: no-op. */
  deleteImage(ref: string): Promise<void>;
  /** Refs of every image made by {@link snapshot} (to drop those whose making a crash cut short of its record). */
  listSnapshots(): Promise<ImageInfo[]>;
  /**
   * Replaces the egress of a sandbox: for a running or paused one it holds for new
   * connections once this resolves (open ones stay); a stopped one gets it at its next
   * start. Throws `not_found`, `validation` (bad rule). Absent: the runtime cannot change it.
   */
  setEgress?(id: string, egress: Egress): Promise<void>;
  /**
   * Replaces the secret injection rules (with values) of a sandbox, running, paused or
   * stopped: once this resolves, new requests through the egress proxy follow them (a rule
   * without `value` injects nothing at once). Throws `not_found`. Absent: the runtime has no
   * injecting proxy (then no sandbox may have rules).
   */
  setSecrets?(id: string, secrets: SecretInjection[]): Promise<void>;
  /**
   * Subscribes to the injections the egress proxy makes (the audit trail); returns the
   * unsubscribe. Events may arrive late (a runner's are fetched) but none is reported twice.
   */
  onInjection?(listener: (e: InjectionEvent) => void): () => void;
  /** Kills if running and frees everything but named volumes. Unknown id: no-op. */
  delete(id: string): Promise<void>;

  /** Runs `/bin/sh -c command` in the foreground. Throws `not_found` / `conflict` (not running). */
  exec(id: string, command: string, options?: ExecOptions): Promise<ExecResult>;
  /** Starts `/bin/sh -c command` detached; it dies with the sandbox. Returns its in-sandbox pid. */
  execBackground(
    id: string,
    command: string,
    options?: Omit<ExecOptions, 'timeoutMs' | 'maxOutputBytes'>,
  ): Promise<{ pid: number }>;
  /** Starts a process on a new PTY. */
  execTty(id: string, options: TtyOptions): Promise<PtyProcess>;
  /**
   * Starts `argv` (argv[0] an absolute path in the sandbox) with its output streamed.
   * Throws `not_found` / `conflict` (not running), `validation` (unknown user, with
   * `details.unknownUser`, or argv[0] cannot be executed: the message says why).
   */
  spawn(id: string, argv: string[], options?: SpawnOptions): Promise<StreamedProcess>;
  /** File operations done inside the sandbox, as its user (see files.ts). */
  readonly files: DriverFiles;
  /**
   * Terminals held where the sandboxes run (see terminals/types.ts), for drivers whose PTYs
   * run in another process (a runner's): every API replica then sees the same terminals.
   * Absent: the caller holds them itself over {@link execTty} (a `TerminalHost`).
   */
  readonly terminals?: DriverTerminals;
  /**
   * Processes started through the API (background and streamed execs; see
   * processes/types.ts), tracked where the sandboxes run, for drivers whose processes run
   * in another process (a runner's): every API replica then sees the same processes.
   * Absent: the caller tracks them itself over {@link spawn} (a `ProcessHost`).
   */
  readonly processes?: DriverProcesses;

  /** Creates the volume if missing; `conflict` if it exists with another size. */
  ensureVolume(name: string, sizeGb: number): Promise<VolumeInfo>;
  listVolumes(): Promise<VolumeInfo[]>;
  /** `conflict` while mounted by a running sandbox; `not_found` if missing. */
  deleteVolume(name: string): Promise<void>;

  /**
   * Sandboxes kept started per pooled image, ready for a create to claim (absent or empty
   * when the runtime keeps none). A claimed sandbox is indistinguishable from one started
   * for the create.
   */
  warmPool?(): Record<string, number>;

  /**
   * What the host has left for new sandboxes (memory, disk, addresses), measured now. Cheap
   * (a file read, a statfs, counters), never throws for a figure it cannot read (null).
   */
  capacity(): Promise<RuntimeCapacity>;

  /**
   * A TCP connection to `port` of a running sandbox, for drivers whose sandbox addresses
   * route only on another host (a runner's): the port proxy connects through it. Absent:
   * `address` is reachable from this process. Rejects `not_found` (not running there),
   * `upstream` (the port refused; `details.code`), `unavailable` (the host is unreachable).
   */
  tunnel?(id: string, port: number): Promise<import('node:stream').Duplex>;

  /**
   * For drivers over several hosts (the runner fleet): `list()` together with which hosts
   * answered it, so that the reconciler tells a sandbox its host lost from one whose host is
   * not answering. Absent: `list()` covers every sandbox of the driver.
   */
  survey?(): Promise<RuntimeSurvey>;

  /** Releases driver resources held by this process (not sandboxes). */
  close(): Promise<void>;
  /**
   * Removes every trace of the driver from the host: sandboxes, their mounts and networks,
   * what it set up host-wide; volumes are unmounted and their data kept. For uninstall
   * (`npm run teardown`), while no other process drives the same instance. Absent: nothing
   * to remove.
   */
  destroyAll?(): Promise<void>;
}
