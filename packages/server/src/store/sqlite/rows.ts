import { SandboxdError } from '@sandboxd/protocol';
import type { SandboxRecord, SandboxRecordState } from '../../domain/sandbox.js';
import type { AccountRecord, ApiKeyRecord, LedgerRow, SandboxUpdate } from '../store.js';

/* Row <-> record mapping for the SQLite store. */

export interface SandboxRow {
  id: string;
  account_id: string;
  name: string;
  image: string;
  region: string;
  env_json: string;
  volumes_json: string;
  created_at: number;
  state: string;
  stop_at: number;
  reserved_minutes: number;
  ended_at: number | null;
  details_json: string | null;
  ports_public: number;
  template: string | null;
  metadata_json: string | null;
  on_timeout: 'stop' | 'pause';
  run_started_at: number | null;
  expires_at: number | null;
  runner: string | null;
  network_json: string | null;
  isolation: 'container' | 'gvisor';
  paused_memory: 'ram' | 'disk' | null;
}

export function toSandbox(r: SandboxRow): SandboxRecord {
  return {
    id: r.id,
    accountId: r.account_id,
    name: r.name,
    image: r.image,
    region: r.region,
    env: JSON.parse(r.env_json),
    volumes: JSON.parse(r.volumes_json),
    createdAt: r.created_at,
    portsPublic: r.ports_public !== 0,
    state: r.state as SandboxRecordState,
    stopAt: r.stop_at,
    reservedMinutes: r.reserved_minutes,
    endedAt: r.ended_at,
    details: r.details_json ? JSON.parse(r.details_json) : null,
    ...(r.template !== null ? { template: r.template } : {}),
    ...(r.metadata_json !== null ? { metadata: JSON.parse(r.metadata_json) } : {}),
    ...(r.on_timeout === 'pause' ? { onTimeout: 'pause' as const } : {}),
    ...(r.run_started_at !== null ? { runStartedAt: r.run_started_at } : {}),
    ...(r.network_json ? { network: JSON.parse(r.network_json) } : {}),
    ...(r.isolation !== 'container' ? { isolation: r.isolation } : {}),
    ...(r.paused_memory !== null ? { pausedMemory: r.paused_memory } : {}),
    expiresAt: r.expires_at,
    ...(r.runner !== null ? { runner: r.runner } : {}),
  };
}

/**
 * The `pausedMemory` of the record an update makes (either store): as the update sets it
 * (null clears it), else kept while the record stays `paused` and dropped once it leaves.
 */
export function setPausedMemory(next: SandboxRecord, u: Pick<SandboxUpdate, 'pausedMemory'>): void {
  const memory = u.pausedMemory !== undefined ? u.pausedMemory : next.state === 'paused' ? next.pausedMemory : null;
  if (memory) next.pausedMemory = memory;
  else delete next.pausedMemory;
}

/** An accounts row, of either store: `admin` is 0/1 in SQLite, a boolean in PostgreSQL. */
export function toAccount(r: {
  id: string;
  email: string;
  password_hash: string | null;
  plan: string;
  admin: number | boolean;
  created_at: number;
}): AccountRecord {
  return {
    id: r.id,
    email: r.email,
    passwordHash: r.password_hash,
    plan: r.plan,
    admin: r.admin === 1 || r.admin === true,
    createdAt: r.created_at,
  };
}

export function toApiKey(r: {
  id: string;
  account_id: string;
  name: string;
  prefix: string;
  key_hash: string;
  created_at: number;
  last_used_at: number | null;
}): ApiKeyRecord {
  return {
    id: r.id,
    accountId: r.account_id,
    name: r.name,
    prefix: r.prefix,
    keyHash: r.key_hash,
    createdAt: r.created_at,
    lastUsedAt: r.last_used_at,
  };
}

export function toLedger(r: {
  id: number;
  account_id: string;
  delta: number;
  reason: string;
  sandbox_id: string | null;
  created_at: number;
}): LedgerRow {
  return {
    id: r.id,
    accountId: r.account_id,
    delta: r.delta,
    reason: r.reason as LedgerRow['reason'],
    sandboxId: r.sandbox_id,
    createdAt: r.created_at,
  };
}

/** Opaque page cursor over (createdAt|id, id) ordering keys. */
export function encodeCursor(key: [number, string | number]): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

/** Decodes a cursor; `validation` (400) when it is not one of ours. */
export function decodeCursor(c: string): [number, string | number] {
  try {
    const v = JSON.parse(Buffer.from(c, 'base64url').toString('utf8'));
    if (Array.isArray(v) && v.length === 2 && Number.isSafeInteger(v[0]) && ['string', 'number'].includes(typeof v[1]))
      return v as [number, string];
  } catch {
    /* fall through */
  }
  throw new SandboxdError('validation', 'Invalid cursor', [
    { in: 'query', path: '/cursor', message: 'is not a cursor returned by this server' },
  ]);
}
