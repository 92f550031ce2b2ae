import { SandboxdError } from '@sandboxd/protocol';
import { type Kysely, sql } from 'kysely';
import { secretsQuotaError } from '../../domain/limits.js';
import type { InjectionQuery, InjectionRecord, SecretRecord, SecretUpdate } from '../store.js';
import { lockAccount } from './sandboxes.js';
import type { PgDatabase } from './schema.js';

type Q = Kysely<PgDatabase>;

const toSecret = (r: PgDatabase['secrets']): SecretRecord => ({
  accountId: r.account_id,
  name: r.name,
  ciphertext: r.ciphertext,
  description: r.description,
  version: r.version,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});
const toInjection = (r: PgDatabase['secret_injections']): InjectionRecord => ({
  id: r.id,
  accountId: r.account_id,
  sandboxId: r.sandbox_id,
  secret: r.secret,
  destination: r.destination,
  method: r.method,
  status: r.status,
  error: r.error,
  at: r.at,
});

/** Secret rows and the injections' audit trail; the count limit is decided under the account's row lock. */
export class PgSecrets {
  constructor(private readonly db: Q) {}

  async create(s: SecretRecord, max: number): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await lockAccount(trx, s.accountId);
      if (await this.get(trx, s.accountId, s.name))
        throw new SandboxdError('conflict', `Secret ${s.name} exists`, { name: s.name });
      const { n } = await trx
        .selectFrom('secrets')
        .select(sql<number>`count(*)::int`.as('n'))
        .where('account_id', '=', s.accountId)
        .executeTakeFirstOrThrow();
      if (n >= max) throw secretsQuotaError(max);
      await trx
        .insertInto('secrets')
        .values({
          account_id: s.accountId,
          name: s.name,
          ciphertext: s.ciphertext,
          description: s.description,
          version: s.version,
          created_at: s.createdAt,
          updated_at: s.updatedAt,
        })
        .execute();
    });
  }

  async get(q: Q, accountId: string, name: string): Promise<SecretRecord | null> {
    const r = await q
      .selectFrom('secrets')
      .selectAll()
      .where('account_id', '=', accountId)
      .where('name', '=', name)
      .executeTakeFirst();
    return r ? toSecret(r) : null;
  }

  async list(accountId: string): Promise<SecretRecord[]> {
    const rows = await this.db
      .selectFrom('secrets')
      .selectAll()
      .where('account_id', '=', accountId)
      .orderBy('name')
      .execute();
    return rows.map(toSecret);
  }

  async listAll(): Promise<SecretRecord[]> {
    const rows = await this.db.selectFrom('secrets').selectAll().orderBy('account_id').orderBy('name').execute();
    return rows.map(toSecret);
  }

  async update(accountId: string, name: string, u: SecretUpdate): Promise<SecretRecord | null> {
    const r = await this.db
      .updateTable('secrets')
      .set({
        ...(u.ciphertext !== undefined ? { ciphertext: u.ciphertext, version: sql<number>`version + 1` } : {}),
        ...(u.description !== undefined ? { description: u.description } : {}),
        updated_at: u.updatedAt,
      })
      .where('account_id', '=', accountId)
      .where('name', '=', name)
      .returningAll()
      .executeTakeFirst();
    return r ? toSecret(r) : null;
  }

  async rewrap(accountId: string, name: string, expected: string, ciphertext: string): Promise<boolean> {
    const r = await this.db
      .updateTable('secrets')
      .set({ ciphertext })
      .where('account_id', '=', accountId)
      .where('name', '=', name)
      .where('ciphertext', '=', expected)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  async delete(accountId: string, name: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom('secrets')
      .where('account_id', '=', accountId)
      .where('name', '=', name)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  async addInjections(rows: InjectionRecord[]): Promise<void> {
    if (!rows.length) return;
    await this.db
      .insertInto('secret_injections')
      .values(
        rows.map((r) => ({
          id: r.id,
          account_id: r.accountId,
          sandbox_id: r.sandboxId,
          secret: r.secret,
          destination: r.destination,
          method: r.method,
          status: r.status,
          error: r.error,
          at: r.at,
        })),
      )
      .execute();
  }

  async listInjections(accountId: string, q: InjectionQuery): Promise<InjectionRecord[]> {
    let query = this.db.selectFrom('secret_injections').selectAll().where('account_id', '=', accountId);
    if (q.sandboxId !== undefined) query = query.where('sandbox_id', '=', q.sandboxId);
    if (q.secret !== undefined) query = query.where('secret', '=', q.secret);
    const before = q.before;
    if (before)
      query = query.where((eb) =>
        eb.or([eb('at', '<', before.at), eb.and([eb('at', '=', before.at), eb('id', '<', before.id)])]),
      );
    const rows = await query.orderBy('at', 'desc').orderBy('id', 'desc').limit(q.limit).execute();
    return rows.map(toInjection);
  }

  async prune(cutoff: number, max: number): Promise<number> {
    return this.db.transaction().execute(async (trx) => {
      let n = Number(
        (await trx.deleteFrom('secret_injections').where('at', '<', cutoff).executeTakeFirst()).numDeletedRows,
      );
      const r = await sql`
        DELETE FROM secret_injections WHERE id IN (
          SELECT id FROM (
            SELECT id, row_number() OVER (PARTITION BY account_id ORDER BY at DESC, id DESC) AS rn
            FROM secret_injections
          ) ranked WHERE rn > ${max}
        )`.execute(trx);
      n += Number(r.numAffectedRows ?? 0);
      return n;
    });
  }
}
