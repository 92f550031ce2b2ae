/**
 * Who may make this host pull what, and with whose credentials:
 * - tenants pull only from the registries the operator allows (`registriesAllowed`, default
 *   {@link DEFAULT_REGISTRIES_ALLOWED}; `*` allows any); the admin (and the operator's own
 *   pulls: warm pool, CLI) from any registry;
 * - the server's credentials of a registry serve the admin's pulls, and a tenant's only when
 *   that registry's entry names the account (`accounts: [...]`) or all (`accounts: "*"`);
 * - an image pulled with those credentials is served from the cache only to the pulls they
 *   serve; any other puller makes its own pull (store.ts);
 * - no pull dials a non-public address ({@link isForbiddenAddress}) unless the operator
 *   named that very registry in `registriesAllowed` (a `*` does not count). dial-guard.ts
 *   enforces this on every connection a pull makes, redirects included.
 * A refusal is a `validation` error (400) naming the registry and how to allow it.
 */
import { BlockList, isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { SandboxdError } from '@sandboxd/protocol';
import type { Credentials } from './skopeo.js';

/** The public registries tenants may pull from when the operator lists none. */
export const DEFAULT_REGISTRIES_ALLOWED = [
  'docker.io',
  'ghcr.io',
  'quay.io',
  'gcr.io',
  'public.ecr.aws',
  'registry.k8s.io',
  'mcr.microsoft.com',
] as const;

/** Who asks for a pull. `accountId` null: the operator's own (warm pool, CLI, runner calls). */
export interface Puller {
  accountId: string | null;
  admin: boolean;
}

/** The operator's (and an admin route's) pulls. */
export const OPERATOR: Puller = { accountId: null, admin: true };
/** A pull nobody is named for (a create without its account): treated as an unknown tenant's. */
export const ANONYMOUS: Puller = { accountId: null, admin: false };

/** A registry's credentials and whom they serve besides the admin (default: nobody else). */
export interface RegistryCredentials extends Credentials {
  /** Account ids whose pulls may use them, or `*` for every account. */
  accounts?: string[] | '*';
}

export interface PullPolicyOptions {
  /** Registries (host[:port]) tenants may pull from, `*` for any; default {@link DEFAULT_REGISTRIES_ALLOWED}. */
  registriesAllowed?: readonly string[];
  /** Credentials by registry host[:port] (`docker.io` for Docker Hub). */
  credentials?: Record<string, RegistryCredentials>;
}

const DOCKER_HUB = new Set(['docker.io', 'index.docker.io', 'registry-1.docker.io', 'registry.hub.docker.com']);

/** `host[:port]` lower-cased, `:443` dropped, Docker Hub's names as `docker.io`. */
export function normalizeRegistry(r: string): string {
  let s = r.trim().toLowerCase();
  if (s.endsWith(':443')) s = s.slice(0, -4);
  return DOCKER_HUB.has(s) ? 'docker.io' : s;
}

/** The host and port skopeo dials for registry `domain` (Docker Hub's API host for `docker.io`). */
export function registryEndpoint(domain: string, insecure: boolean): { host: string; port: number } {
  const d = normalizeRegistry(domain);
  if (d === 'docker.io') return { host: 'registry-1.docker.io', port: 443 };
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(d);
  if (v6) return { host: v6[1], port: v6[2] ? Number(v6[2]) : insecure ? 80 : 443 };
  const i = d.lastIndexOf(':');
  if (i > 0) return { host: d.slice(0, i), port: Number(d.slice(i + 1)) };
  return { host: d, port: insecure ? 80 : 443 };
}

const V4: Array<[string, number]> = [
  ['0.0.0.0', 8], // "this network": 0.0.0.0 reaches the host itself
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // CGNAT; also 100.100.100.200, Alibaba's metadata
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local; 169.254.169.254, the clouds' metadata
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
  ['168.63.129.16', 32], // Azure's host endpoint
];
const V6: Array<[string, number]> = [
  ['::', 128],
  ['::1', 128],
  ['64:ff9b::', 96], // NAT64 of an IPv4 address: checked as that address below too
  ['64:ff9b:1::', 48], // local-use NAT64 (RFC 8215): any IPv4 address, private ones included
  ['::ffff:0:0:0', 96], // SIIT-translated IPv4 (::ffff:0:a.b.c.d)
  ['2001::', 32], // Teredo: carries an IPv4 address
  ['2002::', 16], // 6to4: carries an IPv4 address
  ['100::', 64], // discard
  ['2001:db8::', 32],
  ['fc00::', 7], // unique local; fd00:ec2::254, AWS's metadata over IPv6
  ['fe80::', 10],
  ['ff00::', 8],
];

const forbidden = new BlockList();
for (const [a, p] of V4) forbidden.addSubnet(a, p, 'ipv4');
for (const [a, p] of V6) forbidden.addSubnet(a, p, 'ipv6');

/** The IPv4 address inside an IPv4-mapped (::ffff:a.b.c.d) or NAT64 (64:ff9b::/96) IPv6 address. */
function embeddedV4(ip: string): string | undefined {
  const m = /^(?:::ffff:|64:ff9b::)(?:(\d+\.\d+\.\d+\.\d+)|([0-9a-f]{1,4}):([0-9a-f]{1,4}))$/i.exec(ip);
  if (!m) return undefined;
  if (m[1]) return m[1];
  const hi = Number.parseInt(m[2], 16);
  const lo = Number.parseInt(m[3], 16);
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

/** The host's own addresses (every interface's), read afresh at most once a second. */
let hostCache: { at: number; set: Set<string> } | undefined;
function hostAddresses(): Set<string> {
  const now = Date.now();
  if (hostCache && now - hostCache.at < 1000) return hostCache.set;
  const set = new Set<string>();
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) set.add(a.address.toLowerCase().replace(/%.*$/, ''));
  hostCache = { at: now, set };
  return set;
}

/**
 * True for an address no pull may dial: the host's own addresses, loopback, private, link-local, CGNAT, multicast,
 * reserved and documentation ranges, the clouds' metadata addresses; IPv6 forms of IPv4
 * ones (mapped, NAT64) as their IPv4 address. Anything that is not an IP address is forbidden.
 */
export function isForbiddenAddress(ip: string): boolean {
  const kind = isIP(ip);
  if (kind !== 0 && hostAddresses().has(ip.toLowerCase())) return true;
  if (kind === 4) return forbidden.check(ip, 'ipv4');
  if (kind !== 6) return true;
  const v4 = embeddedV4(ip);
  if (v4 !== undefined) return hostAddresses().has(v4) || forbidden.check(v4, 'ipv4');
  return forbidden.check(ip, 'ipv6');
}

/** The pull policy of one image store. */
export class PullPolicy {
  private readonly allowed: Set<string>;
  /** Registries the operator named in the setting (not the defaults): they alone may be at a private address. */
  private readonly named: Set<string>;
  private readonly any: boolean;
  private readonly creds: Map<string, RegistryCredentials>;

  constructor(opts: PullPolicyOptions = {}) {
    const list = opts.registriesAllowed ?? DEFAULT_REGISTRIES_ALLOWED;
    this.any = list.includes('*');
    this.allowed = new Set(list.filter((r) => r !== '*').map(normalizeRegistry));
    this.named = new Set((opts.registriesAllowed ?? []).filter((r) => r !== '*').map(normalizeRegistry));
    this.creds = new Map(Object.entries(opts.credentials ?? {}).map(([k, v]) => [normalizeRegistry(k), v]));
  }

  /** Throws `validation` when `puller` may not pull from registry `domain`. */
  check(domain: string, puller: Puller, image: string): void {
    if (puller.admin || this.any || this.allowed.has(normalizeRegistry(domain))) return;
    throw new SandboxdError(
      'validation',
      `Pulling from registry ${domain} is not allowed for this account: the operator allows a registry for every account by listing it in SANDBOXD_REGISTRIES_ALLOWED (registriesAllowed)`,
      { image, registry: domain },
    );
  }

  /** True when the operator named registry `domain` itself: it may then be at a non-public address. */
  listed(domain: string): boolean {
    return this.named.has(normalizeRegistry(domain));
  }

  /** True when the server has credentials for registry `domain`. */
  hasCredentials(domain: string): boolean {
    return this.creds.has(normalizeRegistry(domain));
  }

  /**
   * True when an image pulled with the server's credentials of registry `domain` may be
   * served to `puller` from the cache: the admin's, and the pulls those credentials serve.
   */
  servesCredentialed(domain: string, puller: Puller): boolean {
    return puller.admin || this.credentialsFor(domain, puller) !== undefined;
  }

  /** The server's credentials for registry `domain` if they may serve `puller`'s pull. */
  credentialsFor(domain: string, puller: Puller): Credentials | undefined {
    const c = this.creds.get(normalizeRegistry(domain));
    if (!c) return undefined;
    const ok =
      puller.admin ||
      c.accounts === '*' ||
      (puller.accountId !== null && Array.isArray(c.accounts) && c.accounts.includes(puller.accountId));
    return ok ? { username: c.username, password: c.password } : undefined;
  }
}

/** The refusal of a dial to `at` (the registry itself when `own`) at `address`, for the message of a refused pull. */
export function refusedAddress(
  image: string,
  registry: string,
  at: { host: string; port: number; own: boolean },
  address: string,
): SandboxdError {
  const what = at.own
    ? `registry ${registry}`
    : `${at.host}:${at.port} (a redirect or auth server of registry ${registry})`;
  const host = at.host;
  return new SandboxdError(
    'validation',
    `Image pull refused: ${what} is at ${address}, a loopback, private, link-local or metadata address; the operator allows a registry at such an address by naming it in SANDBOXD_REGISTRIES_ALLOWED (registriesAllowed)`,
    { image, registry, host },
  );
}
