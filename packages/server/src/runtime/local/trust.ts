/**
 * Trust in the egress CA inside a sandbox with secret injection rules: the CA certificate at
 * {@link SANDBOX_CA_PATH}, appended to the image's system bundle where one exists, and the
 * usual variables pointing at them. Files are written by the sandbox's own agent as its root
 * (paths resolve inside the sandbox, never on the host); only the certificate goes in,
 * never the CA's key.
 */
import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { SECRET_TRUST_BUNDLE_ENV, SECRET_TRUST_CA_ENV } from '@sandboxd/protocol';
import type { CommandTarget, SandboxCommands } from './commands/exec.js';
import { AgentFiles } from './files.js';

export const SANDBOX_CA_PATH = '/etc/sandboxd/ca.crt';
/** System bundles of common distributions (Debian/Ubuntu/Alpine, Fedora/RHEL, others), in that order. */
export const SYSTEM_BUNDLES = [
  '/etc/ssl/certs/ca-certificates.crt',
  '/etc/pki/tls/certs/ca-bundle.crt',
  '/etc/ssl/cert.pem',
];
/** Most bytes of a bundle read to append to (bundles are ~200 KiB). */
const MAX_BUNDLE = 8 << 20;

/** The first system bundle the image at `rootfsDir` has (a file or a link: not followed on the host), or null. */
export function imageBundle(rootfsDir: string): string | null {
  for (const b of SYSTEM_BUNDLES) {
    try {
      const st = lstatSync(join(rootfsDir, b));
      if (st.isFile() || st.isSymbolicLink()) return b;
    } catch {
      /* not there */
    }
  }
  return null;
}

/** The environment a sandbox with injection rules gets (unless it sets them itself). */
export function trustEnv(bundle: string | null): Record<string, string> {
  const b = bundle ?? SANDBOX_CA_PATH;
  return {
    ...Object.fromEntries(SECRET_TRUST_BUNDLE_ENV.map((k) => [k, b])),
    [SECRET_TRUST_CA_ENV]: SANDBOX_CA_PATH,
  };
}

/** `env` with {@link trustEnv} under it (the caller's own values win). */
export function withTrustEnv(env: Record<string, string>, bundle: string | null): Record<string, string> {
  return { ...trustEnv(bundle), ...env };
}

async function readAll(files: AgentFiles, cid: string, path: string): Promise<Buffer | null> {
  try {
    const r = await files.read(cid, path, { user: 'root' });
    if (r.unsatisfiable) return Buffer.alloc(0);
    if (r.size > MAX_BUNDLE) {
      r.body.destroy();
      return null;
    }
    const chunks: Buffer[] = [];
    for await (const c of r.body) chunks.push(c as Buffer);
    return Buffer.concat(chunks);
  } catch {
    return null;
  }
}

/**
 * Writes the CA certificate into the running sandbox `t` and appends it to each system
 * bundle it has (once: a bundle already holding it is left). Throws when the certificate
 * cannot be written.
 */
export async function installTrust(commands: SandboxCommands, t: CommandTarget, caPem: string): Promise<void> {
  const files = new AgentFiles((_id, argv, o) => commands.spawn(t, argv, o));
  const body = Buffer.from(caPem);
  await files.mkdir(t.cid, '/etc/sandboxd', { user: 'root' }).catch((e: { kind?: string }) => {
    if (e.kind !== 'conflict') throw e;
  });
  await files.write(t.cid, SANDBOX_CA_PATH, Readable.from([body]), { user: 'root', mode: '0644', length: body.length });
  for (const b of SYSTEM_BUNDLES) {
    const had = await readAll(files, t.cid, b);
    if (!had || had.includes(body)) continue;
    const next = Buffer.concat([
      had,
      had.length && had[had.length - 1] !== 10 ? Buffer.from('\n') : Buffer.alloc(0),
      body,
    ]);
    await files
      .write(t.cid, b, Readable.from([next]), { user: 'root', mode: '0644', length: next.length })
      .catch(() => undefined);
  }
}
