/**
 * The composition of role `api`'s runtime: the fleet of runners (`SANDBOXD_RUNNERS`) that
 * buildApp (app.ts) uses as its driver, and the per-runner gauges of /metrics.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { ConfigError, type Config } from './config.js';
import type { Clock } from './domain/clock.js';
import type { Metrics } from './http/metrics.js';
import { FleetDriver, type RunnerStatus } from './runtime/remote/fleet/fleet.js';
import type { RunnerDriver } from './runtime/remote/fleet/member.js';
import { fixedUrls, type RunnerUrls } from './runtime/remote/fleet/records.js';
import { runnerRecords } from './services/runner-records.js';
import type { Store } from './store/store.js';

/**
 * How a runner URL becomes a driver (default a RemoteDriver; tests give fakes) and whether
 * each runner's health is checked on timers (default true; tests call `fleet.refresh()`).
 */
export interface FleetOptions {
  connect?: (url: string) => RunnerDriver;
  poll?: boolean;
  /** `k8s:` runners: the Kubernetes API to ask (default the pod's service account). */
  kubeConfig?: KubeConfig;
}

/**
 * Role `api`: the {@link FleetDriver} over the runners `SANDBOXD_RUNNERS` names (URLs, or
 * the endpoints of a Kubernetes Service, watched), each reached by a RemoteDriver with the
 * runner token; the records say where each sandbox and volume lives.
 */
export async function createFleet(
  config: Readonly<Config>,
  store: Store,
  log: Logger,
  clock: Clock,
  o: FleetOptions = {},
): Promise<FleetDriver> {
  const runners = config.runners;
  if (!runners) throw new ConfigError('SANDBOXD_RUNNERS is required when SANDBOXD_ROLE is api');
  let source: RunnerUrls = fixedUrls(runners.kind === 'urls' ? runners.urls : []);
  if (runners.kind === 'k8s') {
    if (!o.kubeConfig && !process.env.KUBERNETES_SERVICE_HOST)
      throw new ConfigError(
        `SANDBOXD_RUNNERS=k8s:${runners.namespace}/${runners.service} finds runners through the Kubernetes API of the pod it runs in, and this process is not in a pod (KUBERNETES_SERVICE_HOST is unset): give runner URLs instead`,
      );
    const { watchK8sRunners } = await import('./runtime/remote/k8s-discovery.js');
    source = {
      start: (onUrls) =>
        watchK8sRunners({
          namespace: runners.namespace,
          service: runners.service,
          onChange: (found) => onUrls(found.map((r) => r.url)),
          log: log.child({ component: 'discovery' }),
          kubeConfig: o.kubeConfig,
        }),
    };
  }
  let connect = o.connect;
  if (!connect) {
    const { RemoteDriver } = await import('./runtime/remote/driver.js');
    connect = (url) => new RemoteDriver({ url, token: config.runnerToken ?? '' });
  }
  return new FleetDriver({
    source,
    connect,
    records: runnerRecords(store),
    downAfterMs: config.runnerDownMs,
    floors: { memoryBytes: config.createMinMemoryMb * 2 ** 20, diskBytes: config.createMinFreeMb * 2 ** 20 },
    log: log.child({ component: 'fleet' }),
    now: () => clock.now(),
    poll: o.poll,
  });
}

/** Per-runner gauges (label `runner`: its node name, or its URL until it answered). */
export function runnerGauges(metrics: Metrics, runners: () => RunnerStatus[]): void {
  const by = (value: (r: RunnerStatus) => number | null) => () => {
    const out: Record<string, number> = {};
    for (const r of runners()) out[r.node ?? r.url] = value(r) ?? Number.NaN;
    return out;
  };
  metrics.gaugeBy(
    'sandboxd_runner_up',
    '1 while the runner answers (creates may go there), else 0.',
    'runner',
    by((r) => (r.state === 'up' ? 1 : 0)),
  );
  metrics.gaugeBy(
    'sandboxd_runner_sandboxes',
    'Sandboxes the runner holds (running or paused), as it last reported.',
    'runner',
    by((r) => r.sandboxes),
  );
  metrics.gaugeBy(
    'sandboxd_runner_memory_available_bytes',
    "MemAvailable of the runner's host, as last reported.",
    'runner',
    by((r) => r.memoryAvailableBytes),
  );
  metrics.gaugeBy(
    'sandboxd_runner_disk_free_bytes',
    "Free space of the runner's data dir, as last reported.",
    'runner',
    by((r) => r.diskFreeBytes),
  );
  metrics.gaugeBy(
    'sandboxd_runner_addresses_free',
    'Sandbox network addresses left on the runner, as last reported.',
    'runner',
    by((r) => r.addresses?.free ?? null),
  );
}
