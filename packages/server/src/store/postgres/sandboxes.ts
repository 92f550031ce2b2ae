import { SandboxdError, type SandboxNetwork } from '@sandboxd/protocol';
import { type Kysely, type Selectable, sql } from 'kysely';
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
import { decodeCursor, encodeCursor, setPausedMemory } from '../sqlite/rows.js';
import type { Page, PageRequest, Reservation, SandboxUpdate, VolumeRecord } from '../store.js';
import { LOCK_CLASS, LOCK_HOST } from './migrations.js';
import type { PgDatabase, PgSandboxRow } from './schema.js';

type Q = Kysely<PgDatabase>;

/** States taking a concurrency slot of the account. */
const LIVE: SandboxRecordState[] = ['creating', 'started', 'starting'];
/** States holding host resources (`maxSandboxes`, volumes mounted). */
const HELD: SandboxRecordState[] = [...HELD_STATES];

export function toSandbox(r: Selectable<PgSandboxRow>): SandboxRecord {
  return {
    id: r.id,
    accountId: r.account_id,
    name: r.name,
    image: r.image,
    region: r.region,
    env: r.env_json as SandboxRecord['env'],
    volumes: r.volumes_json as SandboxRecord['volumes'],
    createdAt: r.created_at,
    portsPublic: r.ports_public,
    state: r.state as SandboxRecordState,
    stopAt: r.stop_at,
    reservedMinutes: r.reserved_minutes,
    endedAt: r.ended_at,
    details: (r.details_json as SandboxRecord['details']) ?? null,
    ...(r.template !== null ? { template: r.template } : {}),
    ...(r.metadata_json !== null ? { metadata: r.metadata_json as Record<string, string> } : {}),
    ...(r.on_timeout === 'pause' ? { onTimeout: 'pause' as const } : {}),
    ...(r.run_started_at !== null ? { runStartedAt: r.run_started_at } : {}),
    ...(r.network_json ? { network: r.network_json as unknown as SandboxNetwork } : {}),
    ...(r.isolation !== 'container' ? { isolation: r.isolation } : {}),
    ...(r.paused_memory !== null ? { pausedMemory: r.paused_memory } : {}),
    expiresAt: r.expires_at,
    ...(r.runner !== null ? { runner: r.runner } : {}),
  };
}

/**
 * Serializes the decisions of one account: a row lock on its `accounts` row, held to the
 * end of the transaction. `FOR NO KEY UPDATE` conflicts with itself but not with the
 * key-share locks that inserts referencing the account take (ledger rows, sessions, events),
 * so those never wait on it.
 */
export async function lockAccount(trx: Q, accountId: string): Promise<boolean> {
  const r = await sql`SELECT 1 FROM accounts WHERE id = ${accountId} FOR NO KEY UPDATE`.execute(trx);
  return r.rows.length > 0;
}

/** Serializes the decisions on the host-wide `maxSandboxes` (a transaction advisory lock), taken before any account lock. */
export async function lockHost(trx: Q): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(${LOCK_CLASS}, ${LOCK_HOST})`.execute(trx);
}

/** The account's balance, kept with its ledger by a trigger (migration 5): one row read. */
export async function balance(q: Q, accountId: string): Promise<number> {
  const r = await q.selectFrom('accounts').select('balance').where('id', '=', accountId).executeTakeFirst();
  return r?.balance ?? 0;
}

export async function countLive(q: Q, accountId: string): Promise<number> {
  const r = await q
    .selectFrom('sandboxes')
    .select((e) => e.fn.countAll<number>().as('n'))
    .where('account_id', '=', accountId)
    .where('state', 'in', LIVE)
    .executeTakeFirstOrThrow();
  return r.n;
}

export async function countAllLive(q: Q): Promise<number> {
  const r = await q
    .selectFrom('sandboxes')
    .select((e) => e.fn.countAll<number>().as('n'))
    .where('state', 'in', HELD)
    .executeTakeFirstOrThrow();
  return r.n;
}

export async function countPaused(q: Q, accountId: string): Promise<number> {
  const r = await q
    .selectFrom('sandboxes')
    .select((e) => e.fn.countAll<number>().as('n'))
    .where('account_id', '=', accountId)
    .where('state', '=', 'paused')
    .executeTakeFirstOrThrow();
  return r.n;
}

export async function getVolume(q: Q, accountId: string, name: string): Promise<VolumeRecord | null> {
  const v = await q
    .selectFrom('volumes')
    .selectAll()
    .where('account_id', '=', accountId)
    .where('name', '=', name)
    .executeTakeFirst();
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

async function insertVolume(q: Q, v: VolumeRecord): Promise<void> {
  await q
    .insertInto('volumes')
    .values({
      account_id: v.accountId,
      name: v.name,
      size_gb: v.sizeGb,
      created_at: v.createdAt,
      runner: v.runner ?? null,
    })
    .onConflict((oc) => oc.columns(['account_id', 'name']).doNothing())
    .execute();
}

/** In one transaction, under the host lock (when `maxSandboxes` is set) and the account's lock. */
export async function reserve(db: Q, record: SandboxRecord, r: Reservation): Promise<SandboxRecord> {
  return db.transaction().execute(async (trx) => {
    if (r.maxSandboxes) {
      await lockHost(trx);
      const held = await countAllLive(trx);
      if (held >= r.maxSandboxes) throw sandboxesFull(held, r.maxSandboxes);
    }
    await lockAccount(trx, record.accountId);
    const bal = await balance(trx, record.accountId);
    if (bal < r.minutes) {
      throw new SandboxdError('tokens', `Insufficient tokens: ${r.minutes} needed, ${bal} available`, {
        required: r.minutes,
        balance: bal,
      });
    }
    const live = await countLive(trx, record.accountId);
    if (live >= r.concurrency) {
      throw concurrencyLimitError(r.concurrency);
    }
    const volumes = record.volumes.map((m) => ({ ...m }));
    for (const m of volumes) {
      const want = r.volumes.find((v) => v.name === m.name)?.sizeGb ?? null;
      const existing = await getVolume(trx, record.accountId, m.name);
      if (existing && want !== null && existing.sizeGb !== want) {
        throw new SandboxdError('conflict', `Volume ${m.name} exists with sizeGb ${existing.sizeGb}`, {
          name: m.name,
          sizeGb: existing.sizeGb,
        });
      }
      m.sizeGb = existing?.sizeGb ?? want ?? 1;
      if (!existing)
        await insertVolume(trx, {
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
    await insertWithUniqueName(trx, out, r.newName);
    for (const m of volumes)
      await trx
        .insertInto('sandbox_mounts')
        .values({ sandbox_id: out.id, account_id: out.accountId, volume_name: m.name, mount_path: m.mountPath })
        .execute();
    await trx
      .insertInto('ledger')
      .values({
        account_id: out.accountId,
        delta: -r.minutes,
        reason: 'sandbox.create',
        sandbox_id: out.id,
        created_at: out.createdAt,
      })
      .execute();
    return out;
  });
}

/**
 * Inserts the record, taking another name when the account already has one of that name.
 * `ON CONFLICT ... DO NOTHING` rather than catching the error: an error would abort the
 * whole transaction in PostgreSQL.
 */
async function insertWithUniqueName(trx: Q, rec: SandboxRecord, newName: () => string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const r = await trx
      .insertInto('sandboxes')
      .values({
        id: rec.id,
        account_id: rec.accountId,
        name: rec.name,
        image: rec.image,
        region: rec.region,
        env_json: JSON.stringify(rec.env),
        volumes_json: JSON.stringify(rec.volumes),
        created_at: rec.createdAt,
        state: rec.state,
        stop_at: rec.stopAt,
        reserved_minutes: rec.reservedMinutes,
        ended_at: rec.endedAt,
        details_json: rec.details ? JSON.stringify(rec.details) : null,
        ports_public: rec.portsPublic !== false,
        template: rec.template ?? null,
        metadata_json: rec.metadata ? JSON.stringify(rec.metadata) : null,
        on_timeout: rec.onTimeout ?? 'stop',
        run_started_at: rec.runStartedAt ?? null,
        expires_at: rec.expiresAt ?? null,
        runner: rec.runner ?? null,
        network_json: rec.network ? JSON.stringify(rec.network) : null,
        isolation: rec.isolation ?? 'container',
        paused_memory: rec.pausedMemory ?? null,
      })
      .onConflict((oc) => oc.columns(['account_id', 'name']).doNothing())
      .returning('id')
      .executeTakeFirst();
    if (r) return;
    if (attempt > 20) throw new SandboxdError('conflict', `No free sandbox name after ${attempt} tries`);
    rec.name = newName();
  }
}

export async function get(q: Q, id: string): Promise<SandboxRecord | null> {
  const r = await q.selectFrom('sandboxes').selectAll().where('id', '=', id).executeTakeFirst();
  return r ? toSandbox(r) : null;
}

export async function list(
  q: Q,
  accountId: string,
  p: PageRequest & { states: SandboxRecordState[]; metadata?: Record<string, string> },
): Promise<Page<SandboxRecord>> {
  if (p.states.length === 0) return { items: [] };
  let query = q.selectFrom('sandboxes').selectAll().where('account_id', '=', accountId).where('state', 'in', p.states);
  const pairs = Object.entries(p.metadata ?? {});
  // Every pair must be in the labels: jsonb containment of {k: v, ...} (string values only).
  if (pairs.length)
    query = query.where(sql<boolean>`metadata_json::jsonb @> ${JSON.stringify(Object.fromEntries(pairs))}::jsonb`);
  if (p.cursor) {
    const [t, id] = decodeCursor(p.cursor);
    query = query.where((e) =>
      e.or([e('created_at', '<', t), e.and([e('created_at', '=', t), e('id', '<', String(id))])]),
    );
  }
  const rows = await query
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(p.limit + 1)
    .execute();
  const items = rows.slice(0, p.limit).map(toSandbox);
  const last = items.at(-1);
  return rows.length > p.limit && last ? { items, nextCursor: encodeCursor([last.createdAt, last.id]) } : { items };
}

/**
 * In one transaction: the host lock when a `maxSandboxes` limit is given, then the
 * account's lock (balance, concurrency, paused count), then the record's row lock.
 */
export async function update(db: Q, id: string, u: SandboxUpdate): Promise<SandboxRecord> {
  const owner = await db.selectFrom('sandboxes').select('account_id').where('id', '=', id).executeTakeFirst();
  if (!owner) throw new SandboxdError('not_found', 'Sandbox not found');
  return db.transaction().execute(async (trx) => {
    if (u.limits?.maxSandboxes && u.state) await lockHost(trx);
    await lockAccount(trx, owner.account_id);
    const row = await trx.selectFrom('sandboxes').selectAll().where('id', '=', id).forUpdate().executeTakeFirst();
    if (!row) throw new SandboxdError('not_found', 'Sandbox not found');
    const cur = toSandbox(row);
    if (u.expectStates && !u.expectStates.includes(cur.state)) {
      const state = wireState(cur.state);
      throw new SandboxdError('conflict', `Sandbox is ${cur.state === 'creating' ? 'starting' : state}`, { state });
    }
    if (u.state && u.state !== cur.state) {
      assertTransition(cur.state, u.state);
      await checkLimits(trx, cur, u.state, u.limits ?? {});
    }
    const delta = u.ledgerDelta ?? 0;
    if (delta < 0) {
      const bal = await balance(trx, cur.accountId);
      if (bal < -delta)
        throw new SandboxdError('tokens', `Insufficient tokens: ${-delta} needed, ${bal} available`, {
          required: -delta,
          balance: bal,
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
    if (u.remove) await trx.deleteFrom('sandboxes').where('id', '=', id).execute();
    else
      await trx
        .updateTable('sandboxes')
        .set({
          state: next.state,
          stop_at: next.stopAt,
          ended_at: next.endedAt,
          details_json: next.details ? JSON.stringify(next.details) : null,
          reserved_minutes: next.reservedMinutes,
          run_started_at: next.runStartedAt ?? null,
          expires_at: next.expiresAt ?? null,
          network_json: next.network ? JSON.stringify(next.network) : null,
          paused_memory: next.pausedMemory ?? null,
        })
        .where('id', '=', id)
        .execute();
    if (delta !== 0)
      await trx
        .insertInto('ledger')
        .values({
          account_id: cur.accountId,
          delta,
          reason: u.ledgerReason ?? (delta < 0 ? 'sandbox.extend' : 'sandbox.refund'),
          sandbox_id: id,
          created_at: u.at,
        })
        .execute();
    return next;
  });
}

/** The plan and host limits of a move of `cur` into `to` (inside the update's transaction, under its locks). */
async function checkLimits(
  trx: Q,
  cur: SandboxRecord,
  to: SandboxRecordState,
  l: NonNullable<SandboxUpdate['limits']>,
): Promise<void> {
  const entersActive = isLive(to) && !isLive(cur.state);
  if (entersActive && l.maxSandboxes && !HELD_STATES.includes(cur.state)) {
    const held = await countAllLive(trx);
    if (held >= l.maxSandboxes) throw sandboxesFull(held, l.maxSandboxes);
  }
  if (entersActive && l.concurrency !== undefined) {
    const live = await countLive(trx, cur.accountId);
    if (live >= l.concurrency) throw concurrencyLimitError(l.concurrency);
  }
  if (to === 'paused' && l.maxPaused !== undefined) {
    const paused = await countPaused(trx, cur.accountId);
    if (paused >= l.maxPaused) throw pausedLimitError(l.maxPaused);
  }
}

export async function listVolumes(q: Q, accountId: string): Promise<Array<VolumeRecord & { mountedBy: string[] }>> {
  const vols = await q.selectFrom('volumes').selectAll().where('account_id', '=', accountId).orderBy('name').execute();
  const mounts = await q
    .selectFrom('sandbox_mounts as m')
    .innerJoin('sandboxes as x', 'x.id', 'm.sandbox_id')
    .select(['m.volume_name as v', 'm.sandbox_id as s'])
    .where('m.account_id', '=', accountId)
    .where('x.state', 'in', HELD)
    .execute();
  return vols.map((v) => ({
    accountId: v.account_id,
    name: v.name,
    sizeGb: v.size_gb,
    createdAt: v.created_at,
    ...(v.runner !== null ? { runner: v.runner } : {}),
    mountedBy: [...new Set(mounts.filter((m) => m.v === v.name).map((m) => m.s))],
  }));
}

/** Under the account's lock, so a reservation that mounts the volume cannot slip in between. */
export async function createVolume(db: Q, v: VolumeRecord): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await lockAccount(trx, v.accountId);
    await insertVolume(trx, v);
  });
}

/** `conflict` while a sandbox holding host resources mounts it; decided under the account's lock. */
export async function deleteVolume(db: Q, accountId: string, name: string): Promise<boolean> {
  return db.transaction().execute(async (trx) => {
    await lockAccount(trx, accountId);
    const users = await trx
      .selectFrom('sandbox_mounts as m')
      .innerJoin('sandboxes as x', 'x.id', 'm.sandbox_id')
      .select('m.sandbox_id as s')
      .distinct()
      .where('m.account_id', '=', accountId)
      .where('m.volume_name', '=', name)
      .where('x.state', 'in', HELD)
      .execute();
    if (users.length)
      throw new SandboxdError('conflict', `Volume ${name} is mounted by ${users.length} running sandbox(es)`, {
        mountedBy: users.map((u) => u.s),
      });
    const r = await trx
      .deleteFrom('volumes')
      .where('account_id', '=', accountId)
      .where('name', '=', name)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  });
}

/**
 * See `Store.placeSandbox`: under the account's lock (volumes are the account's, so two
 * placements claiming one new volume decide one after the other), then the record's row lock.
 */
export async function place(db: Q, id: string, runner: string): Promise<void> {
  const owner = await db.selectFrom('sandboxes').select('account_id').where('id', '=', id).executeTakeFirst();
  if (!owner) throw new SandboxdError('not_found', 'Sandbox not found');
  await db.transaction().execute(async (trx) => {
    await lockAccount(trx, owner.account_id);
    const row = await trx.selectFrom('sandboxes').select('runner').where('id', '=', id).forUpdate().executeTakeFirst();
    if (!row) throw new SandboxdError('not_found', 'Sandbox not found');
    if (row.runner !== null && row.runner !== runner)
      throw new SandboxdError('conflict', `Sandbox ${id} lives on runner ${row.runner}`, { runner: row.runner });
    const vols = await trx
      .selectFrom('sandbox_mounts as m')
      .innerJoin('volumes as v', (j) =>
        j.onRef('v.account_id', '=', 'm.account_id').onRef('v.name', '=', 'm.volume_name'),
      )
      .select(['v.name as name', 'v.runner as runner'])
      .distinct()
      .where('m.sandbox_id', '=', id)
      .execute();
    const other = vols.find((v) => v.runner !== null && v.runner !== runner);
    if (other)
      throw new SandboxdError('conflict', `Volume ${other.name} lives on runner ${other.runner}`, {
        volume: other.name,
        runner: other.runner,
      });
    await trx.updateTable('sandboxes').set({ runner }).where('id', '=', id).execute();
    if (vols.length)
      await trx
        .updateTable('volumes')
        .set({ runner })
        .where('account_id', '=', owner.account_id)
        .where(
          'name',
          'in',
          vols.map((v) => v.name),
        )
        .where('runner', 'is', null)
        .execute();
  });
}
