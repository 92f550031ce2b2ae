import type { Duplex } from 'node:stream';
import { type Egress, ISOLATIONS, type PauseMemory, SandboxdError } from '@sandboxd/protocol';
import type { CapacityFloors } from '../../../domain/capacity.js';
import { DRIVER_SNAPSHOT_PREFIX } from '../../../domain/snapshots.js';
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
  RuntimeSurvey,
  SandboxSpec,
  SecretInjection,
  SpawnOptions,
  StreamedProcess,
  TtyOptions,
  VolumeInfo,
} from '../../driver.js';
import type { DriverFiles } from '../../files.js';
import type { DriverProcesses } from '../../processes/types.js';
import type { DriverTerminals } from '../../terminals/types.js';
import { isUnreachable, type RunnerDriver, type RunnerMember, tiersOf } from './member.js';
import { type FleetLog, Membership } from './membership.js';
import { bestCapacity } from './placement.js';
import { LIST_TIMEOUT_MS, Placer, within } from './placer.js';
import { type RunnerStatus, runnerStatuses } from './status.js';
import { surveyRunners } from './survey.js';
import type { FleetRecords, RunnerUrls } from './records.js';
import { routedFiles } from './routed-files.js';
import { routedProcesses } from './routed-processes.js';
import { routedTerminals } from './routed-terminals.js';

export type { RunnerStatus } from './status.js';

/** Sandbox ids whose runner this process remembers; past it the memory starts again (the records have them). */
const MAX_REMEMBERED = 100_000;

/** Options of {@link FleetDriver}. */
export interface FleetOptions {
  /** The runner URLs: a fixed list, or the Service's endpoints as they change. */
  source: RunnerUrls;
  /** A driver for the runner at `url` (a RemoteDriver; tests give fakes). */
  connect(url: string): RunnerDriver;
  /** Where sandboxes and volumes live, from the records (see {@link FleetRecords}). */
  records: FleetRecords;
  /** `SANDBOXD_RUNNER_DOWN_MS`: a runner silent this long has its sandboxes turned `error` by the reaper. */
  downAfterMs: number;
  /** A runner below these has no room for a create (createMinMemoryMb, createMinFreeMb). */
  floors: CapacityFloors;
  log: FleetLog;
  /** The clock of how long a runner has not answered, ms (default `Date.now`). */
  now?: () => number;
  /** Health checks on timers (default true); false: only {@link FleetDriver.refresh} checks (tests drive it). */
  poll?: boolean;
  /** How long `init()` waits for the runners' first answers, ms (default min(downAfterMs, 10 s)). */
  initWaitMs?: number;
}

/**
 * A {@link RuntimeDriver} over several runners (`SANDBOXD_ROLE=api`): a plain delegation
 * layer. A create is placed (see {@link Placer}), recorded on its runner (before the
 * runner makes it), then created there; every call about one sandbox goes to the runner its
 * record names (remembered in memory, asked of the records once per sandbox, so a replica
 * that did not create it serves it); `list()`/`survey()` ask every runner that answers;
 * images, snapshots and volumes are asked of the runners that have them. A runner that does
 * not answer is used for nothing until its health check answers again; calls about its
 * sandboxes answer 503 `unavailable` naming it. Each runner's health is checked every
 * `min(1 s, downAfterMs / 5)`.
 */
export class FleetDriver implements RuntimeDriver {
  readonly files: DriverFiles;
  /** The terminals of each sandbox's runner (the PTYs and their clients live there). */
  readonly terminals: DriverTerminals;
  /** The tracked processes of each sandbox's runner (the processes and their readers live there). */
  readonly processes: DriverProcesses;
  readonly images: DriverImageStore;
  private readonly members: Membership;
  private readonly placer: Placer;
  private readonly homes = new Map<string, string>();
  private readonly injectionListeners = new Set<(e: InjectionEvent) => void>();
  private readonly listeners: Array<() => void> = [];
  private readonly now: () => number;
  private watch: { stop(): void } | null = null;

  constructor(private readonly o: FleetOptions) {
    this.now = o.now ?? Date.now;
    const pollMs = o.poll === false ? 0 : Math.max(50, Math.min(1000, Math.floor(o.downAfterMs / 5)));
    this.members = new Membership({
      // Each runner's injection events reach this fleet's listeners (the runner's driver
      // fetches them: see RemoteDriver.onInjection).
      connect: (url) => {
        const d = o.connect(url);
        d.onInjection?.((e) => {
          for (const l of this.injectionListeners) l(e);
        });
        return d;
      },
      now: this.now,
      pollMs,
      healthTimeoutMs: Math.max(1000, Math.min(10_000, Math.floor(o.downAfterMs / 2))),
      downAfterMs: o.downAfterMs,
      log: o.log,
      onChange: () => {
        for (const l of this.listeners) l();
      },
    });
    this.placer = new Placer({
      members: this.members,
      records: o.records,
      floors: o.floors,
      onUnreachable: (m, e) => this.unreachable(m, e),
    });
    this.files = routedFiles((id, fn) => this.on(id, (d) => fn(d.files)));
    this.terminals = routedTerminals((id, fn) => this.on(id, fn));
    this.processes = routedProcesses((id, fn) => this.on(id, fn));
    const all = <T>(fn: (d: RunnerDriver) => Promise<T>) => this.everyUp(fn);
    this.images = {
      async pull(ref, opts) {
        const [info] = await all((d) => d.images!.pull(ref));
        opts?.onProgress?.({ phase: 'done', bytes: info.sizeBytes });
        return info;
      },
      async importArchive() {
        throw new SandboxdError('unsupported', 'Importing an image archive is not supported through runners yet');
      },
      async build(ref, opts) {
        const [info] = await all((d) => d.images!.build(ref));
        opts?.onProgress?.({ phase: 'done', bytes: info.sizeBytes });
        return info;
      },
    };
  }

  /** Called whenever a runner comes, goes, stops or starts answering, or has been silent for `downAfterMs`. */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  /** Checks every runner's health now (tests; the timers do it otherwise). */
  refresh(): Promise<void> {
    return this.members.refresh();
  }

  /** Every runner as /healthz and /metrics report it. */
  runners(): RunnerStatus[] {
    return runnerStatuses(this.members.nodes(), this.o.floors, this.now());
  }

  /** Starts watching the runner list and waits (bounded) for every runner's first answer. Idempotent. */
  async init(): Promise<void> {
    if (this.watch) return;
    let listed!: () => void;
    const first = new Promise<void>((r) => (listed = r));
    this.watch = this.o.source.start((urls) => {
      this.members.setUrls(urls);
      listed();
    });
    const waitMs = this.o.initWaitMs ?? Math.min(this.o.downAfterMs, 10_000);
    await within(
      first.then(() => this.members.refresh()),
      waitMs,
      'list',
    ).catch(() => undefined);
    const status = this.runners();
    this.o.log.info(
      {
        up: status.filter((r) => r.state === 'up').map((r) => r.node),
        down: status.filter((r) => r.state !== 'up').map((r) => r.url),
      },
      'runners',
    );
  }

  /** The recovery reports of the runners that answer, together. */
  async recover(): Promise<RecoveryReport> {
    const out: RecoveryReport = { adopted: [], cleaned: [], failed: [] };
    for (const r of await this.settled((d) => d.recover())) {
      out.adopted.push(...r.adopted);
      out.cleaned.push(...r.cleaned);
      out.failed!.push(...(r.failed ?? []));
    }
    return out;
  }

  async resolveImage(ref: string): Promise<ImageInfo> {
    const up = this.members.up();
    if (!up.length) throw this.placer.noRunner();
    const m = ref.startsWith(DRIVER_SNAPSHOT_PREFIX) ? (await this.placer.snapshotHolders(ref, up))[0] : up[0];
    if (!m) throw new SandboxdError('template_not_found', 'Template not found', { image: ref });
    return this.call(m, (d) => d.resolveImage(ref));
  }

  /** Every image any answering runner has (one entry per ref). */
  async listImages(): Promise<ImageInfo[]> {
    return unique((await this.settled((d) => d.listImages())).flat(), (i) => i.ref);
  }

  async create(spec: SandboxSpec): Promise<RuntimeSandbox> {
    for (let attempt = 0; ; attempt++) {
      const m = await this.placer.place(spec);
      m.begin();
      let made = false;
      try {
        try {
          await this.o.records.assign(spec.id, m.node!);
        } catch (e) {
          // One of its volumes was placed on another runner meanwhile (a concurrent create): place again.
          if (attempt === 0 && e instanceof SandboxdError && e.kind === 'conflict' && hasVolume(e)) continue;
          throw e;
        }
        this.remember(spec.id, m.node!);
        const out = await this.call(m, (d) => d.create(spec));
        made = true;
        return out;
      } finally {
        m.placed(made ? spec.image : null);
      }
    }
  }

  async inspect(id: string): Promise<RuntimeSandbox | null> {
    try {
      return await this.on(id, (d) => d.inspect(id));
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'not_found') return null;
      throw e;
    }
  }
  async list(): Promise<RuntimeSandbox[]> {
    return (await this.survey()).sandboxes;
  }
  kill(id: string): Promise<void> {
    return this.on(id, (d) => d.kill(id));
  }
  pause(id: string, opts?: { memory?: PauseMemory }): Promise<void> {
    return this.on(id, (d) => d.pause(id, opts));
  }
  /** On the source's runner (its checkpoint is there); the forks are recorded there before it makes them. */
  async fork(id: string, specs: ForkSpec[]): Promise<RuntimeSandbox[]> {
    const node = this.homes.get(id);
    const m = node ? await this.usable(node, id) : await this.locate(id);
    for (const f of specs) {
      await this.o.records.assign(f.id, m.node!);
      this.remember(f.id, m.node!);
    }
    return this.call(m, async (d) => {
      if (!d.fork) throw new SandboxdError('unsupported', `Runner ${m.node} cannot fork sandboxes`);
      return d.fork(id, specs);
    });
  }
  /**
   * The tiers some runner that answers offers (as its last health check said; a runner from
   * before tiers offers containers), each once; `memorySnapshots` when any of them has them.
   */
  isolations(): IsolationSupport[] {
    const out = new Map<string, IsolationSupport>();
    for (const m of this.members.up())
      for (const t of tiersOf(m)) {
        const have = out.get(t.isolation);
        if (!have) out.set(t.isolation, { ...t });
        else have.memorySnapshots ||= t.memorySnapshots;
      }
    if (!out.has('container'))
      out.set('container', { isolation: 'container', runtime: 'crun', memorySnapshots: false });
    return [...out.values()].sort((a, b) => ISOLATIONS.indexOf(a.isolation) - ISOLATIONS.indexOf(b.isolation));
  }
  resume(id: string): Promise<void> {
    return this.on(id, (d) => d.resume(id));
  }
  setEgress(id: string, egress: Egress): Promise<void> {
    return this.on(id, async (d) => {
      if (!d.setEgress) throw new SandboxdError('unsupported', 'This runner cannot change the network of a sandbox');
      await d.setEgress(id, egress);
    });
  }
  setSecrets(id: string, secrets: SecretInjection[]): Promise<void> {
    return this.on(id, async (d) => {
      if (!d.setSecrets) throw new SandboxdError('unsupported', 'This runner cannot inject secrets');
      await d.setSecrets(id, secrets);
    });
  }
  /** Every runner's injections (each runner's are fetched by its driver, in order, once each). */
  onInjection(listener: (e: InjectionEvent) => void): () => void {
    this.injectionListeners.add(listener);
    return () => this.injectionListeners.delete(listener);
  }
  stop(id: string): Promise<void> {
    return this.on(id, (d) => d.stop(id));
  }
  start(id: string, opts: { limits: ResourceLimits }): Promise<RuntimeSandbox> {
    return this.on(id, (d) => d.start(id, opts));
  }
  snapshot(id: string, ref: string, opts?: { config?: ImageConfigOverride }): Promise<ImageInfo> {
    return this.on(id, (d) => d.snapshot(id, ref, opts));
  }
  /**
   * On the runner that holds `from` when it is a snapshot (as a create from it is placed:
   * `template_not_found` when none that answers has it, `unavailable` when one does not
   * answer), else on the best placed runner that answers; `to` lives there then. `conflict`
   * when a runner that answers has `to` already.
   */
  async deriveImage(
    from: string,
    to: string,
    config: ImageConfigOverride,
    opts?: { pullAs?: SandboxSpec['pullAs'] },
  ): Promise<ImageInfo> {
    const up = this.members.up();
    if (!up.length) throw this.placer.noRunner();
    // `to` on another runner than the one that makes it would be two images of one ref.
    if (to.startsWith(DRIVER_SNAPSHOT_PREFIX) && (await this.placer.snapshotHolders(to, up)).length)
      throw new SandboxdError('conflict', `Image ${to} exists`, { image: to });
    let m: RunnerMember | undefined;
    if (from.startsWith(DRIVER_SNAPSHOT_PREFIX)) {
      m = (await this.placer.snapshotHolders(from, up))[0];
      if (!m && this.members.members().some((x) => !x.up))
        throw new SandboxdError(
          'unavailable',
          `The snapshot is on none of the runners that answer; ${this.placer.silent()}`,
        );
      if (!m) throw new SandboxdError('template_not_found', 'Template not found', { image: from });
    } else m = this.best(up);
    return this.call(m, (d) => d.deriveImage(from, to, config, opts));
  }
  /** On every runner that answers (a snapshot lives on one; elsewhere a no-op). */
  async deleteImage(ref: string): Promise<void> {
    await this.everyUp((d) => d.deleteImage(ref));
  }
  async listSnapshots(): Promise<ImageInfo[]> {
    return unique((await this.settled((d) => d.listSnapshots())).flat(), (i) => i.ref);
  }

  /** On its runner; with none recorded, on every runner that answers (no-op where unknown). */
  async delete(id: string): Promise<void> {
    const node = this.homes.get(id) ?? (await this.o.records.runnerOf(id));
    if (node) {
      await this.call(await this.usable(node, id), (d) => d.delete(id));
    } else await this.everyUp((d) => d.delete(id));
    this.homes.delete(id);
  }

  exec(id: string, command: string, options?: ExecOptions): Promise<ExecResult> {
    return this.on(id, (d) => d.exec(id, command, options));
  }
  execBackground(
    id: string,
    command: string,
    options?: Omit<ExecOptions, 'timeoutMs' | 'maxOutputBytes'>,
  ): Promise<{ pid: number }> {
    return this.on(id, (d) => d.execBackground(id, command, options));
  }
  execTty(id: string, options: TtyOptions): Promise<PtyProcess> {
    return this.on(id, (d) => d.execTty(id, options));
  }
  spawn(id: string, argv: string[], options?: SpawnOptions): Promise<StreamedProcess> {
    return this.on(id, (d) => d.spawn(id, argv, options));
  }
  tunnel(id: string, port: number): Promise<Duplex> {
    return this.on(id, (d) => {
      if (!d.tunnel) throw new SandboxdError('unsupported', 'This runner has no tunnel to sandbox ports');
      return d.tunnel(id, port);
    });
  }

  /** On the runner that has it, else on the best placed one. */
  async ensureVolume(name: string, sizeGb: number): Promise<VolumeInfo> {
    const up = this.members.up();
    if (!up.length) throw this.placer.noRunner();
    const m = (await this.placer.volumeHolders([name], up)).get(name) ?? this.best(up);
    return this.call(m, (d) => d.ensureVolume(name, sizeGb));
  }
  async listVolumes(): Promise<VolumeInfo[]> {
    return (await this.settled((d) => d.listVolumes())).flat();
  }
  /** On the runner that has it; `unavailable` when none that answers has it and one does not answer. */
  async deleteVolume(name: string): Promise<void> {
    const m = (await this.placer.volumeHolders([name], this.members.up())).get(name);
    if (m) return this.call(m, (d) => d.deleteVolume(name));
    if (this.members.members().some((x) => !x.up))
      throw new SandboxdError(
        'unavailable',
        `Volume ${name} is on none of the runners that answer; ${this.placer.silent()}`,
      );
    throw new SandboxdError('not_found', `Volume ${name} not found`);
  }

  /** The warm pools of the runners that answer, summed by image. */
  warmPool(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const m of this.members.up())
      for (const [image, n] of Object.entries(m.health?.warmPool ?? {})) out[image] = (out[image] ?? 0) + n;
    return out;
  }

  /**
   * The figures of the runner the next create would go to (see `bestCapacity`), from the last
   * health answers (no call). 503 `unavailable` when no runner answers.
   */
  async capacity(): Promise<RuntimeCapacity> {
    const up = this.members.up().filter((m) => m.health);
    if (!up.length) throw this.placer.noRunner();
    return bestCapacity(
      up.map((m) => m.candidate('')),
      this.o.floors,
    );
  }

  /** Every runner that answers is listed (bounded wait each); the rest are reported absent with how long they have been silent. */
  survey(): Promise<RuntimeSurvey> {
    return surveyRunners(this.members, (m, e) => this.unreachable(m, e));
  }

  async close(): Promise<void> {
    this.watch?.stop();
    await this.members.close();
  }

  // --- routing

  /** Runs `fn` on the runner of sandbox `id`. */
  private async on<T>(id: string, fn: (d: RunnerDriver) => Promise<T>): Promise<T> {
    const node = this.homes.get(id);
    return this.call(node ? await this.usable(node, id) : await this.locate(id), fn);
  }

  /** Runs `fn` on `m`; a failure to answer takes `m` out of use until its health check answers. */
  private async call<T>(m: RunnerMember, fn: (d: RunnerDriver) => Promise<T>): Promise<T> {
    try {
      return await fn(m.driver);
    } catch (e) {
      this.unreachable(m, e);
      throw e;
    }
  }

  private unreachable(m: RunnerMember, e: unknown): void {
    if (isUnreachable(e)) this.members.failed(m, e);
  }

  /**
   * The member of `node` if it is up, else the 503 naming it. One that is down is checked
   * first (one check at a time, shared by every call waiting on it), so that a runner back
   * from a restart serves at once rather than at its next periodic check.
   */
  private async usable(node: string, id: string): Promise<RunnerMember> {
    const m = this.members.node(node);
    if (m?.up) return m;
    if (m && !m.removed && m.duplicateOf === null) {
      await this.members.recheck(m);
      if (m.up) return m;
    }
    throw m
      ? m.unavailable(`sandbox ${id} lives`)
      : new SandboxdError('unavailable', `Runner ${node}, where sandbox ${id} lives, is not among the runners`, {
          runner: node,
        });
  }

  /**
   * The runner of a sandbox not remembered: its record's; with none recorded (a record from
   * before runners were recorded), the runner that has it, which is then recorded.
   */
  private async locate(id: string): Promise<RunnerMember> {
    const node = await this.o.records.runnerOf(id);
    if (node) {
      this.remember(id, node);
      return await this.usable(node, id);
    }
    const up = this.members.up();
    const found = await Promise.all(
      up.map((m) =>
        m.driver.inspect(id).then(
          (s) => (s ? m : null),
          () => null,
        ),
      ),
    );
    const m = found.find((x) => x !== null);
    if (m) {
      this.remember(id, m.node!);
      await this.o.records
        .assign(id, m.node!)
        .catch((err) => this.o.log.warn({ err, sandboxId: id }, 'recording the runner of a sandbox failed'));
      return m;
    }
    if (this.members.members().some((x) => !x.up))
      throw new SandboxdError(
        'unavailable',
        `Sandbox ${id} is on none of the runners that answer; ${this.placer.silent()}`,
      );
    throw new SandboxdError('not_found', `sandbox ${id} not found`);
  }

  private remember(id: string, node: string): void {
    if (this.homes.size >= MAX_REMEMBERED) this.homes.clear();
    this.homes.set(id, node);
  }

  /** The best placed of `up` for a new volume. */
  private best(up: RunnerMember[]): RunnerMember {
    return [...up].sort((a, b) => a.candidate('').load - b.candidate('').load)[0];
  }

  /** `fn` on every runner that answers; the first failure (after all settled) is thrown. `unavailable` when none answers. */
  private async everyUp<T>(fn: (d: RunnerDriver) => Promise<T>): Promise<T[]> {
    const up = this.members.up();
    if (!up.length) throw this.placer.noRunner();
    const rs = await Promise.allSettled(up.map((m) => this.call(m, fn)));
    const failed = rs.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    return rs.map((r) => (r as PromiseFulfilledResult<T>).value);
  }

  /** `fn` on every runner that answers, bounded; the answers of those that did (failures are left out). */
  private async settled<T>(fn: (d: RunnerDriver) => Promise<T>): Promise<T[]> {
    const rs = await Promise.allSettled(
      this.members.up().map((m) => this.call(m, (d) => within(fn(d), LIST_TIMEOUT_MS, m.node!))),
    );
    return rs.filter((r) => r.status === 'fulfilled').map((r) => (r as PromiseFulfilledResult<T>).value);
  }
}

function hasVolume(e: SandboxdError): boolean {
  return typeof (e.details as { volume?: unknown } | undefined)?.volume === 'string';
}

function unique<T>(items: T[], key: (t: T) => string): T[] {
  const seen = new Map<string, T>();
  for (const i of items) if (!seen.has(key(i))) seen.set(key(i), i);
  return [...seen.values()];
}
