import { driverVolumeName } from '../domain/sandbox.js';
import type { FleetRecords, VolumeHome } from '../runtime/remote/fleet/records.js';
import type { Store } from '../store/store.js';

/**
 * The fleet's view of the records (role `api`): which runner a sandbox and its volumes live
 * on, from the store, and the write that records a placement (`Store.placeSandbox`). The
 * fleet gets these functions, never the store.
 */
export function runnerRecords(store: Pick<Store, 'getSandbox' | 'getVolume' | 'placeSandbox'>): FleetRecords {
  return {
    async runnerOf(id) {
      return (await store.getSandbox(id))?.runner ?? null;
    },
    async volumesOf(spec) {
      const r = await store.getSandbox(spec.id);
      if (!r) return [];
      const out = new Map<string, VolumeHome>();
      for (const m of r.volumes) {
        if (out.has(m.name)) continue;
        const v = await store.getVolume(r.accountId, m.name);
        out.set(m.name, { driverName: driverVolumeName(r.accountId, m.name), name: m.name, runner: v?.runner ?? null });
      }
      return [...out.values()];
    },
    assign: (id, runner) => store.placeSandbox(id, runner),
  };
}
