import type { SandboxSpec } from '../../driver.js';

/**
 * What the fleet asks of the records (the store, through app.ts: the fleet never holds the
 * store): which runner each sandbox and volume lives on, and the write that records a
 * placement. A record names its runner before the runner creates the sandbox, so any API
 * replica finds any sandbox.
 */
export interface FleetRecords {
  /** The runner (node name) recorded for sandbox `id`; null when none is (no record, not placed, or from before runners were recorded). */
  runnerOf(id: string): Promise<string | null>;
  /**
   * The volumes a create mounts, each with its driver name (as in `spec.volumes`), its
   * name for messages, and the runner recorded for it (null: none yet).
   */
  volumesOf(spec: SandboxSpec): Promise<VolumeHome[]>;
  /**
   * Records that sandbox `id`, and its volumes that live nowhere yet, are on `runner`;
   * called before the runner creates it. `conflict` (details.volume) when one of its volumes
   * was recorded on another runner meanwhile.
   */
  assign(id: string, runner: string): Promise<void>;
}

/** A volume of a create and the runner recorded for it. */
export interface VolumeHome {
  driverName: string;
  name: string;
  runner: string | null;
}

/** Where runner URLs come from: a fixed list, or a watch (the Service's endpoints). */
export interface RunnerUrls {
  /** Starts; `onUrls` gets the whole list, at once or once known, and again on each change. */
  start(onUrls: (urls: string[]) => void): { stop(): void };
}

/** A fixed list of runner URLs (`SANDBOXD_RUNNERS=http://a:7070,http://b:7070`). */
export function fixedUrls(urls: readonly string[]): RunnerUrls {
  return {
    start(onUrls) {
      onUrls([...urls]);
      return { stop() {} };
    },
  };
}
