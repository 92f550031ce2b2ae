import type { Config } from '../../config.js';
import type { ResourceLimits } from '../driver.js';
import type { OciRuntimeName } from './commands/oci-runtime.js';
import type { WarmEntry } from './pools/warm.js';

/** Options of the local driver; only the folders are required. */
export interface LocalDriverOptions {
  /** Sandbox state, roots and volumes live here. */
  dataDir: string;
  /** Shared image cache. */
  imageDir: string;
  /** Volatile runtime state (crun's root); default `/run/sandboxd`. */
  runDir?: string;
  bridge?: string;
  subnet?: string;
  egress?: 'none' | 'nat';
  /** First host uid handed to sandboxes; each gets 65536 from there. Default 100000. */
  uidRangeStart?: number;
  /** Name of the cgroup folder that holds every sandbox's cgroup. Default `sandboxd`. */
  cgroupParent?: string;
  registryCredentials?: Record<string, { username: string; password: string }>;
  insecureRegistries?: string[];
  /** OCI runtime; default crun when installed, else runc. */
  ociRuntime?: OciRuntimeName;
  /** Networks kept made ahead of need, so creating a sandbox does not wait for one (crun only). Default 2. */
  netPoolSize?: number;
  /** false: run every command with `<runtime> exec` instead of the exec agent (tests, comparisons). Default true. */
  execAgent?: boolean;
  /** Images whose sandboxes are kept started, ready to be claimed by a create (crun only). Default none. */
  warmPool?: WarmEntry[];
  /** Limits warm-pooled sandboxes start with, until a create of their image asks for others. */
  warmLimits?: ResourceLimits;
}

/** Options with their defaults filled in. */
export type ResolvedOptions = Required<
  Omit<LocalDriverOptions, 'registryCredentials' | 'insecureRegistries' | 'ociRuntime'>
>;

/** `opts` over the defaults. */
export function withDefaults(opts: LocalDriverOptions): ResolvedOptions {
  return {
    runDir: '/run/sandboxd',
    bridge: 'sbx0',
    subnet: '10.89.0.0/16',
    egress: 'none',
    uidRangeStart: 100_000,
    cgroupParent: 'sandboxd',
    netPoolSize: 2,
    warmPool: [],
    warmLimits: { memoryBytes: 512 << 20, cpus: 1, pids: 512, rootDiskBytes: 1 << 30 },
    ...opts,
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
    egress: config.egress,
    uidRangeStart: config.uidRangeStart,
    cgroupParent: config.cgroupParent,
    ociRuntime: config.ociRuntime,
    insecureRegistries: [...config.insecureRegistries],
    registryCredentials: { ...config.registryCredentials },
    warmPool: config.warmPool.map((e) => ({ ...e })),
    warmLimits: { ...config.plans[config.defaultPlan].limits },
  };
}
