import type { Logger } from 'pino';
import type { Config, PlanConfig } from '../config.js';
import type { Clock } from '../domain/clock.js';
import type { RuntimeDriver } from '../runtime/driver.js';
import type { Store } from '../store/store.js';

/** What every service is built from; assembled once in app.ts. */
export interface ServiceDeps {
  store: Store;
  driver: RuntimeDriver;
  clock: Clock;
  config: Readonly<Config>;
  log: Logger;
}

/** The plan of an account; an account on a plan no longer configured falls back to the default. */
export function planOf(config: Readonly<Config>, plan: string): PlanConfig {
  return config.plans[plan] ?? config.plans[config.defaultPlan];
}
