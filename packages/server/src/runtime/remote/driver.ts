import type { Duplex } from 'node:stream';
import { type Egress, type PauseMemory, SandboxdError } from '@sandboxd/protocol';
import type {
  DriverImageStore,
  ExecOptions,
  ExecResult,
  ForkSpec,
  ImageConfigOverride,
  ImageInfo,
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
import { CALL_TIMEOUT_MS, readJson, RunnerClient, type RunnerClientOptions } from './client.js';
import { RemoteFiles } from './files.js';
import type { InjectionTake } from './injections.js';
import { remoteSpawn, remoteTty } from './process.js';
import { RemoteProcesses } from './processes.js';
import { RemoteTerminals } from './terminals.js';
import { reviveSandbox, type RunnerHealth } from './wire.js';

/** Calls that may build or pull an image, or copy a root file system: minutes, not seconds. */
const LONG_CALL_MS = 30 * 60_000;
/** How often a listened-to runner is asked for its injections, ms. */
export const INJECTION_POLL_MS = 1000;
/** What an exec may take over its own timeout (the runner's answer, the network). */
const EXEC_MARGIN_MS = 60_000;

/** Options of {@link RemoteDriver}. */
export interface RemoteDriverOptions extends RunnerClientOptions {
  /** The runner's base URL (`http://host:port` or `https://...`). */
  url: string;
  /** `SANDBOXD_RUNNER_TOKEN`. */
  token: string;
}

/**
 * A {@link RuntimeDriver} whose sandboxes live on one runner (`SANDBOXD_ROLE=runner`),
 * reached over the runner protocol (`wire.ts`). Passes the driver conformance suite like
 * the local driver it wraps. Errors of the runtime come back as the `SandboxdError` the
 * runner's driver threw; a runner that cannot be reached, resets the connection or does not
 * answer in time gives `unavailable` (503) naming it. Sandbox addresses are those of the
 * runner's host: the port proxy reaches them through {@link tunnel}.
 */
export class RemoteDriver implements RuntimeDriver {
  readonly runner: RunnerClient;
  readonly files: RemoteFiles;
  /** The runner's terminals: PTYs and their clients live on the runner, every API replica sees them. */
  readonly terminals: RemoteTerminals;
  /** The runner's tracked processes: started through any API replica, listed and followed through every one. */
  readonly processes: RemoteProcesses;
  readonly images: DriverImageStore;
  private pool: Record<string, number> = {};
  /** The runner's tiers as of the last health check; null until it answered one. */
  private tiers: IsolationSupport[] | null = null;

  constructor(o: RemoteDriverOptions) {
    this.runner = new RunnerClient(o.url, o.token, o);
    this.files = new RemoteFiles(this.runner);
    this.terminals = new RemoteTerminals(this.runner);
    this.processes = new RemoteProcesses(this.runner);
    const call = this.call.bind(this);
    this.images = {
      async pull(ref, opts) {
        const info = await call<ImageInfo>('images.pull', [ref], LONG_CALL_MS);
        opts?.onProgress?.({ phase: 'done', bytes: info.sizeBytes });
        return info;
      },
      async importArchive() {
        throw new SandboxdError('unsupported', 'Importing an image archive is not supported through a runner yet');
      },
      async build(ref, opts) {
        const info = await call<ImageInfo>('images.build', [ref], LONG_CALL_MS);
        opts?.onProgress?.({ phase: 'done', bytes: info.sizeBytes });
        return info;
      },
    };
  }

  private call<T>(method: string, args: unknown[], timeoutMs = CALL_TIMEOUT_MS): Promise<T> {
    return this.runner.call<T>(method, args, timeoutMs);
  }

  /** The runner's name, capacity, warm pool and sandbox count (`GET /runner/v1/health`), within `timeoutMs`. */
  async health(timeoutMs = 10_000): Promise<RunnerHealth> {
    const res = await this.runner.send('health', { method: 'GET', retryReset: true, timeoutMs });
    const h = (await readJson(res, this.runner.name)) as RunnerHealth;
    this.pool = h.warmPool ?? {};
    this.tiers = h.isolations ?? [{ isolation: 'container', runtime: 'crun', memorySnapshots: false }];
    return h;
  }

  /** Checks that the runner answers (and the token is right). */
  async init(): Promise<void> {
    await this.health();
  }
  /** The report of the runner's own recovery at its start (the runner recovers its host, not the client). */
  recover(): Promise<RecoveryReport> {
    return this.call('recover', []);
  }
  resolveImage(ref: string): Promise<ImageInfo> {
    return this.call('resolveImage', [ref], LONG_CALL_MS);
  }
  listImages(): Promise<ImageInfo[]> {
    return this.call('listImages', []);
  }
  async create(spec: SandboxSpec): Promise<RuntimeSandbox> {
    return reviveSandbox(await this.call<RuntimeSandbox>('create', [spec], LONG_CALL_MS));
  }
  async inspect(id: string): Promise<RuntimeSandbox | null> {
    return reviveSandbox(await this.call<RuntimeSandbox | null>('inspect', [id]));
  }
  async list(): Promise<RuntimeSandbox[]> {
    return (await this.call<RuntimeSandbox[]>('list', [])).map((s) => reviveSandbox(s));
  }
  async kill(id: string): Promise<void> {
    await this.call('kill', [id]);
  }
  async pause(id: string, opts?: { memory?: PauseMemory }): Promise<void> {
    // Paused to disk: a checkpoint of every process, which may take a while.
    await this.call('pause', opts ? [id, opts] : [id], opts?.memory === 'disk' ? LONG_CALL_MS : CALL_TIMEOUT_MS);
  }
  /** Forks on the runner that holds the source (its checkpoint is there). */
  async fork(id: string, specs: ForkSpec[]): Promise<RuntimeSandbox[]> {
    return (await this.call<RuntimeSandbox[]>('fork', [id, specs], LONG_CALL_MS)).map((s) => reviveSandbox(s));
  }
  /**
   * The runner's tiers as of its last health check (`init`, `capacity()` and the fleet's
   * checks refresh it); containers only until it answered one, or when it reports none (a
   * runner from before tiers).
   */
  isolations(): IsolationSupport[] {
    return (this.tiers ?? [{ isolation: 'container', runtime: 'crun', memorySnapshots: false }]).map((t) => ({ ...t }));
  }
  async resume(id: string): Promise<void> {
    await this.call('resume', [id]);
  }
  async stop(id: string): Promise<void> {
    await this.call('stop', [id]);
  }
  async start(id: string, opts: { limits: ResourceLimits }): Promise<RuntimeSandbox> {
    return reviveSandbox(await this.call<RuntimeSandbox>('start', [id, opts], LONG_CALL_MS));
  }
  snapshot(id: string, ref: string, opts?: { config?: ImageConfigOverride }): Promise<ImageInfo> {
    return this.call('snapshot', opts ? [id, ref, opts] : [id, ref], LONG_CALL_MS);
  }
  deriveImage(
    from: string,
    to: string,
    config: ImageConfigOverride,
    opts?: { pullAs?: SandboxSpec['pullAs'] },
  ): Promise<ImageInfo> {
    return this.call('deriveImage', opts ? [from, to, config, opts] : [from, to, config], LONG_CALL_MS);
  }
  async deleteImage(ref: string): Promise<void> {
    await this.call('deleteImage', [ref]);
  }
  async setEgress(id: string, egress: Egress): Promise<void> {
    await this.call('setEgress', [id, egress]);
  }
  /** The rules with their values go to the runner (over its authenticated wire), whose proxy injects them. */
  async setSecrets(id: string, secrets: SecretInjection[]): Promise<void> {
    await this.call('setSecrets', [id, secrets]);
  }

  readonly #injectionListeners = new Set<(e: InjectionEvent) => void>();
  #injectionTimer: NodeJS.Timeout | undefined;
  /** The batch to acknowledge at the next take (see injections.ts). */
  #injectionAck: string | undefined;
  #fetching = false;

  /**
   * The runner's injections, fetched every {@link INJECTION_POLL_MS} while anyone listens;
   * each batch is acknowledged at the next fetch, so an event is reported once.
   */
  onInjection(listener: (e: InjectionEvent) => void): () => void {
    this.#injectionListeners.add(listener);
    if (!this.#injectionTimer) {
      this.#injectionTimer = setInterval(() => void this.fetchInjections(), INJECTION_POLL_MS);
      this.#injectionTimer.unref();
    }
    return () => {
      this.#injectionListeners.delete(listener);
      if (this.#injectionListeners.size === 0 && this.#injectionTimer) {
        clearInterval(this.#injectionTimer);
        this.#injectionTimer = undefined;
      }
    };
  }

  /** One fetch of the runner's injections (the timer's; tests call it). Never throws. */
  async fetchInjections(): Promise<void> {
    if (this.#fetching) return;
    this.#fetching = true;
    try {
      for (let i = 0; i < 20; i++) {
        const t = await this.call<InjectionTake>('injections', [this.#injectionAck ?? null]);
        this.#injectionAck = t.batch;
        for (const e of t.events) for (const l of this.#injectionListeners) l(e);
        if (!t.batch) break;
      }
    } catch {
      // the runner is away: the batch not acknowledged comes back to a later take
    } finally {
      this.#fetching = false;
    }
  }
  listSnapshots(): Promise<ImageInfo[]> {
    return this.call('listSnapshots', []);
  }
  async delete(id: string): Promise<void> {
    await this.call('delete', [id]);
  }
  exec(id: string, command: string, options?: ExecOptions): Promise<ExecResult> {
    return this.call('exec', [id, command, options], (options?.timeoutMs ?? 60_000) + EXEC_MARGIN_MS);
  }
  execBackground(
    id: string,
    command: string,
    options?: Omit<ExecOptions, 'timeoutMs' | 'maxOutputBytes'>,
  ): Promise<{ pid: number }> {
    return this.call('execBackground', [id, command, options]);
  }
  execTty(id: string, options: TtyOptions): Promise<PtyProcess> {
    return remoteTty(this.runner, [id, options]);
  }
  spawn(id: string, argv: string[], options?: SpawnOptions): Promise<StreamedProcess> {
    return remoteSpawn(this.runner, [id, argv, options], options?.stdin === true);
  }
  ensureVolume(name: string, sizeGb: number): Promise<VolumeInfo> {
    return this.call('ensureVolume', [name, sizeGb], LONG_CALL_MS);
  }
  listVolumes(): Promise<VolumeInfo[]> {
    return this.call('listVolumes', []);
  }
  async deleteVolume(name: string): Promise<void> {
    await this.call('deleteVolume', [name]);
  }
  /** The runner's warm pool as of the last health check (`capacity()` refreshes it). */
  warmPool(): Record<string, number> {
    return this.pool;
  }
  /** The runner's capacity; all unknown (null) while it cannot be reached (a create then fails `unavailable`). */
  async capacity(): Promise<RuntimeCapacity> {
    try {
      return (await this.health()).capacity;
    } catch {
      return { memoryAvailableBytes: null, diskFreeBytes: null, addresses: null };
    }
  }

  /** A TCP connection to `port` of a sandbox, through the runner (its addresses route only there). */
  tunnel(sandboxId: string, port: number): Promise<Duplex> {
    return this.runner.tunnel(sandboxId, port);
  }

  async close(): Promise<void> {
    if (this.#injectionTimer) clearInterval(this.#injectionTimer);
    this.#injectionTimer = undefined;
    this.terminals.close();
    this.processes.close();
    this.runner.close();
  }
}
