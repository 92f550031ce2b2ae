/**
 * `sandboxd secrets-key add|rewrap|list`: rotation of the key that encrypts secrets at rest
 * (docs/secrets.md, Key rotation). `add` puts a new key first in the key file (it encrypts
 * from the next start; the others still decrypt); `rewrap` re-encrypts every secret with the
 * first key, after which the older lines may be removed; `list` shows the key ids and how
 * many secrets each one encrypts. Settings come from the server's SANDBOXD_* variables.
 */
import { closeSync, constants, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { loadConfig } from '../config.js';
import { rewrapKeyCheck } from '../services/secrets.js';
import {
  formatSecretKeys,
  newSecretKey,
  readKeyFile,
  type SecretKey,
  SecretKeyring,
  loadSecretKeyring,
} from '../services/secrets-crypto.js';
import { openStore } from '../app.js';
import type { Store } from '../store/store.js';
import { type Command, UsageError } from './command.js';

const USAGE = `usage: sandboxd secrets-key add | rewrap | list | forget-unreadable --yes

  add      puts a new key first in the key file (SANDBOXD_SECRETS_KEY_FILE, default
           <data dir>/secrets.key): it encrypts from the server's next start, the older keys
           still decrypt. Give every server sharing the database the new file, restart them,
           then rewrap.
  rewrap   re-encrypts every secret with the first key (the server may keep serving); then
           the older lines may be removed from the key file.
  list     the key ids, the first (encrypting) one marked, and how many secrets each encrypts.
  forget-unreadable --yes
           after a lost key: deletes every secret no held key decrypts (their accounts set
           them again) and makes these keys the database's, so secrets serve again.

With SANDBOXD_SECRETS_KEY set, the keys are that variable's: add prints a new key line to put
first in it instead of writing a file. See docs/secrets.md.`;

/** Replaces the key file with `keys` atomically: a new 0600 file beside it (never through a link), fsynced, renamed over. */
export function writeKeyFile(path: string, keys: SecretKey[]): void {
  const tmp = join(dirname(path), `.${basename(path)}.new-${process.pid}`);
  rmSync(tmp, { force: true });
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    writeSync(fd, formatSecretKeys(keys));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  const dfd = openSync(dirname(path), 'r');
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}

/**
 * Re-encrypts every secret not under the first key; a secret changed meanwhile (by a server
 * that encrypted it with whatever key it holds) is read again, up to 3 times.
 */
export async function rewrapAll(
  store: Store,
  keyring: SecretKeyring,
): Promise<{ rewrapped: number; already: number; failed: string[] }> {
  let rewrapped = 0;
  let already = 0;
  const failed: string[] = [];
  for (const s of await store.listAllSecrets()) {
    let cur: typeof s | null = s;
    for (let attempt = 0; cur && attempt < 3; attempt++) {
      if (SecretKeyring.keyIdOf(cur.ciphertext) === keyring.primaryId) {
        already++;
        break;
      }
      let value: string;
      try {
        value = keyring.decrypt(cur.accountId, cur.name, cur.ciphertext);
      } catch (e) {
        failed.push(`${cur.accountId}/${cur.name}: ${(e as Error).message}`);
        break;
      }
      if (
        await store.rewrapSecret(
          cur.accountId,
          cur.name,
          cur.ciphertext,
          keyring.encrypt(cur.accountId, cur.name, value),
        )
      ) {
        rewrapped++;
        break;
      }
      cur = await store.getSecret(cur.accountId, cur.name);
    }
  }
  await rewrapKeyCheck(store, keyring);
  return { rewrapped, already, failed };
}

/** Deletes the secrets no key of `keyring` decrypts and makes its keys the database's; returns their names. */
export async function forgetUnreadable(store: Store, keyring: SecretKeyring): Promise<string[]> {
  const gone: string[] = [];
  for (const s of await store.listAllSecrets()) {
    try {
      keyring.decrypt(s.accountId, s.name, s.ciphertext);
    } catch {
      if (await store.deleteSecret(s.accountId, s.name)) gone.push(`${s.accountId}/${s.name}`);
    }
  }
  await rewrapKeyCheck(store, keyring, { force: true });
  return gone;
}

export const secretsKey: Command = {
  summary: "rotate the key of secrets at rest: add a key, re-encrypt every secret, list the keys' use",
  usage: USAGE,
  async run(args) {
    const [sub, ...rest] = args;
    const yes = sub === 'forget-unreadable' && rest.length === 1 && rest[0] === '--yes';
    if (rest.length && !yes) throw new UsageError(`unexpected argument "${rest[0]}"`);
    const config = loadConfig();
    if (sub === 'add') {
      const key = newSecretKey();
      if (config.secretsKey) {
        process.stdout.write(
          `SANDBOXD_SECRETS_KEY holds the keys: put this line first in it (lines "<id> <key>"), restart, then rewrap:\n${key.id} ${key.key.toString('base64')}\n`,
        );
        return 0;
      }
      const keys = readKeyFile(config.secretsKeyFile);
      if (!keys) {
        process.stderr.write(
          `sandboxd secrets-key: ${config.secretsKeyFile} does not exist (a server makes it at its first start)\n`,
        );
        return 1;
      }
      writeKeyFile(config.secretsKeyFile, [key, ...keys]);
      process.stdout.write(
        `sandboxd secrets-key: added key ${key.id} first in ${config.secretsKeyFile} (${keys.length + 1} keys). Give every server the file, restart them, then run \`sandboxd secrets-key rewrap\`.\n`,
      );
      return 0;
    }
    if (sub === 'forget-unreadable' && !yes)
      throw new UsageError('forget-unreadable deletes secrets: pass --yes to confirm');
    if (sub === 'rewrap' || sub === 'list' || sub === 'forget-unreadable') {
      let keyring: SecretKeyring;
      try {
        keyring = loadSecretKeyring(config, { create: false }).keyring;
      } catch (e) {
        process.stderr.write(`sandboxd secrets-key: ${(e as Error).message}\n`);
        return 1;
      }
      const store = await openStore(config);
      try {
        if (sub === 'list') {
          const use = new Map<string, number>();
          for (const s of await store.listAllSecrets()) {
            const id = SecretKeyring.keyIdOf(s.ciphertext) ?? '?';
            use.set(id, (use.get(id) ?? 0) + 1);
          }
          for (const [i, k] of keyring.keys.entries())
            process.stdout.write(`${k.id}\t${use.get(k.id) ?? 0} secrets${i === 0 ? '\t(encrypts)' : ''}\n`);
          for (const [id, n] of use)
            if (!keyring.keys.some((k) => k.id === id)) process.stdout.write(`${id}\t${n} secrets\t(NOT HELD)\n`);
          return 0;
        }
        if (sub === 'forget-unreadable') {
          const gone = await forgetUnreadable(store, keyring);
          process.stdout.write(
            `sandboxd secrets-key: ${gone.length} unreadable secrets deleted${gone.length ? ` (${gone.join(', ')})` : ''}; the keys of this key file are the database's now. Restart the servers.\n`,
          );
          return 0;
        }
        const r = await rewrapAll(store, keyring);
        process.stdout.write(
          `sandboxd secrets-key: ${r.rewrapped} secrets re-encrypted with ${keyring.primaryId}, ${r.already} already were${r.failed.length ? `; ${r.failed.length} could not be read` : ''}.\n`,
        );
        for (const f of r.failed) process.stderr.write(`  ${f}\n`);
        if (!r.failed.length && keyring.keys.length > 1)
          process.stdout.write(
            `The keys after the first (${keyring.keys
              .slice(1)
              .map((k) => k.id)
              .join(', ')}) encrypt nothing now and may be removed from the key file.\n`,
          );
        return r.failed.length ? 1 : 0;
      } finally {
        await store.close();
      }
    }
    throw new UsageError(sub === undefined ? 'names no subcommand' : `unknown subcommand "${sub}"`);
  },
};
