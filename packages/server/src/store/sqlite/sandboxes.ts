import { SandboxdError } from '@sandboxd/protocol';
import { sandboxesFull } from '../../domain/capacity.js';
import { concurrencyLimitError, pausedLimitError } from '../../domain/limits.js';
import {
  assertTransition,
  HELD_STATES,
  isLive,
  type SandboxRecord,
  type SandboxRecordState,
  wireState,
} from '../../domain/sandbox.js';
import type { Page, PageRequest, Reservation, SandboxUpdate, VolumeRecord } from '../store.js';
import type { Db } from './open.js';
import { decodeCursor, encodeCursor, setPausedMemory, toSandbox, type SandboxRow } from './rows.js';

/** States taking a concurrency slot of the account. */
const LIVE = "('creating', 'started', 'starting')";
/** States holding host resources (`maxSandboxes`, volumes mounted). */
const HELD = "('creating', 'started', 'starting', 'paused')";

/** Sandbox, mount and volume persistence; decisions happen inside IMMEDIATE transactions. */
export class SqliteSandboxes {
  constructor(private readonly db: Db) {}

  /** The account's balance, kept with its ledger by a trigger (migration 9): one row read. */
  balance(accountId: string): number {
    const r = this.db.prepare('SELECT balance AS b FROM accounts WHERE id = ?').get(accountId) as
      | { b: number }
      | undefined;
    return r?.b ?? 0;
  }

  reserve(record: SandboxRecord, r: Reservation & { newName: () => string }): SandboxRecord {
    return this.db
      .transaction(() => {
        if (r.maxSandboxes) {
          const held = this.countAllLive();
          if (held >= r.maxSandboxes) throw sandboxesFull(held, r.maxSandboxes);
        }
        const balance = this.balance(record.accountId);
        if (balance < r.minutes) {
          throw new SandboxdError('tokens', `Insufficient tokens: ${r.minutes} needed, ${balance} available`, {
            required: r.minutes,
            balance,
          });
        }
        const live = this.countLive(record.accountId);
        if (live >= r.concurrency) {
          throw concurrencyLimitError(r.concurrency);
        }
        const volumes = record.volumes.map((m) => ({ ...m }));
        for (const m of volumes) {
          const want = r.volumes.find((v) => v.name === m.name)?.sizeGb ?? null;
          const existing = this.getVolume(record.accountId, m.name);
          if (existing && want !== null && existing.sizeGb !== want) {
            throw new SandboxdError('conflict', `Volume ${m.name} exists with sizeGb ${existing.sizeGb}`, {
              name: m.name,
              sizeGb: existing.sizeGb,
            });
          }
          m.sizeGb = existing?.sizeGb ?? want ?? 1;
          if (!existing)
            this.createVolume({
              accountId: record.accountId,
              name: m.name,
              sizeGb: m.sizeGb,
              createdAt: record.createdAt,
            });
        }
        const out = {
          ...record,
          volumes,
          portsPublic: record.portsPublic !== false,
          reservedMinutes: r.minutes,
          state: 'creating' as const,
        };
        this.insertWithUniqueName(out, r.newName);
        const mount = this.db.prepare(
          'INSERT INTO sandbox_mounts (sandbox_id, account_id, volume_name, mount_path) VALUES (?, ?, ?, ?)',
        );
        for (const m of volumes) mount.run(out.id, out.accountId, m.name, m.mountPath);
        this.db
          .prepare('INSERT INTO ledger (account_id, delta, reason, sandbox_id, created_at) VALUES (?, ?, ?, ?, ?)')
          .run(out.accountId, -r.minutes, 'sandbox.create', out.id, out.createdAt);
        return out;
      })
      .immediate();
  }

  private insertWithUniqueName(rec: SandboxRecord, newName: () => string): void {
    const stmt = this.db.prepare(
      `INSERT INTO sandboxes (id, account_id, name, image, region, env_json, volumes_json, created_at, state, stop_at, reserved_minutes, ended_at, details_json, ports_public, template, metadata_json, on_timeout, run_started_at, expires_at, runner, network_json, isolation, paused_memory)
       VALUES (@id, @accountId, @name, @image, @region, @env, @volumes, @createdAt, @state, @stopAt, @reservedMinutes, @endedAt, @details, @portsPublicInt, @template, @metadataJson, @onTimeoutText, @runStartedAtInt, @expiresAtInt, @runnerText, @networkJson, @isolationText, @pausedMemoryText)`,
    );
    for (let attempt = 0; ; attempt++) {
      try {
        const {
          portsPublic,
          template,
          metadata,
          onTimeout,
          runStartedAt,
          expiresAt,
          runner,
          network,
          isolation,
          pausedMemory,
          ...row
        } = rec;
        stmt.run({
          ...row,
          runnerText: runner ?? null,
          onTimeoutText: onTimeout ?? 'stop',
          runStartedAtInt: runStartedAt ?? null,
          expiresAtInt: expiresAt ?? null,
          networkJson: network ? JSON.stringify(network) : null,
          isolationText: isolation ?? 'container',
          pausedMemoryText: pausedMemory ?? null,
          template: template ?? null,
          metadataJson: metadata ? JSON.stringify(metadata) : null,
          env: JSON.stringify(rec.env),
          volumes: JSON.stringify(rec.volumes),
          details: rec.details ? JSON.stringify(rec.details) : null,
          portsPublicInt: portsPublic === false ? 0 : 1,
        });
        return;
      } catch (e) {
        const code = (e as { code?: string }).code;
        if (code !== 'SQLITE_CONSTRAINT_UNIQUE' || attempt > 20 || !/name/.test(String((e as Error).message))) throw e;
        rec.name = newName();
      }
    }
  }

  get(id: string): SandboxRecord | null {
    const r = this.db.prepare('SELECT * FROM sandboxes WHERE id = ?').get(id) as SandboxRow | undefined;
    return r ? toSandbox(r) : null;
  }

  list(
    accountId: string,
    q: PageRequest & { states: SandboxRecordState[]; metadata?: Record<string, string> },
  ): Page<SandboxRecord> {
    const args: unknown[] = [accountId, ...q.states];
    let where = `account_id = ? AND state IN (${q.states.map(() => '?').join(', ')})`;
    for (const [k, v] of Object.entries(q.metadata ?? {})) {
      where += ' AND EXISTS (SELECT 1 FROM json_each(metadata_json) WHERE json_each.key = ? AND json_each.value = ?)';
      args.push(k, v);
    }
    if (q.cursor) {
      const [t, id] = decodeCursor(q.cursor);
      where += ' AND (created_at < ? OR (created_at = ? AND id < ?))';
      args.push(t, t, String(id));
    }
    const rows = this.db
      .prepare(`SELECT * FROM sandboxes WHERE ${where} ORDER BY created_at DESC, id DESC LIMIT ?`)
      .all(...args, q.limit + 1) as SandboxRow[];
    const items = rows.slice(0, q.limit).map(toSandbox);
    const last = items.at(-1);
    return rows.length > q.limit && last ? { items, nextCursor: encodeCursor([last.createdAt, last.id]) } : { items };
  }

  listByState(states: SandboxRecordState[]): SandboxRecord[] {
    const rows = this.db
      .prepare(`SELECT * FROM sandboxes WHERE state IN (${states.map(() => '?').join(', ')})`)
      .all(...states) as SandboxRow[];
    return rows.map(toSandbox);
  }

  listExpired(now: number): SandboxRecord[] {
    return (
      this.db
        .prepare("SELECT * FROM sandboxes WHERE state = 'started' AND stop_at <= ? ORDER BY stop_at")
        .all(now) as SandboxRow[]
    ).map(toSandbox);
  }

  update(id: string, u: SandboxUpdate): SandboxRecord {
    return this.db
      .transaction(() => {
        const cur = this.get(id);
        if (!cur) throw new SandboxdError('not_found', 'Sandbox not found');
        if (u.expectStates && !u.expectStates.includes(cur.state)) {
          const state = wireState(cur.state);
          throw new SandboxdError('conflict', `Sandbox is ${cur.state === 'creating' ? 'starting' : state}`, { state });
        }
        if (u.state && u.state !== cur.state) {
          assertTransition(cur.state, u.state);
          this.checkLimits(cur, u.state, u.limits ?? {});
        }
        const delta = u.ledgerDelta ?? 0;
        if (delta < 0) {
          const balance = this.balance(cur.accountId);
          if (balance < -delta)
            throw new SandboxdError('tokens', `Insufficient tokens: ${-delta} needed, ${balance} available`, {
              required: -delta,
              balance,
            });
        }
        const next: SandboxRecord = {
          ...cur,
          state: u.state ?? cur.state,
          stopAt: u.stopAt ?? cur.stopAt,
          endedAt: u.endedAt !== undefined ? u.endedAt : cur.endedAt,
          details: u.details !== undefined ? u.details : cur.details,
          reservedMinutes: u.reservedMinutes ?? cur.reservedMinutes - delta,
          expiresAt: u.expiresAt !== undefined ? u.expiresAt : (cur.expiresAt ?? null),
        };
        if (u.runStartedAt !== undefined) next.runStartedAt = u.runStartedAt;
        if (u.network !== undefined) next.network = u.network;
        setPausedMemory(next, u);
        if (u.remove) this.delete(id);
        else
          this.db
            .prepare(
              'UPDATE sandboxes SET state = ?, stop_at = ?, ended_at = ?, details_json = ?, reserved_minutes = ?, run_started_at = ?, expires_at = ?, network_json = ?, paused_memory = ? WHERE id = ?',
            )
            .run(
              next.state,
              next.stopAt,
              next.endedAt,
              next.details ? JSON.stringify(next.details) : null,
              next.reservedMinutes,
              next.runStartedAt ?? null,
              next.expiresAt ?? null,
              next.network ? JSON.stringify(next.network) : null,
              next.pausedMemory ?? null,
              id,
            );
        if (delta !== 0) {
          this.db
            .prepare('INSERT INTO ledger (account_id, delta, reason, sandbox_id, created_at) VALUES (?, ?, ?, ?, ?)')
            .run(cur.accountId, delta, u.ledgerReason ?? (delta < 0 ? 'sandbox.extend' : 'sandbox.refund'), id, u.at);
        }
        return next;
      })
      .immediate();
  }

  /** The plan and host limits of a move of `cur` into `to` (inside the update's transaction). */
  private checkLimits(cur: SandboxRecord, to: SandboxRecordState, l: NonNullable<SandboxUpdate['limits']>): void {
    const entersActive = isLive(to) && !isLive(cur.state);
    if (entersActive && l.maxSandboxes && !HELD_STATES.includes(cur.state)) {
      const held = this.countAllLive();
      if (held >= l.maxSandboxes) throw sandboxesFull(held, l.maxSandboxes);
    }
    if (entersActive && l.concurrency !== undefined) {
      const live = this.countLive(cur.accountId);
      if (live >= l.concurrency) throw concurrencyLimitError(l.concurrency);
    }
    if (to === 'paused' && l.maxPaused !== undefined) {
      const paused = this.countPaused(cur.accountId);
      if (paused >= l.maxPaused) throw pausedLimitError(l.maxPaused);
    }
  }

  delete(id: string): void {
    this.db.prepare('DELETE FROM sandboxes WHERE id = ?').run(id);
  }

  listEnded(cutoff: number, limit: number): SandboxRecord[] {
    return (
      this.db
        .prepare(
          "SELECT * FROM sandboxes WHERE state IN ('stopped', 'error') AND ended_at IS NOT NULL AND ended_at < ? ORDER BY ended_at LIMIT ?",
        )
        .all(cutoff, limit) as SandboxRow[]
    ).map(toSandbox);
  }

  listPausedExpired(now: number): SandboxRecord[] {
    return (
      this.db
        .prepare("SELECT * FROM sandboxes WHERE state = 'paused' AND expires_at IS NOT NULL AND expires_at <= ?")
        .all(now) as SandboxRow[]
    ).map(toSandbox);
  }

  countPaused(accountId: string): number {
    return (
      this.db
        .prepare("SELECT COUNT(*) AS n FROM sandboxes WHERE account_id = ? AND state = 'paused'")
        .get(accountId) as { n: number }
    ).n;
  }

  countByState(): Record<SandboxRecordState, number> {
    const out: Record<SandboxRecordState, number> = {
      creating: 0,
      started: 0,
      paused: 0,
      stopped: 0,
      starting: 0,
      error: 0,
    };
    for (const r of this.db.prepare('SELECT state, COUNT(*) AS n FROM sandboxes GROUP BY state').all() as {
      state: SandboxRecordState;
      n: number;
    }[])
      out[r.state] = r.n;
    return out;
  }

  /** Sandboxes of every account holding host resources (paused ones too): what the host holds. */
  countAllLive(): number {
    return (this.db.prepare(`SELECT COUNT(*) AS n FROM sandboxes WHERE state IN ${HELD}`).get() as { n: number }).n;
  }

  countLive(accountId: string): number {
    return (
      this.db
        .prepare(`SELECT COUNT(*) AS n FROM sandboxes WHERE account_id = ? AND state IN ${LIVE}`)
        .get(accountId) as { n: number }
    ).n;
  }

  listVolumes(accountId: string): Array<VolumeRecord & { mountedBy: string[] }> {
    const vols = this.db.prepare('SELECT * FROM volumes WHERE account_id = ? ORDER BY name').all(accountId) as {
      account_id: string;
      name: string;
      size_gb: number;
      created_at: number;
      runner: string | null;
    }[];
    const mounts = this.db
      .prepare(
        `SELECT m.volume_name AS v, m.sandbox_id AS s FROM sandbox_mounts m JOIN sandboxes x ON x.id = m.sandbox_id WHERE m.account_id = ? AND x.state IN ${HELD}`,
      )
      .all(accountId) as { v: string; s: string }[];
    return vols.map((v) => ({
      accountId: v.account_id,
      name: v.name,
      sizeGb: v.size_gb,
      createdAt: v.created_at,
      ...(v.runner !== null ? { runner: v.runner } : {}),
      mountedBy: [...new Set(mounts.filter((m) => m.v === v.name).map((m) => m.s))],
    }));
  }

  getVolume(accountId: string, name: string): VolumeRecord | null {
    const v = this.db.prepare('SELECT * FROM volumes WHERE account_id = ? AND name = ?').get(accountId, name) as
      | { size_gb: number; created_at: number; runner: string | null }
      | undefined;
    return v
      ? {
          accountId,
          name,
          sizeGb: v.size_gb,
          createdAt: v.created_at,
          ...(v.runner !== null ? { runner: v.runner } : {}),
        }
      : null;
  }

  createVolume(v: VolumeRecord): void {
    this.db
      .prepare('INSERT OR IGNORE INTO volumes (account_id, name, size_gb, created_at, runner) VALUES (?, ?, ?, ?, ?)')
      .run(v.accountId, v.name, v.sizeGb, v.createdAt, v.runner ?? null);
  }

  /** See `Store.placeSandbox`. */
  place(id: string, runner: string): void {
    this.db
      .transaction(() => {
        const cur = this.get(id);
        if (!cur) throw new SandboxdError('not_found', 'Sandbox not found');
        if (cur.runner !== undefined && cur.runner !== runner)
          throw new SandboxdError('conflict', `Sandbox ${id} lives on runner ${cur.runner}`, { runner: cur.runner });
        const vols = this.db
          .prepare(
            'SELECT DISTINCT v.name AS name, v.runner AS runner FROM sandbox_mounts m JOIN volumes v ON v.account_id = m.account_id AND v.name = m.volume_name WHERE m.sandbox_id = ?',
          )
          .all(id) as { name: string; runner: string | null }[];
        const other = vols.find((v) => v.runner !== null && v.runner !== runner);
        if (other)
          throw new SandboxdError('conflict', `Volume ${other.name} lives on runner ${other.runner}`, {
            volume: other.name,
            runner: other.runner,
          });
        this.db.prepare('UPDATE sandboxes SET runner = ? WHERE id = ?').run(runner, id);
        const claim = this.db.prepare(
          'UPDATE volumes SET runner = ? WHERE account_id = ? AND name = ? AND runner IS NULL',
        );
        for (const v of vols) claim.run(runner, cur.accountId, v.name);
      })
      .immediate();
  }

  deleteVolume(accountId: string, name: string): boolean {
    return this.db
      .transaction(() => {
        const users = this.db
          .prepare(
            `SELECT DISTINCT m.sandbox_id AS s FROM sandbox_mounts m JOIN sandboxes x ON x.id = m.sandbox_id WHERE m.account_id = ? AND m.volume_name = ? AND x.state IN ${HELD}`,
          )
          .all(accountId, name) as { s: string }[];
        if (users.length)
          throw new SandboxdError('conflict', `Volume ${name} is mounted by ${users.length} running sandbox(es)`, {
            mountedBy: users.map((u) => u.s),
          });
        return (
          this.db.prepare('DELETE FROM volumes WHERE account_id = ? AND name = ?').run(accountId, name).changes > 0
        );
      })
      .immediate();
  }
}
