export { buildApp, createLogger, type BuildAppOptions, type Sandboxd } from './app.js';
export { loadConfig, ConfigError, DEFAULT_PLANS, type Config, type PlanConfig } from './config.js';
export type { RuntimeDriver } from './runtime/driver.js';
export { FakeDriver, createFakeDriver } from './runtime/fake/driver.js';
export { SqliteStore } from './store/sqlite/store.js';
export type { Store } from './store/store.js';
export { OffsetClock, ManualClock, systemClock, type Clock } from './domain/clock.js';
export {
  watchK8sRunners,
  parseK8sRunners,
  type K8sRunner,
  type K8sRunnersWatch,
  type WatchK8sRunnersOptions,
} from './runtime/remote/k8s-discovery.js';
