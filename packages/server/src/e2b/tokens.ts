import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** Where the secret of the access tokens is kept (the store's meta table, shared by replicas). */
const SECRET_KEY = 'e2b.envdAccessTokenSecret';

/**
 * The per-sandbox access tokens of E2B's in-sandbox API (`envdAccessToken`, sent back as
 * `X-Access-Token`). A token is an HMAC of the sandbox id under a secret made once and kept
 * in the database, so it survives restarts, is the same on every replica, and is given
 * again by `connect` without being stored per sandbox.
 */
export class AccessTokens {
  private secret: Promise<Buffer> | null = null;

  constructor(
    private readonly meta: { getMeta(k: string): Promise<string | null>; setMeta(k: string, v: string): Promise<void> },
  ) {}

  async tokenFor(sandboxId: string): Promise<string> {
    const mac = createHmac('sha256', await this.key())
      .update(`envd:${sandboxId}`)
      .digest('base64url');
    return `ea_${mac}`;
  }

  /** Constant-time comparison with the sandbox's token. */
  async verify(sandboxId: string, token: string | undefined): Promise<boolean> {
    if (!token || token.length > 200) return false;
    const want = Buffer.from(await this.tokenFor(sandboxId));
    const got = Buffer.from(token);
    return want.length === got.length && timingSafeEqual(want, got);
  }

  /** Makes the secret on first start (app start-up calls this, before serving). */
  async init(): Promise<void> {
    await this.key();
  }

  private key(): Promise<Buffer> {
    this.secret ??= (async () => {
      const have = await this.meta.getMeta(SECRET_KEY);
      if (have) return Buffer.from(have, 'base64');
      const made = randomBytes(32).toString('base64');
      await this.meta.setMeta(SECRET_KEY, made);
      return Buffer.from(made, 'base64');
    })().catch((e) => {
      this.secret = null;
      throw e;
    });
    return this.secret;
  }
}
