import {
  type Isolation,
  ISOLATIONS,
  LIMITS,
  SandboxdError,
  type SandboxCreate,
  type SandboxNetwork,
  type SandboxListQuery,
  secretEnvName,
} from '@sandboxd/protocol';
import { billedMinutes, refundMinutes } from '../domain/billing.js';
import { DRIVER_SNAPSHOT_PREFIX, driverImageOf, metadataProblems } from '../domain/snapshots.js';
import { newSandboxId } from '../domain/ids.js';
import { newSandboxName } from '../domain/names.js';
import {
  driverVolumeName,
  runStart,
  type MountRecord,
  type SandboxRecord,
  type SandboxRecordState,
  wrongState,
} from '../domain/sandbox.js';
import type { AccountRecord } from '../store/store.js';
import { planOf, type ServiceDeps } from './context.js';
import { LINK_PARAM, LINK_TTL, type PortLinks } from '../proxy/links.js';
import { isOutOfSpace, outOfStorage } from '../domain/storage.js';
import { hostFullError } from '../domain/capacity.js';
import { keyedLock } from '../domain/keyed-lock.js';
import { checkEgress, decideEgress } from '../domain/egress.js';
import type { CapacityService } from './capacity.js';
import { PLACEHOLDER_RE, SecretService } from './secrets.js';
import type { StorageGuard } from './storage.js';
import {
  badRequest,
  type CreateOptions,
  creatingRecord,
  envProblems,
  forkName,
  forkRecord,
  parseVolumes,
} from './sandbox-input.js';
import { createIsolation, hasMemorySnapshots, ISOLATION_LABEL, offeredTiers } from './isolation.js';
import type { IsolationSupport } from '../runtime/driver.js';
import { concurrencyLimitError } from '../domain/limits.js';
import { randomInt } from 'node:crypto';

export { type CreateOptions, envProblems } from './sandbox-input.js';

/**
 * Errors of `driver.create` that mean "the request was wrong", not "the runtime failed":
 * `upstream_timeout` is the image's own start (its ready check, its declared service) that
 * never became ready, which the create answers 504 leaving nothing behind.
 */
const CLIENT_KINDS = new Set(['template_not_found', 'validation', 'conflict', 'upstream_timeout']);

/** The 503 a failure of `driver.create` stands for when it means the host is full, else null. */
function hostFull(e: unknown): SandboxdError | null {
  if (e instanceof SandboxdError && e.kind === 'capacity') return e;
  if (e instanceof SandboxdError && CLIENT_KINDS.has(e.kind)) return null;
  return hostFullError(e);
}

/** Where a started sandbox runs, as the port proxy needs it. */
export interface SandboxLocation {
  accountId: string;
  portsPublic: boolean;
  /** IPv4 on the host's sandbox network. */
  address: string;
}

/**
 * Sandboxes of an account: create (atomic reservation, then the driver), list, get,
 * delete, stop. Another account's sandbox is `not_found`, exactly like a missing one.
 */
export class SandboxService {
  private readonly goneListeners: Array<(id: string) => void> = [];
  /** Ids whose create is in progress in this process; any other `creating` record is abandoned. */
  private readonly creating = new Set<string>();
  /** Refused creates whose record a failed store write left `creating` ({@link takeRefused}). */
  private readonly refused = new Set<string>();
  /**
   * One state change of a sandbox at a time (pause, resume, stop, start, snapshot, delete,
   * the reaper's): a pause must not be undone by the thaw that ends a snapshot's copy.
   */
  readonly exclusive = keyedLock();
  /**
   * `portLinks` signs the links of {@link portLink}; `storage` refuses creates (507) while
   * the data dir is nearly full; `capacity` refuses them (503) while the host has no room.
   */
  constructor(
    private readonly d: ServiceDeps & {
      portLinks: Pick<PortLinks, 'sign'>;
      storage: StorageGuard;
      capacity: Pick<CapacityService, 'check' | 'forget'>;
      /** Secret injection rules (`network.secrets`); absent: a create or update with rules is `unsupported`. */
      secrets?: SecretService;
    },
  ) {}

  /** The secrets service, or `unsupported` when the app has none. */
  private secretsOr(): SecretService {
    if (!this.d.secrets) throw new SandboxdError('unsupported', 'Secret injection is not available on this server');
    return this.d.secrets;
  }

  /** The isolation tiers the runtime offers now (`/healthz`). */
  isolations(): IsolationSupport[] {
    return offeredTiers(this.d.driver);
  }

  /** Whether sandbox `r` pauses to disk here (gVisor with memory snapshots): E2B's pause uses it then. */
  pausesToDisk(r: Pick<SandboxRecord, 'isolation'>): boolean {
    return r.isolation === 'gvisor' && hasMemorySnapshots(this.d.driver, 'gvisor');
  }

  /**
   * The tier an image of the account's own (a template it built, or a snapshot) names in its
   * `org.sandboxd.isolation` label, or undefined: no such label, a value that is no tier, or
   * any other image. Only the account's images are read: they are on the host already, so
   * looking never pulls (a pull here would be the operator's, past the account's pull policy).
   */
  async imageIsolation(accountId: string, image: string): Promise<Isolation | undefined> {
    try {
      const ref = await this.driverImage(accountId, image);
      if (!ref.startsWith(DRIVER_SNAPSHOT_PREFIX)) return undefined;
      const v = (await this.d.driver.resolveImage(ref)).labels?.[ISOLATION_LABEL];
      return (ISOLATIONS as readonly string[]).includes(v ?? '') ? (v as Isolation) : undefined;
    } catch {
      return undefined;
    }
  }

  /** True while this process is creating sandbox `id` (the reconciler leaves such records alone). */
  isCreating(id: string): boolean {
    return this.creating.has(id);
  }

  /** Registers a listener called when a sandbox stops or is removed (terminals close on it). */
  onGone(listener: (sandboxId: string) => void): void {
    this.goneListeners.push(listener);
  }

  /**
   * Creates a sandbox and resolves once it is started. Throws `validation` (400),
   * `tokens` (402), `concurrency` (403), `template_not_found` (404),
   * `conflict` (409, volume of another size, or role api: volumes on two runners),
   * `capacity` (503: the host, or every runner, has no room, by `maxSandboxes`, memory,
   * disk or addresses, or the runtime failed for lack of one), `unavailable` (503, role api:
   * no runner answers, or not the one its volumes live on), `insufficient_storage` (507),
   * `internal`. Tokens are refunded on failure; a create refused for the request, for
   * capacity, for an unreachable runner or for storage leaves no record, nor a record of a
   * volume it did not get to make (a 503 before the runtime is asked writes nothing at all).
   * `opts` are recorded with it (E2B's template and metadata).
   */
  async create(account: AccountRecord, req: SandboxCreate, opts: CreateOptions = {}): Promise<SandboxRecord> {
    const plan = planOf(this.d.config, account.plan);
    const timeoutMs = req.timeoutMs ?? LIMITS.defaultTimeoutMs;
    if (timeoutMs > plan.maxLifetimeMs) {
      throw badRequest(`timeoutMs must be at most ${plan.maxLifetimeMs} on plan ${account.plan}`, '/timeoutMs', {
        max: plan.maxLifetimeMs,
      });
    }
    const tooLong = [...envProblems(req.env, '/env'), ...metadataProblems(req.metadata, '/metadata')];
    if (tooLong.length)
      throw new SandboxdError('validation', tooLong.map((p) => `${p.path}: ${p.message}`).join('; '), tooLong);
    const isolation = createIsolation(req.isolation, {
      plan,
      planName: account.plan,
      instanceDefault: this.d.config.isolation,
      driver: this.d.driver,
    });
    req = { ...req, isolation };
    const { mounts, sizes } = parseVolumes(req.volumes ?? {});
    const egress = decideEgress(
      req.network ? checkEgress(req.network.egress, '/network/egress') : undefined,
      this.d.config.egress,
      plan.egress ?? 'internet',
    );
    // Secret injection rules: checked against the account's secrets, the egress and the env;
    // each secret's placeholder goes into the env (the values only ever to the driver).
    const rules = req.network?.secrets?.length
      ? await this.secretsOr().checkRules(account.id, req.network.secrets, {
          egress,
          base: '/network/secrets',
          env: req.env ?? {},
        })
      : [];
    req = {
      ...req,
      network: { egress, ...(rules.length ? { secrets: rules } : {}) },
      ...(rules.length ? { env: { ...req.env, ...SecretService.envOf(rules) } } : {}),
    };
    // An unknown snapshot or template: 404 before anything is reserved.
    if (opts.driverImage === undefined) await this.driverImage(account.id, req.image);
    await this.d.storage.check();
    await this.d.capacity.check();
    const id = newSandboxId();
    this.creating.add(id);
    try {
      return await this.createReserving(id, account, req, opts, plan, timeoutMs, mounts, sizes);
    } finally {
      this.creating.delete(id);
    }
  }

  private async createReserving(
    id: string,
    account: AccountRecord,
    req: SandboxCreate,
    opts: CreateOptions,
    plan: ReturnType<typeof planOf>,
    timeoutMs: number,
    mounts: MountRecord[],
    sizes: Array<{ name: string; sizeGb: number | null }>,
  ): Promise<SandboxRecord> {
    const now = this.d.clock.now();
    const record = await this.d.store.reserveSandbox(
      creatingRecord({
        id,
        accountId: account.id,
        req,
        opts,
        mounts,
        region: this.d.config.region,
        owner: this.d.presence.id,
        now,
        timeoutMs,
      }),
      {
        minutes: billedMinutes(timeoutMs),
        concurrency: plan.concurrency,
        maxSandboxes: this.d.config.maxSandboxes,
        volumes: sizes,
        newName: newSandboxName,
      },
    );
    const log = this.d.log.child({ sandboxId: record.id, accountId: account.id });
    const rules = record.network?.secrets;
    let resolved: Awaited<ReturnType<SecretService['resolve']>> | null = null;
    try {
      if (rules?.length) {
        this.secretsOr().noteOwner(record.id, account.id);
        resolved = await this.secretsOr().resolve(account.id, rules);
      }
      await this.d.driver.create({
        id: record.id,
        image: opts.driverImage ?? (await this.driverImage(account.id, record.image)),
        env: record.env,
        volumes: record.volumes.map((m) => ({
          name: driverVolumeName(account.id, m.name),
          mountPath: m.mountPath,
          sizeGb: m.sizeGb,
        })),
        limits: plan.limits,
        hostname: record.name,
        egress: record.network?.egress ?? 'none',
        ...(resolved ? { secrets: resolved.secrets } : {}),
        pullAs: { accountId: account.id, admin: account.admin },
        ...(opts.skipImageStart ? { skipImageStart: true } : {}),
        ...(record.isolation ? { isolation: record.isolation } : {}),
      });
    } catch (e) {
      await this.failCreate(record, e, log);
      if (isOutOfSpace(e)) throw outOfStorage();
      const full = hostFull(e);
      if (full) {
        this.d.capacity.forget();
        throw full;
      }
      throw e instanceof SandboxdError && e.kind !== 'internal'
        ? e
        : new SandboxdError('internal', 'The runtime failed to start the sandbox', { sandboxId: record.id });
    }
    let started: SandboxRecord;
    try {
      started = await this.d.store.updateSandbox(record.id, {
        state: 'started',
        details: null,
        expectStates: ['creating'],
        at: this.d.clock.now(),
      });
    } catch (e) {
      // Running, but not recorded (a full disk): the client hears of no sandbox, so none may stay.
      await this.failCreate(record, e, log);
      throw isOutOfSpace(e) ? outOfStorage() : e;
    }
    // A value changed while the runtime started it: it gets the new one now.
    if (resolved)
      await this.secretsOr()
        .afterCreate(started, resolved.versions)
        .catch((err) => log.warn({ err }, 'pushing changed secret values after create failed; tried again later'));
    log.info({ image: record.image, stopAt: new Date(started.stopAt).toISOString() }, 'sandbox started');
    return started;
  }

  /**
   * Undoes a create that will not answer 201: runtime pieces, tokens (refunded), the record
   * (kept as `error` when the runtime failed, removed when the request, the disk, a full
   * host or a runner that does not answer was at fault) and new volumes it did not get to make. When the store cannot record it (a full disk), the
   * record stays `creating` and the reconciler finishes the job once this create is over.
   */
  private async failCreate(record: SandboxRecord, e: unknown, log: ServiceDeps['log']): Promise<void> {
    const clientError = e instanceof SandboxdError && CLIENT_KINDS.has(e.kind);
    const noSpace = isOutOfSpace(e);
    const full = !noSpace && hostFull(e) !== null;
    // Role api: no runner answers, or the one it had to go to does not (a runner it reached
    // meanwhile deletes what it made once it answers again: the reconciler's orphans).
    const unreachable = e instanceof SandboxdError && e.kind === 'unavailable';
    if (clientError) log.info({ kind: (e as SandboxdError).kind }, 'sandbox create refused by runtime');
    else if (noSpace) log.warn({ err: e }, 'sandbox create failed: out of storage');
    else if (full) log.warn({ err: e }, 'sandbox create failed: the host is full');
    else if (unreachable) log.warn({ err: e }, 'sandbox create failed: its runner does not answer');
    else log.error({ err: e }, 'sandbox create failed');
    await this.d.driver.delete(record.id).catch((err) => log.warn({ err }, 'cleanup after failed create'));
    const at = this.d.clock.now();
    const details = { reason: 'create_failed', message: e instanceof Error ? e.message : String(e) };
    // Refused (the request, the host or its runner was at fault): refund and removal in one transaction.
    const remove = clientError || noSpace || full || unreachable;
    try {
      await this.d.store.updateSandbox(record.id, {
        state: 'error',
        endedAt: at,
        details,
        ledgerDelta: record.reservedMinutes,
        ledgerReason: 'sandbox.refund',
        expectStates: ['creating'],
        at,
        remove,
      });
      await this.dropNewVolumes(record);
    } catch (err) {
      if (remove) this.refused.add(record.id);
      log.error({ err }, 'recording a failed create failed; the reconciler will finish it');
    }
  }

  /**
   * Makes `count` new sandboxes of the account from started gVisor sandbox `id`: every
   * process and its memory, the root layer's files, and the source's image, env, metadata,
   * network (egress and secret rules, same placeholders), ports setting and onTimeout; each
   * with its own id, address and writable layer, named `<source name>-fork-<n>`, with a
   * fresh lifetime (`opts.timeoutMs`, E2B's; else the default timeout, at most the plan's
   * lifetime) billed as a create.
   * The account's concurrency limit and balance are checked for all `count` before anything
   * is made. Throws `not_found`, `conflict` (not started; volumes), `validation` (not
   * gVisor, or its tier keeps no memory snapshots here), `quota` (the plan no longer allows
   * gVisor), `concurrency`, `tokens`, `capacity`, `insufficient_storage`, `unsupported` (the
   * runtime cannot fork). On failure no fork is left, record or runtime, and the tokens are refunded.
   */
  async fork(
    account: AccountRecord,
    id: string,
    count: number,
    opts: { timeoutMs?: number } = {},
  ): Promise<SandboxRecord[]> {
    await this.get(account.id, id);
    return this.exclusive(id, () => this.forkNow(account, id, count, opts.timeoutMs));
  }

  private async forkNow(
    account: AccountRecord,
    id: string,
    count: number,
    askedTimeoutMs: number | undefined,
  ): Promise<SandboxRecord[]> {
    const src = await this.get(account.id, id);
    if (src.state !== 'started') throw wrongState(src);
    const isolation = src.isolation ?? 'container';
    if (isolation !== 'gvisor' || !hasMemorySnapshots(this.d.driver, isolation))
      throw new SandboxdError(
        'validation',
        isolation === 'gvisor'
          ? 'This host keeps no memory snapshots of gvisor sandboxes: it cannot fork them'
          : `Only gvisor sandboxes can be forked; this sandbox's isolation is ${isolation}`,
        { isolation },
      );
    if (src.volumes.length)
      throw new SandboxdError(
        'conflict',
        'A sandbox with volumes cannot be forked: a volume is mounted in one sandbox at a time',
        {
          volumes: src.volumes.map((m) => m.name),
        },
      );
    const fork = this.d.driver.fork?.bind(this.d.driver);
    if (!fork) throw new SandboxdError('unsupported', 'This runtime cannot fork sandboxes');
    const plan = planOf(this.d.config, account.plan);
    // The tier as create would decide it now (403 when the plan no longer allows it).
    createIsolation(isolation, {
      plan,
      planName: account.plan,
      instanceDefault: this.d.config.isolation,
      driver: this.d.driver,
    });
    if (askedTimeoutMs !== undefined && askedTimeoutMs > plan.maxLifetimeMs)
      throw badRequest(`timeout must be at most ${plan.maxLifetimeMs} ms on plan ${account.plan}`, '/timeoutMs', {
        max: plan.maxLifetimeMs,
      });
    const timeoutMs = askedTimeoutMs ?? Math.min(LIMITS.defaultTimeoutMs, plan.maxLifetimeMs);
    const minutes = billedMinutes(timeoutMs);
    // All N or none: the account's limit and balance for every fork, before anything is made.
    const live = await this.d.store.countLive(account.id);
    if (live + count > plan.concurrency) throw concurrencyLimitError(plan.concurrency);
    const balance = await this.d.store.balance(account.id);
    if (balance < count * minutes)
      throw new SandboxdError('tokens', `Insufficient tokens: ${count * minutes} needed, ${balance} available`, {
        required: count * minutes,
        balance,
      });
    await this.d.storage.check();
    await this.d.capacity.check();
    const log = this.d.log.child({ sandboxId: src.id, accountId: account.id });
    const reserved: SandboxRecord[] = [];
    const ids = Array.from({ length: count }, () => newSandboxId());
    for (const x of ids) this.creating.add(x);
    try {
      try {
        for (const [i, forkId] of ids.entries()) {
          const now = this.d.clock.now();
          const n = i + 1;
          reserved.push(
            await this.d.store.reserveSandbox(
              forkRecord({ src, id: forkId, n, owner: this.d.presence.id, now, timeoutMs }),
              {
                minutes,
                concurrency: plan.concurrency,
                maxSandboxes: this.d.config.maxSandboxes,
                volumes: [],
                // The account has that name (an earlier fork): the same with 4 random digits.
                newName: () => forkName(src.name, n, String(randomInt(1000, 10_000))),
              },
            ),
          );
        }
        if (src.network?.secrets?.length) for (const r of reserved) this.secretsOr().noteOwner(r.id, account.id);
        await fork(
          src.id,
          reserved.map((r) => ({ id: r.id, hostname: r.name })),
        );
      } catch (e) {
        await this.failFork(reserved, e, log);
        if (isOutOfSpace(e)) throw outOfStorage();
        const full = hostFull(e);
        if (full) {
          this.d.capacity.forget();
          throw full;
        }
        throw e instanceof SandboxdError && e.kind !== 'internal'
          ? e
          : new SandboxdError('internal', 'The runtime failed to fork the sandbox', { sandboxId: src.id });
      }
      const out: SandboxRecord[] = [];
      try {
        for (const r of reserved)
          out.push(
            await this.d.store.updateSandbox(r.id, {
              state: 'started',
              details: null,
              expectStates: ['creating'],
              at: this.d.clock.now(),
            }),
          );
      } catch (e) {
        await this.failFork(reserved, e, log);
        throw isOutOfSpace(e) ? outOfStorage() : e;
      }
      // The values as they are now (a value that changed since the source got it).
      if (src.network?.secrets?.length)
        await Promise.all(
          out.map((r) =>
            this.secretsOr()
              .pushSandbox(r.id)
              .catch((err) =>
                log.warn({ err, fork: r.id }, 'pushing secret values to a fork failed; tried again later'),
              ),
          ),
        );
      log.info({ forks: out.map((r) => r.id) }, 'sandbox forked');
      return out;
    } finally {
      for (const x of ids) this.creating.delete(x);
    }
  }

  /** Undoes a fork that will not answer 201: each fork's runtime part, its record (removed) and its tokens (refunded). */
  private async failFork(reserved: SandboxRecord[], e: unknown, log: ServiceDeps['log']): Promise<void> {
    if (e instanceof SandboxdError && CLIENT_KINDS.has(e.kind)) log.info({ kind: e.kind }, 'sandbox fork refused');
    else log.warn({ err: e }, 'sandbox fork failed');
    for (const r of reserved) {
      await this.d.driver.delete(r.id).catch((err) => log.warn({ err, fork: r.id }, 'cleanup after failed fork'));
      const at = this.d.clock.now();
      try {
        await this.d.store.updateSandbox(r.id, {
          state: 'error',
          endedAt: at,
          details: { reason: 'create_failed', message: e instanceof Error ? e.message : String(e) },
          ledgerDelta: r.reservedMinutes,
          ledgerReason: 'sandbox.refund',
          expectStates: ['creating', 'started'],
          at,
          remove: true,
        });
      } catch (err) {
        this.refused.add(r.id);
        log.error({ err, fork: r.id }, 'recording a failed fork failed; the reconciler will finish it');
      }
    }
  }

  /**
   * A create that was refused but whose record the store could not remove (a full disk):
   * the reconciler removes it ({@link markLost} with `remove`) instead of keeping it `error`.
   */
  wasRefused(id: string): boolean {
    return this.refused.has(id);
  }

  /**
   * Forgets the volumes the reservation of `record` made (a create that never answered 201)
   * when no disk was made for them and no live sandbox uses them: a volume that reached the
   * disk is kept, since a sandbox created meanwhile may have written to it.
   */
  async dropNewVolumes(record: SandboxRecord): Promise<void> {
    const names = [...new Set(record.volumes.map((m) => m.name))];
    if (!names.length) return;
    const onDisk = new Set((await this.d.driver.listVolumes()).map((v) => v.name));
    for (const name of names) {
      const v = await this.d.store.getVolume(record.accountId, name);
      if (!v || v.createdAt !== record.createdAt || onDisk.has(driverVolumeName(record.accountId, name))) continue;
      try {
        await this.d.store.deleteVolume(record.accountId, name);
      } catch (err) {
        if (!(err instanceof SandboxdError && err.kind === 'conflict')) throw err; // live again: kept
      }
    }
  }

  /**
   * The driver's reference of a create's `image`: `snapshots/<name>` is the account's own
   * snapshot (`template_not_found` when it has none of that name, or it is not ready),
   * `templates/<name>[:<tag>]` the account's own template (likewise); the driver's own
   * `snapshot/...` namespace is never reachable by name.
   */
  async driverImage(accountId: string, image: string): Promise<string> {
    const ref = await driverImageOf(
      image,
      {
        snapshot: (name) => this.d.store.getSnapshot(accountId, name),
        template: (name, tag) => this.d.store.getTemplate(accountId, name, tag),
      },
      accountId,
    );
    if (ref === null) throw new SandboxdError('template_not_found', 'Template not found', { image });
    return ref;
  }

  /**
   * Replaces the egress of a sandbox of this account (started, paused or stopped: a stopped
   * one gets it at its next start); new connections follow it once this resolves. Throws
   * `validation` (a bad rule, by its path), `quota` (403: beyond the plan), `not_found`,
   * `conflict` (error state, or a create or start in progress), `unsupported` (the runtime
   * cannot change it).
   */
  async updateNetwork(account: AccountRecord, id: string, network: SandboxNetwork): Promise<SandboxRecord> {
    const plan = planOf(this.d.config, account.plan);
    const egress = decideEgress(
      checkEgress(network.egress, '/egress'),
      this.d.config.egress,
      plan.egress ?? 'internet',
    );
    const setEgress = this.d.driver.setEgress?.bind(this.d.driver);
    if (!setEgress) throw new SandboxdError('unsupported', 'This runtime cannot change the network of a sandbox');
    return this.exclusive(id, async () => {
      const r = await this.get(account.id, id);
      if (!['started', 'paused', 'stopped'].includes(r.state)) throw wrongState(r);
      // Rules given replace the sandbox's; absent, its rules stay, checked against the new egress.
      const before = r.network?.secrets ?? [];
      const asked = network.secrets ?? before;
      // The environment is the create's: a secret whose rule went and comes back gets the
      // placeholder its variable still holds (the env is not checked: a PATCH sets none).
      const inEnv = asked.flatMap((x) => {
        const v = r.env[secretEnvName(x.secret)];
        return v !== undefined && PLACEHOLDER_RE.test(v) ? [{ ...x, placeholder: v }] : [];
      });
      const rules = asked.length
        ? await this.secretsOr().checkRules(account.id, asked, {
            egress,
            base: '/secrets',
            keep: [...inEnv, ...before],
            kept: network.secrets === undefined,
          })
        : [];
      await setEgress(id, egress);
      const out = await this.d.store.updateSandbox(id, {
        network: { egress, ...(rules.length ? { secrets: rules } : {}) },
        at: this.d.clock.now(),
      });
      if (rules.length || before.length) await this.secretsOr().pushSandbox(id, { throwOnFailure: true });
      return out;
    });
  }

  /** The sandbox of this account; `not_found` otherwise (also while it is being created). */
  async get(accountId: string, id: string): Promise<SandboxRecord> {
    const r = await this.d.store.getSandbox(id);
    if (!r || r.accountId !== accountId || r.state === 'creating')
      throw new SandboxdError('not_found', 'Sandbox not found');
    return r;
  }

  /**
   * A signed link to `port` of a started sandbox of this account, valid `expiresInMs`
   * (default 1 h): `<scheme>://<port>-<id>.<publicHost>/?sandboxd_token=...`. Opening it
   * sets a cookie for that host and redirects; it opens private ports and works on public
   * ones. `not_found`, `conflict` (not started).
   */
  async portLink(
    accountId: string,
    req: { id: string; port: number; expiresInMs?: number; scheme: 'http' | 'https' },
  ): Promise<{ url: string; expiresAt: number }> {
    const r = await this.get(accountId, req.id);
    if (r.state !== 'started') throw wrongState(r);
    const expiresAt = this.d.clock.now() + (req.expiresInMs ?? LINK_TTL.defaultMs);
    const token = this.d.portLinks.sign({ sandboxId: r.id, port: req.port, expiresAt });
    return {
      url: `${req.scheme}://${req.port}-${r.id}.${this.d.config.publicHost}/?${LINK_PARAM}=${token}`,
      expiresAt,
    };
  }

  /**
   * Where the port proxy finds a sandbox of any account (public ports are public; the
   * proxy decides access): its owner, whether its ports are public, and its address from
   * the runtime. Null unless the record is `started` and the runtime reports it running.
   */
  async locate(id: string): Promise<SandboxLocation | null> {
    const r = await this.d.store.getSandbox(id);
    if (r?.state !== 'started') return null;
    const rt = await this.d.driver.inspect(id);
    if (rt?.state !== 'running') return null;
    return { accountId: r.accountId, portsPublic: r.portsPublic !== false, address: rt.address };
  }

  /** How many sandbox records are in each state (for metrics). */
  countByState(): Promise<Record<string, number>> {
    return this.d.store.countByState();
  }

  /**
   * A page of the account's sandboxes, newest first (`starting` ones show as stopped);
   * `metadata.<key>=<value>` query pairs keep those whose metadata has every pair.
   */
  async list(accountId: string, q: SandboxListQuery) {
    const wanted: SandboxRecordState[] = q.state ? [q.state] : ['started', 'paused', 'stopped', 'error'];
    const states = wanted.includes('stopped') ? [...wanted, 'starting' as const] : wanted;
    const metadata: Record<string, string> = {};
    for (const [k, v] of Object.entries(q)) if (k.startsWith('metadata.')) metadata[k.slice(9)] = String(v);
    return this.d.store.listSandboxes(accountId, {
      states,
      limit: q.limit ?? LIMITS.defaultPageSize,
      cursor: q.cursor,
      ...(Object.keys(metadata).length ? { metadata } : {}),
    });
  }

  /** Kills the sandbox if running or paused, removes what it kept and its record. `not_found`, `conflict` (starting). */
  async delete(accountId: string, id: string): Promise<void> {
    await this.get(accountId, id);
    return this.exclusive(id, () => this.deleteNow(accountId, id));
  }

  private async deleteNow(accountId: string, id: string): Promise<void> {
    const r = await this.get(accountId, id);
    if (r.state === 'starting') throw new SandboxdError('conflict', 'Sandbox is starting', { state: 'starting' });
    // A running one: its refund and the record's removal in one transaction.
    const live = r.state === 'started' || r.state === 'paused';
    if (!live || !(await this.stop(r, { reason: 'deleted', discard: true, remove: true }))) {
      await this.d.driver.delete(r.id).catch((e) => {
        // A stopped or failed sandbox whose runner does not answer: the record goes now; the
        // runner's part is removed by the reconciler once it answers (a sandbox with no record).
        if (!(e instanceof SandboxdError && e.kind === 'unavailable')) throw e;
        this.d.log.warn({ sandboxId: r.id, err: e.message }, 'deleting the record; its runner removes the rest later');
      });
      await this.d.store.deleteSandbox(r.id);
    }
    this.d.log.info({ sandboxId: r.id }, 'sandbox deleted');
    this.emitGone(r.id);
  }

  /**
   * Stops a started or paused sandbox: every process is killed, the driver keeps its
   * writable root layer for a later start (unless `discard`: it is removed, volumes kept),
   * the record becomes `stopped` and unused whole minutes of the run are refunded (a paused
   * one had them refunded when it paused). A sandbox already stopped by someone else is
   * left as is (null). Driver failures propagate and leave the record's state as it was
   * (its details note the stop or delete begun). With `remove` (a delete), the record is
   * removed in the transaction that refunds. 503 `unavailable`, nothing changed, when the
   * database cannot be reached.
   */
  async stop(
    r: SandboxRecord,
    opts: { reason: string; discard?: boolean; remove?: boolean },
  ): Promise<SandboxRecord | null> {
    // The intent first: a crash, or a database that went away, between the runtime's part and
    // the record's is finished by the reconciler as what it was (a stop; a delete), not taken
    // for a loss. A database that cannot be reached refuses the call before the runtime is
    // touched: nothing changes, and the caller may try again (503).
    await this.d.store
      .updateSandbox(r.id, { details: { stopping: opts.reason }, expectStates: [r.state], at: this.d.clock.now() })
      .catch((e) => {
        if (e instanceof SandboxdError && e.kind === 'unavailable') throw e;
        // Gone or changed meanwhile (or a full disk): the update below decides.
      });
    if (opts.discard) await this.d.driver.delete(r.id);
    else await this.d.driver.stop(r.id);
    const at = this.d.clock.now();
    const refund =
      r.state === 'started'
        ? refundMinutes(r.reservedMinutes, { createdAt: runStart(r), at: Math.min(at, r.stopAt) })
        : 0;
    try {
      const out = await this.d.store.updateSandbox(r.id, {
        state: 'stopped',
        endedAt: at,
        ...(r.state === 'started' ? { stopAt: Math.min(at, r.stopAt) } : {}),
        expiresAt: null,
        details: { reason: opts.reason },
        ledgerDelta: refund,
        ledgerReason: 'sandbox.refund',
        expectStates: ['started', 'paused'],
        at,
        remove: opts.remove,
      });
      this.d.log.info({ sandboxId: r.id, reason: opts.reason, refund }, 'sandbox stopped');
      this.emitGone(r.id);
      return out;
    } catch (e) {
      if (e instanceof SandboxdError && (e.kind === 'conflict' || e.kind === 'not_found')) return null;
      throw e;
    }
  }

  /**
   * Records that the runtime lost a sandbox: `error`, unused minutes refunded (all of them
   * with `fullRefund`, for a create whose client never got an answer); with `remove`, the
   * record is removed in the same transaction instead (a refused create). `details` go into
   * the record's details over `{reason: 'lost', message}` (e.g. the runner that stopped
   * answering). Once only: the update expects the record's state as given.
   */
  async markLost(
    r: SandboxRecord,
    message: string,
    opts: { fullRefund?: boolean; remove?: boolean; details?: Record<string, unknown> } = {},
  ): Promise<void> {
    const at = this.d.clock.now();
    const refund = opts.fullRefund
      ? r.reservedMinutes
      : r.state === 'paused'
        ? 0
        : refundMinutes(r.reservedMinutes, { createdAt: runStart(r), at: Math.min(at, r.stopAt) });
    await this.d.store
      .updateSandbox(r.id, {
        state: 'error',
        endedAt: at,
        details: { reason: 'lost', message, ...opts.details },
        ledgerDelta: refund,
        ledgerReason: 'sandbox.refund',
        expectStates: [r.state],
        at,
        remove: opts.remove,
      })
      .then(
        () => this.refused.delete(r.id),
        (e) => this.d.log.warn({ err: e, sandboxId: r.id }, 'markLost'),
      );
    this.emitGone(r.id);
  }

  /** Tells listeners (terminals) that sandbox `id` stopped or is gone. */
  emitGone(id: string): void {
    for (const l of this.goneListeners) {
      try {
        l(id);
      } catch (err) {
        this.d.log.error({ err, sandboxId: id }, 'onGone listener failed');
      }
    }
  }
}
