import {
  SandboxdError,
  type Isolation,
  type OnTimeout,
  type PauseMemory,
  type Sandbox,
  type SandboxNetwork,
} from '@sandboxd/protocol';

/**
 * Record states. `creating` and `starting` are internal: `creating` is never listed (404
 * until created), `starting` (a stopped sandbox booting again) shows as `stopped`; both
 * count toward concurrency like `started`.
 */
export type SandboxRecordState = 'creating' | 'started' | 'paused' | 'stopped' | 'starting' | 'error';

/** A volume mounted by a sandbox, as recorded. */
export interface MountRecord {
  mountPath: string;
  /** Account-level volume name (not the driver name). */
  name: string;
  sizeGb: number;
}

/** What a sandbox is made from: fixed at creation. */
export interface SandboxSpecRecord {
  id: string;
  accountId: string;
  name: string;
  image: string;
  region: string;
  env: Record<string, string>;
  volumes: MountRecord[];
  createdAt: number;
  /** Whether `publicAccessUrlTemplate` is open to anyone; absent means true. */
  portsPublic?: boolean;
  /** The E2B template name it was created from (E2B's front door); absent for sandboxd's own creates. */
  template?: string;
  /** Caller's key-value labels (E2B's `metadata`); absent means none. */
  metadata?: Record<string, string>;
  /** What the reaper does at `stopAt`; absent means `stop`. */
  onTimeout?: OnTimeout;
  /**
   * Its network settings (egress), as created or last changed (`PATCH .../network`, the one
   * part of the spec that changes); absent for sandboxes made before egress rules existed.
   */
  network?: SandboxNetwork;
  /** Its isolation tier; absent means `container` (every sandbox made before tiers existed). */
  isolation?: Isolation;
}

/** Mutable status of a sandbox. Changed only through {@link assertTransition}. */
export interface SandboxStatus {
  state: SandboxRecordState;
  /** Epoch ms: when a started sandbox stops (or pauses); when a paused one paused. */
  stopAt: number;
  /**
   * Start of the current run (create, start or resume), epoch ms; absent means `createdAt`.
   * Billing and the plan's lifetime count from it.
   */
  runStartedAt?: number;
  /** Paused: when it is deleted (epoch ms); null otherwise. */
  expiresAt?: number | null;
  /** Whole minutes paid for the current run so far (debits minus refunds). */
  reservedMinutes: number;
  /** When it reached `stopped`/`error`; null while live. */
  endedAt: number | null;
  /** Why it is in `error`, or how it stopped. */
  details: Record<string, unknown> | null;
  /**
   * The runner (its `SANDBOXD_NODE_NAME`) the sandbox lives on, recorded before the runner
   * is asked to create it (`Store.placeSandbox`), so that any API replica finds it; absent
   * when none is recorded (role `all`, or a create not placed yet).
   */
  runner?: string;
  /** Paused: where its memory is kept (`ram`: frozen in place; `disk`: checkpointed); absent otherwise. */
  pausedMemory?: PauseMemory;
}

export type SandboxRecord = SandboxSpecRecord & SandboxStatus;

/** The state-transition table: from -> allowed next states. */
export const SANDBOX_TRANSITIONS: Readonly<Record<SandboxRecordState, readonly SandboxRecordState[]>> = {
  creating: ['started', 'error'],
  started: ['paused', 'stopped', 'error'],
  paused: ['started', 'stopped', 'error'],
  stopped: ['starting'],
  starting: ['started', 'stopped', 'error'],
  error: [],
};

/** Start of the record's current run: billing and the plan's lifetime count from it. */
export const runStart = (r: Pick<SandboxRecord, 'createdAt' | 'runStartedAt'>): number => r.runStartedAt ?? r.createdAt;

/** Whether `from -> to` is in the table. */
export function canTransition(from: SandboxRecordState, to: SandboxRecordState): boolean {
  return SANDBOX_TRANSITIONS[from].includes(to);
}

/** Throws `conflict` unless `from -> to` is allowed. */
export function assertTransition(from: SandboxRecordState, to: SandboxRecordState): void {
  if (!canTransition(from, to))
    throw new SandboxdError('conflict', `Sandbox is ${wireState(from)}`, { state: wireState(from) });
}

/** States that occupy a concurrency slot of the account. */
export const ACTIVE_STATES: readonly SandboxRecordState[] = ['creating', 'started', 'starting'];
/** States whose sandbox holds host resources (a slot of `maxSandboxes`, memory, its volumes). */
export const HELD_STATES: readonly SandboxRecordState[] = ['creating', 'started', 'starting', 'paused'];

/** True while a sandbox occupies a concurrency slot. */
export const isLive = (s: SandboxRecordState): boolean => ACTIVE_STATES.includes(s);

/** The wire state of a record state (`creating` shows `started`, `starting` shows `stopped`). */
export function wireState(s: SandboxRecordState): Sandbox['state'] {
  if (s === 'creating') return 'started';
  if (s === 'starting') return 'stopped';
  return s;
}

/** 409 `conflict` naming the sandbox's current (wire) state: the answer to any operation in the wrong state. */
export function wrongState(r: Pick<SandboxRecord, 'state'>): SandboxdError {
  const state = wireState(r.state);
  return new SandboxdError('conflict', `Sandbox is ${state}`, { state });
}

/**
 * The wire form of a record. `creating` never reaches the wire. `stoppedRetentionMs` gives
 * `expiresAt` of stopped and error records (when they are purged).
 */
export function toWireSandbox(r: SandboxRecord, opts: { publicHost: string; stoppedRetentionMs?: number }): Sandbox {
  const out: Sandbox = {
    id: r.id,
    name: r.name,
    state: wireState(r.state),
    region: r.region,
    image: r.image,
    createdAt: new Date(r.createdAt).toISOString(),
    stopAt: new Date(r.stopAt).toISOString(),
    publicAccessUrlTemplate: `{{PORT}}-${r.id}.${opts.publicHost}`,
    metadata: r.metadata ?? {},
    onTimeout: r.onTimeout ?? 'stop',
    isolation: r.isolation ?? 'container',
    ...(r.network ? { network: r.network } : {}),
  };
  if (r.state === 'paused') out.pausedMemory = r.pausedMemory ?? 'ram';
  if (r.state === 'paused' && r.expiresAt) out.expiresAt = new Date(r.expiresAt).toISOString();
  else if (
    (r.state === 'stopped' || r.state === 'error') &&
    r.endedAt !== null &&
    opts.stoppedRetentionMs !== undefined
  )
    out.expiresAt = new Date(r.endedAt + opts.stoppedRetentionMs).toISOString();
  return out;
}

/** Driver-side volume name of an account volume: `<accountId>__<name>`, both `[a-z0-9_]`. */
export function driverVolumeName(accountId: string, name: string): string {
  const safe = (s: string) => s.toLowerCase().replace(/[^a-z0-9_]/g, (c) => `_${c.charCodeAt(0).toString(16)}`);
  return `${safe(accountId)}__${safe(name)}`;
}

const FORBIDDEN_MOUNT_ROOTS = ['/proc', '/sys', '/dev', '/etc/hosts', '/etc/hostname', '/etc/resolv.conf'];

/** Why a mount path is unacceptable, or null when it is fine. */
export function mountPathProblem(p: string): string | null {
  if (!p.startsWith('/')) return 'must be an absolute path';
  if (p === '/') return 'must not be /';
  const parts = p.split('/').slice(1);
  if (parts.some((x) => x === '' || x === '.' || x === '..'))
    return 'must be normalized (no empty, . or .. segments, no trailing /)';
  if (FORBIDDEN_MOUNT_ROOTS.some((r) => p === r || p.startsWith(`${r}/`)))
    return `must not be under ${FORBIDDEN_MOUNT_ROOTS.join(', ')}`;
  return null;
}
