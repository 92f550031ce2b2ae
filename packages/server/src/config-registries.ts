/**
 * The registry settings of the config: which registries every account may pull from
 * (`SANDBOXD_REGISTRIES_ALLOWED`) and the server's registry credentials with whom they serve.
 * The policy itself: runtime/local/images/pull-policy.ts.
 */
import { ConfigError } from './config-values.js';

const HOST = /^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(?::\d{1,5})?$/;

/** `host[:port],...`, `*` (any registry) or `none`; throws {@link ConfigError} naming a bad entry. */
export function parseRegistries(s: string): string[] {
  const text = s.trim();
  if (text === 'none') return [];
  const out = text
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  for (const r of out) {
    if (r !== '*' && !HOST.test(r))
      throw new ConfigError(`SANDBOXD_REGISTRIES_ALLOWED: "${r}" is not a registry host[:port] or *`);
  }
  return out;
}

export type RegistryCredentialsConfig = Record<
  string,
  { username: string; password: string; accounts?: string[] | '*' }
>;

/**
 * `registryCredentials` of the config file: `{ "<host[:port]>": { username, password,
 * accounts? } }`, `accounts` being account ids or `"*"`. Throws {@link ConfigError}.
 */
export function parseRegistryCredentials(raw: unknown): RegistryCredentialsConfig {
  if (raw === undefined || raw === null) return {};
  if (typeof raw !== 'object' || Array.isArray(raw))
    throw new ConfigError('registryCredentials must be an object of registry -> {username, password, accounts?}');
  const out: RegistryCredentialsConfig = {};
  for (const [reg, v] of Object.entries(raw as Record<string, unknown>)) {
    const c = v as { username?: unknown; password?: unknown; accounts?: unknown } | null;
    const accounts = c?.accounts;
    const accountsOk =
      accounts === undefined ||
      accounts === '*' ||
      (Array.isArray(accounts) && accounts.every((a) => typeof a === 'string' && a.length > 0));
    if (!c || typeof c.username !== 'string' || typeof c.password !== 'string' || !accountsOk)
      throw new ConfigError(
        `registryCredentials.${reg} must be {username, password, accounts?} with accounts a list of account ids or "*"`,
      );
    out[reg] = { username: c.username, password: c.password };
    if (accounts !== undefined) out[reg].accounts = accounts === '*' ? '*' : [...(accounts as string[])];
  }
  return out;
}
