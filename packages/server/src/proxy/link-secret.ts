import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { SECRET_BYTES, SHARED_SECRETS, sharedSecret } from '../store/shared-secret.js';
import type { Store } from '../store/store.js';

/** Where versions before the shared secret kept the port-link key: `<dataDir>/proxy-link.key`. */
export const LEGACY_LINK_KEY_FILE = 'proxy-link.key';

/**
 * The port links' secret, shared by the replicas through the database (meta
 * `proxy.portLinkSecret`), loaded once at start-up. On the first start with an empty
 * database, the key file of an older version (`legacyKeyFile`, hex) is carried over, so the
 * links it signed keep working; once the database holds a key the file is not used again (a
 * different file is reported, never used).
 */
export async function loadPortLinkSecret(
  meta: Pick<Store, 'ensureMeta'>,
  o: { legacyKeyFile: string; log: Pick<Logger, 'info' | 'warn'> },
): Promise<Buffer> {
  const legacy = readLegacyKey(o.legacyKeyFile, o.log);
  const { secret, made } = await sharedSecret(meta, SHARED_SECRETS.portLinks, legacy);
  if (legacy && made)
    o.log.info(
      { file: o.legacyKeyFile },
      'port links: the key file was moved into the database (meta proxy.portLinkSecret); its links keep working, and the file can be removed',
    );
  else if (legacy && !secret.equals(legacy))
    o.log.warn(
      { file: o.legacyKeyFile },
      'port links: the database holds another key than this file; links signed with the file are no longer accepted. The file is not used: remove it',
    );
  return secret;
}

/** The key in an older version's file, or null when there is none (or it is unusable: reported). */
function readLegacyKey(path: string, log: Pick<Logger, 'warn'>): Buffer | null {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw e;
  }
  const hex = text.trim();
  if (!new RegExp(`^(?:[0-9a-f]{2}){${SECRET_BYTES},}$`).test(hex)) {
    log.warn({ file: path }, `port links: the key file does not hold ${SECRET_BYTES}+ bytes as hex; it is ignored`);
    return null;
  }
  return Buffer.from(hex, 'hex');
}
