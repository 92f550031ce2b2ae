import { SandboxdError } from '@sandboxd/protocol';
import type { SandboxSpec } from '../src/runtime/driver.js';
import { FakeDriver, type FakeDriverOptions } from '../src/runtime/fake/driver.js';
import { ProcessHost } from '../src/runtime/processes/host.js';
import { FleetDriver } from '../src/runtime/remote/fleet/fleet.js';
import type { RunnerDriver } from '../src/runtime/remote/fleet/member.js';
import { type FleetRecords, fixedUrls, type VolumeHome } from '../src/runtime/remote/fleet/records.js';
import type { RunnerHealth } from '../src/runtime/remote/wire.js';

/**
 * Runners for fast tests of the fleet: each URL is a {@link FakeDriver} with a health
 * answer (its node name, capacity, sandbox count) that can be made to stop answering: while
 * down, every call (health included) rejects `unavailable` as a RemoteDriver's would. The
 * same URL gives the same runner to every fleet that connects (replicas share runners).
 */
export class FakeRunners {
  readonly drivers = new Map<string, FakeDriver>();
  /** The processes started through the API on each runner (tracked by the runner, as a real one does). */
  private readonly processHosts = new Map<string, ProcessHost>();
  private readonly names = new Map<string, string>();
  private readonly down = new Map<string, string>();
  /** Calls per URL, `method id` (for assertions on routing). */
  readonly calls = new Map<string, string[]>();

  /** `nodes`: URL -> node name. */
  constructor(nodes: Record<string, string>) {
    for (const [url, node] of Object.entries(nodes)) this.add(url, node);
  }

  /** Another runner at `url` named `node` (`opts`: the fake's, e.g. extra images it has). */
  add(url: string, node: string, opts: FakeDriverOptions = {}): FakeDriver {
    const d = new FakeDriver(opts);
    this.drivers.set(url, d);
    this.processHosts.set(url, ProcessHost.over(d));
    this.names.set(url, node);
    this.calls.set(url, []);
    return d;
  }

  /** The fake behind `url`. */
  driver(url: string): FakeDriver {
    const d = this.drivers.get(url);
    if (!d) throw new Error(`no fake runner ${url}`);
    return d;
  }

  /** From now on `url` answers as node `node`. */
  rename(url: string, node: string): void {
    this.names.set(url, node);
  }

  /** `url` stops answering (every call rejects `unavailable` with `reason`) or, with null, answers again. */
  setDown(url: string, reason: string | null = 'connect ECONNREFUSED'): void {
    if (reason === null) this.down.delete(url);
    else this.down.set(url, reason);
  }

  /** Sandboxes of `url` (any state), by id. */
  async ids(url: string): Promise<string[]> {
    return (await this.driver(url).list()).map((s) => s.id).sort();
  }

  /** A {@link RunnerDriver} for `url`, as the fleet's `connect` gives one. */
  readonly connect = (url: string): RunnerDriver => {
    const fake = this.driver(url);
    const processes = this.processHosts.get(url)!;
    const check = () => {
      const why = this.down.get(url);
      if (why !== undefined)
        throw new SandboxdError('unavailable', `Runner ${url} is unreachable (${why})`, { runner: url });
    };
    const log = (name: string, args: unknown[]) =>
      this.calls.get(url)!.push(typeof args[0] === 'string' ? `${name} ${args[0]}` : name);
    const health = async (): Promise<RunnerHealth> => {
      check();
      const list = await fake.list();
      return {
        node: this.names.get(url)!,
        capacity: await fake.capacity(),
        warmPool: {},
        sandboxes: list.filter((s) => s.state !== 'stopped').length,
        ...(fake.isolations ? { isolations: fake.isolations() } : {}),
      };
    };
    const wrap = <T extends object>(target: T, prefix: string): T =>
      new Proxy(target, {
        get(t, prop, receiver) {
          if (prop === 'health' && prefix === '') return health;
          if (prop === 'processes' && prefix === '') return wrap(processes, 'processes.');
          const v = Reflect.get(t, prop, receiver);
          if (prop === 'files' || prop === 'images') return wrap(v as object, `${String(prop)}.`);
          // Synchronous by contract (a subscription, a close): never made async, nor checked.
          if (typeof v !== 'function' || prop === 'close' || prop === 'onInjection')
            return typeof v === 'function' ? v.bind(t) : v;
          return async (...args: unknown[]) => {
            check();
            log(`${prefix}${String(prop)}`, args);
            return (v as (...a: unknown[]) => unknown).apply(t, args);
          };
        },
      });
    return wrap(fake, '') as unknown as RunnerDriver;
  };
}

/**
 * In-memory {@link FleetRecords} for fleet tests without a store: the runner of each
 * sandbox and of each volume (by driver name), with the store's rules (a volume placed on
 * one runner makes a placement on another a `conflict`).
 */
export class MemoryRecords implements FleetRecords {
  readonly sandboxes = new Map<string, string>();
  readonly volumes = new Map<string, string>();
  private readonly specs = new Map<string, SandboxSpec>();
  /** Hook run inside `assign` before it decides (a test can race a placement in). */
  beforeAssign: ((id: string, runner: string) => Promise<void>) | null = null;

  async runnerOf(id: string): Promise<string | null> {
    return this.sandboxes.get(id) ?? null;
  }
  async volumesOf(spec: SandboxSpec): Promise<VolumeHome[]> {
    this.specs.set(spec.id, spec);
    return spec.volumes.map((v) => ({ driverName: v.name, name: v.name, runner: this.volumes.get(v.name) ?? null }));
  }
  async assign(id: string, runner: string): Promise<void> {
    await this.beforeAssign?.(id, runner);
    const had = this.sandboxes.get(id);
    if (had && had !== runner) throw new SandboxdError('conflict', `Sandbox ${id} lives on runner ${had}`);
    const vols = this.specs.get(id)?.volumes ?? [];
    const other = vols.find((v) => (this.volumes.get(v.name) ?? runner) !== runner);
    if (other)
      throw new SandboxdError('conflict', `Volume ${other.name} lives on runner ${this.volumes.get(other.name)}`, {
        volume: other.name,
        runner: this.volumes.get(other.name),
      });
    this.sandboxes.set(id, runner);
    for (const v of vols) if (!this.volumes.has(v.name)) this.volumes.set(v.name, runner);
  }
}

/**
 * A started FleetDriver over fake runners at `nodes` (URL -> node name): records in memory,
 * no capacity floors, silent, no polling.
 */
export async function fakeFleet(nodes: Record<string, string>): Promise<{ fleet: FleetDriver; runners: FakeRunners }> {
  const runners = new FakeRunners(nodes);
  const fleet = new FleetDriver({
    source: fixedUrls(Object.keys(nodes)),
    connect: runners.connect,
    records: new MemoryRecords(),
    downAfterMs: 5000,
    floors: { memoryBytes: 0, diskBytes: 0 },
    log: { info() {}, warn() {} },
    poll: false,
  });
  await fleet.init();
  return { fleet, runners };
}
