/**
 * A Python user of this machine, for the tests that install the server's wheel with pip and
 * run Python as the docs say: Debian's python3 (set-up --test installs it with venv, pip,
 * httpx and websockets), first on PATH even where another python3 (pyenv's shims on a
 * developer's machine) comes before it, and pip that reads no configuration of the machine and
 * reaches no index (the wheel comes from the server, its dependencies from Debian).
 */
import { existsSync, readdirSync, realpathSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { userPath } from './user-node.js';

/** Debian's Python. */
export const PYTHON = '/usr/bin/python3';

/** Why Debian's python3 with venv (and the pip it puts into a venv) is not here, or null. */
export function pythonUnavailable(): string | null {
  if (!existsSync(PYTHON)) return `${PYTHON} is missing (scripts/setup.sh --test installs it)`;
  // python3-venv brings the pip wheel a new venv gets (python3-pip-whl).
  const wheels = '/usr/share/python-wheels';
  if (!existsSync(wheels) || !readdirSync(wheels).some((n) => n.startsWith('pip-')))
    return 'venv is missing (apt install python3-venv python3-pip)';
  return null;
}

/**
 * PATH as a Debian user has it: {@link userPath} (the machine's node), without the folders
 * whose `python3` is not Debian's, so `python3` is {@link PYTHON}.
 */
export function debianPath(): string {
  const debian = realpathSync(PYTHON);
  return userPath()
    .split(delimiter)
    .filter((dir) => {
      const py = join(dir, 'python3');
      if (!existsSync(py)) return true;
      try {
        return realpathSync(py) === debian;
      } catch {
        return false;
      }
    })
    .join(delimiter);
}

/**
 * The environment of a user's shell: none of this test run's variables (npm's, SANDBOX*,
 * NODE_OPTIONS, pip's and Python's), PATH with Debian's python3, HOME in `home` (pip's cache and
 * `~/` go there), pip without configuration or version check, its index a closed port.
 */
export function pythonUserEnv(home: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(npm_|SANDBOX|NODE_OPTIONS$|NODE_PATH$|PIP_|PYTHON|VIRTUAL_ENV$)/i.test(k)) continue;
    env[k] = v;
  }
  return {
    ...env,
    PATH: debianPath(),
    HOME: home,
    PIP_CONFIG_FILE: '/dev/null',
    PIP_INDEX_URL: 'http://127.0.0.1:9/simple',
    PIP_DISABLE_PIP_VERSION_CHECK: '1',
    PIP_NO_INPUT: '1',
  };
}
