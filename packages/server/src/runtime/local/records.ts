import { existsSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ImageInfo, RuntimeSandbox, SandboxSpec } from '../driver.js';
import { processStart } from './commands/oci-runtime.js';
import type { SecretSealer, StoredSecretInjection } from './sealed-secrets.js';

/** Sandbox ids the local driver takes (pooled things' ids have this form too). */
export const ID_RE = /^[a-z0-9_]{1,64}$/;

/** The service an image declares (service.ts reads it from the image's labels). */
export interface DeclaredService {
  argv: string[];
  port: number;
  /** Path of the readiness check, `/...`. */
  health: string;
}

/** The start command and ready check an image declares (service.ts reads them from its labels). */
export interface DeclaredStart {
  /** Shell command started (detached) at every boot. */
  cmd?: string;
  /** Shell command run until it exits 0 before a boot is done. */
  ready?: string;
  /** How long the ready check may take in all; absent: the driver's service start timeout. */
  readyTimeoutMs?: number;
}

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
  /**
   * The service its image declares (../service.ts), started at every boot, with the image's
   * env (`env` without the sandbox's own); absent: none (and in records of older versions).
   */
  service?: DeclaredService & { env: string[] };
  /** The start command and ready check its image declares (../service.ts), at every boot; absent: none. */
  start?: DeclaredStart;
  /** Its image allows setuid programs (label org.sandboxd.setuid, ./setuid.ts): no no_new_privs. */
  setuid?: true;
  /**
   * gVisor, paused to disk: phase `stopped` with its processes and memory in a checkpoint
   * (`<dataDir>/checkpoints/<id>/`), which `resume` restores. Absent: none.
   */
  checkpoint?: true;
  /**
   * With `checkpoint`: its PID 1 had lost its channel when saved (the server restarted since
   * the sandbox booted), so it serves none after a restore either: a second agent does.
   */
  checkpointUnserved?: true;
  /** The egress CA is installed in its root layer (trust.ts): done once, when it first has injection rules. */
  trusted?: true;
}

/** Names of record files: `state.<generation>.json`; `state.json` (generation 0) as older versions wrote it. */
const RECORD_FILE_RE = /^state(?:\.(\d{1,15}))?\.json$/;

/** The record files among `names`, newest first. */
function recordFiles(names: string[]): { gen: number; name: string }[] {
  return names
    .map((name) => ({ name, m: RECORD_FILE_RE.exec(name) }))
    .filter((f) => f.m)
    .map((f) => ({ gen: Number(f.m?.[1] ?? 0), name: f.name }))
    .sort((a, b) => b.gen - a.gen);
}

/** The newest record file in sandbox folder `dir` (tests and tools read it), or null. */
export function recordFile(dir: string): string | null {
  const newest = recordFiles(readdirSync(dir))[0];
  return newest ? join(dir, newest.name) : null;
}

/**
 * The sandboxes' folders: `<dir>/<id>/` holds a sandbox's record. A record is replaced as a
 * crash leaves the old or the new one: each write is a new file, `state.<n+1>.json`, and the
 * older ones go once it is written; a reader takes the newest that parses (a write cut by a
 * kill -9 does not). Not a rename over the old file: on ext4 (auto_da_alloc) that starts
 * writing the new file's data out, ~1.2 ms on these machines against ~0.03 ms. Written with
 * synchronous calls: a few tens of microseconds of the event loop, where the same steps
 * through the thread pool wait ~0.5 ms for their turns.
 */
export class RecordStore {
  /** `sealer`: seals `spec.secrets` values on write, opens them on read (never in clear on disk). */
  constructor(
    readonly dir: string,
    private readonly sealer?: SecretSealer,
  ) {}

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
    const dir = this.dirOf(rec.spec.id);
    const older = recordFiles(readdirSync(dir));
    // Synchronous from the listing to the last unlink, so no other write of this process
    // comes between: the next generation is free (exclusive create all the same).
    writeFileSync(join(dir, `state.${(older[0]?.gen ?? 0) + 1}.json`), JSON.stringify(this.#stored(rec)), {
      flag: 'wx',
    });
    for (const f of older) rmSync(join(dir, f.name), { force: true });
  }

  /** The record of `id`, or null when there is none or it cannot be read. */
  async read(id: string): Promise<SandboxRecord | null> {
    const dir = this.dirOf(id);
    for (const f of recordFiles(await readdir(dir).catch(() => [] as string[]))) {
      try {
        const rec = JSON.parse(await readFile(join(dir, f.name), 'utf8')) as SandboxRecord;
        rec.cid ??= rec.spec.id; // records written before warm pools had none
        if (rec.spec.secrets?.length) {
          const stored = rec.spec.secrets as StoredSecretInjection[];
          rec.spec.secrets = this.sealer
            ? this.sealer.openRules(rec.spec.id, stored)
            : stored.map(({ sealed: _, ...r }) => r);
        }
        return rec;
      } catch {
        // cut short by a crash: the one before it holds
      }
    }
    return null;
  }

  /** `rec` as written: the values of its injection rules sealed (or dropped, without a sealer). */
  #stored(rec: SandboxRecord): unknown {
    const rules = rec.spec.secrets;
    if (!rules?.length) return rec;
    const secrets = this.sealer ? this.sealer.sealRules(rec.spec.id, rules) : rules.map(({ value: _, ...r }) => r);
    return { ...rec, spec: { ...rec.spec, secrets } };
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
    state: running ? (frozen ? 'paused' : 'running') : rec.checkpoint && rec.phase === 'stopped' ? 'paused' : 'stopped',
    address: rec.address,
    pid: running ? rec.initPid : 0,
    createdAt: new Date(rec.createdAt),
    ...(rec.spec.isolation ? { isolation: rec.spec.isolation } : {}),
    ...(running && frozen ? { pausedMemory: 'ram' as const } : {}),
    ...(!running && rec.checkpoint && rec.phase === 'stopped' ? { pausedMemory: 'disk' as const } : {}),
    workingDir: rec.workingDir,
    user: rec.user,
  };
}
