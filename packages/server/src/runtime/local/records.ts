import { existsSync } from 'node:fs';
import { readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ImageInfo, RuntimeSandbox, SandboxSpec } from '../driver.js';
import { processStart } from './commands/oci-runtime.js';

/** Sandbox ids the local driver takes (pooled things' ids have this form too). */
export const ID_RE = /^[a-z0-9_]{1,64}$/;

/** What the driver keeps on disk per sandbox, so a restarted process can adopt it. */
export interface SandboxRecord {
  spec: SandboxSpec;
  /**
   * The container's id in the runtime (crun's id, its cgroup's name): the sandbox's own id,
   * or, for a sandbox claimed from the warm pool, the pooled id it was started under.
   */
  cid: string;
  slot: number;
  uidBase: number;
  address: string;
  netnsPath: string;
  /** Id the network was attached under: the sandbox's own, or a pooled one's. */
  netId?: string;
  /** Id the root layer was prepared under: the sandbox's own, or a pooled one's. */
  rootId?: string;
  imageDigest: string;
  createdAt: string;
  workingDir: string;
  /** numeric uid:gid for exec. */
  user: string;
  /** Full environment, KEY=VALUE. */
  env: string[];
  /**
   * `creating` (half made: recovery removes it), `ready` (made; running, paused, or killed),
   * and the phases of a sandbox whose root layer is kept (lifecycle.ts): `stopping` (being
   * stopped), `stopped`, `starting` (being booted again from its layer). A crash in
   * `stopping` or `starting` ends, after recovery, in `stopped`.
   */
  phase: 'creating' | 'ready' | 'stopping' | 'stopped' | 'starting';
  /** Host pid of the sandbox's init and its start time, to tell "running" without asking crun. */
  initPid: number;
  initStart: number | null;
}

/**
 * The sandboxes' folders: `<dir>/<id>/` holds a sandbox's `state.json` (its record) beside
 * its bundle. A record is replaced atomically (a crash leaves the old or the new one).
 */
export class RecordStore {
  constructor(readonly dir: string) {}

  /** The folder of sandbox `id`. */
  dirOf(id: string): string {
    return join(this.dir, id);
  }

  /** True when the folder of `id` exists (a record, or what is left of one). */
  has(id: string): boolean {
    return existsSync(this.dirOf(id));
  }

  /** Writes `rec` to its sandbox's folder, which must exist. */
  async write(rec: SandboxRecord): Promise<void> {
    const file = join(this.dirOf(rec.spec.id), 'state.json');
    await writeFile(`${file}.tmp`, JSON.stringify(rec));
    await rename(`${file}.tmp`, file);
  }

  /** The record of `id`, or null when there is none or it cannot be read. */
  async read(id: string): Promise<SandboxRecord | null> {
    try {
      const rec = JSON.parse(await readFile(join(this.dirOf(id), 'state.json'), 'utf8')) as SandboxRecord;
      rec.cid ??= rec.spec.id; // records written before warm pools had none
      return rec;
    } catch {
      return null;
    }
  }

  /** Ids of every sandbox folder, with or without a record in it. */
  async ids(): Promise<string[]> {
    try {
      return (await readdir(this.dir)).filter((n) => ID_RE.test(n));
    } catch {
      return [];
    }
  }
}

/** True while the sandbox's init runs: its pid exists with the start time recorded. */
export function isAlive(rec: SandboxRecord): boolean {
  return rec.initPid > 0 && rec.initStart !== null && processStart(rec.initPid) === rec.initStart;
}

/**
 * The record of a sandbox being created from `image` in uid slot `slot`: phase `creating`,
 * no address or init yet, running as root until the image's user is resolved.
 */
export function newRecord(
  spec: SandboxSpec,
  image: Pick<ImageInfo, 'digest' | 'workingDir'>,
  env: string[],
  o: { slot: number; uidBase: number; rootId?: string },
): SandboxRecord {
  return {
    spec,
    cid: spec.id,
    slot: o.slot,
    uidBase: o.uidBase,
    address: '',
    netnsPath: '',
    imageDigest: image.digest,
    createdAt: new Date().toISOString(),
    workingDir: image.workingDir || '/',
    user: '0:0',
    env,
    phase: 'creating',
    initPid: 0,
    initStart: null,
    rootId: o.rootId,
  };
}

/** True for a sandbox whose root layer is kept without a container (or with one being made or removed). */
export function isKept(rec: SandboxRecord): boolean {
  return rec.phase === 'stopping' || rec.phase === 'stopped' || rec.phase === 'starting';
}

/** True for a record the driver shows (`inspect`, `list`): made, and not a half-made create. */
export function isVisible(rec: SandboxRecord | undefined | null): rec is SandboxRecord {
  return !!rec && rec.phase !== 'creating';
}

/**
 * What the driver reports of a sandbox, from its record; running is checked now. `frozen`:
 * its cgroup freezer was asked to freeze (read from the kernel by the caller).
 */
export function recordView(rec: SandboxRecord, frozen = false): RuntimeSandbox {
  const running = isAlive(rec);
  return {
    id: rec.spec.id,
    image: rec.spec.image,
    imageDigest: rec.imageDigest,
    state: running ? (frozen ? 'paused' : 'running') : 'stopped',
    address: rec.address,
    pid: running ? rec.initPid : 0,
    createdAt: new Date(rec.createdAt),
    workingDir: rec.workingDir,
    user: rec.user,
  };
}
