import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { CapacityReport } from '../services/capacity.js';

const RESOURCES: CapacityReport['full'] = ['sandboxes', 'memory', 'disk', 'addresses'];

/** Prometheus metrics of one server; a registry per instance, so tests can build many. */
export class Metrics {
  readonly registry = new Registry();
  readonly createSeconds: Histogram<'outcome'>;
  readonly execSeconds: Histogram<'mode'>;
  readonly errors: Counter<'code'>;

  /**
   * `countByState` feeds the gauge of sandbox records by state (SandboxService.countByState),
   * `capacity` the `sandboxd_capacity_*` gauges (CapacityService.report), `recoveryPending`
   * the gauge of an earlier run's leftovers not yet removed from the host.
   */
  constructor(
    countByState: () => Promise<Record<string, number>>,
    capacity: () => Promise<CapacityReport>,
    recoveryPending: () => number = () => 0,
  ) {
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
    this.capacityGauges(capacity);
  }

  /**
   * What the host has left (the figures of /healthz's `capacity`), one report per scrape.
   * A figure the runtime cannot tell is NaN; a limit that is off is +Inf (`maxSandboxes`) or 0 (floors).
   */
  private capacityGauges(capacity: () => Promise<CapacityReport>): void {
    let scrape: Promise<CapacityReport> | null = null;
    const report = () => {
      scrape ??= capacity().finally(() => setImmediate(() => (scrape = null)));
      return scrape;
    };
    const known = (n: number | null | undefined) => (n === null || n === undefined ? Number.NaN : n);
    const gauge = (name: string, help: string, value: (r: CapacityReport) => number) =>
      new Gauge({
        name,
        help,
        registers: [this.registry],
        async collect() {
          this.set(value(await report()));
        },
      });
    gauge(
      'sandboxd_capacity_sandboxes_used',
      'Live sandboxes (started and being created) of all accounts.',
      (r) => r.sandboxes.used,
    );
    gauge(
      'sandboxd_capacity_sandboxes_max',
      'maxSandboxes: live sandboxes the host takes (+Inf: no limit).',
      (r) => r.sandboxes.max ?? Number.POSITIVE_INFINITY,
    );
    gauge('sandboxd_capacity_memory_available_bytes', 'MemAvailable of the host.', (r) =>
      known(r.memory.availableBytes),
    );
    gauge(
      'sandboxd_capacity_memory_floor_bytes',
      'Below this much available memory creates answer 503 (0: off).',
      (r) => r.memory.floorBytes,
    );
    gauge('sandboxd_capacity_disk_free_bytes', "Free space of the data dir's file system.", (r) =>
      known(r.disk.freeBytes),
    );
    gauge(
      'sandboxd_capacity_disk_floor_bytes',
      'Below this much free disk creates answer 503 (0: off).',
      (r) => r.disk.floorBytes,
    );
    gauge('sandboxd_capacity_addresses_free', 'Sandbox network addresses left.', (r) => known(r.addresses?.free));
    gauge('sandboxd_capacity_addresses_total', 'Sandbox network addresses in all.', (r) => known(r.addresses?.total));
    new Gauge({
      name: 'sandboxd_capacity_full',
      help: '1 while the resource is at its limit (creates answer 503 capacity naming it), else 0.',
      labelNames: ['resource'],
      registers: [this.registry],
      async collect() {
        const r = await report();
        for (const resource of RESOURCES) this.set({ resource }, r.full.includes(resource) ? 1 : 0);
      },
    });
  }

  /** A gauge `name` with one label, set from `read` at each scrape (e.g. per-image pool counts). */
  gaugeBy(name: string, help: string, label: string, read: () => Record<string, number>): void {
    new Gauge({
      name,
      help,
      labelNames: [label],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [value, n] of Object.entries(read())) this.set({ [label]: value }, n);
      },
    });
  }
}
