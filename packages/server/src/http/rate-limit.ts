/**
 * Rate limits: token buckets per account (API requests) and per client IP (requests
 * without valid credentials), and sliding-window throttles for failed logins (per email
 * and per IP) and sign-ups (per IP). Everything is in memory, keyed by strings, bounded
 * in size (idle entries are evicted), and driven by an injected clock so tests never sleep.
 */
import { SandboxdError } from '@sandboxd/protocol';
import type { RateLimitConfig } from '../config.js';

/** The answer of a check: allowed, or refused with the wait until the next success. */
export type Verdict = { ok: true } | { ok: false; retryAfterMs: number };

const OK: Verdict = { ok: true };
/** Keys kept per limiter at most; past it the least recently used key is dropped. */
export const DEFAULT_MAX_KEYS = 100_000;

/**
 * Token buckets by key: each holds up to `burst` tokens and refills at `perSec`; a request
 * takes one. A bucket that has refilled to full is indistinguishable from a new one, so it
 * is dropped (swept at most every `sweepMs`); the map also never holds more than `maxKeys`.
 */
export class TokenBuckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private lastSweep: number;

  constructor(
    private readonly o: { perSec: number; burst: number; now: () => number; maxKeys?: number; sweepMs?: number },
  ) {
    this.lastSweep = o.now();
  }

  get size(): number {
    return this.buckets.size;
  }

  get enabled(): boolean {
    return this.o.perSec > 0 && this.o.burst > 0;
  }

  /** Takes one token for `key`. */
  take(key: string): Verdict {
    if (!this.enabled) return OK;
    const now = this.o.now();
    this.sweep(now);
    const b = this.buckets.get(key);
    let tokens = this.o.burst;
    if (b) {
      tokens = Math.min(this.o.burst, b.tokens + (Math.max(0, now - b.at) * this.o.perSec) / 1000);
      this.buckets.delete(key); // re-inserted below: Map order is least recently used first
    } else if (this.buckets.size >= (this.o.maxKeys ?? DEFAULT_MAX_KEYS)) {
      this.buckets.delete(this.buckets.keys().next().value as string);
    }
    if (tokens >= 1) {
      this.buckets.set(key, { tokens: tokens - 1, at: now });
      return OK;
    }
    this.buckets.set(key, { tokens, at: now });
    return { ok: false, retryAfterMs: Math.max(1, Math.ceil(((1 - tokens) * 1000) / this.o.perSec)) };
  }

  private sweep(now: number): void {
    if (now - this.lastSweep < (this.o.sweepMs ?? 10_000)) return;
    this.lastSweep = now;
    const fullAfterMs = (b: { tokens: number }) => ((this.o.burst - b.tokens) * 1000) / this.o.perSec;
    for (const [k, b] of this.buckets) if (now - b.at >= fullAfterMs(b)) this.buckets.delete(k);
  }
}

/**
 * At most `max` events per key within a sliding `windowMs`: `check` says whether one more
 * is allowed now, `record` counts one. Keys whose events all left the window are dropped.
 */
export class SlidingWindow {
  private readonly events = new Map<string, number[]>();
  private lastSweep: number;

  constructor(private readonly o: { max: number; windowMs: number; now: () => number; maxKeys?: number }) {
    this.lastSweep = o.now();
  }

  get size(): number {
    return this.events.size;
  }

  check(key: string): Verdict {
    if (this.o.max <= 0) return OK;
    const now = this.o.now();
    const list = this.live(key, now);
    if (!list || list.length < this.o.max) return OK;
    return { ok: false, retryAfterMs: Math.max(1, Math.ceil(list[list.length - this.o.max] + this.o.windowMs - now)) };
  }

  record(key: string): void {
    if (this.o.max <= 0) return;
    const now = this.o.now();
    this.sweep(now);
    const list = this.live(key, now) ?? [];
    list.push(now);
    if (list.length > this.o.max) list.splice(0, list.length - this.o.max);
    this.events.delete(key);
    if (this.events.size >= (this.o.maxKeys ?? DEFAULT_MAX_KEYS))
      this.events.delete(this.events.keys().next().value as string);
    this.events.set(key, list);
  }

  /** Forgets a key (a successful login clears its email's failures). */
  clear(key: string): void {
    this.events.delete(key);
  }

  private live(key: string, now: number): number[] | undefined {
    const list = this.events.get(key);
    if (!list) return undefined;
    while (list.length && list[0] <= now - this.o.windowMs) list.shift();
    if (!list.length) this.events.delete(key);
    return list.length ? list : undefined;
  }

  private sweep(now: number): void {
    if (now - this.lastSweep < Math.min(this.o.windowMs, 60_000)) return;
    this.lastSweep = now;
    for (const [k, list] of this.events)
      if (!list.length || list[list.length - 1] <= now - this.o.windowMs) this.events.delete(k);
  }
}

/**
 * The client key of an address: IPv4 (also IPv4-mapped IPv6) as is, IPv6 by its /64
 * (one host usually holds a whole /64, so single addresses would be free to rotate).
 */
export function clientKey(ip: string | undefined): string {
  if (!ip) return 'unknown';
  const v4 = /^(?:::ffff:)?(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(ip);
  if (v4) return v4[1];
  if (!ip.includes(':')) return ip;
  const [head, tail = ''] = ip.split('%')[0].toLowerCase().split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = ip.includes('::') ? [...h, ...Array(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t] : h;
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}

/** Every limit of one server, built from its config. */
export class RateLimits {
  readonly account: TokenBuckets;
  readonly ip: TokenBuckets;
  readonly loginByEmail: SlidingWindow;
  readonly loginByIp: SlidingWindow;
  readonly signupByIp: SlidingWindow;

  constructor(
    readonly config: RateLimitConfig,
    now: () => number,
  ) {
    this.account = new TokenBuckets({ perSec: config.accountPerSec, burst: config.accountBurst, now });
    this.ip = new TokenBuckets({ perSec: config.ipPerSec, burst: config.ipBurst, now });
    const windowMs = config.authWindowMs;
    this.loginByEmail = new SlidingWindow({ max: config.loginFailuresPerEmail, windowMs, now });
    this.loginByIp = new SlidingWindow({ max: config.loginFailuresPerIp, windowMs, now });
    this.signupByIp = new SlidingWindow({ max: config.signupsPerIp, windowMs, now });
  }
}

/** Which limit refused a request (`details.limit` of the 429). */
export type LimitName = 'account' | 'ip' | 'login' | 'signup';

const WHY: Record<LimitName, (c: RateLimitConfig) => string> = {
  account: (c) => `Too many requests for this account (at most ${c.accountPerSec}/s, bursts of ${c.accountBurst})`,
  ip: (c) =>
    `Too many requests without valid credentials from this address (at most ${c.ipPerSec}/s, bursts of ${c.ipBurst})`,
  login: (c) =>
    `Too many failed logins for this email or from this address (at most ${c.loginFailuresPerEmail} per email and ${c.loginFailuresPerIp} per address in ${Math.round(c.authWindowMs / 60_000)} min)`,
  signup: (c) =>
    `Too many sign-ups from this address (at most ${c.signupsPerIp} in ${Math.round(c.authWindowMs / 60_000)} min)`,
};

/** The 429 of a refused verdict: `details` carries `limit` and `retryAfterMs` (the server adds `Retry-After`). */
export function rateLimited(limit: LimitName, retryAfterMs: number, config: RateLimitConfig): SandboxdError {
  const wait = retryAfterMs < 1000 ? `${retryAfterMs} ms` : `${Math.ceil(retryAfterMs / 1000)} s`;
  return new SandboxdError('rate_limited', `${WHY[limit](config)}; retry in ${wait}`, { limit, retryAfterMs });
}

/** Whole seconds for `Retry-After` (at least 1) of a 429 body, or null when it has none. */
export function retryAfterSeconds(body: { code: number; details?: unknown }): string | null {
  const ms = (body.details as { retryAfterMs?: unknown } | undefined)?.retryAfterMs;
  return body.code === 429 && typeof ms === 'number' ? String(Math.max(1, Math.ceil(ms / 1000))) : null;
}

/** Charges the per-IP bucket of a request without valid credentials; throws the 429. */
export function limitIp(limits: RateLimits, ip: string | undefined): void {
  const v = limits.ip.take(clientKey(ip));
  if (!v.ok) throw rateLimited('ip', v.retryAfterMs, limits.config);
}

/** Charges the bucket of an authenticated account; throws the 429. */
export function limitAccount(limits: RateLimits, accountId: string): void {
  const v = limits.account.take(accountId);
  if (!v.ok) throw rateLimited('account', v.retryAfterMs, limits.config);
}
