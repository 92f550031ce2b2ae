import { SandboxdError, type Shell } from '@sandboxd/protocol';
import type { RuntimeDriver } from '../runtime/driver.js';

/** How long one probe command may take. */
const PROBE_TIMEOUT_MS = 10_000;

/** The shell and folder a new terminal starts with. */
export interface TerminalLaunch {
  shell: Shell;
  /** Absolute path of the shell in the sandbox (as `command -v` printed it), or its name. */
  shellPath: string;
  cwd: string;
}

/**
 * Decides what a new terminal runs, by asking the sandbox with quick `driver.exec`s (run
 * in parallel) instead of starting a shell that would die at once:
 * shell = the requested one, else `bash` when installed, else `sh`;
 * cwd = the requested folder, else the image's working dir (when not `/`), else `/root`
 * when present, else `/`.
 * Throws `validation` (400) naming `shell` or `cwd` when the requested one is missing,
 * `conflict` when the sandbox stopped meanwhile.
 */
export async function resolveLaunch(
  driver: RuntimeDriver,
  sandboxId: string,
  req: { shell?: Shell; cwd?: string; imageWorkingDir?: string },
): Promise<TerminalLaunch> {
  if (req.cwd !== undefined && !req.cwd.startsWith('/'))
    throw invalid('cwd', `cwd must be an absolute path, got "${req.cwd}"`);
  const shells: Shell[] = req.shell ? [req.shell] : ['bash', 'sh'];
  const wd = req.imageWorkingDir;
  const dirs = req.cwd !== undefined ? [req.cwd] : [...(wd && wd !== '/' ? [wd] : []), '/root'];
  const [paths, found] = await Promise.all([
    Promise.all(shells.map((s) => run(driver, sandboxId, `command -v ${s}`))),
    Promise.all(dirs.map((d) => run(driver, sandboxId, `test -d ${quote(d)}`))),
  ]);
  const si = paths.findIndex((p) => p.ok && p.out !== '');
  if (si < 0) {
    throw req.shell
      ? invalid('shell', `shell "${req.shell}" is not installed in this sandbox's image`)
      : invalid('shell', "neither bash nor sh is installed in this sandbox's image");
  }
  const di = found.findIndex((f) => f.ok);
  if (req.cwd !== undefined && di < 0) throw invalid('cwd', `cwd "${req.cwd}" does not exist in the sandbox`);
  const line = paths[si].out.split('\n')[0];
  return { shell: shells[si], shellPath: line.startsWith('/') ? line : shells[si], cwd: di >= 0 ? dirs[di] : '/' };
}

async function run(driver: RuntimeDriver, id: string, command: string): Promise<{ ok: boolean; out: string }> {
  try {
    const r = await driver.exec(id, command, { timeoutMs: PROBE_TIMEOUT_MS, maxOutputBytes: 4096 });
    return { ok: r.exitCode === 0, out: r.stdout.trim() };
  } catch (e) {
    if (e instanceof SandboxdError && (e.kind === 'not_found' || e.kind === 'conflict')) {
      throw new SandboxdError('conflict', 'Sandbox is not running', { state: 'stopped' });
    }
    throw e;
  }
}

/** Single-quotes `s` for `/bin/sh`. */
function quote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function invalid(field: 'shell' | 'cwd', message: string): SandboxdError {
  return new SandboxdError('validation', message, [{ in: 'body', path: `/${field}`, message }]);
}
