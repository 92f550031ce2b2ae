/**
 * The Node.js a user of this machine has: the first `node` on PATH once the project's own
 * Node (the one running the tests, fetched by set-up when the machine's is older) is taken
 * off it. The SDK and the CLI must keep working on it (Node 20 and newer).
 */
import { accessSync, constants, realpathSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';

/** The first executable `name` in the `path` list, or null. */
export function which(name: string, path: string): string | null {
  for (const dir of path.split(delimiter).filter(Boolean)) {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      /* not here */
    }
  }
  return null;
}

/**
 * PATH as a user of the machine has it: without the project's own Node, which comes back
 * last only when the machine has no other node.
 */
export function userPath(): string {
  const ours = realpathSync(process.execPath);
  const isOurs = (dir: string) => {
    try {
      return realpathSync(join(dir, 'node')) === ours;
    } catch {
      return false;
    }
  };
  const rest = (process.env.PATH ?? '').split(delimiter).filter((d) => d && !isOurs(d));
  return which('node', rest.join(delimiter)) ? rest.join(delimiter) : [...rest, dirname(ours)].join(delimiter);
}

/** The user's `node` binary (see {@link userPath}). */
export function userNode(): string {
  return which('node', userPath())!;
}
