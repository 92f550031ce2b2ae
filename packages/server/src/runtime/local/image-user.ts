import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';

/** Looks a name up in a passwd/group style file of the rootfs; undefined when absent. */
function lookup(rootfs: string, file: 'passwd' | 'group', name: string): { id: number; gid?: number } | undefined {
  let text: string;
  try { text = readFileSync(join(rootfs, 'etc', file), 'utf8'); } catch { return undefined; }
  for (const line of text.split('\n')) {
    const f = line.split(':');
    if (f[0] === name && f.length >= 3) return { id: Number(f[2]), gid: file === 'passwd' ? Number(f[3]) : undefined };
  }
  return undefined;
}

/**
 * Resolves an image config `User` (`""`, `name`, `uid`, `name:group`, `uid:gid`) to the
 * numeric `uid:gid` that `crun exec --user` takes, reading names from the image's
 * /etc/passwd and /etc/group. Throws `validation` for a name the image does not have.
 */
export function resolveImageUser(rootfs: string, user: string): string {
  if (!user) return '0:0';
  const [u, g] = user.split(':', 2) as [string, string | undefined];
  let uid: number; let gid: number | undefined;
  if (/^\d+$/.test(u)) uid = Number(u);
  else {
    const entry = lookup(rootfs, 'passwd', u);
    if (!entry) throw new SandboxdError('validation', `image user "${u}" is not in the image's /etc/passwd`, { user });
    uid = entry.id; gid = entry.gid;
  }
  if (g !== undefined) {
    if (/^\d+$/.test(g)) gid = Number(g);
    else {
      const entry = lookup(rootfs, 'group', g);
      if (!entry) throw new SandboxdError('validation', `image group "${g}" is not in the image's /etc/group`, { user });
      gid = entry.id;
    }
  }
  return `${uid}:${gid ?? (uid === 0 ? 0 : uid)}`;
}
