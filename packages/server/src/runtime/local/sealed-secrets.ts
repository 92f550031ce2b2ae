/**
 * Secret values at rest in the local driver's sandbox records: never in clear on disk.
 * Each value is sealed with AES-256-GCM under a key of the driver's own,
 * `<dataDir>/runtime-secrets.key` (32 random bytes, base64; made 0600 at first need, never
 * read through a symlink), with the sandbox id and the secret's name as additional data (a
 * sealed value copied into another record or rule does not open). A record whose value does
 * not open (the key file lost or replaced) keeps the rule without value: it injects nothing.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import type { SecretInjection } from '../driver.js';

/** A rule as a record holds it: `value` sealed (`sealed`), never in clear. */
export type StoredSecretInjection = Omit<SecretInjection, 'value'> & { sealed?: string };

const PREFIX = 'v1:';

export class SecretSealer {
  #key: Buffer | undefined;

  constructor(private readonly keyFile: string) {}

  /** The key: read, or made when the file does not exist. */
  #keyOf(create: boolean): Buffer | null {
    if (this.#key) return this.#key;
    try {
      const fd = openSync(this.keyFile, constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        if (!fstatSync(fd).isFile()) throw new Error(`${this.keyFile} is not a regular file`);
        const k = Buffer.from(readFileSync(fd, 'utf8').trim(), 'base64');
        if (k.length !== 32) throw new Error(`${this.keyFile} does not hold 32 bytes of base64`);
        this.#key = k;
        return k;
      } finally {
        closeSync(fd);
      }
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || !create) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw e;
      }
    }
    const k = randomBytes(32);
    const fd = openSync(
      this.keyFile,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    );
    try {
      writeFileSync(fd, `${k.toString('base64')}\n`);
    } finally {
      closeSync(fd);
    }
    this.#key = k;
    return k;
  }

  seal(value: string, aad: string): string {
    const key = this.#keyOf(true) as Buffer;
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', key, iv);
    c.setAAD(Buffer.from(aad));
    const ct = Buffer.concat([c.update(value, 'utf8'), c.final(), c.getAuthTag()]);
    return `${PREFIX}${iv.toString('base64')}:${ct.toString('base64')}`;
  }

  /** The value, or undefined when it does not open. */
  open(sealed: string, aad: string): string | undefined {
    try {
      if (!sealed.startsWith(PREFIX)) return undefined;
      const key = this.#keyOf(false);
      if (!key) return undefined;
      const [ivB, ctB] = sealed.slice(PREFIX.length).split(':');
      const iv = Buffer.from(ivB, 'base64');
      const all = Buffer.from(ctB, 'base64');
      const d = createDecipheriv('aes-256-gcm', key, iv);
      d.setAAD(Buffer.from(aad));
      d.setAuthTag(all.subarray(all.length - 16));
      return Buffer.concat([d.update(all.subarray(0, all.length - 16)), d.final()]).toString('utf8');
    } catch {
      return undefined;
    }
  }

  /** `rules` as a record stores them for sandbox `id`. */
  sealRules(id: string, rules: SecretInjection[]): StoredSecretInjection[] {
    return rules.map(({ value, ...r }) =>
      value === undefined ? r : { ...r, sealed: this.seal(value, `${id}\0${r.secret}`) },
    );
  }

  /** Stored rules of sandbox `id` with their values. */
  openRules(id: string, stored: StoredSecretInjection[]): SecretInjection[] {
    return stored.map(({ sealed, ...r }) => {
      const value = sealed === undefined ? undefined : this.open(sealed, `${id}\0${r.secret}`);
      return value === undefined ? r : { ...r, value };
    });
  }
}
