import type { FileService } from '../../services/files.js';
import type { EnvdCall } from './context.js';
import { needsHome, resolveEnvdPath } from './entries.js';

/** How long a user's home is remembered (a home rarely moves; a new user is looked up anew). */
const HOME_TTL_MS = 30_000;
/** Homes remembered at most (oldest forgotten first). */
const MAX_HOMES = 1000;

/**
 * envd's path resolution for E2B's calls: a relative path (or `~`) is the user's home
 * joined with it, the home read from the sandbox's /etc/passwd by the file tool (as the user
 * itself, so an unknown user fails as every file operation would). Homes are cached briefly
 * per sandbox and user; absolute paths need no lookup.
 */
export class EnvdPaths {
  private readonly homes = new Map<string, { home: string; at: number }>();

  constructor(
    private readonly files: Pick<FileService, 'whoami'>,
    private readonly now: () => number = Date.now,
  ) {}

  /** `path` resolved for `user` in the call's sandbox. */
  async resolve(call: EnvdCall, path: string, user: string | undefined): Promise<string> {
    if (!needsHome(path)) return path;
    return resolveEnvdPath(path, await this.home(call, user));
  }

  /** The home directory of `user` (undefined: the sandbox's default user). */
  async home(call: EnvdCall, user: string | undefined): Promise<string> {
    const key = `${call.sandbox.id}\0${user ?? ''}`;
    const hit = this.homes.get(key);
    if (hit && this.now() - hit.at < HOME_TTL_MS) return hit.home;
    const { home } = await this.files.whoami(call.accountId, call.sandbox.id, user);
    this.homes.delete(key);
    this.homes.set(key, { home, at: this.now() });
    if (this.homes.size > MAX_HOMES) this.homes.delete(this.homes.keys().next().value as string);
    return home;
  }
}
