/**
 * The local driver's recovery at start-up (and in destroyAll): which sandboxes of this
 * instance are adopted, and which leftovers go, in the background. See driver.ts.
 */
import type { RecoveryReport } from '../driver.js';
import { processStart } from './commands/oci-runtime.js';
import { type Leftover, Leftovers } from './leftovers.js';
import { settleKept } from './lifecycle.js';
import type { ContainerOwnership } from './ownership.js';
import { isKept, type SandboxRecord } from './records.js';
import type { StartHost } from './boot.js';

/** What of the driver recovery uses. */
export interface RecoverHost extends StartHost {
  ownership: ContainerOwnership;
  /** Ids a create may not take: recovery adds each leftover's until it is gone. */
  reserved: Set<string>;
  /** Takes the uid slots of containers in this runtime root that are not this instance's. */
  foreignSlots(slots: number[]): void;
  recoveryConcurrency: number;
  /** Test hook: the background removal waits for it. */
  holdLeftovers?: Promise<unknown>;
}

/**
 * Adopts this instance's running sandboxes and hands everything else it left on the host
 * to a background removal ({@link RecoveryReport.background}), which keeps each
 * leftover's id, uid slot and address from being reused until it is gone. Only what is
 * this instance's is looked at: containers of its own runtime root whose bundle lies in
 * its own folders and that carry its key (see {@link ContainerOwnership}), networks of its own
 * bridge, roots and loop devices under its data dir. Resolves with the report and the
 * background removal (the caller starts the pools' refill once it holds it).
 */
export async function recoverInstance(h: RecoverHost): Promise<{ report: RecoveryReport; leftovers: Leftovers }> {
  const report: RecoveryReport = { adopted: [], cleaned: [] };
  const { mine: running, foreign } = await h.ownership.containers();
  const legacy = await h.ownership.legacyContainers();
  const ids = new Set<string>([
    ...running.keys(),
    ...legacy.keys(),
    ...(await h.state.ids()),
    ...(await h.roots.list()),
  ]);
  for (const n of await h.network.list()) ids.add(n.id);
  // A container that is not this instance's is left alone entirely: its id, the network
  // and root a record here may name for it, its uid range.
  const untouchable = new Set<string>();
  for (const id of foreign.keys()) {
    const rec = await h.state.read(id);
    for (const x of [id, rec?.netId, rec?.rootId]) if (x) untouchable.add(x);
  }
  for (const id of untouchable) ids.delete(id);
  h.foreignSlots([...foreign.values()].flatMap((slot) => (slot === undefined ? [] : [slot])));
  const adopt = new Map<string, SandboxRecord>();
  const found = new Map<string, SandboxRecord | null>();
  for (const id of ids) {
    const rec = await h.state.read(id);
    found.set(id, rec);
    // A record under another folder than its own id is a warm claim a crash interrupted.
    const c = rec && rec.spec.id === id ? running.get(rec.cid) : undefined;
    if (
      rec &&
      rec.phase === 'ready' &&
      !h.pools.owns(id) &&
      c &&
      // crun says `paused` for a frozen (paused) sandbox: adopted, and left frozen.
      (c.status === 'running' || c.status === 'paused') &&
      processStart(c.pid) !== null
    ) {
      adopt.set(id, { ...rec, initPid: c.pid, initStart: processStart(c.pid) });
    } else if (rec && rec.spec.id === id && isKept(rec) && !h.pools.owns(id)) {
      // Stopped (layer kept): adopted; one a crash left stopping or starting is made stopped.
      const hasContainer = running.has(rec.cid) || running.has(id);
      await settleKept(h, rec, hasContainer).catch(() => undefined);
      adopt.set(id, rec);
    }
  }
  // A pooled network or root in use by an adopted sandbox stays; every other leftover goes.
  const inUse = new Set([...adopt.values()].flatMap((r) => [r.cid, r.netId ?? r.spec.id, r.rootId ?? r.spec.id]));
  const items: Leftover[] = [];
  for (const [id, rec] of found) {
    if (adopt.has(id)) {
      h.records.set(id, adopt.get(id)!);
      report.adopted.push(id);
    } else if (!inUse.has(id)) {
      const slot = rec?.slot ?? running.get(id)?.slot ?? legacy.get(id)?.slot;
      // A container whose uid range is unknown cannot keep it reserved: it dies now.
      const live = running.get(id) ?? legacy.get(id);
      if (slot === undefined && live) await live.runtime.kill(id).catch(() => undefined);
      items.push({ id, slot });
      h.reserved.add(id);
    }
  }
  // The table was made anew by init(): the adopted sandboxes' egress goes back in.
  for (const rec of adopt.values()) {
    if (rec.phase === 'ready' && rec.address && rec.spec.egress && rec.spec.egress !== 'none') {
      await h.network.egress.apply(rec.spec.id, rec.address, rec.spec.egress, rec.spec.secrets).catch(() => undefined);
    }
  }
  const live = new Map(
    [...h.records].filter(([, r]) => r.phase === 'ready').map(([id, r]) => [id, r.spec.volumes.map((v) => v.name)]),
  );
  await h.volumes.recover(live);
  const leftovers = new Leftovers(items, {
    concurrency: h.recoveryConcurrency,
    hold: h.holdLeftovers,
    remove: async ({ id }) => {
      try {
        if (legacy.has(id)) await h.ownership.legacyRuntime().delete(id);
        await h.teardown(id, found.get(id));
      } finally {
        h.reserved.delete(id);
      }
    },
  });
  report.background = leftovers;
  return { report, leftovers };
}
