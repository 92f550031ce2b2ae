/**
 * The behaviour every Store must show, as node:test suites run against each store
 * (sqlite/store.test.ts, postgres/store.test.ts): counters, sandboxes, volumes and
 * snapshots, accounts, two stores racing on one database, image builds, and secrets. The parts live in
 * conformance/.
 */
import assert from 'node:assert/strict';
import type { Store } from './store.js';
import { runAccountConformance } from './conformance/accounts.js';
import { runBuildConformance } from './conformance/builds.js';
import { runConcurrencyConformance } from './conformance/concurrency.js';
import { runCounterConformance } from './conformance/counters.js';
import { runSandboxConformance } from './conformance/sandboxes.js';
import { runSecretConformance } from './conformance/secrets.js';
import { runVolumeConformance } from './conformance/volumes.js';
import type { StoreTarget } from './conformance/support.js';

export { runCounterConformance } from './conformance/counters.js';
export type { StoreTarget } from './conformance/support.js';

/**
 * The balance migration tests of both stores: the ledger an older database holds (account
 * `a`: rows summing to 95; account `b`: none), as SQL VALUES of
 * `(account_id, delta, reason, sandbox_id, created_at)`, and what the migrated store must
 * show of it ({@link checkFilledBalances}).
 */
export const OLD_LEDGER_VALUES =
  "('a', 100, 'signup', NULL, 1), ('a', -7, 'sandbox.create', 's1', 2), ('a', 2, 'sandbox.refund', 's1', 3)";

/** Balances filled from {@link OLD_LEDGER_VALUES}, then moved by every later ledger row. */
export async function checkFilledBalances(s: Store): Promise<void> {
  assert.equal(await s.balance('a'), 95);
  assert.equal(await s.balance('b'), 0);
  await s.addLedger({ accountId: 'a', delta: -5, reason: 'sandbox.extend', sandboxId: 's1', createdAt: 4 });
  await s.addLedger({ accountId: 'b', delta: 3, reason: 'admin.grant', sandboxId: null, createdAt: 5 });
  assert.equal(await s.balance('a'), 90);
  assert.equal(await s.balance('b'), 3);
}

/** Registers the behaviour every Store must show with node's test runner. */
export function runStoreConformance(target: StoreTarget): void {
  runCounterConformance(target);
  runSandboxConformance(target);
  runVolumeConformance(target);
  runAccountConformance(target);
  runConcurrencyConformance(target);
  runBuildConformance(target);
  runSecretConformance(target);
}
