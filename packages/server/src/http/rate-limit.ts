/**
 * Rate limits on fixed-window counters (`Counters`: in this process's memory, or in the
 * database so that replicas share them; `SANDBOXD_RATE_LIMIT_STORE`).
 *
 * Request limits (per account, per client address) and the sign-up limit are
 * @fastify/rate-limit's limiters (`createRateLimit`), whose store is these counters. The
 * failed-login throttle is not: it counts failures only, is checked before the password is
 * hashed and is cleared by a success, which the library's limiters (one increment per call,
 * no reset) do not offer; it uses the same counters directly ({@link RateLimits.reserveLogin}).
 *
 * Every limit here counts before it compares (one atomic hit, then the check of the count
 * that hit returned), never reads, acts, then counts: N parallel requests get N distinct
 * counts, so at most `max` of them pass, whatever their timing.
 *
 * Time is injected (`now`, epoch ms for the database store) so tests move a clock.
 */
import { type FastifyRateLimitStore, normalizeIP, type RateLimitPluginOptions } from '@fastify/rate-limit';
import { SandboxdError } from '@sandboxd/protocol';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { RateLimitConfig } from '../config.js';
import type { Counters } from '../store/store.js';

/** A login attempt that {@link RateLimits.reserveLogin} let through to the password check. */
export interface LoginAttempt {
  /** The password was wrong: the reserved failure stays counted. */
  failed(): Promise<void>;
  /** The password was right: the address's reservation is given back, the email's failures cleared. */
  succeeded(): Promise<void>;
}

/** Which limit refused a request (`details.limit` of the 429). */
export type LimitName = 'account' | 'ip' | 'login' | 'signup';

/** A fixed window: at most `max` events per `windowMs`, counted from the first one. */
export interface FixedWindow {
  max: number;
  windowMs: number;
}

/**
 * The window of a request limit configured as a rate and a burst: `burst` requests per
 * `burst / perSec` seconds (the same sustained rate, and at most `burst` at once within a
 * window). Null (off) when either is 0.
 */
export function requestWindow(perSec: number, burst: number): FixedWindow | null {
  if (perSec <= 0 || burst <= 0) return null;
  return { max: burst, windowMs: Math.max(1, Math.round((burst * 1000) / perSec)) };
}

/** A count per fixed window; null (off) when `max` is 0. */
function countWindow(max: number, windowMs: number): FixedWindow | null {
  return max > 0 ? { max, windowMs } : null;
}

/**
 * The key of a client address (@fastify/rate-limit's `normalizeIP`): IPv4 (also
 * IPv4-mapped IPv6) as is, IPv6 by its /64 (one host usually holds a whole /64, so single
 * addresses would be free to rotate).
 */
export function addressKey(ip: string | undefined): string {
  return ip ? normalizeIP(ip, 64) : 'unknown';
}

/** Every limit of one server, built from its config over one set of counters. */
export class RateLimits {
  readonly account: FixedWindow | null;
  readonly ip: FixedWindow | null;
  readonly signup: FixedWindow | null;
  /** Failed logins per email and per client address. */
  readonly loginByEmail: FixedWindow | null;
  readonly loginByIp: FixedWindow | null;
  private nextPurge = 0;

  constructor(
    readonly config: RateLimitConfig,
    private readonly counters: Counters,
    private readonly clock: () => number,
    private readonly purgeEveryMs = 60_000,
  ) {
    this.account = requestWindow(config.accountPerSec, config.accountBurst);
    this.ip = requestWindow(config.ipPerSec, config.ipBurst);
    this.signup = countWindow(config.signupsPerIp, config.authWindowMs);
    this.loginByEmail = countWindow(config.loginFailuresPerEmail, config.authWindowMs);
    this.loginByIp = countWindow(config.loginFailuresPerIp, config.authWindowMs);
  }

  /** Whole milliseconds of the injected clock. */
  now(): number {
    return Math.floor(this.clock());
  }

  /**
   * Counts one event for `key`; returns the count and the wait until the window ends. Ended
   * windows are purged from the counters at most once per `purgeEveryMs` (in the background).
   */
  async hit(key: string, windowMs: number): Promise<{ count: number; ttl: number }> {
    const { count, ttl } = await this.hitWindow(key, windowMs);
    return { count, ttl };
  }

  /** {@link hit}, with the end of the window the event was counted in (to give it back to). */
  private async hitWindow(key: string, windowMs: number): Promise<{ count: number; ttl: number; resetAt: number }> {
    const now = this.now();
    if (now >= this.nextPurge) {
      this.nextPurge = now + this.purgeEveryMs;
      this.counters.purgeCounters(now).catch(() => {}); // a failing store fails the hits too
    }
    const w = await this.counters.hitCounter(key, windowMs, now);
    return { count: w.count, ttl: w.resetAt - now, resetAt: w.resetAt };
  }

  /**
   * Charges one request to `accountId` on the account limit, under the key the API's own
   * limiter uses (`account:<id>`), for front doors outside fastify (E2B's envd). Resolves
   * with the wait in ms when the window is over its max, else null (also when the limit is off).
   */
  async chargeAccount(accountId: string): Promise<number | null> {
    const w = this.account;
    if (!w) return null;
    const r = await this.hit(`account:${accountId}`, w.windowMs);
    return r.count > w.max ? Math.max(1, r.ttl) : null;
  }

  /** The count of `key`'s live window and the wait until it ends, or null. */
  async read(key: string): Promise<{ count: number; ttl: number } | null> {
    const now = this.now();
    const w = await this.counters.readCounter(key, now);
    return w && { count: w.count, ttl: w.resetAt - now };
  }

  /**
   * The failed-login throttle as it stands, without counting anything: milliseconds until
   * `email` from `ip` may try again (the longer of the two waits), 0 when it may now. For
   * reading only: the login route reserves with {@link reserveLogin}, because a read then a
   * later count lets parallel attempts all pass before any is counted.
   */
  async loginWait(email: string, ip: string): Promise<number> {
    const wait = async (w: FixedWindow | null, key: string) => {
      if (!w) return 0;
      const r = await this.read(key);
      return r && r.count >= w.max ? Math.max(1, r.ttl) : 0;
    };
    return Math.max(
      ...(await Promise.all([wait(this.loginByEmail, `login-email:${email}`), wait(this.loginByIp, `login-ip:${ip}`)])),
    );
  }

  /**
   * Reserves one login attempt of `email` from `ip` before the password is checked: counts
   * it as a failure on both counters at once, and refuses it when either count passes its
   * max (the reservation is then given back, so a refusal is not a failure). So however
   * many attempts run in parallel, at most the max of each window reach the password
   * check. Resolves with the wait in ms when refused, else with a {@link LoginAttempt}:
   * `failed()` keeps the count, `succeeded()` gives the address's reservation back and
   * clears the email's failures.
   */
  async reserveLogin(email: string, ip: string): Promise<{ wait: number } | LoginAttempt> {
    const keys = [
      [this.loginByEmail, `login-email:${email}`],
      [this.loginByIp, `login-ip:${ip}`],
    ] as const;
    const hits = await Promise.all(keys.map(([w, key]) => (w ? this.hitWindow(key, w.windowMs) : null)));
    let wait = 0;
    for (const [i, r] of hits.entries()) {
      const w = keys[i][0];
      if (r && w && r.count > w.max) wait = Math.max(wait, Math.max(1, r.ttl));
    }
    // Each reservation is given back to the window it was counted in, never to a later one.
    const release = (i: number) => {
      const h = hits[i];
      return h ? this.counters.releaseCounter(keys[i][1], h.resetAt) : undefined;
    };
    if (wait > 0) {
      await Promise.all([release(0), release(1)]);
      return { wait };
    }
    return {
      failed: async () => {},
      succeeded: async () => {
        await Promise.all([this.loginSucceeded(email), release(1)]);
      },
    };
  }

  /** Counts a failed login for `email` and for `ip` (without a check: see {@link reserveLogin}). */
  async loginFailed(email: string, ip: string): Promise<void> {
    await Promise.all([
      this.loginByEmail && this.hit(`login-email:${email}`, this.loginByEmail.windowMs),
      this.loginByIp && this.hit(`login-ip:${ip}`, this.loginByIp.windowMs),
    ]);
  }

  /** A successful login clears its email's failures (not its address's). */
  async loginSucceeded(email: string): Promise<void> {
    await this.counters.deleteCounter(`login-email:${email}`);
  }

  /**
   * Options of @fastify/rate-limit: no limit of its own on any route (`global: false`; the
   * auth hook picks the limit of each request), and these counters as its store.
   */
  pluginOptions(): RateLimitPluginOptions {
    const limits = this;
    class CountersStore implements FastifyRateLimitStore {
      incr(key: string, cb: (e: Error | null, r?: { current: number; ttl: number }) => void, timeWindow: number) {
        limits.hit(key, timeWindow).then((r) => cb(null, { current: r.count, ttl: r.ttl }), cb);
      }
      child(): FastifyRateLimitStore {
        return this; // limiters keep apart by their key prefix
      }
    }
    return { global: false, store: CountersStore };
  }
}

/**
 * A request limiter of @fastify/rate-limit (registered with {@link RateLimits.pluginOptions})
 * for limit `name`: each call charges one request to `key(req)` and throws the 429 past the
 * window's max. Does nothing when the limit is off.
 */
export function requestLimiter(
  app: FastifyInstance,
  limits: RateLimits,
  name: 'account' | 'ip' | 'signup',
  key: (req: FastifyRequest) => string,
): (req: FastifyRequest) => Promise<void> {
  const w = limits[name];
  if (!w) return async () => {};
  const limit = app.createRateLimit({
    max: w.max,
    timeWindow: w.windowMs,
    keyGenerator: (req) => `${name}:${key(req)}`,
  });
  return async (req) => {
    const r = await limit(req);
    if (!r.isAllowed && r.isExceeded) throw rateLimited(name, r.ttl, limits);
  };
}

const seconds = (ms: number) => (ms % 1000 === 0 ? `${ms / 1000} s` : `${(ms / 1000).toFixed(3)} s`);
const minutes = (ms: number) => `${Math.round(ms / 60_000)} min`;

const WHY: Record<LimitName, (l: RateLimits) => string> = {
  account: ({ account: w }) =>
    `Too many requests for this account (at most ${w?.max} per ${seconds(w?.windowMs ?? 0)})`,
  ip: ({ ip: w }) =>
    `Too many requests without valid credentials from this address (at most ${w?.max} per ${seconds(w?.windowMs ?? 0)})`,
  login: ({ config: c }) =>
    `Too many failed logins for this email or from this address (at most ${c.loginFailuresPerEmail} per email and ${c.loginFailuresPerIp} per address in ${minutes(c.authWindowMs)})`,
  signup: ({ config: c }) =>
    `Too many sign-ups from this address (at most ${c.signupsPerIp} in ${minutes(c.authWindowMs)})`,
};

/** The 429 of a refusal: `details` carries `limit` and `retryAfterMs` (the server adds `Retry-After`). */
export function rateLimited(limit: LimitName, retryAfterMs: number, limits: RateLimits): SandboxdError {
  const ms = Math.max(1, Math.ceil(retryAfterMs));
  const wait = ms < 1000 ? `${ms} ms` : `${Math.ceil(ms / 1000)} s`;
  return new SandboxdError('rate_limited', `${WHY[limit](limits)}; retry in ${wait}`, { limit, retryAfterMs: ms });
}

/**
 * Whole seconds for `Retry-After` (at least 1) of a 429 or a 503 `capacity` body, or null
 * when it has none.
 */
export function retryAfterSeconds(body: { code: number; kind?: string; details?: unknown }): string | null {
  const ms = (body.details as { retryAfterMs?: unknown } | undefined)?.retryAfterMs;
  const asks = body.code === 429 || body.kind === 'capacity';
  return asks && typeof ms === 'number' ? String(Math.max(1, Math.ceil(ms / 1000))) : null;
}
