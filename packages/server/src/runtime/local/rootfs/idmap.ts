/**
 * Idmapped mounts: show a directory tree owned by "canonical" ids (uid 0 = root of the
 * image or volume) to one sandbox as owned by that sandbox's host ids, without copying or
 * chowning anything. Done by the `idmap-mount` native helper (open_tree + mount_setattr
 * with MOUNT_ATTR_IDMAP + move_mount); Debian's `mount -o X-mount.idmap` silently does nothing.
 */
import { isAbsolute } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import { mountHelper } from './mounts.js';

/** Default number of ids a sandbox's user namespace maps. */
export const ID_RANGE = 65536;

/** A sandbox's id mapping: sandbox id N <-> host id uidBase+N for 0 <= N < size (uids and gids). */
export interface IdMapping {
  uidBase: number;
  /** Number of ids mapped; default {@link ID_RANGE}. */
  size?: number;
}

/** Throws 'validation' unless the mapping is usable: never maps to host root, fits in 32 bits. */
export function checkMapping(m: IdMapping): { uidBase: number; size: number } {
  const size = m.size ?? ID_RANGE;
  if (!Number.isInteger(m.uidBase) || m.uidBase < 1)
    throw new SandboxdError('validation', `uidBase must be a positive integer, got ${m.uidBase}`);
  if (!Number.isInteger(size) || size < 1 || m.uidBase + size > 0xfffffffe)
    throw new SandboxdError('validation', `id range ${m.uidBase}+${size} does not fit in 32-bit ids`);
  return { uidBase: m.uidBase, size };
}

/**
 * Mounts `src` at `dst` (which must exist) so that a file owned by id N in `src` appears
 * owned by host id uidBase+N at `dst`, and a file created through `dst` by host id
 * uidBase+N is stored as N. Ids outside the range show as the overflow id (65534).
 * The mount is not recursive (submounts of `src` are not carried along) and keeps
 * `src`'s mount flags. Unmount with `unmount([dst])` from mounts.ts.
 */
export async function idmappedBind(src: string, dst: string, opts: IdMapping): Promise<void> {
  await idmappedBinds([[src, dst]], opts);
}

/** Like {@link idmappedBind} for several pairs with one mapping, in one helper run. */
export async function idmappedBinds(pairs: [src: string, dst: string][], opts: IdMapping): Promise<void> {
  const { uidBase, size } = checkMapping(opts);
  if (pairs.length === 0) return;
  for (const [s, d] of pairs)
    if (!isAbsolute(s) || !isAbsolute(d))
      throw new SandboxdError('validation', `idmapped bind needs absolute paths: ${s} -> ${d}`);
  await mountHelper(['bind', String(uidBase), String(size), ...pairs.flat()]);
}

/** One entry of an OCI config's `mounts`, as crun reads it. */
export interface OciMount {
  destination: string;
  type: string;
  source: string;
  options: string[];
  uidMappings?: { containerID: number; hostID: number; size: number }[];
  gidMappings?: { containerID: number; hostID: number; size: number }[];
}

/**
 * An OCI mount entry that makes crun (>= 1.8) bind `source` at `destination` idmapped with
 * the sandbox's mapping, using the runtime-spec 1.1 per-mount `uidMappings`/`gidMappings`
 * (crun's `idmap` mount option works as well). Nothing is mounted on the host for it.
 * crun resolves `source` as the container's root, so every parent directory of `source`
 * must be searchable (x) by host uid `uidBase`.
 */
export function idmappedOciBind(
  source: string,
  destination: string,
  opts: IdMapping & { readonly?: boolean },
): OciMount {
  const { uidBase, size } = checkMapping(opts);
  const map = [{ containerID: 0, hostID: uidBase, size }];
  return {
    destination,
    type: 'bind',
    source,
    options: ['bind', 'nosuid', 'nodev', ...(opts.readonly ? ['ro'] : [])],
    uidMappings: map,
    gidMappings: map.map((m) => ({ ...m })),
  };
}
