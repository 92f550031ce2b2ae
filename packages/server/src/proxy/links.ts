import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

/** Query parameter of a port link, and the cookie it is traded for. */
export const LINK_PARAM = 'sandboxd_token';
export const LINK_COOKIE = 'sandboxd_token';

/** The bounds of a link's lifetime, in ms. */
export const LINK_TTL = { defaultMs: 3_600_000, minMs: 1000, maxMs: 7 * 86_400_000 } as const;

/**
 * Signed, expiring grants to one port of one sandbox: `<expiresAtMs>.<HMAC-SHA256>` over
 * sandbox id, port and expiry, keyed by a 256-bit secret kept in `secretPath` (created
 * with mode 0600 on first use, so links survive restarts). A link cannot be widened to
 * another port or sandbox and stops working at its expiry; rotating the secret file
 * revokes every link. Nothing touches the disk until the first sign or verify.
 */
export class PortLinks {
  private secret: Buffer | null = null;

  constructor(private readonly opts: { secretPath: string }) {}

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
    if (this.secret) return this.secret;
    const path = this.opts.secretPath;
    try {
      this.secret = parseSecret(readFileSync(path, 'utf8'), path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
      try {
        writeFileSync(path, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
      } catch (w) {
        if ((w as NodeJS.ErrnoException).code !== 'EEXIST') throw w;
      }
      this.secret = parseSecret(readFileSync(path, 'utf8'), path);
    }
    return this.secret;
  }
}

function parseSecret(text: string, path: string): Buffer {
  const hex = text.trim();
  if (!/^[0-9a-f]{64,}$/.test(hex)) throw new Error(`${path} must hold at least 32 bytes as hex`);
  return Buffer.from(hex, 'hex');
}
