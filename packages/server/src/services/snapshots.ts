import { SandboxdError, type Snapshot } from '@sandboxd/protocol';
import { isLayerNamespace, snapshotImage, snapshotRef } from '../domain/snapshots.js';
import { isOutOfSpace, outOfStorage } from '../domain/storage.js';
import type { AccountRecord, SnapshotRecord } from '../store/store.js';
import { planOf, type ServiceDeps } from './context.js';
import { type SandboxRecord, wrongState } from '../domain/sandbox.js';
import { SNAPSHOTTABLE } from './lifecycle.js';
import type { SandboxService } from './sandboxes.js';
import type { StorageGuard } from './storage.js';

/**
 * The lease naming the server that makes snapshot `ref` (its presence id) while it does; its
 * time is only a bound for a holder that never lets it go: whether the maker runs is its
 * presence's to say.
 */
const makingLease = (ref: string) => `snapshot:${ref}`;
const MAKING_LEASE_MS = 24 * 3_600_000;

/** The wire form of a snapshot record. */
export function toWireSnapshot(s: SnapshotRecord): Snapshot {
  return {
    name: s.name,
    image: snapshotImage(s.name),
    sizeBytes: s.sizeBytes,
    baseImage: s.baseImage,
    sandboxId: s.sandboxId,
    createdAt: new Date(s.createdAt).toISOString(),
  };
}

/**
 * Snapshots: a sandbox's filesystem (image + writable layer, volumes excluded) made an
 * image `snapshots/<name>` private to the account, counted against the plan's
 * `snapshotBytes`. The row is written `creating` before the runtime copies and `ready`
 * after, so a crash leaves either a whole snapshot or a `creating` row that the start-up
 * reconciliation removes with whatever image the runtime got to make.
 */
export class SnapshotService {
  constructor(
    private readonly d: ServiceDeps & { storage: Pick<StorageGuard, 'check'> },
    private readonly sandboxes: Pick<SandboxService, 'get' | 'exclusive'>,
  ) {}

  /** 201's snapshot. `not_found`, `conflict` (state, or the name is taken), `quota`, `insufficient_storage`. */
  async create(account: AccountRecord, id: string, name: string): Promise<SnapshotRecord> {
    await this.sandboxes.get(account.id, id);
    return this.sandboxes.exclusive(id, () => this.createNow(account, id, name));
  }

  private async createNow(account: AccountRecord, id: string, name: string): Promise<SnapshotRecord> {
    const r = await this.sandboxes.get(account.id, id);
    if (!SNAPSHOTTABLE.includes(r.state)) throw wrongState(r);
    await this.d.storage.check();
    const plan = planOf(this.d.config, account.plan);
    const ref = snapshotRef(account.id, name);
    await this.claimMaking(ref, name);
    try {
      return await this.make(account, r, name, ref, plan.snapshotBytes);
    } finally {
      await this.d.store
        .releaseLease(makingLease(ref), this.d.presence.id)
        .catch((err) => this.d.log.warn({ err, snapshot: name }, 'releasing a snapshot lease failed'));
    }
  }

  /**
   * Names this process as the maker of `ref` (the lease {@link makingLease}), so that no
   * other server's start-up takes the unfinished snapshot for a crash's. One left by a
   * server that is gone is taken over; one of a server at work is `conflict`.
   */
  private async claimMaking(ref: string, name: string): Promise<void> {
    const lease = makingLease(ref);
    const me = this.d.presence.id;
    let got = await this.d.store.acquireLease(lease, me, MAKING_LEASE_MS, this.d.clock.now());
    if (!got.held && !(await this.d.presence.alive(got.holder))) {
      await this.d.store.releaseLease(lease, got.holder);
      got = await this.d.store.acquireLease(lease, me, MAKING_LEASE_MS, this.d.clock.now());
    }
    if (!got.held) throw new SandboxdError('conflict', 'A snapshot of that name is being made', { name });
  }

  private async make(
    account: AccountRecord,
    r: SandboxRecord,
    name: string,
    ref: string,
    quotaBytes: number,
  ): Promise<SnapshotRecord> {
    const createdAt = this.d.clock.now();
    await this.d.store.beginSnapshot(
      { accountId: account.id, name, state: 'creating', sizeBytes: 0, baseImage: r.image, sandboxId: r.id, createdAt },
      quotaBytes,
    );
    let sizeBytes: number;
    try {
      sizeBytes = (await this.d.driver.snapshot(r.id, ref)).sizeBytes;
    } catch (e) {
      await this.drop(account.id, name, ref);
      if (isOutOfSpace(e)) throw outOfStorage();
      if (e instanceof SandboxdError && e.kind !== 'internal') throw e;
      this.d.log.error({ err: e, sandboxId: r.id }, 'snapshot failed');
      throw new SandboxdError('internal', 'The runtime failed to make the snapshot', { sandboxId: r.id });
    }
    try {
      const out = await this.d.store.finishSnapshot(account.id, name, sizeBytes, quotaBytes);
      this.d.log.info({ sandboxId: r.id, snapshot: name, sizeBytes }, 'snapshot made');
      return out;
    } catch (e) {
      await this.drop(account.id, name, ref);
      throw e;
    }
  }

  async list(accountId: string): Promise<SnapshotRecord[]> {
    return (await this.d.store.listSnapshots(accountId)).filter((s) => s.state === 'ready');
  }

  /** `not_found` unless the account has a ready snapshot of that name. */
  async get(accountId: string, name: string): Promise<SnapshotRecord> {
    const s = await this.d.store.getSnapshot(accountId, name);
    if (s?.state !== 'ready') throw new SandboxdError('not_found', 'Snapshot not found');
    return s;
  }

  /** Removes the image (sandboxes made from it keep their files) and the record. `not_found`. */
  async delete(accountId: string, name: string): Promise<void> {
    await this.get(accountId, name);
    await this.d.driver.deleteImage(snapshotRef(accountId, name));
    await this.d.store.deleteSnapshot(accountId, name);
    this.d.log.info({ accountId, snapshot: name }, 'snapshot deleted');
  }

  /**
   * At start-up: rows a crash left `creating` are removed with their image, and snapshot
   * images with no row (a crash between the copy and the row) are removed; image builds'
   * layers (`snapshot/<owner>/_l.*`) are left to the builds service's own recovery. A snapshot that
   * another server on the database is making (it holds its lease and runs) is left alone.
   */
  async reconcile(): Promise<{ dropped: string[] }> {
    const dropped: string[] = [];
    const rows = await this.d.store.listAllSnapshots();
    const kept = new Set<string>();
    for (const s of rows) {
      const ref = snapshotRef(s.accountId, s.name);
      if (s.state === 'ready' || (await this.beingMade(ref))) kept.add(ref);
      else {
        await this.drop(s.accountId, s.name, ref);
        dropped.push(ref);
      }
    }
    for (const img of await this.d.driver.listSnapshots()) {
      // Image builds' cache layers (`snapshot/<owner>/_l.*`) are the builds service's to keep or remove.
      if (kept.has(img.ref) || isLayerNamespace(img.ref)) continue;
      await this.d.driver
        .deleteImage(img.ref)
        .catch((err) => this.d.log.warn({ err, image: img.ref }, 'removing a stray snapshot'));
      dropped.push(img.ref);
    }
    if (dropped.length) this.d.log.info({ dropped }, 'removed snapshots a crash left unfinished');
    return { dropped };
  }

  /** Whether a server that still runs holds the making lease of `ref` (else the lease is let go). */
  private async beingMade(ref: string): Promise<boolean> {
    const lease = makingLease(ref);
    const got = await this.d.store.acquireLease(lease, this.d.presence.id, 1, this.d.clock.now());
    if (!got.held && (await this.d.presence.alive(got.holder))) return true;
    await this.d.store.releaseLease(lease, got.holder).catch(() => undefined);
    return false;
  }

  private async drop(accountId: string, name: string, ref: string): Promise<void> {
    await this.d.driver
      .deleteImage(ref)
      .catch((err) => this.d.log.warn({ err, image: ref }, 'removing an unfinished snapshot'));
    await this.d.store
      .deleteSnapshot(accountId, name)
      .catch((err) => this.d.log.warn({ err, snapshot: name }, 'removing an unfinished snapshot row'));
  }
}
