import { SandboxdError } from '@sandboxd/protocol';
import { type Kysely, sql } from 'kysely';
import { snapshotQuotaError } from '../../domain/limits.js';
import type { SnapshotRecord } from '../store.js';
import { lockAccount } from './sandboxes.js';
import type { PgDatabase } from './schema.js';

type Q = Kysely<PgDatabase>;

const toSnapshot = (r: PgDatabase['snapshots']): SnapshotRecord => ({
  accountId: r.account_id,
  name: r.name,
  state: r.state,
  sizeBytes: r.size_bytes,
  baseImage: r.base_image,
  sandboxId: r.sandbox_id,
  createdAt: r.created_at,
});

/** Snapshot rows; the quota is decided under the account's row lock. */
export class PgSnapshots {
  constructor(private readonly db: Q) {}

  async bytes(q: Q, accountId: string): Promise<number> {
    const r = await q
      .selectFrom('snapshots')
      .select(sql<number>`COALESCE(SUM(size_bytes), 0)::bigint`.as('b'))
      .where('account_id', '=', accountId)
      .where('state', '=', 'ready')
      .executeTakeFirstOrThrow();
    return r.b;
  }

  async begin(s: SnapshotRecord, quotaBytes: number): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await lockAccount(trx, s.accountId);
      if (await this.get(trx, s.accountId, s.name))
        throw new SandboxdError('conflict', `Snapshot ${s.name} exists`, { name: s.name });
      const used = await this.bytes(trx, s.accountId);
      if (used >= quotaBytes) throw snapshotQuotaError(used, quotaBytes);
      await trx
        .insertInto('snapshots')
        .values({
          account_id: s.accountId,
          name: s.name,
          state: 'creating',
          size_bytes: 0,
          base_image: s.baseImage,
          sandbox_id: s.sandboxId,
          created_at: s.createdAt,
        })
        .execute();
    });
  }

  async finish(accountId: string, name: string, sizeBytes: number, quotaBytes: number): Promise<SnapshotRecord> {
    return this.db.transaction().execute(async (trx) => {
      await lockAccount(trx, accountId);
      const cur = await this.get(trx, accountId, name);
      if (!cur) throw new SandboxdError('not_found', 'Snapshot not found');
      const used = await this.bytes(trx, accountId);
      if (used + sizeBytes > quotaBytes) throw snapshotQuotaError(used, quotaBytes, sizeBytes);
      await trx
        .updateTable('snapshots')
        .set({ state: 'ready', size_bytes: sizeBytes })
        .where('account_id', '=', accountId)
        .where('name', '=', name)
        .execute();
      return { ...cur, state: 'ready' as const, sizeBytes };
    });
  }

  async get(q: Q, accountId: string, name: string): Promise<SnapshotRecord | null> {
    const r = await q
      .selectFrom('snapshots')
      .selectAll()
      .where('account_id', '=', accountId)
      .where('name', '=', name)
      .executeTakeFirst();
    return r ? toSnapshot(r) : null;
  }

  async list(accountId: string): Promise<SnapshotRecord[]> {
    return (
      await this.db
        .selectFrom('snapshots')
        .selectAll()
        .where('account_id', '=', accountId)
        .orderBy('created_at', 'desc')
        .orderBy('name')
        .execute()
    ).map(toSnapshot);
  }

  async listAll(): Promise<SnapshotRecord[]> {
    return (await this.db.selectFrom('snapshots').selectAll().execute()).map(toSnapshot);
  }

  async delete(accountId: string, name: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom('snapshots')
      .where('account_id', '=', accountId)
      .where('name', '=', name)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }
}
