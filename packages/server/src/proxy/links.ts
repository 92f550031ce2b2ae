import { createHmac, timingSafeEqual } from 'node:crypto';

/** Query parameter of a port link, and the cookie it is traded for. */
export const LINK_PARAM = 'sandboxd_token';
export const LINK_COOKIE = 'sandboxd_token';

/** The bounds of a link's lifetime, in ms. */
export const LINK_TTL = { defaultMs: 3_600_000, minMs: 1000, maxMs: 7 * 86_400_000 } as const;

/**
 * Signed, expiring grants to one port of one sandbox: `<expiresAtMs>.<HMAC-SHA256>` over
 * sandbox id, port and expiry, keyed by `secret()`: a 256-bit secret shared by every
 * replica through the database (link-secret.ts loads it at start-up), so a link signed by
 * one replica opens the port through any other and survives restarts. A link cannot be
 * widened to another port or sandbox and stops working at its expiry; rotating the secret
 * revokes every link.
 */
export class PortLinks {
  constructor(private readonly opts: { secret: () => Buffer }) {}

  /** A token for `port` of `sandboxId` valid until `expiresAt` (epoch ms). */
  sign(g: { sandboxId: string; port: number; expiresAt: number }): string {
    return `${g.expiresAt}.${this.mac(g)}`;
  }

  /** True when `token` was made by {@link sign} for exactly this sandbox and port and has not expired at `now`. */
  verify(token: string, g: { sandboxId: string; port: number; now: number }): boolean {
    const m = /^([0-9]{1,15})\.([A-Za-z0-9_-]{43})$/.exec(token);
    if (!m) return false;
    const expiresAt = Number(m[1]);
    if (!(expiresAt > g.now)) return false;
    const want = Buffer.from(this.mac({ sandboxId: g.sandboxId, port: g.port, expiresAt }));
    const got = Buffer.from(m[2]);
    return got.length === want.length && timingSafeEqual(got, want);
  }

  /** Seconds until the token's expiry (0 when unparsable or past). */
  remainingSeconds(token: string, now: number): number {
    const expiresAt = Number(token.split('.')[0]);
    return Number.isFinite(expiresAt) ? Math.max(0, Math.floor((expiresAt - now) / 1000)) : 0;
  }

  private mac(g: { sandboxId: string; port: number; expiresAt: number }): string {
    return createHmac('sha256', this.key())
      .update(`sandboxd-port-link/v1\n${g.sandboxId}\n${g.port}\n${g.expiresAt}`)
      .digest('base64url');
  }

  private key(): Buffer {
    return this.opts.secret();
  }
}
