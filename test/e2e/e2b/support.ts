/**
 * Shared set-up of the E2B compatibility suites: a real server, an account with a key, and
 * the environment variables E2B's SDK reads (set on this process, as a user would set them):
 * `E2B_API_URL` (the control API under /e2b), `E2B_SANDBOX_URL` (all in-sandbox traffic to
 * sandboxd's own origin) and `E2B_API_KEY`. The `e2b` package is the unchanged npm release.
 */
import { newAccount, type Server, startServer } from '../harness.js';

export interface E2bEnv {
  s: Server;
  key: string;
  accountId: string;
}

/** Starts a server and points E2B's SDK at it through its environment variables. */
export async function startE2b(o: { env?: Record<string, string>; tokens?: number } = {}): Promise<E2bEnv> {
  const s = await startServer({ env: o.env });
  const { id, key } = await newAccount(s, { tokens: o.tokens ?? 1_000_000 });
  e2bAt(s, key);
  return { s, key, accountId: id };
}

/** Points E2B's SDK (its environment variables) at server `s` with `key`, as its user would. */
export function e2bAt(s: Server, key: string): void {
  process.env.E2B_API_URL = `${s.baseUrl}/e2b`;
  process.env.E2B_SANDBOX_URL = s.baseUrl;
  process.env.E2B_API_KEY = key;
  delete process.env.E2B_DOMAIN;
  delete process.env.E2B_DEBUG;
}
