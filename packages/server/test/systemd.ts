/** systemd's own checks of the unit in deploy/systemd/, for the installer's tests. */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { INSTALL_PATHS } from '../src/commands/install.js';

/** Why the unit cannot be verified here (no systemd-analyze), or null when it can. */
export function systemdAnalyzeMissing(): string | null {
  const p = spawnSync('systemd-analyze', ['--version'], { encoding: 'utf8' });
  return p.status === 0 ? null : 'systemd-analyze is not installed (apt-get install systemd; scripts/setup.sh --test)';
}

/**
 * `systemd-analyze verify` of a unit whose ExecStart names `launcher` (the installed path
 * rewritten into the temp tree, so that the command exists), written as `dir`/sandboxd.service:
 * its status and output, empty when clean.
 */
export function verifyUnit(unitText: string, launcher: string, dir: string): { status: number | null; output: string } {
  const unit = join(dir, 'sandboxd.service');
  writeFileSync(unit, unitText.replaceAll(`ExecStart=${INSTALL_PATHS.launcher}`, `ExecStart=${launcher}`));
  // Findings go to stderr (not to the journal, where a non-tty stderr may send them).
  const p = spawnSync('systemd-analyze', ['verify', unit], {
    encoding: 'utf8',
    env: { ...process.env, SYSTEMD_LOG_TARGET: 'console', SYSTEMD_LOG_LEVEL: 'info' },
  });
  return { status: p.status, output: `${p.stdout ?? ''}${p.stderr ?? ''}${p.error?.message ?? ''}`.trim() };
}
