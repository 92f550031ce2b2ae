import { randomBytes } from 'node:crypto';
import type { Store } from './store.js';

/**
 * The secrets every replica must hold the same, by their key in the store's meta table
 * (values: base64 of at least 32 bytes). Rotation: docs/postgres.md ("Shared secrets").
 */
export const SHARED_SECRETS = {
  /** HMAC key of E2B's per-sandbox envd access tokens (e2b/tokens.ts). */
  envdTokens: 'e2b.envdAccessTokenSecret',
  /** HMAC key of the port proxy's links to private ports (proxy/links.ts). */
  portLinks: 'proxy.portLinkSecret',
} as const;

/** Bytes of a secret made here; a stored one must have at least as many. */
export const SECRET_BYTES = 32;

/**
 * The shared secret `key`: the database's if it has one, else `initial` (when given: a
 * secret carried over from before it lived in the database) or 32 random bytes, inserted
 * only if absent and read back. Replicas starting at once on a fresh database all end with
 * the first insert's value. `made` is true when this call's value is the one kept.
 */
export async function sharedSecret(
  meta: Pick<Store, 'ensureMeta'>,
  key: string,
  initial?: Buffer | null,
): Promise<{ secret: Buffer; made: boolean }> {
  const candidate = (initial ?? randomBytes(SECRET_BYTES)).toString('base64');
  const held = await meta.ensureMeta(key, candidate);
  const secret = Buffer.from(held, 'base64');
  if (secret.length < SECRET_BYTES || secret.toString('base64') !== held)
    throw new Error(`The database's ${key} (table meta) must be base64 of at least ${SECRET_BYTES} bytes`);
  return { secret, made: held === candidate };
}
