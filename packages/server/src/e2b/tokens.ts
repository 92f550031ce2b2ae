import { createHmac, timingSafeEqual } from 'node:crypto';
import { SHARED_SECRETS, sharedSecret } from '../store/shared-secret.js';
import type { Store } from '../store/store.js';

/**
 * The per-sandbox access tokens of E2B's in-sandbox API (`envdAccessToken`, sent back as
 * `X-Access-Token`). A token is an HMAC of the sandbox id under a secret made once and kept
 * in the database (meta `e2b.envdAccessTokenSecret`), so it survives restarts, is the same
 * on every replica (replicas starting at once on a fresh database agree on the first one
 * inserted), and is given again by `connect` without being stored per sandbox.
 */
export class AccessTokens {
  private secret: Promise<Buffer> | null = null;

  constructor(private readonly meta: Pick<Store, 'ensureMeta'>) {}

  async tokenFor(sandboxId: string): Promise<string> {
    const mac = createHmac('sha256', await this.key())
      .update(`envd:${sandboxId}`)
      .digest('base64url');
    return `ea_${mac}`;
  }

  /**
   * The traffic access token of a sandbox with private ports (E2B's `trafficAccessToken`,
   * sent back as `E2B-Traffic-Access-Token` to its ports): another HMAC of the id, under
   * the same secret.
   */
  async trafficTokenFor(sandboxId: string): Promise<string> {
    const mac = createHmac('sha256', await this.key())
      .update(`traffic:${sandboxId}`)
      .digest('base64url');
    return `ta_${mac}`;
  }

  /** Constant-time comparison with the sandbox's traffic access token. */
  async verifyTraffic(sandboxId: string, token: string | undefined): Promise<boolean> {
    if (!token || token.length > 200) return false;
    const want = Buffer.from(await this.trafficTokenFor(sandboxId));
    const got = Buffer.from(token);
    return want.length === got.length && timingSafeEqual(want, got);
  }

  /** Constant-time comparison with the sandbox's token. */
  async verify(sandboxId: string, token: string | undefined): Promise<boolean> {
    if (!token || token.length > 200) return false;
    const want = Buffer.from(await this.tokenFor(sandboxId));
    const got = Buffer.from(token);
    return want.length === got.length && timingSafeEqual(want, got);
  }

  /**
   * The signature of an upload URL of E2B's template builder (the SDK PUTs a COPY's files
   * there without its API key): an HMAC of the account, the files' hash and the expiry
   * (unix seconds), under the same secret, so the URL uploads that hash for that account
   * until then and nothing else.
   */
  async uploadSignature(accountId: string, hash: string, expires: number): Promise<string> {
    return createHmac('sha256', await this.key())
      .update(`template-upload:${accountId}:${hash}:${expires}`)
      .digest('base64url');
  }

  /** Constant-time check of an upload URL's signature (its expiry is the caller's to check). */
  async verifyUpload(accountId: string, hash: string, expires: number, signature: string): Promise<boolean> {
    if (!signature || signature.length > 200) return false;
    const want = Buffer.from(await this.uploadSignature(accountId, hash, expires));
    const got = Buffer.from(signature);
    return want.length === got.length && timingSafeEqual(want, got);
  }

  /** Makes the secret on first start (app start-up calls this, before serving). */
  async init(): Promise<void> {
    await this.key();
  }

  private key(): Promise<Buffer> {
    this.secret ??= sharedSecret(this.meta, SHARED_SECRETS.envdTokens).then(
      (s) => s.secret,
      (e) => {
        this.secret = null;
        throw e;
      },
    );
    return this.secret;
  }
}
