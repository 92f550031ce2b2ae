import type { AccountService } from './accounts.js';
import type { AuthService } from './auth.js';
import type { ServiceDeps } from './context.js';

/** What a first start created; secrets here go to the console, never to logs. */
export interface BootstrapResult {
  accountId: string;
  email: string;
  /** Set when the key was generated (not given in config). */
  apiKey?: string;
  loginToken: string;
}

/**
 * On an empty database, creates the admin account (default plan), its first API key
 * (`SANDBOXD_BOOTSTRAP_API_KEY` or a new one) and a one-time login token. Returns null
 * when accounts already exist.
 */
export async function bootstrap(
  d: ServiceDeps,
  svc: { accounts: AccountService; auth: AuthService },
): Promise<BootstrapResult | null> {
  if ((await d.store.countAccounts()) > 0) return null;
  const b = d.config.bootstrap;
  const email = b.adminEmail ?? 'admin@localhost';
  const account = await svc.accounts.create({ email, password: b.adminPassword ?? null, admin: true });
  const key = await svc.auth.createKey(account.id, 'bootstrap', { fixedKey: b.apiKey });
  const loginToken = await svc.auth.newLoginLink(account.id);
  d.log.info({ accountId: account.id }, 'bootstrap admin account created');
  return { accountId: account.id, email, apiKey: b.apiKey ? undefined : key.key, loginToken };
}

/** The console text of a first start. */
export function bootstrapBanner(r: BootstrapResult, opts: { baseUrl: string }): string {
  const lines = [
    '',
    '==================== sandboxd: first start ====================',
    `Admin account: ${r.email}`,
    `One-time login link (24 h): ${opts.baseUrl}/api/v1/auth/link?token=${r.loginToken}`,
  ];
  if (r.apiKey) lines.push(`First API key (shown once): ${r.apiKey}`, `  export SANDBOX_API_KEY=${r.apiKey}`);
  else lines.push('API key: the one given in the config (bootstrap.apiKey, or SANDBOXD_BOOTSTRAP_API_KEY)');
  lines.push('================================================================', '');
  return lines.join('\n');
}
