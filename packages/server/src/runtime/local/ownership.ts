/**
 * Which containers of a runtime root are this instance's: recovery adopts or removes only
 * those, and never touches another instance's (see LocalDriver.recover and ownership.test.ts).
 */
import { readFile, realpath } from 'node:fs/promises';
import { join } from 'node:path';
import { ID_RANGE_SIZE, INSTANCE_ANNOTATION } from './bundle/oci-config.js';
import { type CrunState, OciRuntime } from './commands/oci-runtime.js';
import { mapLimit } from './network/exec.js';
import { isUnder } from './rootfs/mounts.js';

/** A container with the uid slot its config names (undefined: none of this instance's ranges). */
export type OwnedContainer = CrunState & { slot?: number; runtime: OciRuntime };

export class ContainerOwnership {
  constructor(
    private readonly o: {
      /** The instance's own runtime (its root lies in the instance's run dir). */
      crun: OciRuntime;
      /** The gVisor tier's runtime (its root beside crun's), whose containers are looked for too. */
      gvisor?: OciRuntime;
      /** The instance's key, marked on each of its containers (INSTANCE_ANNOTATION). */
      instance: string;
      /** The run dir base, whose `<runtime>` root every instance shared before run dirs were per instance. */
      runDirBase: string;
      /** First host uid of slot 0 of the instance's uid ranges. */
      uidRangeStart: number;
      /**
       * Folders the instance's bundles lie in: its run dir's bundles folder, and its data
       * dir's `sandboxes/`, where bundles were before they moved to the run dir.
       */
      bundleDirs: string[];
    },
  ) {}

  /**
   * The containers of the instance's runtime root, split: `mine` (bundle in one of
   * `bundleDirs`, marked with the instance's key), with the uid slot their config names;
   * `foreign`, any other (id -> the slot its uid range falls on, if any), which nothing here
   * ever touches.
   */
  async containers(): Promise<{ mine: Map<string, OwnedContainer>; foreign: Map<string, number | undefined> }> {
    const mine = new Map<string, OwnedContainer>();
    const foreign = new Map<string, number | undefined>();
    const under = await this.underOwnBundles();
    for (const rt of this.o.gvisor ? [this.o.crun, this.o.gvisor] : [this.o.crun]) {
      await mapLimit(await rt.list(), 8, async (c) => {
        const conf = await this.containerConfig(rt, c);
        if (under(c.bundle) && conf?.instance === this.o.instance)
          mine.set(c.id, { ...c, slot: conf.slot, runtime: rt });
        else foreign.set(c.id, conf?.slot);
      });
    }
    return { mine, foreign };
  }

  /**
   * Containers that an earlier version of the instance ran in the runtime root shared by
   * every instance (`<runDirBase>/<runtime>`): those whose bundle lies in one of
   * `bundleDirs`. Recovery removes them (they carry no key).
   */
  async legacyContainers(): Promise<Map<string, OwnedContainer>> {
    const out = new Map<string, OwnedContainer>();
    const legacy = this.legacyRuntime();
    if (legacy.root === this.o.crun.root) return out;
    const under = await this.underOwnBundles();
    for (const c of await legacy.list().catch(() => [])) {
      if (!under(c.bundle)) continue;
      out.set(c.id, { ...c, slot: (await this.containerConfig(legacy, c))?.slot, runtime: legacy });
    }
    return out;
  }

  /** The runtime over the shared root of earlier versions. */
  legacyRuntime(): OciRuntime {
    return new OciRuntime({ root: join(this.o.runDirBase, this.o.crun.binary), binary: this.o.crun.binary });
  }

  /** A test: does a path lie in one of `bundleDirs`, as given or as its real path? */
  private async underOwnBundles(): Promise<(p: string | undefined) => boolean> {
    const dirs: string[] = [];
    for (const d of this.o.bundleDirs) dirs.push(d, await realpath(d).catch(() => d));
    return (p) => typeof p === 'string' && dirs.some((d) => p !== d && isUnder(p, d));
  }

  /**
   * The instance marker and uid slot of container `c`, from the config.json the driver
   * wrote: crun's copy in its state dir (the bundle's goes once the container runs), else
   * the bundle's (runc, or a container that never ran), else `<runtime> state` (marker
   * only); null when none can be read.
   */
  private async containerConfig(
    runtime: OciRuntime,
    c: CrunState,
  ): Promise<{ instance?: string; slot?: number } | null> {
    type Conf = { annotations?: Record<string, string>; linux?: { uidMappings?: { hostID: number }[] } };
    const read = async (file: string): Promise<Conf | null> => {
      try {
        return JSON.parse(await readFile(file, 'utf8')) as Conf;
      } catch {
        return null;
      }
    };
    const conf: Conf | null =
      (await read(join(runtime.root, c.id, 'config.json'))) ??
      (await read(join(c.bundle, 'config.json'))) ??
      (await runtime.state(c.id));
    if (!conf) return null;
    const hostId = conf.linux?.uidMappings?.[0]?.hostID;
    const start = this.o.uidRangeStart;
    const slot =
      typeof hostId === 'number' && (hostId - start) % ID_RANGE_SIZE === 0
        ? (hostId - start) / ID_RANGE_SIZE
        : undefined;
    return {
      instance: conf.annotations?.[INSTANCE_ANNOTATION],
      slot: slot !== undefined && slot >= 0 ? slot : undefined,
    };
  }
}
