import type { Config } from '../../config.js';
import type { ResourceLimits } from '../driver.js';
import type { GvisorPlatform } from '../gvisor/runsc.js';
import type { OciRuntimeName } from './commands/oci-runtime.js';
import type { WarmEntry } from './pools/warm.js';
import type { Upstream } from './network/dns.js';
import type { NetworkOptions } from './network/manager.js';
import type { RegistryCredentials } from './images/pull-policy.js';

/** Options of the local driver; only the folders are required. */
export interface LocalDriverOptions {
  /** Sandbox state, roots and volumes live here. */
  dataDir: string;
  /** Shared image cache. */
  imageDir: string;
  /**
   * Base of the volatile runtime state; default `/run/sandboxd`. The driver keeps its own
   * under `<runDir>/<key>/` (crun's root, exec pid files), `<key>` being the instance key of
   * `dataDir` (instance.ts), so instances on one host never share it.
   */
  runDir?: string;
  bridge?: string;
  subnet?: string;
  /** Where sandbox egress is routed (`SANDBOXD_EGRESS_VIA`: `dev` or `dev:next-hop`); default the host's routes. */
  egressVia?: string;
  /** Upstream resolvers of the sandboxes' resolver (`SANDBOXD_EGRESS_DNS`); default the host's resolv.conf. */
  egressDns?: Upstream[];
  /** Each sandbox's share of the egress services (config `egress*PerSandbox`, `egressProxyIdleTimeoutMs`). */
  egressShare?: NetworkOptions['share'];
  /** A PEM file of extra CAs the egress proxy trusts upstream for injected requests (`SANDBOXD_EGRESS_CA_FILE`). */
  egressCaFile?: string;
  /** First host uid handed to sandboxes; each gets 65536 from there. Default 100000. */
  uidRangeStart?: number;
  /** Name of the cgroup folder that holds every sandbox's cgroup. Default `sandboxd-<key>`. */
  cgroupParent?: string;
  /** Registry credentials by host[:port] and whose pulls they serve (pull-policy.ts); default none. */
  registryCredentials?: Record<string, RegistryCredentials>;
  insecureRegistries?: string[];
  /** Registries every account may pull from (`*`: any); default DEFAULT_REGISTRIES_ALLOWED (pull-policy.ts). */
  registriesAllowed?: string[];
  /** OCI runtime of the `container` tier; default crun when installed, else runc. */
  ociRuntime?: Exclude<OciRuntimeName, 'runsc'>;
  /** Offer the `gvisor` tier (runsc); default: when runsc is installed. */
  gvisor?: boolean;
  /** runsc's platform (`SANDBOXD_GVISOR_PLATFORM`); default chosen by what the host offers (../gvisor/runsc.ts). */
  gvisorPlatform?: GvisorPlatform;
  /** Networks kept made ahead of need, so creating a sandbox does not wait for one (crun only). Default 2. */
  netPoolSize?: number;
  /** false: run every command with `<runtime> exec` instead of the exec agent (tests, comparisons). Default true. */
  execAgent?: boolean;
  /** Images whose sandboxes are kept started, ready to be claimed by a create (crun only). Default none. */
  warmPool?: WarmEntry[];
  /** Limits warm-pooled sandboxes start with, until a create of their image asks for others. */
  warmLimits?: ResourceLimits;
  /** How long a boot waits for the service an image declares to be healthy (service.ts). Default 60 s. */
  serviceStartTimeoutMs?: number;
  /** Leftovers of an earlier process removed at once in the background by `recover()`. Default 4. */
  recoveryConcurrency?: number;
  /** Tests: the background removal of leftovers starts only once this settles. */
  holdLeftovers?: Promise<unknown>;
  /** Where the driver's parts report (the image store: stale work dirs, builds, pulls without isolation); default nowhere. */
  log?: (msg: string, level?: 'info' | 'warn') => void;
}

/** Options with their defaults filled in. */
export type ResolvedOptions = Required<
  Omit<
    LocalDriverOptions,
    | 'registryCredentials'
    | 'insecureRegistries'
    | 'registriesAllowed'
    | 'ociRuntime'
    | 'gvisor'
    | 'gvisorPlatform'
    | 'holdLeftovers'
    | 'log'
    | 'egressVia'
    | 'egressDns'
    | 'egressShare'
    | 'egressCaFile'
  >
> &
  Pick<LocalDriverOptions, 'holdLeftovers' | 'log' | 'egressVia' | 'egressDns' | 'egressShare' | 'egressCaFile'>;

/** `opts` over the defaults, for the instance of key `key`. */
export function withDefaults(opts: LocalDriverOptions, key: string): ResolvedOptions {
  const set = Object.fromEntries(Object.entries(opts).filter(([, v]) => v !== undefined));
  return {
    runDir: '/run/sandboxd',
    bridge: 'sbx0',
    subnet: '10.89.0.0/16',
    uidRangeStart: 100_000,
    cgroupParent: `sandboxd-${key}`,
    netPoolSize: 2,
    warmPool: [] as WarmEntry[],
    warmLimits: { memoryBytes: 512 << 20, cpus: 1, pids: 512, rootDiskBytes: 1 << 30 },
    execAgent: true,
    recoveryConcurrency: 4,
    serviceStartTimeoutMs: 60_000,
    ...set,
  } as ResolvedOptions;
}

/** The local driver's options from the server config. */
export function localDriverOptions(config: Readonly<Config>): LocalDriverOptions {
  return {
    dataDir: config.dataDir,
    imageDir: config.imageDir,
    runDir: config.runDir,
    bridge: config.bridge,
    subnet: config.subnet,
    egressVia: config.egressVia,
    egressDns: config.egressDns?.map((u) => ({ ...u })),
    egressCaFile: config.egressCaFile,
    egressShare: {
      dnsPendingPerSandbox: config.egressDnsPendingPerSandbox,
      proxyConnectionsPerSandbox: config.egressProxyConnectionsPerSandbox,
      proxyIdleTimeoutMs: config.egressProxyIdleTimeoutMs,
    },
    uidRangeStart: config.uidRangeStart,
    cgroupParent: config.cgroupParent,
    ociRuntime: config.ociRuntime,
    gvisorPlatform: config.gvisorPlatform,
    insecureRegistries: [...config.insecureRegistries],
    registriesAllowed: [...config.registriesAllowed],
    registryCredentials: Object.fromEntries(
      Object.entries(config.registryCredentials).map(([k, v]) => [
        k,
        { ...v, accounts: Array.isArray(v.accounts) ? [...v.accounts] : v.accounts },
      ]),
    ),
    warmPool: config.warmPool.map((e) => ({ ...e })),
    warmLimits: { ...config.plans[config.defaultPlan].limits },
    serviceStartTimeoutMs: config.serviceStartTimeoutMs,
  };
}
