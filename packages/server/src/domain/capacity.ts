import { SandboxdError } from '@sandboxd/protocol';
import type { RuntimeCapacity } from '../runtime/driver.js';

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

/** Who has no room, as a capacity refusal's message begins: one host, or every runner of an API process. */
export const NO_ROOM = {
  host: 'The host has no room for more sandboxes',
  runners: 'No runner has room for more sandboxes',
} as const;

/**
 * The 503 `capacity` refusal of a create: a message naming the resource and saying when to
 * retry, `details: {resource, retryAfterMs, ...figures}`. The server adds `Retry-After`.
 */
export function capacityError(
  resource: CapacityResource,
  why: string,
  figures: Record<string, unknown> = {},
  subject: string = NO_ROOM.host,
): SandboxdError {
  return new SandboxdError('capacity', `${subject}: ${why}; retry in ${CAPACITY_RETRY_MS / 1000} s`, {
    resource,
    retryAfterMs: CAPACITY_RETRY_MS,
    ...figures,
  });
}

/** The floors of creates, bytes (`createMinMemoryMb`, `createMinFreeMb`); 0: off. */
export interface CapacityFloors {
  memoryBytes: number;
  diskBytes: number;
}

/** One resource a host has no room in: what, why (for messages), the figures. */
export interface Shortage {
  resource: CapacityResource;
  why: string;
  figures: Record<string, unknown>;
}

/**
 * Each of memory, disk and addresses that is at its limit in the runtime's figures `c`, in
 * that order (empty: room for another sandbox). A figure the runtime cannot tell (null)
 * never counts as short.
 */
export function shortagesIn(c: RuntimeCapacity, floors: CapacityFloors): Shortage[] {
  const out: Shortage[] = [];
  const { memoryBytes: memory, diskBytes: disk } = floors;
  if (memory > 0 && c.memoryAvailableBytes !== null && c.memoryAvailableBytes < memory)
    out.push({
      resource: 'memory',
      why: `memory is low (${mib(c.memoryAvailableBytes)} available, the floor is ${mib(memory)}: createMinMemoryMb)`,
      figures: { availableBytes: c.memoryAvailableBytes, floorBytes: memory },
    });
  if (disk > 0 && c.diskFreeBytes !== null && c.diskFreeBytes < disk)
    out.push({
      resource: 'disk',
      why: `disk space is low (${mib(c.diskFreeBytes)} free on the data dir's file system, the floor is ${mib(disk)}: createMinFreeMb)`,
      figures: { freeBytes: c.diskFreeBytes, floorBytes: disk },
    });
  if (c.addresses && c.addresses.free <= 0)
    out.push({
      resource: 'addresses',
      why: `no free sandbox network address (all ${c.addresses.total} are in use)`,
      figures: { ...c.addresses },
    });
  return out;
}

/** The 503 `capacity` refusals of {@link shortagesIn}, messages beginning with `subject` ({@link NO_ROOM}). */
export function capacityShortages(
  c: RuntimeCapacity,
  floors: CapacityFloors,
  subject: string = NO_ROOM.host,
): SandboxdError[] {
  return shortagesIn(c, floors).map((x) => capacityError(x.resource, x.why, x.figures, subject));
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
