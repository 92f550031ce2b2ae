import type { Logger } from 'pino';
import type { Config, PlanConfig } from '../config.js';
import type { Clock } from '../domain/clock.js';
import type { Presence } from '../lifecycle/presence.js';
import type { RuntimeDriver } from '../runtime/driver.js';
import type { Store } from '../store/store.js';

/**
 * What services are built from, assembled once in app.ts. Each service takes the part of it
 * it uses (a `Pick`), so its constructor says what it touches.
 */
export interface ServiceDeps {
  store: Store;
  driver: RuntimeDriver;
  clock: Clock;
  config: Readonly<Config>;
  log: Logger;
  /** This process among those sharing the database: the owner named by records of work in progress. */
  presence: Presence;
}

/** The plan of an account; an account on a plan no longer configured falls back to the default. */
export function planOf(config: Readonly<Config>, plan: string): PlanConfig {
  return config.plans[plan] ?? config.plans[config.defaultPlan];
}
