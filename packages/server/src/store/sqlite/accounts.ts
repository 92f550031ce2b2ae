import type { Db } from './open.js';
import { toAccount, toApiKey } from './rows.js';
import type { AccountRecord, ApiKeyRecord } from '../store.js';
import type { LedgerReason } from '../../domain/billing.js';
import { SandboxdError } from '@sandboxd/protocol';

/** Account, session, login-link and API-key persistence over one SQLite handle. */
export class SqliteAccounts {
  constructor(private readonly db: Db) {}

  createAccount(a: AccountRecord, grant: { tokens: number; reason: LedgerReason }): void {
    this.db
      .transaction(() => {
        try {
          this.db
            .prepare(
              'INSERT INTO accounts (id, email, password_hash, plan, admin, created_at) VALUES (?, ?, ?, ?, ?, ?)',
            )
            .run(a.id, a.email, a.passwordHash, a.plan, a.admin ? 1 : 0, a.createdAt);
        } catch (e) {
          if ((e as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE')
            throw new SandboxdError('conflict', 'An account with this email exists');
          throw e;
        }
        if (grant.tokens !== 0) {
          this.db
            .prepare('INSERT INTO ledger (account_id, delta, reason, sandbox_id, created_at) VALUES (?, ?, ?, NULL, ?)')
            .run(a.id, grant.tokens, grant.reason, a.createdAt);
        }
      })
      .immediate();
  }
  getAccount(id: string): AccountRecord | null {
    const r = this.db.prepare('SELECT * FROM accounts WHERE id = ?').get(id) as
      | Parameters<typeof toAccount>[0]
      | undefined;
    return r ? toAccount(r) : null;
  }
  getAccountByEmail(email: string): AccountRecord | null {
    const r = this.db.prepare('SELECT * FROM accounts WHERE email = ?').get(email) as
      | Parameters<typeof toAccount>[0]
      | undefined;
    return r ? toAccount(r) : null;
  }
  listAccounts(): AccountRecord[] {
    return (
      this.db.prepare('SELECT * FROM accounts ORDER BY created_at, id').all() as Parameters<typeof toAccount>[0][]
    ).map(toAccount);
  }
  countAccounts(): number {
    return (this.db.prepare('SELECT COUNT(*) AS n FROM accounts').get() as { n: number }).n;
  }
  setAccountPlan(id: string, plan: string): void {
    const r = this.db.prepare('UPDATE accounts SET plan = ? WHERE id = ?').run(plan, id);
    if (r.changes === 0) throw new SandboxdError('not_found', 'Account not found');
  }

  createSession(s: { tokenHash: string; accountId: string; createdAt: number; expiresAt: number }): void {
    this.db.prepare('DELETE FROM sessions WHERE expires_at <= ?').run(s.createdAt);
    this.db
      .prepare('INSERT INTO sessions (token_hash, account_id, created_at, expires_at) VALUES (?, ?, ?, ?)')
      .run(s.tokenHash, s.accountId, s.createdAt, s.expiresAt);
  }
  getSession(tokenHash: string, now: number): { accountId: string } | null {
    const r = this.db
      .prepare('SELECT account_id FROM sessions WHERE token_hash = ? AND expires_at > ?')
      .get(tokenHash, now) as { account_id: string } | undefined;
    return r ? { accountId: r.account_id } : null;
  }
  deleteSession(tokenHash: string): void {
    this.db.prepare('DELETE FROM sessions WHERE token_hash = ?').run(tokenHash);
  }
  createLoginLink(l: { tokenHash: string; accountId: string; expiresAt: number }): void {
    this.db
      .prepare('INSERT INTO login_links (token_hash, account_id, expires_at) VALUES (?, ?, ?)')
      .run(l.tokenHash, l.accountId, l.expiresAt);
  }
  consumeLoginLink(tokenHash: string, now: number): string | null {
    return this.db
      .transaction(() => {
        const r = this.db
          .prepare('SELECT account_id FROM login_links WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?')
          .get(tokenHash, now) as { account_id: string } | undefined;
        if (!r) return null;
        this.db.prepare('UPDATE login_links SET used_at = ? WHERE token_hash = ?').run(now, tokenHash);
        return r.account_id;
      })
      .immediate();
  }

  createApiKey(k: ApiKeyRecord): void {
    this.db
      .prepare(
        'INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at, last_used_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
      )
      .run(k.id, k.accountId, k.name, k.prefix, k.keyHash, k.createdAt, k.lastUsedAt);
  }
  listApiKeys(accountId: string): ApiKeyRecord[] {
    return (
      this.db
        .prepare('SELECT * FROM api_keys WHERE account_id = ? ORDER BY created_at, id')
        .all(accountId) as Parameters<typeof toApiKey>[0][]
    ).map(toApiKey);
  }
  findApiKeyByHash(keyHash: string): ApiKeyRecord | null {
    const r = this.db.prepare('SELECT * FROM api_keys WHERE key_hash = ?').get(keyHash) as
      | Parameters<typeof toApiKey>[0]
      | undefined;
    return r ? toApiKey(r) : null;
  }
  touchApiKey(id: string, at: number): void {
    this.db.prepare('UPDATE api_keys SET last_used_at = ? WHERE id = ?').run(at, id);
  }
  deleteApiKey(accountId: string, id: string): boolean {
    return this.db.prepare('DELETE FROM api_keys WHERE id = ? AND account_id = ?').run(id, accountId).changes > 0;
  }
}
