import { SandboxdError } from '@sandboxd/protocol';
import type { CapacityFloors } from '../../../domain/capacity.js';
import { DRIVER_SNAPSHOT_PREFIX } from '../../../domain/snapshots.js';
import type { SandboxSpec } from '../../driver.js';
import { type RunnerMember, tiersOf } from './member.js';
import type { Membership } from './membership.js';
import { choose } from './placement.js';
import type { FleetRecords } from './records.js';

/** A listing asked of every runner (volumes, snapshots) waits this long for each, ms. */
export const LIST_TIMEOUT_MS = 10_000;

/** `p`, or a rejection `unavailable` naming `runner` once `ms` passed. */
export function within<T>(p: Promise<T>, ms: number, runner: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new SandboxdError('unavailable', `Runner ${runner} did not answer within ${ms} ms`)),
      ms,
    );
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/**
 * Where a create goes. Hard constraints first: the runner its volumes live on (recorded, or,
 * for a volume recorded nowhere, the runner that has it on disk), the runner that holds its
 * snapshot image; then {@link choose} among what is left: least loaded, image cached, room
 * for the plan's sandbox (memory, disk, addresses). Refusals: 409 `conflict` (volumes on two
 * runners, or a volume and the snapshot on different ones), 503 `unavailable` (no runner
 * answers, or the one the volume or image lives on does not), 503 `capacity` (no candidate
 * has room), 404 `template_not_found` (a snapshot no runner has).
 */
export class Placer {
  constructor(
    private readonly o: {
      members: Membership;
      records: FleetRecords;
      floors: CapacityFloors;
      onUnreachable: (m: RunnerMember, e: unknown) => void;
    },
  ) {}

  /** The runner `spec` is to be created on (up). */
  async place(spec: SandboxSpec): Promise<RunnerMember> {
    const up = this.o.members.up();
    if (!up.length) throw this.noRunner();
    let pool = up;
    let where: string | undefined;
    // A tier beyond containers goes only to a runner that offers it.
    const isolation = spec.isolation ?? 'container';
    if (isolation !== 'container') {
      pool = up.filter((m) => tiersOf(m).some((t) => t.isolation === isolation));
      if (!pool.length) {
        if (this.o.members.members().some((m) => !m.up))
          throw new SandboxdError(
            'unavailable',
            `No runner that answers offers isolation ${isolation}; ${this.silent()}`,
          );
        throw new SandboxdError('validation', `isolation ${isolation} is offered by none of the runners`, [
          { in: 'body', path: '/isolation', message: `isolation ${isolation} is offered by none of the runners` },
        ]);
      }
      where = `the runner(s) that offer isolation ${isolation} (${pool.map((m) => m.node).join(', ')})`;
    }
    const home = await this.volumeHome(spec, up);
    if (home) {
      const m = this.o.members.node(home.node);
      const what = `volume ${home.names.join(', ')} lives`;
      if (!m?.up)
        throw m
          ? m.unavailable(what)
          : new SandboxdError('unavailable', `Runner ${home.node}, where ${what}, is not among the runners`, {
              runner: home.node,
            });
      if (!pool.includes(m))
        throw new SandboxdError(
          'conflict',
          `Volume ${home.names.join(', ')} lives on runner ${home.node}, which does not offer isolation ${isolation}`,
          { runner: home.node, isolation },
        );
      pool = [m];
      where = `runner ${home.node}, where ${what}`;
    }
    if (spec.image.startsWith(DRIVER_SNAPSHOT_PREFIX)) {
      const holders = await this.snapshotHolders(spec.image, pool);
      if (!holders.length) {
        if (home && (await this.snapshotHolders(spec.image, up)).length)
          throw new SandboxdError(
            'conflict',
            `The snapshot and volume ${home.names.join(', ')} live on different runners: a sandbox is made on one runner`,
            { runner: home.node },
          );
        if (this.o.members.members().some((m) => !m.up))
          throw new SandboxdError(
            'unavailable',
            `The snapshot is on none of the runners that answer; ${this.silent()}`,
          );
        throw new SandboxdError('template_not_found', 'Template not found', { image: spec.image });
      }
      pool = holders;
      where ??= `the runner(s) that hold the snapshot (${holders.map((m) => m.node).join(', ')})`;
    }
    const choice = choose(
      pool.map((m) => m.candidate(spec.image)),
      this.o.floors,
      where,
    );
    if ('refusal' in choice) throw choice.refusal;
    return pool.find((m) => m.node === choice.node)!;
  }

  /** The one runner the volumes of `spec` live on (null: none yet); 409 when they live on two. */
  private async volumeHome(spec: SandboxSpec, up: RunnerMember[]): Promise<{ node: string; names: string[] } | null> {
    if (!spec.volumes.length) return null;
    const vols = await this.o.records.volumesOf(spec);
    const homes = new Map<string, string>(); // volume name -> node
    for (const v of vols) if (v.runner) homes.set(v.name, v.runner);
    const unplaced = vols.filter((v) => !v.runner);
    if (unplaced.length) {
      // Recorded nowhere (new, or from before runners were recorded): on the disk of a runner?
      const found = await this.volumeHolders(
        unplaced.map((v) => v.driverName),
        up,
      );
      for (const v of unplaced) {
        const m = found.get(v.driverName);
        if (m?.node) homes.set(v.name, m.node);
      }
    }
    const byNode = new Map<string, string[]>();
    for (const [name, node] of homes) byNode.set(node, [...(byNode.get(node) ?? []), name]);
    if (byNode.size > 1) {
      const where = [...byNode].map(([node, names]) => `${names.join(', ')} on ${node}`).join('; ');
      throw new SandboxdError(
        'conflict',
        `The volumes live on different runners (${where}): a sandbox mounts volumes of one runner only`,
        { volumes: Object.fromEntries(homes) },
      );
    }
    const [entry] = byNode;
    return entry ? { node: entry[0], names: entry[1] } : null;
  }

  /** Which of `among` have each of the volumes `names` (driver names) on disk; runners that fail are skipped. */
  async volumeHolders(names: string[], among: RunnerMember[]): Promise<Map<string, RunnerMember>> {
    const want = new Set(names);
    const out = new Map<string, RunnerMember>();
    await Promise.all(
      among.map(async (m) => {
        try {
          for (const v of await within(m.driver.listVolumes(), LIST_TIMEOUT_MS, m.node ?? m.url))
            if (want.has(v.name)) out.set(v.name, m);
        } catch (e) {
          this.o.onUnreachable(m, e);
        }
      }),
    );
    return out;
  }

  /** Which of `among` hold snapshot image `ref`; runners that fail are skipped. */
  async snapshotHolders(ref: string, among: RunnerMember[]): Promise<RunnerMember[]> {
    const out: RunnerMember[] = [];
    await Promise.all(
      among.map(async (m) => {
        try {
          const list = await within(m.driver.listSnapshots(), LIST_TIMEOUT_MS, m.node ?? m.url);
          if (list.some((i) => i.ref === ref)) out.push(m);
        } catch (e) {
          this.o.onUnreachable(m, e);
        }
      }),
    );
    return out;
  }

  /** The 503 `unavailable` when no runner answers, naming each and why. */
  noRunner(): SandboxdError {
    const all = this.o.members.members();
    return new SandboxdError(
      'unavailable',
      all.length ? `No runner answers; ${this.silent()}` : 'No runner is known yet (SANDBOXD_RUNNERS)',
      { runners: all.map((m) => m.node ?? m.url) },
    );
  }

  /** "a: why; b: why" of the runners that are not up. */
  silent(): string {
    return this.o.members
      .members()
      .filter((m) => !m.up)
      .map((m) => `${m.node ?? m.url}: ${m.why}`)
      .join('; ');
  }
}
