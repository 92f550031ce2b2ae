/**
 * What the store conformance suites share: the target they run against, a sandbox record
 * to reserve, and the set-up of one store or of two on one database.
 */
import type { SandboxdError } from '@sandboxd/protocol';
import type { SandboxRecord } from '../../domain/sandbox.js';
import type { Store } from '../store.js';

/** What the suite needs: a fresh, empty store per test. */
export interface StoreTarget {
  name: string;
  make: () => Promise<Store>;
  /**
   * Two stores on one fresh, empty database, each with its own connections: what two
   * server processes (replicas) sharing the database see.
   */
  makePair: () => Promise<[Store, Store]>;
}

/** A record of sandbox `id` of `accountId` in `creating`, as a create reserves it. */
export const rec = (id: string, accountId: string, createdAt: number): SandboxRecord => ({
  id,
  accountId,
  name: `n-${id}`,
  image: 'img',
  region: 'local',
  env: { A: '1' },
  volumes: [],
  createdAt,
  state: 'creating',
  stopAt: createdAt + 60_000,
  reservedMinutes: 0,
  endedAt: null,
  details: null,
});

/** A snapshot record of acc_a's sandbox s1 named `name`, in `creating`, as a snapshot begins. */
export const snapshotRecord = (name: string, createdAt = 1) => ({
  accountId: 'acc_a',
  name,
  state: 'creating' as const,
  sizeBytes: 0,
  baseImage: 'img',
  sandboxId: 's1',
  createdAt,
});

/** Runs `fn` on a fresh store of `target` holding account acc_a with 10 tokens. */
export function storeRunner(target: StoreTarget) {
  return async (fn: (s: Store) => Promise<void>) => {
    const s = await target.make();
    await s.createAccount(
      { id: 'acc_a', email: 'a@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
      { tokens: 10, reason: 'signup' },
    );
    try {
      await fn(s);
    } finally {
      await s.close();
    }
  };
}

/** Runs `fn` on two stores on one database ("two replicas") of `target`, with `tokens` in acc_a. */
export function pairRunner(target: StoreTarget) {
  return async (tokens: number, fn: (a: Store, b: Store) => Promise<void>) => {
    const [a, b] = await target.makePair();
    try {
      await a.createAccount(
        { id: 'acc_a', email: 'a@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
        { tokens, reason: 'signup' },
      );
      await fn(a, b);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  };
}

/** How many of `rs` were fulfilled (`ok`) and how many failed with each error kind. */
export function outcomes(rs: PromiseSettledResult<unknown>[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of rs) {
    const k = r.status === 'fulfilled' ? 'ok' : ((r.reason as SandboxdError).kind ?? String(r.reason));
    out[k] = (out[k] ?? 0) + 1;
  }
  return out;
}
