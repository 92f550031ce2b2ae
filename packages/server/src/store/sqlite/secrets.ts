import { SandboxdError } from '@sandboxd/protocol';
import { secretsQuotaError } from '../../domain/limits.js';
import type { InjectionQuery, InjectionRecord, SecretRecord, SecretUpdate } from '../store.js';
import type { Db } from './open.js';

interface SecretRow {
  account_id: string;
  name: string;
  ciphertext: string;
  description: string;
  version: number;
  created_at: number;
  updated_at: number;
}
interface InjectionRow {
  id: string;
  account_id: string;
  sandbox_id: string;
  secret: string;
  destination: string;
  method: string;
  status: number | null;
  error: string | null;
  at: number;
}

const toSecret = (r: SecretRow): SecretRecord => ({
  accountId: r.account_id,
  name: r.name,
  ciphertext: r.ciphertext,
  description: r.description,
  version: r.version,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});
const toInjection = (r: InjectionRow): InjectionRecord => ({
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

/** Secret rows and the injections' audit trail; the count limit is decided in an IMMEDIATE transaction. */
export class SqliteSecrets {
  constructor(private readonly db: Db) {}

  create(s: SecretRecord, max: number): void {
    this.db
      .transaction(() => {
        if (this.get(s.accountId, s.name))
          throw new SandboxdError('conflict', `Secret ${s.name} exists`, { name: s.name });
        const n = (
          this.db.prepare('SELECT count(*) AS n FROM secrets WHERE account_id = ?').get(s.accountId) as {
            n: number;
          }
        ).n;
        if (n >= max) throw secretsQuotaError(max);
        this.db
          .prepare(
            'INSERT INTO secrets (account_id, name, ciphertext, description, version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
          )
          .run(s.accountId, s.name, s.ciphertext, s.description, s.version, s.createdAt, s.updatedAt);
      })
      .immediate();
  }

  get(accountId: string, name: string): SecretRecord | null {
    const r = this.db.prepare('SELECT * FROM secrets WHERE account_id = ? AND name = ?').get(accountId, name) as
      | SecretRow
      | undefined;
    return r ? toSecret(r) : null;
  }

  list(accountId: string): SecretRecord[] {
    return (
      this.db.prepare('SELECT * FROM secrets WHERE account_id = ? ORDER BY name').all(accountId) as SecretRow[]
    ).map(toSecret);
  }

  listAll(): SecretRecord[] {
    return (this.db.prepare('SELECT * FROM secrets ORDER BY account_id, name').all() as SecretRow[]).map(toSecret);
  }

  update(accountId: string, name: string, u: SecretUpdate): SecretRecord | null {
    const r = this.db
      .prepare(
        `UPDATE secrets SET
           ciphertext = COALESCE(@ciphertext, ciphertext),
           version = version + CASE WHEN @ciphertext IS NULL THEN 0 ELSE 1 END,
           description = COALESCE(@description, description),
           updated_at = @updatedAt
         WHERE account_id = @accountId AND name = @name RETURNING *`,
      )
      .get({
        accountId,
        name,
        ciphertext: u.ciphertext ?? null,
        description: u.description ?? null,
        updatedAt: u.updatedAt,
      }) as SecretRow | undefined;
    return r ? toSecret(r) : null;
  }

  rewrap(accountId: string, name: string, expected: string, ciphertext: string): boolean {
    return (
      this.db
        .prepare('UPDATE secrets SET ciphertext = ? WHERE account_id = ? AND name = ? AND ciphertext = ?')
        .run(ciphertext, accountId, name, expected).changes > 0
    );
  }

  delete(accountId: string, name: string): boolean {
    return this.db.prepare('DELETE FROM secrets WHERE account_id = ? AND name = ?').run(accountId, name).changes > 0;
  }

  addInjections(rows: InjectionRecord[]): void {
    const ins = this.db.prepare(
      'INSERT INTO secret_injections (id, account_id, sandbox_id, secret, destination, method, status, error, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
    this.db.transaction(() => {
      for (const r of rows)
        ins.run(r.id, r.accountId, r.sandboxId, r.secret, r.destination, r.method, r.status, r.error, r.at);
    })();
  }

  listInjections(accountId: string, q: InjectionQuery): InjectionRecord[] {
    const where = ['account_id = @accountId'];
    if (q.sandboxId !== undefined) where.push('sandbox_id = @sandboxId');
    if (q.secret !== undefined) where.push('secret = @secret');
    if (q.before) where.push('(at < @beforeAt OR (at = @beforeAt AND id < @beforeId))');
    return (
      this.db
        .prepare(`SELECT * FROM secret_injections WHERE ${where.join(' AND ')} ORDER BY at DESC, id DESC LIMIT @limit`)
        .all({
          accountId,
          sandboxId: q.sandboxId ?? null,
          secret: q.secret ?? null,
          beforeAt: q.before?.at ?? null,
          beforeId: q.before?.id ?? null,
          limit: q.limit,
        }) as InjectionRow[]
    ).map(toInjection);
  }

  prune(cutoff: number, max: number): number {
    return this.db.transaction(() => {
      let n = this.db.prepare('DELETE FROM secret_injections WHERE at < ?').run(cutoff).changes;
      const over = this.db
        .prepare('SELECT account_id FROM secret_injections GROUP BY account_id HAVING count(*) > ?')
        .all(max) as { account_id: string }[];
      for (const { account_id } of over) {
        // The newest `max` stay: everything at or below the (max+1)-th newest goes.
        const edge = this.db
          .prepare(
            'SELECT at, id FROM secret_injections WHERE account_id = ? ORDER BY at DESC, id DESC LIMIT 1 OFFSET ?',
          )
          .get(account_id, max) as { at: number; id: string } | undefined;
        if (!edge) continue;
        n += this.db
          .prepare('DELETE FROM secret_injections WHERE account_id = ? AND (at < ? OR (at = ? AND id <= ?))')
          .run(account_id, edge.at, edge.at, edge.id).changes;
      }
      return n;
    })();
  }
}
