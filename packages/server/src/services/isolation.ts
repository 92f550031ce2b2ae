/**
 * Isolation tiers above the driver: which tier a create gets (the plan's allowed list and
 * default, then what the runtime offers), and whether a tier keeps memory on disk (pause to
 * disk, fork). docs/api.md, Isolation tiers.
 */
import { type Isolation, SandboxdError } from '@sandboxd/protocol';
import { type PlanConfig, planIsolation } from '../config-plans.js';
import type { IsolationSupport, RuntimeDriver } from '../runtime/driver.js';

/**
 * The image label that names the isolation tier of sandboxes made through E2B's door from an
 * image of the account's own (a template of sandboxd's builds, a snapshot) when the template
 * config names none (`LABEL org.sandboxd.isolation=gvisor` in the Dockerfile).
 */
export const ISOLATION_LABEL = 'org.sandboxd.isolation';

/** What a driver without `isolations()` offers: containers, without memory snapshots. */
export const CONTAINER_ONLY: readonly IsolationSupport[] = [
  { isolation: 'container', runtime: 'crun', memorySnapshots: false },
];

/** The tiers the driver offers now (`isolations()`; absent: containers only). */
export function offeredTiers(driver: Pick<RuntimeDriver, 'isolations'>): IsolationSupport[] {
  return driver.isolations?.() ?? CONTAINER_ONLY.map((t) => ({ ...t }));
}

/**
 * The tier of a create: `asked`, else the plan's default (the instance's `SANDBOXD_ISOLATION`
 * when the plan names none). 403 `quota` when the plan does not allow it (details: the
 * plan's `allowed` list); 400 `validation` at `/isolation` when the runtime does not offer it
 * (details: what it offers). Containers are always offered: every runtime runs them.
 */
export function createIsolation(
  asked: Isolation | undefined,
  c: { plan: PlanConfig; planName: string; instanceDefault: Isolation; driver: Pick<RuntimeDriver, 'isolations'> },
): Isolation {
  const { allowed, default: dflt } = planIsolation(c.plan, c.instanceDefault);
  const isolation = asked ?? dflt;
  if (!allowed.includes(isolation))
    throw new SandboxdError(
      'quota',
      `isolation ${isolation} is not allowed on plan ${c.planName} (allowed: ${allowed.join(', ')})`,
      { quota: 'isolation', isolation, allowed: [...allowed], plan: c.planName },
    );
  const offered = offeredTiers(c.driver).map((t) => t.isolation);
  if (isolation !== 'container' && !offered.includes(isolation)) {
    const message = `isolation ${isolation} is not offered by this host (it offers ${offered.join(', ') || 'container'})`;
    throw new SandboxdError('validation', `/isolation: ${message}`, [
      { in: 'body', path: '/isolation', message, offered },
    ]);
  }
  return isolation;
}

/** Whether sandboxes of `isolation` can keep their memory on disk here (pause to disk, fork). */
export function hasMemorySnapshots(driver: Pick<RuntimeDriver, 'isolations'>, isolation: Isolation): boolean {
  return offeredTiers(driver).some((t) => t.isolation === isolation && t.memorySnapshots);
}
