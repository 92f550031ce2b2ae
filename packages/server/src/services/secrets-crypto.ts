/**
 * The encryption of secrets at rest (docs/secrets.md, Keys): AES-256-GCM with a random 96-bit
 * IV, the additional data binding the ciphertext to its account and name (`accountId\0name`:
 * a row copied to another account or name does not decrypt), and the id of the key that made
 * it. Text form: `v1.<keyId>.<base64url(iv | tag | ciphertext)>`.
 *
 * Keys come from `SANDBOXD_SECRETS_KEY` (base64 of 32 bytes, or the key file's format), else
 * the key file (`SANDBOXD_SECRETS_KEY_FILE`, default `<dataDir>/secrets.key`), made 0600 at
 * the first start. The file holds one key a line, `<keyId> <base64 of 32 bytes>` (`#` comments
 * and blank lines allowed); the first encrypts, every one decrypts (rotation: `sandboxd
 * secrets-key add`, then `rewrap`, then the old lines may go). Never in the database.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, fsyncSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';

/** The key file's name in the data dir when `SANDBOXD_SECRETS_KEY_FILE` names none. */
export const SECRETS_KEY_FILE = 'secrets.key';
const KEY_ID_RE = /^[A-Za-z0-9_-]{1,32}$/;
const VERSION = 'v1';

export interface SecretKey {
  id: string;
  key: Buffer;
}

/** A fresh key with a random id. */
export function newSecretKey(): SecretKey {
  return { id: `k${randomBytes(4).toString('hex')}`, key: randomBytes(32) };
}

function parseKey(b64: string, where: string): Buffer {
  const key = /^[A-Za-z0-9+/]+={0,2}$/.test(b64) ? Buffer.from(b64, 'base64') : Buffer.alloc(0);
  if (key.length !== 32) throw new Error(`${where}: a key is the base64 of exactly 32 bytes`);
  return key;
}

/**
 * The keys of a key file's text (or of `SANDBOXD_SECRETS_KEY`: a bare base64 key gets the id
 * `env-` + the first 8 hex digits of its SHA-256). Throws naming the line, never quoting a key.
 */
export function parseSecretKeys(text: string, source: string): SecretKey[] {
  const trimmed = text.trim();
  if (trimmed !== '' && !/\s/.test(trimmed)) {
    const key = parseKey(trimmed, source);
    return [{ id: `env-${createHash('sha256').update(key).digest('hex').slice(0, 8)}`, key }];
  }
  const keys: SecretKey[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const [id, b64, extra] = line.split(/\s+/);
    const where = `${source} line ${i + 1}`;
    if (extra !== undefined || b64 === undefined) throw new Error(`${where}: a line is "<keyId> <base64 key>"`);
    if (!KEY_ID_RE.test(id)) throw new Error(`${where}: a key id is 1-32 letters, digits, "_" or "-"`);
    if (keys.some((k) => k.id === id)) throw new Error(`${where}: key id ${id} appears twice`);
    keys.push({ id, key: parseKey(b64, where) });
  });
  if (!keys.length) throw new Error(`${source}: no key`);
  return keys;
}

/** The key file's text for `keys` (the first encrypts). */
export function formatSecretKeys(keys: SecretKey[]): string {
  return [
    '# sandboxd secrets keys: "<keyId> <base64 of 32 bytes>" a line; the first encrypts, all decrypt.',
    '# Keep it secret and backed up: without it no secret can be read (docs/secrets.md).',
    ...keys.map((k) => `${k.id} ${k.key.toString('base64')}`),
    '',
  ].join('\n');
}

/** The error a ciphertext that does not decrypt gets: it names neither the key nor any byte of the value. */
export class SecretDecryptError extends Error {}

/** The keys of the instance: encrypts with the first, decrypts with the one a ciphertext names. */
export class SecretKeyring {
  constructor(readonly keys: readonly SecretKey[]) {
    if (!keys.length) throw new Error('a keyring needs at least one key');
  }

  /** The id of the key that encrypts. */
  get primaryId(): string {
    return this.keys[0].id;
  }

  encrypt(accountId: string, name: string, value: string): string {
    const k = this.keys[0];
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', k.key, iv);
    c.setAAD(aad(accountId, name));
    const data = Buffer.concat([c.update(value, 'utf8'), c.final()]);
    return `${VERSION}.${k.id}.${Buffer.concat([iv, c.getAuthTag(), data]).toString('base64url')}`;
  }

  /** The key id a ciphertext names, or null when it is not one of ours. */
  static keyIdOf(ciphertext: string): string | null {
    const [v, id, body, extra] = ciphertext.split('.');
    return v === VERSION && body !== undefined && extra === undefined && KEY_ID_RE.test(id) ? id : null;
  }

  /** Throws {@link SecretDecryptError} when the key is unknown, or the text was changed or belongs elsewhere. */
  decrypt(accountId: string, name: string, ciphertext: string): string {
    const id = SecretKeyring.keyIdOf(ciphertext);
    if (id === null) throw new SecretDecryptError('not a sandboxd secret ciphertext');
    const k = this.keys.find((x) => x.id === id);
    if (!k) throw new SecretDecryptError(`encrypted with key ${id}, which this server does not hold`);
    const raw = Buffer.from(ciphertext.split('.')[2], 'base64url');
    if (raw.length < 28) throw new SecretDecryptError('ciphertext too short');
    try {
      const d = createDecipheriv('aes-256-gcm', k.key, raw.subarray(0, 12));
      d.setAAD(aad(accountId, name));
      d.setAuthTag(raw.subarray(12, 28));
      return Buffer.concat([d.update(raw.subarray(28)), d.final()]).toString('utf8');
    } catch {
      throw new SecretDecryptError(`does not decrypt with key ${id} (changed, or not this secret's)`);
    }
  }
}

function aad(accountId: string, name: string): Buffer {
  return Buffer.from(`${accountId}\0${name}`, 'utf8');
}

/** Where the keys come from. */
export interface SecretKeySource {
  /** `SANDBOXD_SECRETS_KEY`. */
  secretsKey?: string;
  /** `SANDBOXD_SECRETS_KEY_FILE`; default `<dataDir>/secrets.key`. */
  secretsKeyFile?: string;
  dataDir: string;
}

export function keyFilePath(src: SecretKeySource): string {
  return src.secretsKeyFile ?? join(src.dataDir, SECRETS_KEY_FILE);
}

/**
 * Reads a key file without following a symlink at its name; refuses one that is not a
 * regular file or that others than its owner may read or write. Null when it does not exist.
 */
export function readKeyFile(path: string): SecretKey[] | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'ELOOP') throw new Error(`secrets key file ${path} is a symbolic link; refused`);
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`secrets key file ${path} is not a regular file`);
    if (st.mode & 0o077)
      throw new Error(
        `secrets key file ${path} is readable or writable by others (mode ${(st.mode & 0o777).toString(8)}): chmod 600 it`,
      );
    return parseSecretKeys(readFileSync(fd, 'utf8'), path);
  } finally {
    closeSync(fd);
  }
}

/** Writes a new key file (0600, never through a symlink, fsynced); `EEXIST` when one is there. */
export function createKeyFile(path: string, keys: SecretKey[]): void {
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    writeSync(fd, formatSecretKeys(keys));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * The instance's keyring: `SANDBOXD_SECRETS_KEY` when set, else the key file, made with one
 * fresh key when missing and `create` (the server's first start). `made` says it was made.
 */
export function loadSecretKeyring(
  src: SecretKeySource,
  o: { create: boolean },
): { keyring: SecretKeyring; made: boolean; source: string } {
  if (src.secretsKey !== undefined && src.secretsKey !== '')
    return {
      keyring: new SecretKeyring(parseSecretKeys(src.secretsKey, 'SANDBOXD_SECRETS_KEY')),
      made: false,
      source: 'SANDBOXD_SECRETS_KEY',
    };
  const path = keyFilePath(src);
  const keys = readKeyFile(path);
  if (keys) return { keyring: new SecretKeyring(keys), made: false, source: path };
  if (!o.create) throw new Error(`no secrets key: ${path} does not exist and SANDBOXD_SECRETS_KEY is not set`);
  try {
    createKeyFile(path, [newSecretKey()]);
  } catch (e) {
    // Another process made it meanwhile: read what it wrote.
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  const made = readKeyFile(path);
  if (!made) throw new Error(`secrets key file ${path} vanished after it was made`);
  return { keyring: new SecretKeyring(made), made: true, source: path };
}
