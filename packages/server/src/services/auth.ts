import { SandboxdError } from '@sandboxd/protocol';
import { newApiKey, newKeyId, newSecretToken, sha256Hex } from '../domain/ids.js';
import type { AccountRecord, ApiKeyRecord } from '../store/store.js';
import type { ServiceDeps } from './context.js';
import { verifyPassword } from './passwords.js';

/** How a request proved who it is. */
export interface Principal {
  account: AccountRecord;
  via: 'key' | 'session';
}

const TOUCH_EVERY_MS = 60_000;

/**
 * Credentials: API keys (hashed at rest, shown once), cookie sessions and one-time login
 * links. Secrets are random 200+ bit strings, so SHA-256 is the right hash for them;
 * passwords use scrypt.
 */
export class AuthService {
  constructor(private readonly d: Pick<ServiceDeps, 'store' | 'clock' | 'config' | 'log'>) {}

  /** The account of an API key, or `unauthorized`. Updates `lastUsedAt` at most once a minute. */
  async fromApiKey(key: string): Promise<Principal> {
    const k = key.startsWith('sk_') && key.length <= 200 ? await this.d.store.findApiKeyByHash(sha256Hex(key)) : null;
    const account = k && (await this.d.store.getAccount(k.accountId));
    if (!k || !account) throw new SandboxdError('unauthorized', 'Invalid API key');
    const now = this.d.clock.now();
    if (k.lastUsedAt === null || now - k.lastUsedAt >= TOUCH_EVERY_MS) await this.d.store.touchApiKey(k.id, now);
    return { account, via: 'key' };
  }

  /** The account of a session cookie value, or `unauthorized`. */
  async fromSession(token: string): Promise<Principal> {
    const s = token.length <= 200 ? await this.d.store.getSession(sha256Hex(token), this.d.clock.now()) : null;
    const account = s && (await this.d.store.getAccount(s.accountId));
    if (!s || !account) throw new SandboxdError('unauthorized', 'Session expired or invalid');
    return { account, via: 'session' };
  }

  /** Checks email + password; returns a new session token. `unauthorized` on mismatch. */
  async login(email: string, password: string): Promise<{ account: AccountRecord; token: string }> {
    const a = await this.d.store.getAccountByEmail(email.trim());
    const ok = await verifyPassword(password, a?.passwordHash ?? null);
    if (!a || !ok) throw new SandboxdError('unauthorized', 'Wrong email or password');
    return { account: a, token: await this.newSession(a.id) };
  }

  /** Starts a session for an account; returns the cookie value. */
  async newSession(accountId: string): Promise<string> {
    const token = newSecretToken();
    const now = this.d.clock.now();
    await this.d.store.createSession({
      tokenHash: sha256Hex(token),
      accountId,
      createdAt: now,
      expiresAt: now + this.d.config.sessionTtlMs,
    });
    return token;
  }

  async logout(token: string): Promise<void> {
    await this.d.store.deleteSession(sha256Hex(token));
  }

  /** A one-time login token valid for `ttlMs` (default 24 h). */
  async newLoginLink(accountId: string, ttlMs = 86_400_000): Promise<string> {
    const token = newSecretToken();
    await this.d.store.createLoginLink({
      tokenHash: sha256Hex(token),
      accountId,
      expiresAt: this.d.clock.now() + ttlMs,
    });
    return token;
  }

  /** Trades a login link for a session token; `unauthorized` if used, expired or unknown. */
  async consumeLoginLink(token: string): Promise<string> {
    const accountId = await this.d.store.consumeLoginLink(sha256Hex(token), this.d.clock.now());
    if (!accountId) throw new SandboxdError('unauthorized', 'Login link is invalid, used or expired');
    return this.newSession(accountId);
  }

  /** Creates an API key; `key` is returned this once. `fixedKey` is for the bootstrap key only. */
  async createKey(
    accountId: string,
    name: string,
    opts: { fixedKey?: string } = {},
  ): Promise<ApiKeyRecord & { key: string }> {
    const key = opts.fixedKey ?? newApiKey();
    const rec: ApiKeyRecord = {
      id: newKeyId(),
      accountId,
      name,
      prefix: key.slice(0, 10),
      keyHash: sha256Hex(key),
      createdAt: this.d.clock.now(),
      lastUsedAt: null,
    };
    await this.d.store.createApiKey(rec);
    this.d.log.info({ accountId, keyId: rec.id }, 'api key created');
    return { ...rec, key };
  }

  listKeys(accountId: string): Promise<ApiKeyRecord[]> {
    return this.d.store.listApiKeys(accountId);
  }

  /** Revokes a key of this account; `not_found` otherwise. */
  async deleteKey(accountId: string, id: string): Promise<void> {
    if (!(await this.d.store.deleteApiKey(accountId, id))) throw new SandboxdError('not_found', 'API key not found');
  }
}
