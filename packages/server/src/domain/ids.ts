import { createHash, randomBytes, randomInt } from 'node:crypto';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** `n` crypto-random characters of lowercase RFC 4648 base32. */
export function randomBase32(n: number): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += BASE32[bytes[i] & 31];
  return s;
}

/** `n` crypto-random characters of [A-Za-z0-9], unbiased. */
export function randomBase62(n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += BASE62[randomInt(62)];
  return s;
}

/** Sandbox id: `sbx_` + 20 base32 (100 bits). */
export const newSandboxId = (): string => `sbx_${randomBase32(20)}`;
/** Terminal id: `term_` + 16 base32. */
export const newTerminalId = (): string => `term_${randomBase32(16)}`;
/** Account id: `acc_` + 16 base32; only `[a-z0-9_]`, so it can prefix driver volume names. */
export const newAccountId = (): string => `acc_${randomBase32(16)}`;
/** API key record id (not the key). */
export const newKeyId = (): string => `key_${randomBase32(16)}`;
/** An API key: `sk_` + 40 base62 (~238 bits); shown once, stored as {@link sha256Hex}. */
export const newApiKey = (): string => `sk_${randomBase62(40)}`;
/** An opaque bearer secret for cookies and one-time links (256 bits, base64url). */
export const newSecretToken = (): string => randomBytes(32).toString('base64url');

/** Hex SHA-256; secrets with 200+ bits of entropy are stored this way. */
export function sha256Hex(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}
