import { SandboxdError } from '@sandboxd/protocol';

/* The plan limits' refusals, one builder each, for every store and service that decides them. */

/** 403 `concurrency`: the account has `limit` sandboxes taking a concurrency slot. */
export function concurrencyLimitError(limit: number): SandboxdError {
  return new SandboxdError('concurrency', `Concurrency limit reached: ${limit} sandboxes running`, { limit });
}

/** 403 `quota`: the account keeps the plan's `maxPaused` paused sandboxes. */
export function pausedLimitError(limit: number): SandboxdError {
  return new SandboxdError('quota', `Paused sandbox limit reached: the plan allows ${limit}`, {
    quota: 'maxPaused',
    limit,
  });
}

/** 403 `quota`: the account's snapshots use `used` bytes (and one being made would add `extra`) of the plan's `quotaBytes`. */
export function snapshotQuotaError(used: number, quotaBytes: number, extra = 0): SandboxdError {
  return new SandboxdError(
    'quota',
    `Snapshot quota reached: the account's snapshots use ${used} bytes${extra ? ` and this one adds ${extra}` : ''}; the plan allows ${quotaBytes}`,
    { quota: 'snapshotBytes', limit: quotaBytes, used, ...(extra ? { sizeBytes: extra } : {}) },
  );
}

/** 403 `quota`: the plan does not allow the egress asked for (`asked` is beyond `limit`). */
export function egressPlanError(asked: string, limit: string): SandboxdError {
  return new SandboxdError(
    'quota',
    `Egress "${asked}" is beyond the plan's limit: the plan allows ${limit === 'allow' ? 'only allow rules' : `"${limit}"`}`,
    { quota: 'egress', limit, asked },
  );
}

/** 403 `quota`: the account holds `limit` secrets already. */
export function secretsQuotaError(limit: number): SandboxdError {
  return new SandboxdError('quota', `Secret quota reached: an account holds at most ${limit} secrets`, {
    quota: 'secrets',
    limit,
  });
}
