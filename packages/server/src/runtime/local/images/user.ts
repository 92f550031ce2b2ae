import { closeSync, constants, fstatSync, lstatSync, openSync, readlinkSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';

/** Largest /etc/passwd or /etc/group read from an image. */
const MAX_FILE_BYTES = 4 << 20;

/**
 * Host path of `path` inside the image rootfs `root`, resolved as if `root` were `/` (like
 * openat2's RESOLVE_IN_ROOT): symlinks are followed, but absolute targets and `..` stay
 * inside `root`. An image is untrusted: `etc -> /etc` must not name the host's /etc.
 * Undefined when a component is missing or there are too many links.
 */
export function resolveInRoot(root: string, path: string): string | undefined {
  const todo = path.split('/').filter(Boolean);
  const done: string[] = [];
  for (let links = 0; todo.length > 0; ) {
    const part = todo.shift()!;
    if (part === '.') continue;
    if (part === '..') {
      done.pop();
      continue;
    }
    const host = join(root, ...done, part);
    let isLink: boolean;
    try {
      isLink = lstatSync(host).isSymbolicLink();
    } catch {
      return undefined;
    }
    if (!isLink) {
      done.push(part);
      continue;
    }
    if (++links > 40) return undefined;
    const target = readlinkSync(host);
    if (target.startsWith('/')) done.length = 0;
    todo.unshift(...target.split('/').filter(Boolean));
  }
  return join(root, ...done);
}

/**
 * Reads a small regular file of an image rootfs, or undefined. Never blocks on a FIFO,
 * never opens a device node, never reads an endless file: all of which an image can hold.
 */
export function readImageFile(root: string, path: string): string | undefined {
  const host = resolveInRoot(root, path);
  if (!host) return undefined;
  try {
    const st = lstatSync(host);
    if (!st.isFile() || st.size > MAX_FILE_BYTES) return undefined;
    const fd = openSync(host, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY);
    try {
      const f = fstatSync(fd);
      if (!f.isFile() || f.ino !== st.ino || f.dev !== st.dev) return undefined;
      const buf = Buffer.alloc(Math.min(f.size, MAX_FILE_BYTES));
      let n = 0;
      while (n < buf.length) {
        const got = readSync(fd, buf, n, buf.length - n, n);
        if (got === 0) break;
        n += got;
      }
      return buf.subarray(0, n).toString('utf8');
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
}

/** Looks a name up in a passwd/group style file of the rootfs; undefined when absent. */
function lookup(rootfs: string, file: 'passwd' | 'group', name: string): { id: number; gid?: number } | undefined {
  const text = readImageFile(rootfs, `/etc/${file}`);
  if (text === undefined) return undefined;
  for (const line of text.split('\n')) {
    const f = line.split(':');
    if (f[0] !== name || f.length < 3 || !/^\d+$/.test(f[2])) continue;
    return { id: Number(f[2]), gid: file === 'passwd' && /^\d+$/.test(f[3] ?? '') ? Number(f[3]) : undefined };
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
  let uid: number;
  let gid: number | undefined;
  if (/^\d+$/.test(u)) uid = Number(u);
  else {
    const entry = lookup(rootfs, 'passwd', u);
    if (!entry) throw new SandboxdError('validation', `image user "${u}" is not in the image's /etc/passwd`, { user });
    uid = entry.id;
    gid = entry.gid;
  }
  if (g !== undefined) {
    if (/^\d+$/.test(g)) gid = Number(g);
    else {
      const entry = lookup(rootfs, 'group', g);
      if (!entry)
        throw new SandboxdError('validation', `image group "${g}" is not in the image's /etc/group`, { user });
      gid = entry.id;
    }
  }
  return `${uid}:${gid ?? (uid === 0 ? 0 : uid)}`;
}
