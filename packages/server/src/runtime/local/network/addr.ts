import { createHash } from 'node:crypto';
import { SandboxdError } from '@sandboxd/protocol';

/** Sandbox ids accepted by the network manager (the driver's id rule). */
export const SANDBOX_ID_RE = /^[a-z0-9_]{1,64}$/;
/** Interface names the kernel accepts (IFNAMSIZ 16 with the NUL) that are also safe in nft strings. */
const IFNAME_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,14}$/;

/** An IPv4 prefix as numbers: `base` is the network address with host bits cleared. */
export interface Prefix {
  base: number;
  len: number;
}

/** `a.b.c.d` -> unsigned 32-bit number; throws `validation` on anything else. */
export function ipToInt(ip: string): number {
  const parts = ip.split('.');
  if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255)) {
    throw new SandboxdError('validation', `not an IPv4 address: ${ip}`);
  }
  return parts.reduce((n, p) => n * 256 + Number(p), 0);
}

/** Unsigned 32-bit number -> `a.b.c.d`. */
export function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

function mask(len: number): number {
  return len === 0 ? 0 : (0xffffffff << (32 - len)) >>> 0;
}

/** Parses `a.b.c.d/len`, clearing host bits; throws `validation` when malformed. */
export function parsePrefix(cidr: string): Prefix {
  const m = /^([\d.]+)\/(\d{1,2})$/.exec(cidr);
  if (!m || Number(m[2]) > 32) throw new SandboxdError('validation', `not an IPv4 CIDR: ${cidr}`);
  const len = Number(m[2]);
  return { base: (ipToInt(m[1]) & mask(len)) >>> 0, len };
}

/** `base/len` text of a prefix. */
export function formatPrefix(p: Prefix): string {
  return `${intToIp(p.base)}/${p.len}`;
}

/** Whether `ip` (a number) lies inside `p`. */
export function contains(p: Prefix, ip: number): boolean {
  return (ip & mask(p.len)) >>> 0 === p.base;
}

/** Whether two prefixes share any address. */
export function overlaps(a: Prefix, b: Prefix): boolean {
  return contains(a, b.base) || contains(b, a.base);
}

/**
 * Drops duplicates and prefixes inside another one, so the rest can go into one nft
 * interval set (nft rejects overlapping intervals there).
 */
export function mergePrefixes(prefixes: Prefix[]): Prefix[] {
  const sorted = [...prefixes].sort((a, b) => a.len - b.len || a.base - b.base);
  const kept: Prefix[] = [];
  for (const p of sorted) if (!kept.some((k) => contains(k, p.base))) kept.push(p);
  return kept.sort((a, b) => a.base - b.base);
}

/** Sandbox subnet facts derived from a CIDR: the gateway and the pool of sandbox addresses. */
export interface SubnetPlan {
  prefix: Prefix;
  /** First host address; lives on the bridge. */
  gateway: number;
  /** First and last address handed to sandboxes (inclusive). */
  first: number;
  last: number;
}

/** Plans a sandbox subnet; throws `validation` unless the prefix length is 8..29. */
export function planSubnet(cidr: string): SubnetPlan {
  const prefix = parsePrefix(cidr);
  if (prefix.len < 8 || prefix.len > 29) {
    throw new SandboxdError('validation', `sandbox subnet ${cidr}: prefix length must be 8..29`);
  }
  const broadcast = (prefix.base + 2 ** (32 - prefix.len) - 1) >>> 0;
  return { prefix, gateway: prefix.base + 1, first: prefix.base + 2, last: broadcast - 1 };
}

/**
 * Throws `validation` unless `name` is a usable interface name: <= 15 chars, no quotes or
 * spaces, and not one that means something else in /proc/sys/net (`all`, `default`, `lo`).
 */
export function checkIfName(name: string): void {
  if (!IFNAME_RE.test(name) || ['all', 'default', 'lo'].includes(name)) {
    throw new SandboxdError('validation', `bad interface name: ${name}`);
  }
}

/** Throws `validation` unless `id` matches {@link SANDBOX_ID_RE}. */
export function checkSandboxId(id: string): void {
  if (!SANDBOX_ID_RE.test(id)) throw new SandboxdError('validation', `bad sandbox id: ${JSON.stringify(id)}`);
}

function digest(label: string): Buffer {
  return createHash('sha256').update(label).digest();
}

/** Host-side veth name of a sandbox: `sv` + 10 hex chars of a hash of the id (12 chars). */
export function hostVethName(id: string): string {
  return `sv${digest(`veth:${id}`).toString('hex').slice(0, 10)}`;
}

/** MAC of a sandbox's eth0: locally administered unicast, from a hash of the id. */
export function sandboxMac(id: string): string {
  return macFrom(digest(`mac:${id}`));
}

/** MAC of a sandbox's host-side veth (the sandbox's gateway MAC), from a hash of the id. */
export function hostVethMac(id: string): string {
  return macFrom(digest(`hostmac:${id}`));
}

/**
 * The interface group (`ip link ... group N`, nft `iifgroup`/`oifgroup`) of every host-side
 * veth of one instance, from a hash of its network name: one firewall rule matches all of
 * its ports, and only them (another instance on the host has another group). Never 0 (the
 * kernel's default group) and above 2^28, away from small numbers an admin would pick.
 */
export function instanceGroup(name: string): number {
  return 0x10000000 + (digest(`group:${name}`).readUInt32BE(0) % 0x6fffffff);
}

/** Fixed MAC of a bridge, so it does not change as ports come and go. */
export function bridgeMac(bridge: string): string {
  return macFrom(digest(`bridge:${bridge}`));
}

function macFrom(h: Buffer): string {
  return ['02', ...[...h.subarray(0, 5)].map((b) => b.toString(16).padStart(2, '0'))].join(':');
}

/** Netns name of a sandbox. */
export function netnsName(id: string): string {
  return `sbx-${id}`;
}

/** Where `ip netns` keeps the netns file that crun joins. */
export function netnsPath(id: string): string {
  return `/run/netns/${netnsName(id)}`;
}
