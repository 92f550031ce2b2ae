/**
 * Checks of what a create or exec request carries beyond its schema: env entries execve
 * would refuse, and the volume map (mount paths, sizes, nesting). Errors are `validation`
 * with a JSON pointer into the body for each problem. And the record a checked create
 * request reserves.
 */
import { LIMITS, SandboxdError, type SandboxCreate, type ValidationProblem } from '@sandboxd/protocol';
import { pointerToken } from '../domain/json-pointer.js';
import { newSandboxName } from '../domain/names.js';
import { type MountRecord, mountPathProblem, type SandboxRecord } from '../domain/sandbox.js';

/**
 * Entries `NAME=value` longer than {@link LIMITS.maxArgBytes} in UTF-8: execve refuses
 * them (E2BIG), so a sandbox or command given one could never start.
 */
export function envProblems(env: Record<string, string> | undefined, base: string): ValidationProblem[] {
  const out: ValidationProblem[] = [];
  for (const [k, v] of Object.entries(env ?? {})) {
    const bytes = Buffer.byteLength(k) + 1 + Buffer.byteLength(v);
    if (bytes > LIMITS.maxArgBytes) {
      out.push({
        in: 'body',
        path: `${base}/${pointerToken(k)}`,
        message: `NAME=value is ${bytes} bytes; at most ${LIMITS.maxArgBytes}`,
      });
    }
  }
  return out;
}

export function badRequest(message: string, path: string, extra: Record<string, unknown> = {}): SandboxdError {
  return new SandboxdError('validation', message, [{ in: 'body', path, message, ...extra }]);
}

/** Turns the request's volume map into mounts (sizes resolved later) and requested sizes. */
export function parseVolumes(v: NonNullable<SandboxCreate['volumes']>): {
  mounts: MountRecord[];
  sizes: Array<{ name: string; sizeGb: number | null }>;
} {
  const problems: ValidationProblem[] = [];
  const mounts: MountRecord[] = [];
  const sizes = new Map<string, number | null>();
  for (const [mountPath, spec] of Object.entries(v)) {
    const ptr = `/volumes/${pointerToken(mountPath)}`;
    const p = mountPathProblem(mountPath);
    if (p) problems.push({ in: 'body', path: ptr, message: `mount path ${p}` });
    const name = typeof spec === 'string' ? spec : spec.name;
    const size = typeof spec === 'string' ? null : (spec.sizeGb ?? null);
    const seen = sizes.get(name);
    if (seen !== undefined && seen !== null && size !== null && seen !== size)
      problems.push({ in: 'body', path: ptr, message: `volume ${name} is given two sizes` });
    sizes.set(name, size ?? seen ?? null);
    mounts.push({ mountPath, name, sizeGb: size ?? 1 });
  }
  // A mount path below another volume's would be resolved by the runtime through that
  // volume's content, which other sandboxes of the account may write (symlinks planted
  // there would decide where, or whether, this one is mounted): refused.
  for (const inner of mounts) {
    const outer = mounts.find((o) => o !== inner && inner.mountPath.startsWith(`${o.mountPath}/`));
    if (outer) {
      const ptr = `/volumes/${pointerToken(inner.mountPath)}`;
      problems.push({
        in: 'body',
        path: ptr,
        message: `mount path must not be inside another volume's mount path (${outer.mountPath})`,
      });
    }
  }
  if (problems.length)
    throw new SandboxdError('validation', problems.map((p) => `${p.path}: ${p.message}`).join('; '), problems);
  return { mounts, sizes: [...sizes].map(([name, sizeGb]) => ({ name, sizeGb })) };
}

/**
 * What a create records beyond sandboxd's own request: internal, never part of sandboxd's
 * API schema. E2B's front door gives the template name and the caller's metadata.
 */
export interface CreateOptions {
  template?: string;
  metadata?: Record<string, string>;
  /**
   * The runtime's image to create from, instead of resolving the request's `image` (which
   * is then only recorded): the builds service's step sandboxes, made from a cache layer
   * (`snapshot/<accountId>/_l.<key>`) that no request may name. Never set from a request.
   */
  driverImage?: string;
  /** The image's own start (service, start command, ready check) is not run: build step sandboxes. Never set from a request. */
  skipImageStart?: boolean;
}

/**
 * The record of the `n`th fork (from 1) of started sandbox `src`, in `creating`: the source's
 * image, env (secret placeholders included: the fork's memory holds them), metadata,
 * network (egress and secret rules), ports setting, onTimeout, template and tier; no
 * volumes; named `<source name>-fork-<n>`; a fresh lifetime from `now`.
 */
export function forkRecord(c: {
  src: SandboxRecord;
  id: string;
  n: number;
  owner: string;
  now: number;
  timeoutMs: number;
}): SandboxRecord {
  const { src, now } = c;
  return {
    id: c.id,
    accountId: src.accountId,
    name: forkName(src.name, c.n),
    image: src.image,
    region: src.region,
    env: { ...src.env },
    volumes: [],
    createdAt: now,
    portsPublic: src.portsPublic !== false,
    state: 'creating',
    stopAt: now + c.timeoutMs,
    reservedMinutes: 0,
    endedAt: null,
    details: { owner: c.owner, forkedFrom: src.id },
    ...(src.template !== undefined ? { template: src.template } : {}),
    ...(src.metadata !== undefined ? { metadata: { ...src.metadata } } : {}),
    ...(src.onTimeout === 'pause' ? { onTimeout: 'pause' as const } : {}),
    ...(src.network ? { network: structuredClone(src.network) } : {}),
    ...(src.isolation ? { isolation: src.isolation } : {}),
    runStartedAt: now,
    expiresAt: null,
  };
}

/** `<name>-fork-<n>`; with `suffix` (the account has that name already: an earlier fork), `<name>-fork-<n>-<suffix>`. */
export function forkName(name: string, n: number, suffix?: string): string {
  return suffix === undefined ? `${name}-fork-${n}` : `${name}-fork-${n}-${suffix}`;
}

/**
 * The record a create reserves, in `creating`: `req` checked (its egress decided), `mounts`
 * its parsed volumes, `owner` the server that runs the create, `now` the create's time.
 */
export function creatingRecord(c: {
  id: string;
  accountId: string;
  req: SandboxCreate;
  opts: CreateOptions;
  mounts: MountRecord[];
  region: string;
  owner: string;
  now: number;
  timeoutMs: number;
}): SandboxRecord {
  const { req, opts, now } = c;
  return {
    id: c.id,
    accountId: c.accountId,
    name: newSandboxName(),
    image: req.image,
    region: c.region,
    env: req.env ?? {},
    volumes: c.mounts,
    createdAt: now,
    portsPublic: req.ports?.public !== false,
    state: 'creating',
    stopAt: now + c.timeoutMs,
    reservedMinutes: 0,
    endedAt: null,
    // Until `started`: whose create this is (another server's reconciler leaves it alone while it runs).
    details: { owner: c.owner },
    ...(opts.template !== undefined ? { template: opts.template } : {}),
    ...(req.metadata !== undefined || opts.metadata !== undefined
      ? { metadata: { ...opts.metadata, ...req.metadata } }
      : {}),
    ...(req.onTimeout === 'pause' ? { onTimeout: 'pause' as const } : {}),
    ...(req.network ? { network: req.network } : {}),
    ...(req.isolation && req.isolation !== 'container' ? { isolation: req.isolation } : {}),
    runStartedAt: now,
    expiresAt: null,
  };
}
