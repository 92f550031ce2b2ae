import { SandboxdError } from '@sandboxd/protocol';
import { snapshotQuotaError } from '../../domain/limits.js';
import type { SnapshotRecord } from '../store.js';
import type { Db } from './open.js';

interface SnapshotRow {
  account_id: string;
  name: string;
  state: 'creating' | 'ready';
  size_bytes: number;
  base_image: string;
  sandbox_id: string;
  created_at: number;
}

const toSnapshot = (r: SnapshotRow): SnapshotRecord => ({
  accountId: r.account_id,
  name: r.name,
  state: r.state,
  sizeBytes: r.size_bytes,
  baseImage: r.base_image,
  sandboxId: r.sandbox_id,
  createdAt: r.created_at,
});

/** Snapshot rows; the quota is decided inside IMMEDIATE transactions. */
export class SqliteSnapshots {
  constructor(private readonly db: Db) {}

  bytes(accountId: string): number {
    return (
      this.db
        .prepare("SELECT COALESCE(SUM(size_bytes), 0) AS b FROM snapshots WHERE account_id = ? AND state = 'ready'")
        .get(accountId) as { b: number }
    ).b;
  }

  begin(s: SnapshotRecord, quotaBytes: number): void {
    this.db
      .transaction(() => {
        if (this.get(s.accountId, s.name))
          throw new SandboxdError('conflict', `Snapshot ${s.name} exists`, { name: s.name });
        const used = this.bytes(s.accountId);
        if (used >= quotaBytes) throw snapshotQuotaError(used, quotaBytes);
        this.db
          .prepare(
            'INSERT INTO snapshots (account_id, name, state, size_bytes, base_image, sandbox_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
          )
          .run(s.accountId, s.name, 'creating', 0, s.baseImage, s.sandboxId, s.createdAt);
      })
      .immediate();
  }

  finish(accountId: string, name: string, sizeBytes: number, quotaBytes: number): SnapshotRecord {
    return this.db
      .transaction(() => {
        const cur = this.get(accountId, name);
        if (!cur) throw new SandboxdError('not_found', 'Snapshot not found');
        const used = this.bytes(accountId);
        if (used + sizeBytes > quotaBytes) throw snapshotQuotaError(used, quotaBytes, sizeBytes);
        this.db
          .prepare("UPDATE snapshots SET state = 'ready', size_bytes = ? WHERE account_id = ? AND name = ?")
          .run(sizeBytes, accountId, name);
        return { ...cur, state: 'ready' as const, sizeBytes };
      })
      .immediate();
  }

  get(accountId: string, name: string): SnapshotRecord | null {
    const r = this.db.prepare('SELECT * FROM snapshots WHERE account_id = ? AND name = ?').get(accountId, name) as
      | SnapshotRow
      | undefined;
    return r ? toSnapshot(r) : null;
  }

  list(accountId: string): SnapshotRecord[] {
    return (
      this.db
        .prepare('SELECT * FROM snapshots WHERE account_id = ? ORDER BY created_at DESC, name')
        .all(accountId) as SnapshotRow[]
    ).map(toSnapshot);
  }

  listAll(): SnapshotRecord[] {
    return (this.db.prepare('SELECT * FROM snapshots').all() as SnapshotRow[]).map(toSnapshot);
  }

  delete(accountId: string, name: string): boolean {
    return this.db.prepare('DELETE FROM snapshots WHERE account_id = ? AND name = ?').run(accountId, name).changes > 0;
  }
}
