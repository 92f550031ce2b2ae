import { posix } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import type { RuntimeDriver } from '../runtime/driver.js';
import { findUser, type PasswdEntry, readSandboxPasswd } from '../runtime/passwd.js';

/** How a process starts "as a login" of a user: who, where, and the variables a login sets. */
export interface Login {
  /** For the driver: numeric `uid:gid`, or undefined for the image's user. */
  user: string | undefined;
  /** `HOME`, and `USER` / `LOGNAME` when the user has a name. */
  env: Record<string, string>;
  /** Absolute working directory. */
  cwd: string;
}

/**
 * Resolves a login of `user` (`root`, a name, a numeric `uid[:gid]`; undefined: the image's
 * user) in a running sandbox, from the sandbox's own /etc/passwd: HOME, USER and LOGNAME
 * as a login sets them, and the working directory: `cwd` when absolute, `~` and `~/x`
 * under the home, any other relative path under the home, none: the home (`/` for a user
 * without one). Throws `validation` for an unknown user name or a `~name` path.
 */
export async function resolveLogin(
  driver: Pick<RuntimeDriver, 'files' | 'inspect'>,
  sandboxId: string,
  o: { user?: string; cwd?: string },
): Promise<Login> {
  const [entries, runtime] = await Promise.all([
    readSandboxPasswd(driver.files, sandboxId),
    o.user === undefined ? driver.inspect(sandboxId) : Promise.resolve(null),
  ]);
  return loginOf(entries, o.user, runtime?.user ?? '0:0', o.cwd);
}

/** {@link resolveLogin} over a parsed /etc/passwd (`imageUser`: numeric `uid:gid`). */
export function loginOf(entries: PasswdEntry[], user: string | undefined, imageUser: string, cwd?: string): Login {
  const ref = user ?? imageUser;
  let e = findUser(entries, ref);
  if (!e && ref === 'root') e = { name: 'root', uid: 0, gid: 0, home: '/root', shell: '/bin/sh' };
  if (!e && !/^\d+(:\d+)?$/.test(ref))
    throw new SandboxdError('validation', `Unknown user in the sandbox: ${ref}`, [
      { in: 'header', path: 'user', message: `no user "${ref}" in the sandbox's /etc/passwd` },
    ]);
  const home = e?.home.startsWith('/') ? clean(e.home) : '/';
  const env: Record<string, string> = { HOME: home };
  if (e) Object.assign(env, { USER: e.name, LOGNAME: e.name });
  return {
    user: user === undefined ? undefined : e ? `${e.uid}:${e.gid}` : ref,
    env,
    cwd: loginCwd(cwd, home),
  };
}

/** The working directory `cwd` names for a user whose home is `home`. */
export function loginCwd(cwd: string | undefined, home: string): string {
  if (cwd === undefined || cwd === '') return home;
  if (cwd.includes('\0')) throw badCwd(cwd, 'contains a NUL byte');
  if (cwd.startsWith('/')) return clean(cwd);
  const p = underHome(cwd, home);
  if (p === null) throw badCwd(cwd, "cannot expand another user's home (~name)");
  return p;
}

/**
 * A relative path (or `~`, `~/x`) as a login of a user whose home is `home` reads it: under
 * the home, cleaned (`..` resolved, no trailing slash); the empty path is the home. Null for
 * `~name` (another user's home, which neither a login here nor envd expands).
 */
export function underHome(path: string, home: string): string | null {
  if (path.startsWith('~')) {
    if (path.length > 1 && path[1] !== '/') return null;
    return clean(posix.join(home, path.slice(1)));
  }
  return clean(posix.join(home, path));
}

/** A normalized absolute path without a trailing slash (but `/`). */
function clean(path: string): string {
  const p = posix.normalize(path);
  return p.length > 1 && p.endsWith('/') ? p.slice(0, -1) : p;
}

function badCwd(cwd: string, why: string): SandboxdError {
  return new SandboxdError('validation', `cwd "${cwd}": ${why}`, [{ in: 'body', path: '/cwd', message: why }]);
}
