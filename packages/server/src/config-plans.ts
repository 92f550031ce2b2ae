/**
 * Plans and request rate limits of the server configuration: their types, the built-in
 * values, and how a config file, overrides and `SANDBOXD_RATE_LIMIT_*` variables merge over
 * them (config.ts's loadConfig calls these).
 */
import { EGRESS_LEVELS, type EgressLevel, ISOLATIONS, type Isolation } from '@sandboxd/protocol';
import { ConfigError, oneOf, parseIntStrict } from './config-values.js';

const GiB = 1024 ** 3;

type Env = Record<string, string | undefined>;

/** Per-sandbox resource limits of a plan (kernel-enforced by the driver). */
export interface PlanSandboxLimits {
  memoryBytes: number;
  cpus: number;
  pids: number;
  rootDiskBytes: number;
}

/** A plan: lifetime cap, concurrency, sign-up grant and per-sandbox limits. */
export interface PlanConfig {
  /** Largest `stopAt` minus the start of the run (create, start or resume) in ms. */
  maxLifetimeMs: number;
  /** Sandboxes in `creating` or `started` an account may hold at once. */
  concurrency: number;
  /** Tokens granted when an account is created on this plan. */
  signupTokens: number;
  /** Paused sandboxes an account may keep at once (a pause past it answers 403 `quota`). */
  maxPaused: number;
  /** A paused sandbox is deleted this long after it paused (default 7 days). */
  pausedRetentionMs: number;
  /** Bytes all snapshots of an account may add on disk (a snapshot past it answers 403 `quota`). */
  snapshotBytes: number;
  /**
   * The most egress a sandbox may ask for: `none`, `allow` (rules only) or `internet`
   * (anything, rules included). Absent: `internet`.
   */
  egress?: EgressLevel;
  /** Image builds of an account running at once (more wait `queued`); absent: {@link BUILD_PLAN_DEFAULTS}. */
  maxBuilds?: number;
  /** Largest build context (the tar as spooled, inflated) and E2B upload, bytes. */
  buildContextBytes?: number;
  /** Bytes the account's build cache (its layers) may hold; least recently used layers go first past it. */
  buildCacheBytes?: number;
  /**
   * The isolation tiers its sandboxes may ask for (a create asking for another answers 403
   * `quota`). Absent in a config file: every tier, `["container", "gvisor"]`.
   */
  isolations?: Isolation[];
  /**
   * The tier of a create that names none; must be one of `isolations`. Absent: the
   * instance's `SANDBOXD_ISOLATION` (default `container`).
   */
  defaultIsolation?: Isolation;
  limits: PlanSandboxLimits;
}

/** A plan's build limits when it names none. */
export const BUILD_PLAN_DEFAULTS = {
  maxBuilds: 2,
  buildContextBytes: 512 * 2 ** 20,
  buildCacheBytes: 10 * GiB,
} as const satisfies Required<Pick<PlanConfig, 'maxBuilds' | 'buildContextBytes' | 'buildCacheBytes'>>;

/** The build limits of `plan`, defaults filled in. */
export function buildLimits(
  plan: PlanConfig,
): Required<Pick<PlanConfig, 'maxBuilds' | 'buildContextBytes' | 'buildCacheBytes'>> {
  return {
    maxBuilds: plan.maxBuilds ?? BUILD_PLAN_DEFAULTS.maxBuilds,
    buildContextBytes: plan.buildContextBytes ?? BUILD_PLAN_DEFAULTS.buildContextBytes,
    buildCacheBytes: plan.buildCacheBytes ?? BUILD_PLAN_DEFAULTS.buildCacheBytes,
  };
}

/**
 * The isolation tiers a plan allows and its default (`instanceDefault`, the instance's
 * `SANDBOXD_ISOLATION`, when the plan names none).
 */
export function planIsolation(
  plan: PlanConfig,
  instanceDefault: Isolation,
): { allowed: readonly Isolation[]; default: Isolation } {
  return { allowed: plan.isolations ?? ISOLATIONS, default: plan.defaultIsolation ?? instanceDefault };
}

/** A week: the default `pausedRetentionMs`. */
const WEEK_MS = 7 * 86_400_000;

/**
 * Request rate limits (`SANDBOXD_RATE_LIMIT_*`); a rate or count of 0 turns that limit off.
 * The port proxy, /healthz, the probes (/livez, /readyz) and /metrics are never limited. Windows are fixed: a rate and a
 * burst allow `burst` requests per `burst / perSec` seconds.
 */
export interface RateLimitConfig {
  /**
   * Where the counters live (`_STORE`): `memory` (this process; a restart forgets them) or
   * `database` (the store's database, shared by every server using it). Default: `database`
   * when `SANDBOXD_DATABASE_URL` is set (replicas share the limits), else `memory`.
   */
  store: 'memory' | 'database';
  /** API requests per second per account, sustained (`_ACCOUNT_PER_SEC`), and the burst (`_ACCOUNT_BURST`). */
  accountPerSec: number;
  accountBurst: number;
  /** Requests per second per client IP without valid credentials (`_IP_PER_SEC`), and the burst (`_IP_BURST`). */
  ipPerSec: number;
  ipBurst: number;
  /** Failed logins per email (`_LOGIN_FAILURES_PER_EMAIL`) and per IP (`_LOGIN_FAILURES_PER_IP`) within the window. */
  loginFailuresPerEmail: number;
  loginFailuresPerIp: number;
  /** Sign-up attempts per IP within the window (`_SIGNUPS_PER_IP`). */
  signupsPerIp: number;
  /** The window of the login and sign-up counts, ms (`_AUTH_WINDOW_MS`). */
  authWindowMs: number;
  /** Terminal WebSockets one account may hold open at once (`_TERMINAL_SOCKETS_PER_ACCOUNT`). */
  terminalSocketsPerAccount: number;
}

/** Defaults: far above heavy use of one account (a load of 500 exec/s never meets them). */
export const DEFAULT_RATE_LIMITS: RateLimitConfig = {
  store: 'memory',
  accountPerSec: 1000,
  accountBurst: 2000,
  ipPerSec: 100,
  ipBurst: 1000,
  loginFailuresPerEmail: 10,
  loginFailuresPerIp: 50,
  signupsPerIp: 10,
  authWindowMs: 900_000,
  terminalSocketsPerAccount: 256,
};

/** Built-in plans; a config file may override or add plans. */
export const DEFAULT_PLANS: Record<string, PlanConfig> = {
  FREE: {
    maxLifetimeMs: 3_600_000,
    concurrency: 5,
    signupTokens: 1000,
    maxPaused: 5,
    pausedRetentionMs: WEEK_MS,
    snapshotBytes: 5 * GiB,
    egress: 'internet',
    isolations: [...ISOLATIONS],
    limits: { memoryBytes: 2 * GiB, cpus: 1, pids: 512, rootDiskBytes: 10 * GiB },
  },
  PRO: {
    maxLifetimeMs: 86_400_000,
    concurrency: 50,
    signupTokens: 10_000,
    maxPaused: 50,
    pausedRetentionMs: WEEK_MS,
    snapshotBytes: 50 * GiB,
    egress: 'internet',
    isolations: [...ISOLATIONS],
    limits: { memoryBytes: 8 * GiB, cpus: 4, pids: 4096, rootDiskBytes: 50 * GiB },
  },
};

/**
 * `SANDBOXD_RATE_LIMIT_<FIELD>` (e.g. `_ACCOUNT_PER_SEC`) over the file's `rateLimit` over the
 * defaults; `store` defaults to `defaultStore` (`database` when the database is PostgreSQL).
 */
export function rateLimits(
  env: Env,
  fromFile: unknown,
  fromOverrides: Partial<RateLimitConfig> | undefined,
  defaultStore: RateLimitConfig['store'],
): RateLimitConfig {
  const file = (fromFile ?? {}) as Record<string, unknown>;
  const out = { ...DEFAULT_RATE_LIMITS, store: defaultStore };
  for (const k of Object.keys(out) as Array<keyof RateLimitConfig>) {
    const name = `SANDBOXD_RATE_LIMIT_${k.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
    const raw = fromOverrides?.[k] ?? (env[name] || undefined) ?? file[k];
    if (raw === undefined) continue;
    if (k === 'store') out.store = oneOf(name, ['memory', 'database'] as const)(String(raw));
    else out[k] = parseIntStrict(name, String(raw), k === 'authWindowMs' ? 1 : 0, 2 ** 40);
  }
  return out;
}

/** The built-in plans with those of the config file and the overrides over them; throws {@link ConfigError}. */
export function mergePlans(
  fromFile?: Record<string, Partial<PlanConfig>>,
  fromOverrides?: Record<string, PlanConfig>,
): Record<string, PlanConfig> {
  const out: Record<string, PlanConfig> = structuredClone(DEFAULT_PLANS);
  for (const [name, p] of Object.entries({ ...fromFile, ...fromOverrides })) {
    if (!/^[A-Z][A-Z0-9_]{0,31}$/.test(name))
      throw new ConfigError(`plan name "${name}" must match ^[A-Z][A-Z0-9_]{0,31}$`);
    const base = out[name] ?? DEFAULT_PLANS.FREE;
    const plan: PlanConfig = { ...base, ...p, limits: { ...base.limits, ...(p.limits ?? {}) } };
    plan.egress ??= 'internet';
    plan.isolations ??= [...ISOLATIONS];
    Object.assign(plan, buildLimits(plan));
    if (
      !Array.isArray(plan.isolations) ||
      plan.isolations.length === 0 ||
      plan.isolations.some((t) => !ISOLATIONS.includes(t))
    )
      throw new ConfigError(`plans.${name}.isolations must be a non-empty list of ${ISOLATIONS.join(', ')}`);
    plan.isolations = [...new Set(plan.isolations)];
    if (plan.defaultIsolation !== undefined && !plan.isolations.includes(plan.defaultIsolation))
      throw new ConfigError(
        `plans.${name}.defaultIsolation must be one of its isolations (${plan.isolations.join(', ')}), got "${String(plan.defaultIsolation)}"`,
      );
    if (!EGRESS_LEVELS.includes(plan.egress))
      throw new ConfigError(`plans.${name}.egress must be one of ${EGRESS_LEVELS.join(', ')}`);
    for (const [k, v] of Object.entries({ ...plan, ...plan.limits })) {
      if (k === 'limits' || k === 'egress' || k === 'isolations' || k === 'defaultIsolation') continue;
      if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
        throw new ConfigError(`plans.${name}.${k} must be a non-negative number`);
    }
    if (plan.limits.cpus <= 0 || plan.concurrency < 1)
      throw new ConfigError(`plans.${name}: cpus and concurrency must be positive`);
    if (!Number.isInteger(plan.maxBuilds) || (plan.maxBuilds ?? 0) < 1)
      throw new ConfigError(`plans.${name}.maxBuilds must be a positive integer`);
    out[name] = plan;
  }
  return out;
}
