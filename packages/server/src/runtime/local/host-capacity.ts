import { readFileSync, statfsSync } from 'node:fs';

/** `MemAvailable` of a /proc/meminfo text, in bytes; null when it has none. */
export function parseMemAvailable(meminfo: string): number | null {
  const m = /^MemAvailable:\s+(\d+)\s*kB\s*$/m.exec(meminfo);
  return m ? Number(m[1]) * 1024 : null;
}

/** How the host's figures are read; tests give their own. */
export interface HostReaders {
  /** The text of /proc/meminfo. */
  meminfo: () => string;
  /** statfs(2) of a path: free blocks for unprivileged users and the block size. */
  statfs: (path: string) => { bavail: number; bsize: number };
}

const HOST: HostReaders = {
  meminfo: () => readFileSync('/proc/meminfo', 'utf8'),
  statfs: (path) => statfsSync(path),
};

/**
 * Memory and disk left on the host, read now: one small file read and one statfs (a few
 * microseconds each); null for a figure that cannot be read.
 */
export function readHostCapacity(
  dataDir: string,
  readers: HostReaders = HOST,
): { memoryAvailableBytes: number | null; diskFreeBytes: number | null } {
  let memoryAvailableBytes: number | null = null;
  let diskFreeBytes: number | null = null;
  try {
    memoryAvailableBytes = parseMemAvailable(readers.meminfo());
  } catch {
    /* no /proc (not Linux): unknown */
  }
  try {
    const s = readers.statfs(dataDir);
    diskFreeBytes = s.bavail * s.bsize;
  } catch {
    /* not made yet: unknown */
  }
  return { memoryAvailableBytes, diskFreeBytes };
}
