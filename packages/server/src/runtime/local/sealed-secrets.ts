/**
 * Secret values at rest in the local driver's sandbox records: never in clear on disk.
 * Each value is sealed the way the API's secrets are (services/secrets-crypto.ts: AES-256-GCM,
 * the key's id in the text) under a key of the driver's own, `<dataDir>/runtime-secrets.key`
 * (made 0600 at first need, never read through a symlink nor when others may read it), with
 * the sandbox id and the secret's name as additional data (a sealed value copied into another
 * record or rule does not open). A record whose value does not open (the key file lost or
 * replaced) keeps the rule without value: it injects nothing.
 */
import { createKeyFile, newSecretKey, readKeyFile, SecretKeyring } from '../../services/secrets-crypto.js';
import type { SecretInjection } from '../driver.js';

/** A rule as a record holds it: `value` sealed (`sealed`), never in clear. */
export type StoredSecretInjection = Omit<SecretInjection, 'value'> & { sealed?: string };

export class SecretSealer {
  #keyring: SecretKeyring | undefined;

  constructor(private readonly keyFile: string) {}

  /** The driver's key: read, or (`create`) made when the file does not exist; null when it does not. */
  #keyringOf(create: boolean): SecretKeyring | null {
    if (this.#keyring) return this.#keyring;
    let keys = readKeyFile(this.keyFile);
    if (!keys && create) {
      try {
        createKeyFile(this.keyFile, [newSecretKey()]);
      } catch (e) {
        // Made meanwhile by another writer: read what it wrote.
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
      keys = readKeyFile(this.keyFile);
    }
    if (!keys) return null;
    this.#keyring = new SecretKeyring(keys);
    return this.#keyring;
  }

  seal(value: string, id: string, secret: string): string {
    return (this.#keyringOf(true) as SecretKeyring).encrypt(id, secret, value);
  }

  /** The value, or undefined when it does not open. */
  open(sealed: string, id: string, secret: string): string | undefined {
    try {
      return this.#keyringOf(false)?.decrypt(id, secret, sealed);
    } catch {
      return undefined;
    }
  }

  /** `rules` as a record stores them for sandbox `id`. */
  sealRules(id: string, rules: SecretInjection[]): StoredSecretInjection[] {
    return rules.map(({ value, ...r }) => (value === undefined ? r : { ...r, sealed: this.seal(value, id, r.secret) }));
  }

  /** Stored rules of sandbox `id` with their values. */
  openRules(id: string, stored: StoredSecretInjection[]): SecretInjection[] {
    return stored.map(({ sealed, ...r }) => {
      const value = sealed === undefined ? undefined : this.open(sealed, id, r.secret);
      return value === undefined ? r : { ...r, value };
    });
  }
}
