import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { ISOLATIONS, type Isolation } from '@sandboxd/protocol';
import {
  bool,
  ConfigError,
  databaseUrl,
  deepFreeze,
  MIN_RUNNER_TOKEN_LENGTH,
  oneOf,
  parseEgress,
  parseEgressCaFile,
  parseEgressDns,
  parseEgressVia,
  parseIntStrict,
  parseJson,
  parseRunners,
  parseWarmPool,
  readJson,
  type RunnerSource,
} from './config-values.js';
import { DEFAULT_REGISTRIES_ALLOWED } from './runtime/local/images/pull-policy.js';
import { parseRegistries, parseRegistryCredentials } from './config-registries.js';
import { DEFAULT_FAIR_SHARE, type FairShareConfig, fairShare } from './config-fair-share.js';
import { mergePlans, type PlanConfig, planIsolation, type RateLimitConfig, rateLimits } from './config-plans.js';
import { parseTrustedProxies } from './http/trusted-proxies.js';
import { GVISOR_PLATFORMS, type GvisorPlatform } from './runtime/gvisor/runsc.js';

export { DEFAULT_FAIR_SHARE, type FairShareConfig };

export {
  BUILD_PLAN_DEFAULTS,
  buildLimits,
  DEFAULT_PLANS,
  planIsolation,
  DEFAULT_RATE_LIMITS,
  type PlanConfig,
  type PlanSandboxLimits,
  type RateLimitConfig,
} from './config-plans.js';
export {
  ConfigError,
  MIN_RUNNER_TOKEN_LENGTH,
  parseRunners,
  parseWarmPool,
  type RunnerSource,
} from './config-values.js';

/** The whole server configuration; built once by {@link loadConfig}, frozen. */
export interface Config {
  port: number;
  host: string;
  dataDir: string;
  /** SQLite file; default `<dataDir>/sandboxd.db`. Unused when `databaseUrl` is set. */
  dbPath: string;
  /**
   * `SANDBOXD_DATABASE_URL`: a `postgres://` or `postgresql://` URL puts every record in that
   * PostgreSQL database, shared by every server (replica) pointed at it; unset: SQLite at `dbPath`.
   */
  databaseUrl?: string;
  /** Image cache of the local runtime; default `<dataDir>/images`. */
  imageDir: string;
  /**
   * `SANDBOXD_SECRETS_KEY`: the key that encrypts secrets at rest, base64 of 32 bytes (or the
   * key file's lines); unset: the key file. Replicas sharing a database need the same keys.
   */
  secretsKey?: string;
  /**
   * `SANDBOXD_SECRETS_KEY_FILE`: the secrets' key file (docs/secrets.md), made 0600 with a
   * fresh key at the first start when missing; default `<dataDir>/secrets.key`.
   */
  secretsKeyFile: string;
  /** Host part of `publicAccessUrlTemplate`; default `sandbox.localhost:<port>`. */
  publicHost: string;
  region: string;
  /**
   * `SANDBOXD_EGRESS`: the egress of a create that names none (bounded by the account's
   * plan): `none` (default) or `internet`; `nat` is the old name of `internet`.
   */
  egress: 'none' | 'internet';
  /**
   * `SANDBOXD_ISOLATION`: the isolation tier of a create that names none, on a plan that
   * names no `defaultIsolation`: `container` (default) or `gvisor`. Each plan without a
   * default of its own must allow it.
   */
  isolation: Isolation;
  /**
   * `SANDBOXD_EGRESS_VIA`: where sandbox egress is routed, `dev` or `dev:next-hop` (e.g. a
   * veth into a network namespace); unset: the host's own routes.
   */
  egressVia?: string;
  /**
   * `SANDBOXD_EGRESS_DNS`: upstream resolvers of the sandboxes' resolver, `ip[:port],...`;
   * unset: the nameservers of the host's /etc/resolv.conf.
   */
  egressDns?: { host: string; port: number }[];
  /**
   * `SANDBOXD_EGRESS_CA_FILE`: a PEM file of CAs the egress proxy trusts, beside the system's,
   * when it opens its own TLS connection upstream for a request it injects a secret into
   * (docs/secrets.md). For tests (the fake internet's CA) and private upstreams; unset: the
   * system CAs only.
   */
  egressCaFile?: string;
  /**
   * Each sandbox's share of the egress services (docs/runtime.md, Egress by rule):
   * `SANDBOXD_EGRESS_DNS_PENDING_PER_SANDBOX` (default 64): its queries waiting for upstream
   * at once, past them REFUSED; `SANDBOXD_EGRESS_PROXY_CONNECTIONS_PER_SANDBOX` (default
   * 512): its proxied connections at once, past them closed;
   * `SANDBOXD_EGRESS_PROXY_IDLE_TIMEOUT_MS` (default 600000): a relayed connection with no
   * byte either way for that long is closed.
   */
  egressDnsPendingPerSandbox: number;
  egressProxyConnectionsPerSandbox: number;
  egressProxyIdleTimeoutMs: number;
  runtime: 'local' | 'fake';
  /** Local runtime: host bridge name (<= 15 chars) and the IPv4 subnet sandboxes get addresses from. */
  bridge: string;
  subnet: string;
  /**
   * Local runtime: where volatile state lives; each instance uses `<runDir>/<key>/` (crun's
   * root and the like), the key being derived from the data dir (see instance.ts).
   */
  runDir: string;
  /** Local runtime: the OCI runtime binary; unset = crun when installed, else runc. */
  ociRuntime?: 'crun' | 'runc';
  /** Local runtime: gVisor's platform (`SANDBOXD_GVISOR_PLATFORM`: kvm, systrap, ptrace); unset: chosen by what the host offers. */
  gvisorPlatform?: GvisorPlatform;
  /** Local runtime: cgroup folder holding every sandbox's cgroup; unset: `sandboxd-<key>`, the instance's own. */
  cgroupParent?: string;
  /** Local runtime: first host uid of the per-sandbox 65536-id ranges. */
  uidRangeStart: number;
  /** Registries (host:port) reached over plain HTTP, e.g. a loopback test registry. */
  insecureRegistries: string[];
  /**
   * `SANDBOXD_REGISTRIES_ALLOWED` (file `registriesAllowed`): registries (host[:port]) every
   * account may pull from, `*` for any, `none` for none; default DEFAULT_REGISTRIES_ALLOWED
   * (Docker Hub, ghcr.io, quay.io, gcr.io, public.ecr.aws, registry.k8s.io,
   * mcr.microsoft.com). Admins pull from any registry. A registry named here (not by `*`)
   * may be at a loopback or private address; no other pull dials one. See docs/runtime.md.
   */
  registriesAllowed: string[];
  /**
   * Registry credentials by host[:port] (config file only, never env). They serve admins'
   * pulls, and other accounts' only when `accounts` names them (`"*"`: every account).
   */
  registryCredentials: Record<string, { username: string; password: string; accounts?: string[] | '*' }>;
  terminalIdleMs: number;
  /** Below this many MiB free on the data dir's file system, creates, execs and terminals answer 507; 0 = no floor. */
  minFreeMb: number;
  /**
   * Sandboxes the host holds at once (`started` and being created, all accounts); a create
   * past it answers 503 `capacity`. 0 = no count limit (memory, disk and addresses still apply).
   */
  maxSandboxes: number;
  /**
   * Below this many MiB free on the data dir's file system, creates answer 503 `capacity`
   * (resource `disk`); default twice `minFreeMb`, so creates stop before the 507 floor; 0 = off.
   */
  createMinFreeMb: number;
  /** Below this many MiB of available memory (MemAvailable), creates answer 503 `capacity` (resource `memory`); 0 = off. */
  createMinMemoryMb: number;
  /** Port proxy: how long to wait for a sandbox's response headers (and the connect) before answering 504. */
  proxyTimeoutMs: number;
  /** Port proxy: proxied requests and WebSocket tunnels open per sandbox at once; the excess answers 503 `capacity`. */
  proxyMaxConnsPerSandbox: number;
  plans: Record<string, PlanConfig>;
  defaultPlan: string;
  signupEnabled: boolean;
  sessionTtlMs: number;
  /** How long stopped and error records stay listed before they are purged. */
  stoppedRetentionMs: number;
  /** Reaper poll period; keeps stops within one second of `stopAt`. */
  reaperIntervalMs: number;
  /** Full list-compare-repair against the driver, period. */
  reconcileIntervalMs: number;
  /**
   * `SANDBOXD_REAPER_LEASE_MS`: with a shared database (PostgreSQL), one server at a time
   * reaps, holding the lease `reaper` this long from each pass (renewed by every pass); a
   * holder that dies is replaced within this time. At least twice `reaperIntervalMs`.
   */
  reaperLeaseMs: number;
  /** Grace period of SIGTERM before in-flight requests are cut. */
  shutdownGraceMs: number;
  /**
   * The admin account made on the first start (an empty database): `SANDBOXD_BOOTSTRAP_API_KEY`,
   * `SANDBOXD_BOOTSTRAP_ADMIN_EMAIL`, `SANDBOXD_BOOTSTRAP_ADMIN_PASSWORD`, or the file's
   * `bootstrap: {apiKey, adminEmail, adminPassword}` (what `sandboxd install` writes); each
   * variable over the file's field. Unused once an account exists.
   */
  bootstrap: { apiKey?: string; adminEmail?: string; adminPassword?: string };
  /**
   * `SANDBOXD_TRUSTED_PROXIES` (file `trustedProxies`): reverse proxies (IP addresses or CIDR
   * ranges, comma-separated) whose `X-Forwarded-For` and `X-Forwarded-Proto` are believed for
   * the client address (rate limits, access log) and the scheme (Secure cookie, `wss://`).
   * Default none: those headers are ignored from every peer. See http/trusted-proxies.ts.
   */
  trustedProxies: string[];
  rateLimit: RateLimitConfig;
  /** Per-sandbox shares of terminals, processes, watches and transfers (`SANDBOXD_FAIR_SHARE_*`): config-fair-share.ts. */
  fairShare: FairShareConfig;
  /** Enables `POST /api/v1/_test/clock`. Never on by default. */
  testClock: boolean;
  logLevel: string;
  /**
   * TLS: PEM files of the certificate (chain) and its key. When both are set the one port
   * speaks HTTPS only (API, console, port proxy, E2B's front doors); unset: plain HTTP.
   */
  tls: { certPath: string; keyPath: string } | null;
  /** E2B front door: template name -> image (and the user E2B calls run as when they name none). */
  e2bTemplates: Record<string, E2bTemplate>;
  /**
   * Local runtime: images whose sandboxes are kept started, ready for a create to claim
   * (`image=size,...`; `off` for none). Default: 4 of `local/debian:bookworm`, 1 of
   * `local/code-interpreter:latest`.
   */
  warmPool: { image: string; size: number }[];
  /**
   * Local runtime: how long a sandbox's boot waits for the service its image declares
   * (`org.sandboxd.service.*` labels) to answer its health check before the create fails
   * (`SANDBOXD_SERVICE_START_TIMEOUT_MS`, default 60000).
   */
  serviceStartTimeoutMs: number;
  /**
   * `SANDBOXD_ROLE`: `all` (the API and a local runtime in one process), `api` (the API; its
   * sandboxes live on the runners of `runners`), `runner` (one host's runtime, served to API
   * processes only). See docs/runners.md.
   */
  role: 'all' | 'api' | 'runner';
  /** `SANDBOXD_RUNNERS`: how an `api` process finds its runners; null for the other roles when unset. */
  runners: RunnerSource | null;
  /** `SANDBOXD_RUNNER_TOKEN`: the secret shared by API processes and runners; required for `api` and `runner`. */
  runnerToken?: string;
  /** `SANDBOXD_NODE_NAME`: a runner's name (default the host name). */
  nodeName: string;
  /**
   * `SANDBOXD_RUNNER_DOWN_MS` (role `api`): a runner that has not answered for this long has
   * its started and paused sandboxes turned `error` (unused minutes refunded) by the reaper.
   * Until then they only answer 503. Health checks of each runner run every
   * min(1 s, this / 5). See docs/runners.md.
   */
  runnerDownMs: number;
  /**
   * `SANDBOXD_BUILDS_MAX`: image builds this server runs at once, all accounts (default 2);
   * more wait `queued` (each account also within its plan's `maxBuilds`).
   */
  buildsMax: number;
  /**
   * `SANDBOXD_BUILD_STEP_TIMEOUT_MS`: how long one step of a build (a RUN, a COPY) may take
   * before the build fails (default 30 min; never past the plan's `maxLifetimeMs`).
   */
  buildStepTimeoutMs: number;
  /**
   * `SANDBOXD_BUILD_UPLOAD_TTL_MS`: how long an E2B template upload (a file tar) is kept
   * before the builds tick removes it (default 24 h).
   */
  buildUploadTtlMs: number;
}

/**
 * The images pooled by default: the default image of the console, the CLI and E2B's `base`,
 * and one sandbox of the code-interpreter image (E2B's `code-interpreter-v1`) with its code
 * server and Python kernel started (~115 MiB idle, see docs/runtime.md).
 */
export const DEFAULT_WARM_POOL = 'local/debian:bookworm=4,local/code-interpreter:latest=1';

/** What an E2B template name stands for. */
export interface E2bTemplate {
  image: string;
  /** Default user of E2B calls (commands, files, PTYs) that name none; unset: the image's user. */
  user?: string;
  /**
   * The isolation tier of its sandboxes (`container` or `gvisor`); unset: the image's
   * `org.sandboxd.isolation` label, else the plan's default.
   */
  isolation?: Isolation;
}

/**
 * `base` is E2B's default template: the Debian image, used as E2B's `user` account.
 * `code-interpreter-v1` (the default template of E2B's `@e2b/code-interpreter`) and
 * `code-interpreter` are the code-interpreter image, also as `user`.
 */
export const DEFAULT_E2B_TEMPLATES: Record<string, E2bTemplate> = {
  base: { image: 'local/debian:bookworm', user: 'user' },
  'code-interpreter-v1': { image: 'local/code-interpreter:latest', user: 'user' },
  'code-interpreter': { image: 'local/code-interpreter:latest', user: 'user' },
};

type Env = Record<string, string | undefined>;

/**
 * Builds the config from defaults, then the JSON file named by `SANDBOXD_CONFIG` (same
 * keys as {@link Config}), then `SANDBOXD_*` variables. Throws {@link ConfigError}.
 */
export function loadConfig(env: Env = process.env, overrides: Partial<Config> = {}): Readonly<Config> {
  const file = env.SANDBOXD_CONFIG ? readJson(env.SANDBOXD_CONFIG) : {};
  const pick = <T>(key: keyof Config, envName: string | null, parse: (s: string) => T, dflt: T): T => {
    if (key in overrides) return overrides[key] as T;
    const raw = envName ? env[envName] : undefined;
    if (raw !== undefined && raw !== '') return parse(raw);
    if (key in file) return parse(String(file[key]));
    return dflt;
  };
  const int = (name: string, min: number, max: number) => (s: string) => parseIntStrict(name, s, min, max);
  const port = pick('port', 'SANDBOXD_PORT', int('SANDBOXD_PORT', 0, 65535), 8080);
  const dataDir = resolve(pick('dataDir', 'SANDBOXD_DATA_DIR', String, './data'));
  const minFreeMb = pick('minFreeMb', 'SANDBOXD_MIN_FREE_MB', int('SANDBOXD_MIN_FREE_MB', 0, 2 ** 30), 256);
  const dbUrl = pick<string | undefined>('databaseUrl', 'SANDBOXD_DATABASE_URL', databaseUrl, undefined);
  const plans = mergePlans(file.plans as Record<string, Partial<PlanConfig>> | undefined, overrides.plans);
  const cfg: Config = {
    port,
    host: pick('host', 'SANDBOXD_HOST', String, '127.0.0.1'),
    dataDir,
    dbPath: pick('dbPath', 'SANDBOXD_DB_PATH', String, join(dataDir, 'sandboxd.db')),
    databaseUrl: dbUrl,
    imageDir: resolve(pick('imageDir', 'SANDBOXD_IMAGE_DIR', String, join(dataDir, 'images'))),
    secretsKey: pick<string | undefined>('secretsKey', 'SANDBOXD_SECRETS_KEY', String, undefined),
    secretsKeyFile: resolve(pick('secretsKeyFile', 'SANDBOXD_SECRETS_KEY_FILE', String, join(dataDir, 'secrets.key'))),
    publicHost: pick('publicHost', 'SANDBOXD_PUBLIC_HOST', String, `sandbox.localhost:${port}`),
    region: pick('region', 'SANDBOXD_REGION', String, 'local'),
    egress: pick('egress', 'SANDBOXD_EGRESS', parseEgress, 'none'),
    isolation: pick('isolation', 'SANDBOXD_ISOLATION', oneOf('SANDBOXD_ISOLATION', ISOLATIONS), 'container'),
    egressVia: pick<string | undefined>('egressVia', 'SANDBOXD_EGRESS_VIA', parseEgressVia, undefined),
    egressDns: pick<Config['egressDns']>('egressDns', 'SANDBOXD_EGRESS_DNS', parseEgressDns, undefined),
    egressCaFile: pick<string | undefined>('egressCaFile', 'SANDBOXD_EGRESS_CA_FILE', parseEgressCaFile, undefined),
    egressDnsPendingPerSandbox: pick(
      'egressDnsPendingPerSandbox',
      'SANDBOXD_EGRESS_DNS_PENDING_PER_SANDBOX',
      int('SANDBOXD_EGRESS_DNS_PENDING_PER_SANDBOX', 1, 4096),
      64,
    ),
    egressProxyConnectionsPerSandbox: pick(
      'egressProxyConnectionsPerSandbox',
      'SANDBOXD_EGRESS_PROXY_CONNECTIONS_PER_SANDBOX',
      int('SANDBOXD_EGRESS_PROXY_CONNECTIONS_PER_SANDBOX', 1, 8192),
      512,
    ),
    egressProxyIdleTimeoutMs: pick(
      'egressProxyIdleTimeoutMs',
      'SANDBOXD_EGRESS_PROXY_IDLE_TIMEOUT_MS',
      int('SANDBOXD_EGRESS_PROXY_IDLE_TIMEOUT_MS', 1000, 2 ** 31 - 1),
      600_000,
    ),
    runtime: pick('runtime', 'SANDBOXD_RUNTIME', oneOf('SANDBOXD_RUNTIME', ['local', 'fake'] as const), 'local'),
    bridge: pick('bridge', 'SANDBOXD_BRIDGE', String, 'sbx0'),
    subnet: pick('subnet', 'SANDBOXD_SUBNET', String, '10.89.0.0/16'),
    runDir: resolve(pick('runDir', 'SANDBOXD_RUN_DIR', String, '/run/sandboxd')),
    ociRuntime: pick<'crun' | 'runc' | undefined>(
      'ociRuntime',
      'SANDBOXD_OCI_RUNTIME',
      oneOf('SANDBOXD_OCI_RUNTIME', ['crun', 'runc'] as const),
      undefined,
    ),
    gvisorPlatform: pick<GvisorPlatform | undefined>(
      'gvisorPlatform',
      'SANDBOXD_GVISOR_PLATFORM',
      oneOf('SANDBOXD_GVISOR_PLATFORM', GVISOR_PLATFORMS),
      undefined,
    ),
    cgroupParent: pick<string | undefined>('cgroupParent', 'SANDBOXD_CGROUP_PARENT', String, undefined),
    uidRangeStart: pick(
      'uidRangeStart',
      'SANDBOXD_UID_RANGE_START',
      int('SANDBOXD_UID_RANGE_START', 65536, 2 ** 31),
      100_000,
    ),
    insecureRegistries:
      overrides.insecureRegistries ??
      (env.SANDBOXD_INSECURE_REGISTRIES ?? (file.insecureRegistries as string[] | undefined)?.join(',') ?? '')
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean),
    registriesAllowed: pick('registriesAllowed', 'SANDBOXD_REGISTRIES_ALLOWED', parseRegistries, [
      ...DEFAULT_REGISTRIES_ALLOWED,
    ]),
    registryCredentials: parseRegistryCredentials(overrides.registryCredentials ?? file.registryCredentials),
    terminalIdleMs: pick(
      'terminalIdleMs',
      'SANDBOXD_TERMINAL_IDLE_MS',
      int('SANDBOXD_TERMINAL_IDLE_MS', 1, 2 ** 31),
      1_800_000,
    ),
    minFreeMb,
    maxSandboxes: pick('maxSandboxes', 'SANDBOXD_MAX_SANDBOXES', int('SANDBOXD_MAX_SANDBOXES', 0, 1_000_000), 0),
    createMinFreeMb: pick(
      'createMinFreeMb',
      'SANDBOXD_CREATE_MIN_FREE_MB',
      int('SANDBOXD_CREATE_MIN_FREE_MB', 0, 2 ** 30),
      2 * minFreeMb,
    ),
    createMinMemoryMb: pick(
      'createMinMemoryMb',
      'SANDBOXD_CREATE_MIN_MEMORY_MB',
      int('SANDBOXD_CREATE_MIN_MEMORY_MB', 0, 2 ** 30),
      256,
    ),
    proxyTimeoutMs: pick(
      'proxyTimeoutMs',
      'SANDBOXD_PROXY_TIMEOUT_MS',
      int('SANDBOXD_PROXY_TIMEOUT_MS', 1, 2 ** 31),
      30_000,
    ),
    proxyMaxConnsPerSandbox: pick(
      'proxyMaxConnsPerSandbox',
      'SANDBOXD_PROXY_MAX_CONNS_PER_SANDBOX',
      int('SANDBOXD_PROXY_MAX_CONNS_PER_SANDBOX', 1, 1_000_000),
      256,
    ),
    plans,
    defaultPlan: pick('defaultPlan', 'SANDBOXD_DEFAULT_PLAN', String, 'FREE'),
    signupEnabled: pick('signupEnabled', 'SANDBOXD_SIGNUP_ENABLED', bool('SANDBOXD_SIGNUP_ENABLED'), true),
    sessionTtlMs: pick(
      'sessionTtlMs',
      'SANDBOXD_SESSION_TTL_MS',
      int('SANDBOXD_SESSION_TTL_MS', 60_000, 2 ** 40),
      7 * 86_400_000,
    ),
    stoppedRetentionMs: pick(
      'stoppedRetentionMs',
      'SANDBOXD_STOPPED_RETENTION_MS',
      int('SANDBOXD_STOPPED_RETENTION_MS', 0, 2 ** 40),
      86_400_000,
    ),
    reaperIntervalMs: pick(
      'reaperIntervalMs',
      'SANDBOXD_REAPER_INTERVAL_MS',
      int('SANDBOXD_REAPER_INTERVAL_MS', 10, 1000),
      250,
    ),
    reconcileIntervalMs: pick(
      'reconcileIntervalMs',
      'SANDBOXD_RECONCILE_INTERVAL_MS',
      int('SANDBOXD_RECONCILE_INTERVAL_MS', 100, 2 ** 31),
      30_000,
    ),
    reaperLeaseMs: pick(
      'reaperLeaseMs',
      'SANDBOXD_REAPER_LEASE_MS',
      int('SANDBOXD_REAPER_LEASE_MS', 100, 600_000),
      3000,
    ),
    shutdownGraceMs: pick(
      'shutdownGraceMs',
      'SANDBOXD_SHUTDOWN_GRACE_MS',
      int('SANDBOXD_SHUTDOWN_GRACE_MS', 0, 600_000),
      30_000,
    ),
    bootstrap: overrides.bootstrap ?? bootstrapConfig(env, file.bootstrap),
    trustedProxies: pick('trustedProxies', 'SANDBOXD_TRUSTED_PROXIES', parseTrustedProxies, []),
    // Shared by default where the database is (PostgreSQL: replicas share one limit).
    rateLimit: rateLimits(env, file.rateLimit, overrides.rateLimit, dbUrl ? 'database' : 'memory'),
    fairShare: fairShare(env, file.fairShare, overrides.fairShare),
    testClock: pick('testClock', 'SANDBOXD_TEST_CLOCK', bool('SANDBOXD_TEST_CLOCK'), false),
    logLevel: pick('logLevel', 'SANDBOXD_LOG_LEVEL', String, 'info'),
    tls: tlsConfig(
      env.SANDBOXD_TLS_CERT || (file.tlsCert as string | undefined),
      env.SANDBOXD_TLS_KEY || (file.tlsKey as string | undefined),
      overrides.tls,
    ),
    warmPool: pick('warmPool', 'SANDBOXD_WARM_POOL', parseWarmPool, parseWarmPool(DEFAULT_WARM_POOL)),
    serviceStartTimeoutMs: pick(
      'serviceStartTimeoutMs',
      'SANDBOXD_SERVICE_START_TIMEOUT_MS',
      int('SANDBOXD_SERVICE_START_TIMEOUT_MS', 100, 3_600_000),
      60_000,
    ),
    role: pick('role', 'SANDBOXD_ROLE', oneOf('SANDBOXD_ROLE', ['all', 'api', 'runner'] as const), 'all'),
    runners: pick<RunnerSource | null>('runners', 'SANDBOXD_RUNNERS', parseRunners, null),
    runnerToken: pick<string | undefined>('runnerToken', 'SANDBOXD_RUNNER_TOKEN', String, undefined),
    nodeName: pick('nodeName', 'SANDBOXD_NODE_NAME', String, hostname()),
    runnerDownMs: pick(
      'runnerDownMs',
      'SANDBOXD_RUNNER_DOWN_MS',
      int('SANDBOXD_RUNNER_DOWN_MS', 250, 86_400_000),
      5000,
    ),
    buildsMax: pick('buildsMax', 'SANDBOXD_BUILDS_MAX', int('SANDBOXD_BUILDS_MAX', 1, 1000), 2),
    buildStepTimeoutMs: pick(
      'buildStepTimeoutMs',
      'SANDBOXD_BUILD_STEP_TIMEOUT_MS',
      int('SANDBOXD_BUILD_STEP_TIMEOUT_MS', 1000, 86_400_000),
      1_800_000,
    ),
    buildUploadTtlMs: pick(
      'buildUploadTtlMs',
      'SANDBOXD_BUILD_UPLOAD_TTL_MS',
      int('SANDBOXD_BUILD_UPLOAD_TTL_MS', 60_000, 30 * 86_400_000),
      86_400_000,
    ),
    e2bTemplates: e2bTemplates(
      overrides.e2bTemplates ??
        (env.SANDBOXD_E2B_TEMPLATES ? parseJson('SANDBOXD_E2B_TEMPLATES', env.SANDBOXD_E2B_TEMPLATES) : undefined) ??
        file.e2bTemplates,
    ),
  };
  validate(cfg);
  return deepFreeze(cfg);
}

function validate(cfg: Config): void {
  if (!cfg.plans[cfg.defaultPlan]) {
    throw new ConfigError(
      `defaultPlan "${cfg.defaultPlan}" is not a configured plan (${Object.keys(cfg.plans).join(', ')})`,
    );
  }
  for (const [name, plan] of Object.entries(cfg.plans)) {
    const { allowed, default: dflt } = planIsolation(plan, cfg.isolation);
    if (!allowed.includes(dflt))
      throw new ConfigError(
        `SANDBOXD_ISOLATION is ${cfg.isolation}, which plan ${name} does not allow (isolations: ${allowed.join(', ')}): give the plan a defaultIsolation, or allow it`,
      );
  }
  const key = cfg.bootstrap.apiKey;
  if (key !== undefined && !/^sk_[A-Za-z0-9]{20,100}$/.test(key)) {
    throw new ConfigError('SANDBOXD_BOOTSTRAP_API_KEY must look like sk_ followed by 20 to 100 letters and digits');
  }
  if (cfg.createMinFreeMb !== 0 && cfg.createMinFreeMb < cfg.minFreeMb) {
    throw new ConfigError(
      `SANDBOXD_CREATE_MIN_FREE_MB (${cfg.createMinFreeMb}) must be 0 or at least SANDBOXD_MIN_FREE_MB (${cfg.minFreeMb}): below that floor creates answer 507 first`,
    );
  }
  if (cfg.reaperLeaseMs < 2 * cfg.reaperIntervalMs) {
    throw new ConfigError(
      `SANDBOXD_REAPER_LEASE_MS (${cfg.reaperLeaseMs}) must be at least twice SANDBOXD_REAPER_INTERVAL_MS (${cfg.reaperIntervalMs}): every pass renews the lease`,
    );
  }
  if (cfg.bootstrap.adminPassword !== undefined && cfg.bootstrap.adminPassword.length < 8) {
    throw new ConfigError('SANDBOXD_BOOTSTRAP_ADMIN_PASSWORD must have at least 8 characters');
  }
  if (cfg.role !== 'all') {
    if (!cfg.runnerToken)
      throw new ConfigError(
        `SANDBOXD_RUNNER_TOKEN is required when SANDBOXD_ROLE is ${cfg.role}: the secret shared by API processes and runners`,
      );
    if (cfg.runnerToken.length < MIN_RUNNER_TOKEN_LENGTH || /\s/.test(cfg.runnerToken))
      throw new ConfigError(
        `SANDBOXD_RUNNER_TOKEN must have at least ${MIN_RUNNER_TOKEN_LENGTH} characters and no white space`,
      );
  }
  if (cfg.role === 'api' && !cfg.runners)
    throw new ConfigError(
      'SANDBOXD_RUNNERS is required when SANDBOXD_ROLE is api: the runner URL(s) or k8s:<namespace>/<service>',
    );
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/.test(cfg.nodeName))
    throw new ConfigError(
      `SANDBOXD_NODE_NAME must be letters, digits, '.', '_' or '-' (at most 253), got "${cfg.nodeName}"`,
    );
}

/** The bootstrap admin: each `SANDBOXD_BOOTSTRAP_*` variable over the file's `bootstrap` field. */
function bootstrapConfig(env: Env, raw: unknown): Config['bootstrap'] {
  if (raw !== undefined && (typeof raw !== 'object' || raw === null || Array.isArray(raw)))
    throw new ConfigError('bootstrap must be an object {apiKey?, adminEmail?, adminPassword?}');
  const f = (raw ?? {}) as Record<string, unknown>;
  const field = (name: string, envName: string): string | undefined => {
    if (env[envName]) return env[envName];
    const v = f[name];
    if (v === undefined || v === null || v === '') return undefined;
    if (typeof v !== 'string') throw new ConfigError(`bootstrap.${name} must be a string`);
    return v;
  };
  for (const k of Object.keys(f))
    if (!['apiKey', 'adminEmail', 'adminPassword'].includes(k))
      throw new ConfigError(`bootstrap.${k} is not a setting (apiKey, adminEmail, adminPassword)`);
  return {
    apiKey: field('apiKey', 'SANDBOXD_BOOTSTRAP_API_KEY'),
    adminEmail: field('adminEmail', 'SANDBOXD_BOOTSTRAP_ADMIN_EMAIL'),
    adminPassword: field('adminPassword', 'SANDBOXD_BOOTSTRAP_ADMIN_PASSWORD'),
  };
}

/** Both TLS files or neither; each must be readable (checked at start-up, by the server). */
function tlsConfig(cert: string | undefined, key: string | undefined, override?: Config['tls']): Config['tls'] {
  if (override !== undefined) return override;
  if (!cert && !key) return null;
  if (!cert || !key) throw new ConfigError('SANDBOXD_TLS_CERT and SANDBOXD_TLS_KEY must be set together');
  return { certPath: resolve(cert), keyPath: resolve(key) };
}

/** The built-in templates with the configured ones over them; each `{image, user?}`. */
function e2bTemplates(raw: unknown): Record<string, E2bTemplate> {
  const out: Record<string, E2bTemplate> = { ...DEFAULT_E2B_TEMPLATES };
  if (raw === undefined || raw === null) return out;
  if (typeof raw !== 'object' || Array.isArray(raw))
    throw new ConfigError('e2bTemplates must be an object of name -> {image, user?, isolation?}');
  for (const [name, v] of Object.entries(raw as Record<string, unknown>)) {
    const t = typeof v === 'string' ? { image: v } : (v as Partial<E2bTemplate> | null);
    if (!t || typeof t.image !== 'string' || !t.image || (t.user !== undefined && typeof t.user !== 'string'))
      throw new ConfigError(`e2bTemplates.${name} must be an image reference or {image, user?, isolation?}`);
    if (t.isolation !== undefined && !ISOLATIONS.includes(t.isolation))
      throw new ConfigError(`e2bTemplates.${name}.isolation must be one of ${ISOLATIONS.join(', ')}`);
    out[name] = {
      image: t.image,
      ...(t.user ? { user: t.user } : {}),
      ...(t.isolation ? { isolation: t.isolation } : {}),
    };
  }
  return out;
}
