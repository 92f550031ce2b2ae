import { SandboxdError, type Sandbox } from '@sandboxd/protocol';

/** Record states: `creating` is internal (counts toward concurrency, never listed). */
export type SandboxRecordState = 'creating' | 'started' | 'stopped' | 'error';

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
}

/** Mutable status of a sandbox. Changed only through {@link assertTransition}. */
export interface SandboxStatus {
  state: SandboxRecordState;
  /** Epoch ms. */
  stopAt: number;
  /** Whole minutes paid for so far (debits minus refunds). */
  reservedMinutes: number;
  /** When it reached `stopped`/`error`; null while live. */
  endedAt: number | null;
  /** Why it is in `error`, or how it stopped. */
  details: Record<string, unknown> | null;
}

export type SandboxRecord = SandboxSpecRecord & SandboxStatus;

/** The state-transition table: from -> allowed next states. */
export const SANDBOX_TRANSITIONS: Readonly<Record<SandboxRecordState, readonly SandboxRecordState[]>> = {
  creating: ['started', 'error'],
  started: ['stopped', 'error'],
  stopped: [],
  error: [],
};

/** Whether `from -> to` is in the table. */
export function canTransition(from: SandboxRecordState, to: SandboxRecordState): boolean {
  return SANDBOX_TRANSITIONS[from].includes(to);
}

/** Throws `conflict` unless `from -> to` is allowed. */
export function assertTransition(from: SandboxRecordState, to: SandboxRecordState): void {
  if (!canTransition(from, to)) throw new SandboxdError('conflict', `Sandbox cannot go from ${from} to ${to}`);
}

/** True while a sandbox occupies a concurrency slot. */
export const isLive = (s: SandboxRecordState): boolean => s === 'creating' || s === 'started';

/** The wire form of a record. `creating` never reaches the wire. */
export function toWireSandbox(r: SandboxRecord, opts: { publicHost: string }): Sandbox {
  return {
    id: r.id,
    name: r.name,
    state: r.state === 'creating' ? 'started' : r.state,
    region: r.region,
    image: r.image,
    createdAt: new Date(r.createdAt).toISOString(),
    stopAt: new Date(r.stopAt).toISOString(),
    publicAccessUrlTemplate: `{{PORT}}-${r.id}.${opts.publicHost}`,
  };
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
