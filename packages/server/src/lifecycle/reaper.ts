import { SandboxdError } from '@sandboxd/protocol';
import { planOf, type ServiceDeps } from '../services/context.js';
import type { LifecycleService } from '../services/lifecycle.js';
import type { SandboxService } from '../services/sandboxes.js';
import type { SandboxRecord } from '../domain/sandbox.js';
import type { Presence } from './presence.js';
import type { Store } from '../store/store.js';

/** What one reconcile pass repaired. */
export interface ReconcileReport {
  /** Records past `stopAt` that were stopped (or paused). */
  expired: string[];
  /** Records whose runtime state a crash left out of step, brought back in step (thawed, frozen, stopped). */
  aligned: string[];
  /** Started records the runtime no longer had: now `error`. */
  lost: string[];
  /** Records left in `creating` by a crash, or by a failed create the store could not record: now `error`, refunded, new volumes they did not get to make forgotten. */
  abandoned: string[];
  /** Runtime sandboxes with no live record: deleted from the runtime. */
  orphans: string[];
}

/** The lease that makes one server the reaper among those sharing a database. */
export const REAPER_LEASE = 'reaper';

const PURGE_EVERY_MS = 10_000;
/** Ended records purged per pass (each one's kept root layer is removed with it). */
const PURGE_BATCH = 200;
const RETRY_AFTER_FAILURE_MS = 5_000;

/**
 * The lifecycle loop (list, compare, repair) with an injected clock. `tick()` stops every
 * started sandbox whose `stopAt` has passed and purges records that ended more than
 * `stoppedRetentionMs` ago; `reconcile()` compares the store with `driver.list()` and
 * repairs what a crash or a runtime failure left behind. `start()` runs both on timers.
 *
 * With a shared database (`SANDBOXD_DATABASE_URL`), servers reap one at a time: each pass
 * first takes or renews the store's lease {@link REAPER_LEASE} for `reaperLeaseMs`, and a
 * server that another holds it from skips the pass (nothing listed, nothing logged). The
 * holder renews it every tick (<= 1 s); one that dies is replaced once its lease runs out,
 * within `reaperLeaseMs`; `stop()` gives it up so that another takes it at once. On
 * SQLite (one process) there is no lease: the process always reaps.
 */
export class Reaper {
  private tickTimer: NodeJS.Timeout | null = null;
  private reconcileTimer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> = Promise.resolve();
  private timerTickBusy = false;
  private lastPurge = Number.NEGATIVE_INFINITY;
  private readonly failedUntil = new Map<string, number>();
  /** This process's name on the lease: its presence's id (host, pid and a random part). */
  get leaseHolder(): string {
    return this.d.presence.id;
  }
  /** Whether the last pass held the lease (log lines on changes only). */
  private holding = false;
  /** The lease's end as last taken or renewed (this process's clock). */
  private leaseUntil = Number.NEGATIVE_INFINITY;
  private nudged = false;

  constructor(
    private readonly d: ServiceDeps,
    private readonly sandboxes: Pick<
      SandboxService,
      'isCreating' | 'wasRefused' | 'stop' | 'markLost' | 'dropNewVolumes' | 'emitGone' | 'exclusive'
    >,
    private readonly lifecycle: Pick<LifecycleService, 'isStarting' | 'pauseRecord' | 'backToStopped'>,
  ) {}

  /** Starts the timers (unref'd: they never keep the process alive). */
  start(): void {
    if (this.tickTimer) return;
    this.tickTimer = setInterval(() => {
      if (this.timerTickBusy) return; // a slow pass must not pile up more passes
      this.timerTickBusy = true;
      this.tick()
        .catch((err) => this.d.log.error({ err }, 'reaper tick failed'))
        .finally(() => (this.timerTickBusy = false));
    }, this.d.config.reaperIntervalMs).unref();
    this.reconcileTimer = setInterval(() => {
      this.reconcile().catch((err) => this.d.log.error({ err }, 'reconcile failed'));
    }, this.d.config.reconcileIntervalMs).unref();
  }

  /**
   * Asks for a reconcile pass soon, while the timers run (a runner stopped answering, has
   * been silent for `runnerDownMs`, or answers again); asks made before it begins are one.
   */
  nudge(): void {
    if (!this.reconcileTimer || this.nudged) return;
    this.nudged = true;
    setImmediate(() => {
      this.nudged = false;
      this.reconcile().catch((err) => this.d.log.error({ err }, 'reconcile failed'));
    });
  }

  /** Stops the timers, waits for a pass in progress and gives the lease up (when it has one). */
  async stop(): Promise<void> {
    if (this.tickTimer) clearInterval(this.tickTimer);
    if (this.reconcileTimer) clearInterval(this.reconcileTimer);
    this.tickTimer = this.reconcileTimer = null;
    await this.running.catch(() => {});
    if (this.shared && this.holding) {
      this.holding = false;
      this.leaseUntil = Number.NEGATIVE_INFINITY;
      await this.d.store
        .releaseLease(REAPER_LEASE, this.leaseHolder)
        .then(() => this.d.log.info({ holder: this.leaseHolder }, 'reaper lease released'))
        .catch((err) => this.d.log.warn({ err }, 'releasing the reaper lease failed; it runs out by itself'));
    }
  }

  /** Servers share the database (PostgreSQL): passes need the lease. */
  private get shared(): boolean {
    return Boolean(this.d.config.databaseUrl);
  }

  /**
   * Takes or renews the reaper lease; true when this process holds it (always without a
   * shared database). Logs when it is taken or lost, never on a pass that simply skips.
   */
  async holdLease(): Promise<boolean> {
    if (!this.shared) return true;
    const now = this.d.clock.now();
    const ttl = this.d.config.reaperLeaseMs;
    let got: Awaited<ReturnType<Store['acquireLease']>>;
    try {
      got = await this.d.store.acquireLease(REAPER_LEASE, this.leaseHolder, ttl, now);
    } catch (err) {
      // Not known to be ours any more: no pass until the database answers again.
      if (this.holding) this.d.log.warn({ err }, 'reaper lease could not be renewed; not reaping until it is');
      this.holding = false;
      throw err;
    }
    if (got.held && !this.holding)
      this.d.log.info({ holder: this.leaseHolder }, 'reaper lease taken: this server reaps');
    if (!got.held && this.holding)
      this.d.log.warn({ holder: got.holder, expiresAt: got.expiresAt }, 'reaper lease lost to another server');
    this.holding = got.held;
    this.leaseUntil = got.held ? got.expiresAt : Number.NEGATIVE_INFINITY;
    return got.held;
  }

  /**
   * Within a long pass: renews the lease once a third of its time has gone, so that a pass
   * that outlasts it does not lose it; false when it is no longer this process's.
   */
  private async keepLease(): Promise<boolean> {
    if (!this.shared) return true;
    if (this.d.clock.now() < this.leaseUntil - (this.d.config.reaperLeaseMs * 2) / 3) return true;
    return this.holdLease();
  }

  /** One expiry + purge pass; passes never overlap. Returns the ids stopped (none when another server holds the lease). */
  tick(): Promise<string[]> {
    return this.serial(async () => {
      await this.d.presence.beat().catch((err) => this.d.log.warn({ err }, 'presence lease could not be renewed'));
      if (!(await this.holdLease())) return [];
      const now = this.d.clock.now();
      const stopped: string[] = [];
      for (const r of await this.d.store.listExpired(now)) {
        if ((this.failedUntil.get(r.id) ?? 0) > now) continue;
        if (!(await this.keepLease())) return stopped;
        if (await this.stopOne(r, 'timeout')) stopped.push(r.id);
      }
      for (const r of await this.d.store.listPausedExpired(now)) {
        if ((this.failedUntil.get(r.id) ?? 0) > now) continue;
        if (!(await this.keepLease())) return stopped;
        await this.removeOne(r, 'paused retention ended');
      }
      if (now - this.lastPurge >= PURGE_EVERY_MS) {
        this.lastPurge = now;
        let purged = 0;
        for (const r of await this.d.store.listEnded(now - this.d.config.stoppedRetentionMs, PURGE_BATCH)) {
          if (!(await this.keepLease())) break;
          if (await this.removeOne(r, 'retention ended')) purged++;
        }
        if (purged) this.d.log.info({ purged }, 'purged ended sandbox records');
      }
      return stopped;
    });
  }

  /**
   * Compares live records with the runtime and repairs. Records still in `creating` whose
   * create is in progress neither here nor on another server that still runs (the owner the
   * record names, {@link Presence}) never answered 201: they are removed from the runtime and
   * marked `error` with a full refund; `starting` ones likewise go back to `stopped`.
   * At `startup` only sandboxes the runtime lists are deleted from it: the driver's
   * `recover()` already removes everything else it found (in the background, so that the
   * start does not wait for it). A server that another holds the reaper lease from repairs
   * nothing (an empty report), at start-up too.
   */
  reconcile(opts: { startup?: boolean } = {}): Promise<ReconcileReport> {
    return this.serial(async () => {
      const report: ReconcileReport = { expired: [], aligned: [], lost: [], abandoned: [], orphans: [] };
      if (!(await this.holdLease())) return report;
      const records = await this.d.store.listSandboxesByState(['creating', 'started', 'paused', 'starting']);
      const survey = this.d.driver.survey
        ? await this.d.driver.survey()
        : { sandboxes: await this.d.driver.list(), absent: () => null };
      const runtime = new Map(survey.sandboxes.map((s) => [s.id, s]));
      const now = this.d.clock.now();
      const abandoned: SandboxRecord[] = [];
      let lost = false; // the lease, to another server, amid a long pass: the rest is its
      for (const r of records) {
        if (!(await this.keepLease())) {
          lost = true;
          break;
        }
        if (r.state === 'creating') {
          // Checked in this order: once a create is over, its record no longer changes.
          if (this.sandboxes.isCreating(r.id) || (await this.d.store.getSandbox(r.id))?.state !== 'creating') continue;
          if (await this.ownerAtWork(r)) continue; // another server's create, in progress
          if (!opts.startup || runtime.has(r.id))
            await this.d.driver
              .delete(r.id)
              .catch((err) => this.d.log.warn({ err, sandboxId: r.id }, 'delete abandoned'));
          const why = opts.startup
            ? 'the server stopped while the sandbox was being created'
            : 'the sandbox could not be created';
          await this.sandboxes.markLost(r, why, { fullRefund: true, remove: this.sandboxes.wasRefused(r.id) });
          abandoned.push(r);
          report.abandoned.push(r.id);
        } else if (r.state === 'starting') {
          // A start a crash cut short: back to stopped, refunded (whatever it booted is stopped again).
          if (this.lifecycle.isStarting(r.id) || (await this.d.store.getSandbox(r.id))?.state !== 'starting') continue;
          if (await this.ownerAtWork(r)) continue;
          await this.lifecycle
            .backToStopped(r, new Error('the server stopped while the sandbox was being started'))
            .catch((err) => this.d.log.warn({ err, sandboxId: r.id }, 'settling an interrupted start'));
          report.aligned.push(r.id);
        } else if (!runtime.has(r.id) && survey.absent(r.runner ?? null)) {
          // Its runner did not answer the listing: gone only once it has been silent for runnerDownMs.
          const away = survey.absent(r.runner ?? null)!;
          if (away.forMs < this.d.config.runnerDownMs || (r.state !== 'started' && r.state !== 'paused')) continue;
          const message = `runner ${away.host} has not answered for ${Math.round(away.forMs / 1000)} s: ${away.reason}`;
          await this.sandboxes.markLost(r, message, { details: { reason: 'runner_down', runner: away.host } });
          report.lost.push(r.id);
        } else if (runtime.get(r.id)?.state === 'stopped' && typeof r.details?.stopping === 'string') {
          // A stop a crash cut short between the runtime's stop and the record's: finished.
          if (await this.stopOne(r, r.details.stopping)) report.aligned.push(r.id);
        } else if (!runtime.has(r.id) && r.details?.stopping === 'deleted') {
          // A delete cut short (a crash, the database gone) between the runtime's part and the
          // record's: finished as the delete it was (record removed, unused minutes refunded).
          if (await this.finishDelete(r)) report.aligned.push(r.id);
        } else if (r.state === 'paused' && runtime.get(r.id)?.state === 'running') {
          // A refused pause whose thaw went through, or a resume the record did not see: frozen again.
          await this.d.driver
            .pause(r.id)
            .then(() => report.aligned.push(r.id))
            .catch((err) => this.d.log.warn({ err, sandboxId: r.id }, 'freezing a paused sandbox'));
        } else if (r.state === 'started' && runtime.get(r.id)?.state === 'paused') {
          // A pause cut short before its record, a resume cut short after it, or a snapshot's freeze: thawed.
          await this.d.driver
            .resume(r.id)
            .then(() => report.aligned.push(r.id))
            .catch((err) => this.d.log.warn({ err, sandboxId: r.id }, 'thawing a started sandbox'));
        } else if (r.state === 'started' && r.stopAt <= now) {
          if (await this.stopOne(r, 'timeout')) report.expired.push(r.id);
        } else if (!['running', 'paused'].includes(runtime.get(r.id)?.state ?? 'gone')) {
          // Not while a lifecycle call is in flight: a pause to disk shows the sandbox stopped
          // in the runtime until its record says paused. Checked again once it is done.
          if (!(await this.stillLost(r))) continue;
          if (!opts.startup || runtime.has(r.id))
            await this.d.driver.delete(r.id).catch((err) => this.d.log.warn({ err, sandboxId: r.id }, 'delete lost'));
          await this.sandboxes.markLost(r, 'the runtime lost the sandbox');
          report.lost.push(r.id);
        }
      }
      // Once none of them is live any more, so that two abandoned creates of one new volume let it go.
      for (const r of abandoned)
        await this.sandboxes
          .dropNewVolumes(r)
          .catch((err) => this.d.log.warn({ err, sandboxId: r.id }, 'volumes of an abandoned create'));
      const known = new Set(records.map((r) => r.id));
      for (const id of lost ? [] : runtime.keys()) {
        if (known.has(id)) continue;
        const rec = await this.d.store.getSandbox(id); // a create may have begun since the listing
        // A stopped record keeps its root layer in the runtime for a later start.
        if (rec && rec.state !== 'error') continue;
        await this.d.driver.delete(id).catch((err) => this.d.log.warn({ err, sandboxId: id }, 'delete orphan'));
        report.orphans.push(id);
      }
      if (
        report.expired.length +
        report.aligned.length +
        report.lost.length +
        report.abandoned.length +
        report.orphans.length
      ) {
        this.d.log.info(report, 'reconciled store with runtime');
      }
      return report;
    });
  }

  /**
   * Whether started or paused record `r` is still lost once its sandbox's lifecycle lock is
   * free: its record unchanged and the runtime showing it neither running nor paused (an
   * answer the runtime could not give is not "lost").
   */
  private stillLost(r: SandboxRecord): Promise<boolean> {
    return this.sandboxes.exclusive(r.id, async () => {
      const now = await this.d.store.getSandbox(r.id);
      if (!now || now.state !== r.state) return false;
      const rt = await this.d.driver.inspect(r.id).catch(() => undefined);
      return rt !== undefined && !['running', 'paused'].includes(rt?.state ?? 'gone');
    });
  }

  /**
   * Deletes a sandbox whose record's time is over (a paused one past its retention, an
   * ended one past `stoppedRetentionMs`): the runtime's part (processes, kept memory or
   * root layer; volumes kept), then the record.
   */
  /**
   * A record of work in progress (`creating`, `starting`) whose owner, another server on the
   * database, still runs: not abandoned, whatever this process knows of it.
   */
  private async ownerAtWork(r: SandboxRecord): Promise<boolean> {
    const owner = r.details?.owner;
    return owner !== this.d.presence.id && (await this.d.presence.alive(owner));
  }

  private removeOne(r: SandboxRecord, why: string): Promise<boolean> {
    return this.sandboxes.exclusive(r.id, () => this.removeNow(r, why));
  }

  private async removeNow(r: SandboxRecord, why: string): Promise<boolean> {
    // Changed since it was listed (resumed, started): not this pass's to remove.
    const cur = await this.d.store.getSandbox(r.id);
    if (!cur || cur.state !== r.state) return false;
    try {
      await this.d.driver.delete(r.id).catch((e) => {
        // An ended sandbox whose runner does not answer: the record goes; the runner's part
        // is removed by reconcile once it answers (a sandbox with no record).
        if (!(isUnavailable(e) && (r.state === 'stopped' || r.state === 'error'))) throw e;
        this.d.log.info({ sandboxId: r.id, err: e.message }, 'purging the record; its runner removes the rest later');
      });
      await this.d.store.deleteSandbox(r.id);
      this.failedUntil.delete(r.id);
      this.d.log.info({ sandboxId: r.id, state: r.state, why }, 'sandbox deleted');
      if (r.state === 'paused') this.sandboxes.emitGone(r.id);
      return true;
    } catch (err) {
      this.failedUntil.set(r.id, this.d.clock.now() + RETRY_AFTER_FAILURE_MS);
      this.d.log.error({ err, sandboxId: r.id }, 'deleting a sandbox past its retention failed; will retry');
      return false;
    }
  }

  /** Finishes the delete of `listed` that its record began (see reconcile), once its lifecycle lock is free. */
  private finishDelete(listed: SandboxRecord): Promise<boolean> {
    return this.sandboxes.exclusive(listed.id, async () => {
      const r = await this.d.store.getSandbox(listed.id);
      if (!r || (r.state !== 'started' && r.state !== 'paused') || r.details?.stopping !== 'deleted') return false;
      try {
        const out = await this.sandboxes.stop(r, { reason: 'deleted', discard: true, remove: true });
        if (out) this.d.log.info({ sandboxId: r.id }, 'sandbox deleted (a delete cut short, finished)');
        return out !== null;
      } catch (err) {
        this.d.log.warn({ err, sandboxId: r.id }, 'finishing a delete cut short failed; tried again next pass');
        return false;
      }
    });
  }

  private stopOne(listed: SandboxRecord, reason: string): Promise<boolean> {
    return this.sandboxes.exclusive(listed.id, async () => {
      // Changed since it was listed (paused, stopped, deleted by a call): as it is now.
      const r = await this.d.store.getSandbox(listed.id);
      if (!r || (r.state !== 'started' && r.state !== 'paused')) return false;
      return this.stopNow(r, reason);
    });
  }

  private async stopNow(r: SandboxRecord, reason: string): Promise<boolean> {
    try {
      if (r.onTimeout === 'pause' && reason === 'timeout' && r.state === 'started') {
        const account = await this.d.store.getAccount(r.accountId);
        const plan = planOf(this.d.config, account?.plan ?? this.d.config.defaultPlan);
        const paused = await this.lifecycle.pauseRecord(r, plan, 'timeout').then(
          () => true,
          (err) => {
            // At the plan's maxPaused (or a freeze that failed): stopped instead, its layer kept.
            this.d.log.warn({ err, sandboxId: r.id }, 'pause at stopAt refused; stopping instead');
            return false;
          },
        );
        if (paused) {
          this.failedUntil.delete(r.id);
          return true;
        }
      }
      const out = await this.sandboxes.stop(r, { reason });
      this.failedUntil.delete(r.id);
      return out !== null;
    } catch (err) {
      this.failedUntil.set(r.id, this.d.clock.now() + RETRY_AFTER_FAILURE_MS);
      this.d.log.error({ err, sandboxId: r.id }, 'stopping an expired sandbox failed; will retry');
      return false;
    }
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.running.catch(() => {}).then(fn);
    this.running = p;
    return p;
  }
}

function isUnavailable(e: unknown): e is SandboxdError {
  return e instanceof SandboxdError && e.kind === 'unavailable';
}
