import { SandboxdError } from '@sandboxd/protocol';
import { type Kysely, sql } from 'kysely';
import type { LedgerReason } from '../../domain/billing.js';
import { decodeCursor, encodeCursor, toAccount, toApiKey } from '../sqlite/rows.js';
import type { AccountRecord, ApiKeyRecord, LedgerRow, Page, PageRequest } from '../store.js';
import { balance } from './sandboxes.js';
import type { PgDatabase } from './schema.js';

type Q = Kysely<PgDatabase>;

/** A unique-constraint violation of PostgreSQL. */
const isUniqueViolation = (e: unknown) => (e as { code?: string }).code === '23505';

/** Account, session, login-link, API-key and ledger rows over one PostgreSQL pool. */
export class PgAccounts {
  constructor(private readonly db: Q) {}

  async createAccount(a: AccountRecord, grant: { tokens: number; reason: LedgerReason }) {
    await this.db.transaction().execute(async (trx) => {
      try {
        await trx
          .insertInto('accounts')
          .values({
            id: a.id,
            email: a.email,
            password_hash: a.passwordHash,
            plan: a.plan,
            admin: a.admin,
            created_at: a.createdAt,
          })
          .execute();
      } catch (e) {
        if (isUniqueViolation(e)) throw new SandboxdError('conflict', 'An account with this email exists');
        throw e;
      }
      if (grant.tokens !== 0)
        await trx
          .insertInto('ledger')
          .values({
            account_id: a.id,
            delta: grant.tokens,
            reason: grant.reason,
            sandbox_id: null,
            created_at: a.createdAt,
          })
          .execute();
    });
  }
  async getAccount(id: string) {
    const r = await this.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirst();
    return r ? toAccount(r) : null;
  }
  async getAccountByEmail(email: string) {
    const r = await this.db
      .selectFrom('accounts')
      .selectAll()
      .where(sql<boolean>`lower(email) = lower(${email})`)
      .executeTakeFirst();
    return r ? toAccount(r) : null;
  }
  async listAccounts() {
    return (await this.db.selectFrom('accounts').selectAll().orderBy('created_at').orderBy('id').execute()).map(
      toAccount,
    );
  }
  async countAccounts() {
    const r = await this.db
      .selectFrom('accounts')
      .select((e) => e.fn.countAll<number>().as('n'))
      .executeTakeFirstOrThrow();
    return r.n;
  }
  async setAccountPlan(id: string, plan: string) {
    const r = await this.db.updateTable('accounts').set({ plan }).where('id', '=', id).executeTakeFirst();
    if (Number(r.numUpdatedRows) === 0) throw new SandboxdError('not_found', 'Account not found');
  }

  async createSession(s: { tokenHash: string; accountId: string; createdAt: number; expiresAt: number }) {
    await this.db.deleteFrom('sessions').where('expires_at', '<=', s.createdAt).execute();
    await this.db
      .insertInto('sessions')
      .values({ token_hash: s.tokenHash, account_id: s.accountId, created_at: s.createdAt, expires_at: s.expiresAt })
      .execute();
  }
  async getSession(tokenHash: string, now: number) {
    const r = await this.db
      .selectFrom('sessions')
      .select('account_id')
      .where('token_hash', '=', tokenHash)
      .where('expires_at', '>', now)
      .executeTakeFirst();
    return r ? { accountId: r.account_id } : null;
  }
  async deleteSession(tokenHash: string) {
    await this.db.deleteFrom('sessions').where('token_hash', '=', tokenHash).execute();
  }
  async createLoginLink(l: { tokenHash: string; accountId: string; expiresAt: number }) {
    await this.db
      .insertInto('login_links')
      .values({ token_hash: l.tokenHash, account_id: l.accountId, expires_at: l.expiresAt, used_at: null })
      .execute();
  }
  /** One statement: of concurrent consumers of a link, exactly one gets the account. */
  async consumeLoginLink(tokenHash: string, now: number) {
    const r = await this.db
      .updateTable('login_links')
      .set({ used_at: now })
      .where('token_hash', '=', tokenHash)
      .where('used_at', 'is', null)
      .where('expires_at', '>', now)
      .returning('account_id')
      .executeTakeFirst();
    return r ? r.account_id : null;
  }

  async createApiKey(k: ApiKeyRecord) {
    await this.db
      .insertInto('api_keys')
      .values({
        id: k.id,
        account_id: k.accountId,
        name: k.name,
        prefix: k.prefix,
        key_hash: k.keyHash,
        created_at: k.createdAt,
        last_used_at: k.lastUsedAt,
      })
      .execute();
  }
  async listApiKeys(accountId: string) {
    return (
      await this.db
        .selectFrom('api_keys')
        .selectAll()
        .where('account_id', '=', accountId)
        .orderBy('created_at')
        .orderBy('id')
        .execute()
    ).map(toApiKey);
  }
  async findApiKeyByHash(keyHash: string) {
    const r = await this.db.selectFrom('api_keys').selectAll().where('key_hash', '=', keyHash).executeTakeFirst();
    return r ? toApiKey(r) : null;
  }
  async touchApiKey(id: string, at: number) {
    await this.db.updateTable('api_keys').set({ last_used_at: at }).where('id', '=', id).execute();
  }
  async deleteApiKey(accountId: string, id: string) {
    const r = await this.db
      .deleteFrom('api_keys')
      .where('id', '=', id)
      .where('account_id', '=', accountId)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  async addLedger(row: Omit<LedgerRow, 'id'>): Promise<number> {
    const r = await this.db
      .insertInto('ledger')
      .values({
        account_id: row.accountId,
        delta: row.delta,
        reason: row.reason,
        sandbox_id: row.sandboxId,
        created_at: row.createdAt,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    return r.id;
  }
  async balance(accountId: string) {
    return balance(this.db, accountId);
  }
  async listLedger(accountId: string, page: PageRequest): Promise<Page<LedgerRow>> {
    const before = page.cursor ? Number(decodeCursor(page.cursor)[0]) : Number.MAX_SAFE_INTEGER;
    const rows = await this.db
      .selectFrom('ledger')
      .selectAll()
      .where('account_id', '=', accountId)
      .where('id', '<', before)
      .orderBy('id', 'desc')
      .limit(page.limit + 1)
      .execute();
    const items: LedgerRow[] = rows.slice(0, page.limit).map((r) => ({
      id: r.id,
      accountId: r.account_id,
      delta: r.delta,
      reason: r.reason as LedgerReason,
      sandboxId: r.sandbox_id,
      createdAt: r.created_at,
    }));
    const last = items.at(-1);
    return rows.length > page.limit && last ? { items, nextCursor: encodeCursor([last.id, last.id]) } : { items };
  }
}
