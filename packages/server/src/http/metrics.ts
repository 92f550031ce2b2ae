import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Prometheus metrics of one server; a registry per instance, so tests can build many. */
export class Metrics {
  readonly registry = new Registry();
  readonly createSeconds: Histogram<'outcome'>;
  readonly execSeconds: Histogram<'mode'>;
  readonly errors: Counter<'code'>;

  /**
   * `countByState` feeds the gauge of sandbox records by state (SandboxService.countByState);
   * `recoveryPending`, the gauge of an earlier run's leftovers not yet removed from the host.
   */
  constructor(countByState: () => Promise<Record<string, number>>, recoveryPending: () => number = () => 0) {
    collectDefaultMetrics({ register: this.registry, prefix: 'sandboxd_process_' });
    this.createSeconds = new Histogram({
      name: 'sandboxd_sandbox_create_seconds',
      help: 'Time to create a sandbox, request to started.',
      labelNames: ['outcome'],
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [this.registry],
    });
    this.execSeconds = new Histogram({
      name: 'sandboxd_exec_seconds',
      help: 'Time of exec requests.',
      labelNames: ['mode'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60],
      registers: [this.registry],
    });
    this.errors = new Counter({
      name: 'sandboxd_http_errors_total',
      help: 'Error responses by code.',
      labelNames: ['code'],
      registers: [this.registry],
    });
    new Gauge({
      name: 'sandboxd_sandboxes',
      help: 'Sandbox records by state.',
      labelNames: ['state'],
      registers: [this.registry],
      async collect() {
        const counts = await countByState();
        for (const [state, n] of Object.entries(counts)) this.set({ state }, n);
      },
    });
    new Gauge({
      name: 'sandboxd_recovery_pending',
      help: 'Leftovers of an earlier run (sandboxes, networks, roots) not yet removed from the host.',
      registers: [this.registry],
      collect() {
        this.set(recoveryPending());
      },
    });
  }
}
