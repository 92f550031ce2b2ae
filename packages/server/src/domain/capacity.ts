import { SandboxdError } from '@sandboxd/protocol';

/**
 * What a full host has run out of, as a 503 `capacity` names it: the configured count of
 * sandboxes, memory, disk space on the data dir, sandbox network addresses, or (a failure of
 * the runtime only) the host's processes.
 */
export type CapacityResource = 'sandboxes' | 'memory' | 'disk' | 'addresses' | 'processes';

/**
 * How long a client refused for capacity is asked to wait (`Retry-After`, `details.retryAfterMs`).
 * Room comes back when other sandboxes end, which no one can predict: one fixed, short wait.
 */
export const CAPACITY_RETRY_MS = 5000;

const MiB = 2 ** 20;

/** A size in MiB for messages. */
export const mib = (bytes: number): string => `${Math.floor(bytes / MiB)} MiB`;

/**
 * The 503 `capacity` refusal of a create: a message naming the resource and saying when to
 * retry, `details: {resource, retryAfterMs, ...figures}`. The server adds `Retry-After`.
 */
export function capacityError(
  resource: CapacityResource,
  why: string,
  figures: Record<string, unknown> = {},
): SandboxdError {
  return new SandboxdError(
    'capacity',
    `The host has no room for more sandboxes: ${why}; retry in ${CAPACITY_RETRY_MS / 1000} s`,
    { resource, retryAfterMs: CAPACITY_RETRY_MS, ...figures },
  );
}

/** The refusal at `maxSandboxes`. */
export function sandboxesFull(used: number, max: number): SandboxdError {
  return capacityError('sandboxes', `${used} of ${max} are in use (maxSandboxes)`, { used, max });
}

/**
 * Failures of the runtime that mean the host is full, each with its resource and a short
 * reason (no paths). Tested against the message and `code` of `e` and its causes:
 * - a bridge with no free port (`RTNETLINK answers: Exchange full`, EXFULL: a Linux bridge
 *   takes at most 1023 ports) or a subnet with no free address: `addresses`;
 * - a process that could not be made (EAGAIN from fork/clone/spawn): `processes`;
 * - ENOMEM (`Cannot allocate memory`): `memory`.
 * A full disk (ENOSPC) is not here: it stays the 507 of `domain/storage.ts`.
 */
const HOST_FULL: Array<{ resource: CapacityResource; why: string; test: (msg: string, code: string) => boolean }> = [
  {
    resource: 'addresses',
    why: 'the sandbox network bridge has no free port',
    test: (m, c) => c === 'EXFULL' || /\bExchange full\b|\bEXFULL\b/.test(m),
  },
  {
    resource: 'addresses',
    why: 'no free sandbox network address',
    test: (m) => /\bno free address\b/i.test(m),
  },
  {
    resource: 'processes',
    why: 'the host could not start another process',
    test: (m, c) =>
      c === 'EAGAIN' ||
      /\b(fork|clone3?|vfork|spawn\b[^\n:]*)[^\n]*(\bEAGAIN\b|Resource temporarily unavailable)/i.test(m),
  },
  {
    resource: 'memory',
    why: 'the host is out of memory',
    test: (m, c) => c === 'ENOMEM' || /\bENOMEM\b|Cannot allocate memory|Out of memory/i.test(m),
  },
];

/** The capacity refusal a runtime failure `e` stands for, or null when it means something else. */
export function hostFullError(e: unknown): SandboxdError | null {
  let x: unknown = e;
  for (let depth = 0; x && typeof x === 'object' && depth < 8; depth++) {
    const { code, message, cause } = x as { code?: unknown; message?: unknown; cause?: unknown };
    const m = typeof message === 'string' ? message : '';
    const c = typeof code === 'string' ? code : '';
    const hit = HOST_FULL.find((h) => h.test(m, c));
    if (hit) return capacityError(hit.resource, hit.why);
    x = cause;
  }
  return null;
}
