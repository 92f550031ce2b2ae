import { LIMITS, type PauseMemory, SandboxdError } from '@sandboxd/protocol';
import { billedMinutes, refundMinutes } from '../domain/billing.js';
import { hostFullError } from '../domain/capacity.js';
import { pausedLimitError } from '../domain/limits.js';
import { runStart, type SandboxRecord, type SandboxRecordState, wrongState } from '../domain/sandbox.js';
import { isOutOfSpace, outOfStorage } from '../domain/storage.js';
import type { AccountRecord } from '../store/store.js';
import type { CapacityService } from './capacity.js';
import { planOf, type ServiceDeps } from './context.js';
import type { SandboxService } from './sandboxes.js';
import type { StorageGuard } from './storage.js';
import { hasMemorySnapshots } from './isolation.js';
import { badRequest } from './sandbox-input.js';

/**
 * Pause, resume, stop and start of an account's sandboxes (decisions: Lifecycle additions).
 *
 * - pause: `started` -> `paused`. Every process is frozen (memory, connections and
 *   terminals kept, silent); the unused whole minutes of the run are refunded; counts toward
 *   the plan's `maxPaused` (403 `quota`); deleted `pausedRetentionMs` after it paused. With
 *   `memory: "disk"` (gVisor sandboxes) the runtime checkpoints it to disk instead; the
 *   record says where (`pausedMemory`).
 * - resume: `paused` -> `started`, with a new `stopAt` and a new reservation (402, 403 as
 *   create). The record changes first, so a crash before the thaw leaves a `started` record
 *   over a frozen sandbox, which the reconciler thaws.
 * - stop: `started`/`paused` -> `stopped`, the writable root layer kept until the record is
 *   purged or deleted.
 * - start: `stopped` -> `starting` (reserved like a create) -> `started` from the kept
 *   layer; a failure, or a crash (the reconciler), puts it back to `stopped`, refunded.
 */
export class LifecycleService {
  /** Ids whose start is in progress in this process; any other `starting` record was cut short by a crash. */
  private readonly startingHere = new Set<string>();

  constructor(
    private readonly d: ServiceDeps & {
      storage: Pick<StorageGuard, 'check'>;
      capacity: Pick<CapacityService, 'check' | 'forget'>;
    },
    private readonly sandboxes: Pick<SandboxService, 'get' | 'stop' | 'emitGone' | 'markLost' | 'exclusive'>,
  ) {}

  /** True while this process is starting sandbox `id` (the reconciler leaves it alone). */
  isStarting(id: string): boolean {
    return this.startingHere.has(id);
  }

  /**
   * `started` -> `paused`, its memory kept in RAM or (`memory: "disk"`, gVisor) on disk.
   * `not_found`, `conflict`, `quota`, `validation` (disk on a tier that cannot).
   */
  async pause(account: AccountRecord, id: string, opts: { memory?: PauseMemory } = {}): Promise<SandboxRecord> {
    await this.sandboxes.get(account.id, id);
    return this.sandboxes.exclusive(id, () => this.pauseNow(account, id, opts.memory ?? 'ram'));
  }

  private async pauseNow(account: AccountRecord, id: string, memory: PauseMemory): Promise<SandboxRecord> {
    const r = await this.sandboxes.get(account.id, id);
    if (r.state !== 'started') throw wrongState(r);
    if (memory === 'disk') {
      const isolation = r.isolation ?? 'container';
      if (isolation !== 'gvisor')
        throw badRequest(
          `memory "disk" needs a gvisor sandbox; this sandbox's isolation is ${isolation} (it pauses in RAM only)`,
          '/memory',
          { isolation },
        );
      if (!hasMemorySnapshots(this.d.driver, isolation))
        throw badRequest(
          'This host keeps no memory snapshots of gvisor sandboxes: it pauses them in RAM only',
          '/memory',
          {
            isolation,
          },
        );
    }
    return this.pauseRecord(r, planOf(this.d.config, account.plan), 'paused', memory);
  }

  /** Pauses a started record (API, E2B, or the reaper at `stopAt`, which keeps memory in RAM). */
  async pauseRecord(
    r: SandboxRecord,
    plan: ReturnType<typeof planOf>,
    reason = 'paused',
    memory: PauseMemory = 'ram',
  ): Promise<SandboxRecord> {
    // Checked before the freeze too, so that a refused pause never freezes anything.
    const paused = await this.d.store.countPaused(r.accountId);
    if (paused >= plan.maxPaused) throw pausedLimitError(plan.maxPaused);
    await this.d.driver.pause(r.id, memory === 'disk' ? { memory } : undefined);
    const at = this.d.clock.now();
    const refund = refundMinutes(r.reservedMinutes, { createdAt: runStart(r), at: Math.min(at, r.stopAt) });
    try {
      const out = await this.d.store.updateSandbox(r.id, {
        state: 'paused',
        stopAt: Math.min(at, r.stopAt),
        expiresAt: at + plan.pausedRetentionMs,
        details: { reason },
        ledgerDelta: refund,
        ledgerReason: 'sandbox.refund',
        expectStates: ['started'],
        limits: { maxPaused: plan.maxPaused },
        pausedMemory: memory,
        at,
      });
      this.d.log.info({ sandboxId: r.id, refund, reason, memory }, 'sandbox paused');
      return out;
    } catch (e) {
      await this.d.driver
        .resume(r.id)
        .catch((err) => this.d.log.warn({ err, sandboxId: r.id }, 'thaw after refused pause'));
      throw e;
    }
  }

  /** `paused` -> `started` with `stopAt = now + timeoutMs`. `not_found`, `conflict`, `validation`, `tokens`, `concurrency`. */
  async resume(account: AccountRecord, id: string, timeoutMs?: number): Promise<SandboxRecord> {
    await this.sandboxes.get(account.id, id);
    return this.sandboxes.exclusive(id, () => this.resumeNow(account, id, timeoutMs));
  }

  private async resumeNow(account: AccountRecord, id: string, timeoutMs?: number): Promise<SandboxRecord> {
    const r = await this.sandboxes.get(account.id, id);
    if (r.state !== 'paused') throw wrongState(r);
    const plan = planOf(this.d.config, account.plan);
    const t = this.lifetime(account, timeoutMs);
    const at = this.d.clock.now();
    const minutes = billedMinutes(t);
    const out = await this.d.store.updateSandbox(r.id, {
      state: 'started',
      stopAt: at + t,
      runStartedAt: at,
      expiresAt: null,
      details: null,
      ledgerDelta: -minutes,
      ledgerReason: 'sandbox.resume',
      reservedMinutes: minutes,
      expectStates: ['paused'],
      limits: { concurrency: plan.concurrency, maxSandboxes: this.d.config.maxSandboxes },
      at,
    });
    /** The record back to `paused` as it was, the run's minutes refunded. */
    const backToPaused = () =>
      this.d.store
        .updateSandbox(r.id, {
          state: 'paused',
          stopAt: r.stopAt,
          ...(r.runStartedAt !== undefined ? { runStartedAt: r.runStartedAt } : {}),
          expiresAt: r.expiresAt ?? null,
          details: r.details ?? null,
          pausedMemory: r.pausedMemory ?? null,
          ledgerDelta: minutes,
          ledgerReason: 'sandbox.refund',
          reservedMinutes: r.reservedMinutes,
          expectStates: ['started'],
          at: this.d.clock.now(),
        })
        .catch((err) => this.d.log.warn({ err, sandboxId: r.id }, 'resume: putting the record back to paused'));
    try {
      await this.d.driver.resume(r.id);
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'unavailable') {
        // The runner did not answer, or went away before it did: the sandbox is there, frozen
        // (or thawed by a call whose answer was lost; a thaw again is a no-op). The record goes
        // back to `paused` as it was, and the caller may retry (503).
        this.d.log.warn({ err: e, sandboxId: r.id }, 'resume: runner unavailable; left paused');
        await backToPaused();
        throw e;
      }
      // A restore from disk that failed keeps its checkpoint: the sandbox is still paused to
      // disk, and a resume may be tried again. Nothing is lost, so it is not marked lost.
      const still = r.pausedMemory === 'disk' ? await this.d.driver.inspect(r.id).catch(() => null) : null;
      if (still?.state === 'paused' && still.pausedMemory === 'disk') {
        this.d.log.error({ err: e, sandboxId: r.id }, 'resume from disk failed; left paused to disk');
        await backToPaused();
        throw new SandboxdError(
          'internal',
          'The runtime could not restore the sandbox from disk: it stays paused to disk, and resume may be tried again',
          { sandboxId: r.id },
        );
      }
      // A paused sandbox that cannot be thawed is gone (its cgroup with it).
      this.d.log.error({ err: e, sandboxId: r.id }, 'resume failed');
      await this.sandboxes.markLost(out, `resume failed: ${(e as Error).message}`, { fullRefund: true });
      throw new SandboxdError('internal', 'The runtime failed to resume the sandbox', { sandboxId: r.id });
    }
    this.d.log.info({ sandboxId: r.id, stopAt: new Date(out.stopAt).toISOString() }, 'sandbox resumed');
    return out;
  }

  /** `started`/`paused` -> `stopped`, keeping the root layer. `not_found`, `conflict`. */
  async stop(account: AccountRecord, id: string): Promise<SandboxRecord> {
    await this.sandboxes.get(account.id, id);
    return this.sandboxes.exclusive(id, () => this.stopNow(account, id));
  }

  private async stopNow(account: AccountRecord, id: string): Promise<SandboxRecord> {
    const r = await this.sandboxes.get(account.id, id);
    if (r.state !== 'started' && r.state !== 'paused') throw wrongState(r);
    const out = await this.sandboxes.stop(r, { reason: 'stopped' });
    if (!out) throw wrongState((await this.sandboxes.get(account.id, id).catch(() => null)) ?? { state: 'stopped' });
    return out;
  }

  /**
   * `stopped` -> `started` from its kept root layer, with `stopAt = now + timeoutMs`.
   * `not_found`, `conflict` (not stopped, or stopped with no layer kept), `validation`,
   * `tokens`, `concurrency`, `capacity`, `insufficient_storage`.
   */
  async start(account: AccountRecord, id: string, timeoutMs?: number): Promise<SandboxRecord> {
    await this.sandboxes.get(account.id, id);
    return this.sandboxes.exclusive(id, () => this.startNow(account, id, timeoutMs));
  }

  private async startNow(account: AccountRecord, id: string, timeoutMs?: number): Promise<SandboxRecord> {
    const r = await this.sandboxes.get(account.id, id);
    if (r.state !== 'stopped') throw wrongState(r);
    const plan = planOf(this.d.config, account.plan);
    const t = this.lifetime(account, timeoutMs);
    const kept = await this.d.driver.inspect(r.id);
    if (!kept)
      throw new SandboxdError('conflict', 'Sandbox is stopped and kept no root layer to start from', {
        state: 'stopped',
      });
    await this.d.storage.check();
    await this.d.capacity.check();
    const at = this.d.clock.now();
    const minutes = billedMinutes(t);
    this.startingHere.add(r.id);
    try {
      const starting = await this.d.store.updateSandbox(r.id, {
        state: 'starting',
        stopAt: at + t,
        runStartedAt: at,
        endedAt: null,
        details: { owner: this.d.presence.id },
        ledgerDelta: -minutes,
        ledgerReason: 'sandbox.start',
        reservedMinutes: minutes,
        expectStates: ['stopped'],
        limits: { concurrency: plan.concurrency, maxSandboxes: this.d.config.maxSandboxes },
        at,
      });
      try {
        await this.d.driver.start(r.id, { limits: plan.limits });
      } catch (e) {
        await this.backToStopped(starting, e);
        if (isOutOfSpace(e)) throw outOfStorage();
        const full = e instanceof SandboxdError && e.kind === 'capacity' ? e : hostFullError(e);
        if (full) {
          this.d.capacity.forget();
          throw full;
        }
        if (e instanceof SandboxdError && e.kind !== 'internal') throw e;
        throw new SandboxdError('internal', 'The runtime failed to start the sandbox', { sandboxId: r.id });
      }
      const out = await this.d.store.updateSandbox(r.id, {
        state: 'started',
        details: null,
        expectStates: ['starting'],
        at: this.d.clock.now(),
      });
      this.d.log.info({ sandboxId: r.id, stopAt: new Date(out.stopAt).toISOString() }, 'sandbox started again');
      return out;
    } finally {
      this.startingHere.delete(r.id);
    }
  }

  /**
   * A start that did not finish (it failed, or a crash cut it short): whatever the runtime
   * booted is stopped again (the layer kept), the record goes back to `stopped` and the
   * run's reservation is refunded in full.
   */
  async backToStopped(r: SandboxRecord, cause: unknown): Promise<void> {
    this.d.log.warn({ err: cause, sandboxId: r.id }, 'sandbox start failed; back to stopped');
    await this.d.driver.stop(r.id).catch((err) => this.d.log.warn({ err, sandboxId: r.id }, 'stop after failed start'));
    const at = this.d.clock.now();
    await this.d.store.updateSandbox(r.id, {
      state: 'stopped',
      endedAt: at,
      stopAt: at,
      details: { reason: 'start_failed', message: cause instanceof Error ? cause.message : String(cause) },
      ledgerDelta: r.reservedMinutes,
      ledgerReason: 'sandbox.refund',
      reservedMinutes: 0,
      expectStates: ['starting'],
      at,
    });
  }

  /** The lifetime of a new run: `timeoutMs` or the default, within the plan (400 naming the largest allowed). */
  private lifetime(account: AccountRecord, timeoutMs: number | undefined): number {
    const plan = planOf(this.d.config, account.plan);
    const t = timeoutMs ?? Math.min(LIMITS.defaultTimeoutMs, plan.maxLifetimeMs);
    if (t > plan.maxLifetimeMs) {
      const message = `timeoutMs must be at most ${plan.maxLifetimeMs} on plan ${account.plan}`;
      throw new SandboxdError('validation', message, [
        { in: 'body', path: '/timeoutMs', message, max: plan.maxLifetimeMs },
      ]);
    }
    return t;
  }
}

/** States a snapshot can be taken in. */
export const SNAPSHOTTABLE: readonly SandboxRecordState[] = ['started', 'paused', 'stopped'];
