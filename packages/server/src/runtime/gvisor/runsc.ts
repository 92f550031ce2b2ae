/**
 * gVisor's runsc as the OCI runtime of the `gvisor` tier: whether this host has it, and the
 * platform it runs on. runsc intercepts a sandbox's system calls with one of its platforms:
 * `kvm` (hardware virtualisation, fastest, needs a working /dev/kvm), `systrap` (newer runsc
 * builds) or `ptrace` (works everywhere, slowest). The platform is chosen once per boot of
 * the host: `kvm` when /dev/kvm opens and a probe sandbox on it answers within 15 s (nested
 * virtualisation may offer /dev/kvm that never runs a guest), else `ptrace`.
 * `SANDBOXD_GVISOR_PLATFORM` overrides the choice.
 */
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Paths where runsc is looked for (Debian's package installs /usr/bin/runsc). */
const RUNSC_PATHS = ['/usr/bin/runsc', '/usr/local/bin/runsc', '/usr/sbin/runsc'];

export type GvisorPlatform = 'kvm' | 'systrap' | 'ptrace';
export const GVISOR_PLATFORMS: readonly GvisorPlatform[] = ['kvm', 'systrap', 'ptrace'];

/**
 * The oldest runsc build the gvisor tier runs on (scripts/install-runsc.sh installs one):
 * Debian bookworm's 2022-12-19 build fails GNU coreutils' statx (`ls` in a Debian image says
 * "Invalid argument"), stops threads under an OCI seccomp profile, and cannot save a sandbox
 * holding a TCP connection.
 */
export const MIN_RUNSC_BUILD = 20240101;

/** The build date of the installed runsc (`runsc version 0.0~20240729.0` -> 20240729); null when missing. */
export function runscBuild(): number | null {
  const m = /0\.0~(\d{8})/.exec(runscVersion() ?? '');
  return m ? Number(m[1]) : null;
}

/** Whether a runsc the gvisor tier can use is installed (see {@link MIN_RUNSC_BUILD}). */
export function runscInstalled(): boolean {
  if (!RUNSC_PATHS.some((p) => existsSync(p))) return false;
  const build = runscBuild();
  return build !== null && build >= MIN_RUNSC_BUILD;
}

/** runsc's version line, e.g. `runsc version 0.0~20221219.0`; null when missing. */
export function runscVersion(): string | null {
  const r = spawnSync('runsc', ['--version'], { encoding: 'utf8', timeout: 10_000 });
  return r.status === 0 ? (r.stdout.split('\n')[0]?.trim() ?? null) : null;
}

/** The platforms this runsc build knows (`systrap` came after the 2022 builds). */
function knownPlatforms(): GvisorPlatform[] {
  const r = spawnSync('runsc', ['flags'], { encoding: 'utf8', timeout: 10_000 });
  const text = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  const line = text.split('\n').findIndex((l) => /-platform\b/.test(l));
  const help =
    line >= 0
      ? text
          .split('\n')
          .slice(line, line + 3)
          .join(' ')
      : '';
  return GVISOR_PLATFORMS.filter((p) => p === 'ptrace' || help.includes(p));
}

function kvmOpens(): boolean {
  try {
    accessSync('/dev/kvm', constants.R_OK | constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** Whether `runsc --platform=<p> do /bin/true` (the host's own root, no network) answers within 15 s. */
function probe(platform: GvisorPlatform): boolean {
  const root = mkdtempSync(join(tmpdir(), 'sandboxd-runsc-probe-'));
  try {
    const r = spawnSync('runsc', ['--root', root, `--platform=${platform}`, '--network=none', 'do', '/bin/true'], {
      stdio: 'ignore',
      timeout: 15_000,
      killSignal: 'SIGTERM', // runsc then stops the sandbox it started
    });
    return r.status === 0;
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

/** Where the choice is kept: /run is a tmpfs, emptied at every boot of the host. */
export const PLATFORM_CACHE = '/run/sandboxd-gvisor-platform';

/**
 * The platform runsc uses here: `forced` when given, else the fastest one that works (see
 * the module's doc), remembered in `file` (on a tmpfs: chosen once per boot) for the runsc
 * version that chose it.
 */
export function gvisorPlatform(forced?: GvisorPlatform, file = PLATFORM_CACHE): GvisorPlatform {
  if (forced) return forced;
  const version = runscVersion() ?? 'unknown';
  try {
    const [v, p] = readFileSync(file, 'utf8').split('\n');
    if (v === version && GVISOR_PLATFORMS.includes(p as GvisorPlatform)) return p as GvisorPlatform;
  } catch {
    /* not chosen yet this boot */
  }
  const known = knownPlatforms();
  let chosen: GvisorPlatform = 'ptrace';
  if (known.includes('kvm') && kvmOpens() && probe('kvm')) chosen = 'kvm';
  else if (known.includes('systrap') && probe('systrap')) chosen = 'systrap';
  try {
    writeFileSync(file, `${version}\n${chosen}\n`);
  } catch {
    /* chosen again next time */
  }
  return chosen;
}

/**
 * runsc's global flags for sandboxd's sandboxes:
 * - the platform;
 * - the root file system in `shared` access mode and without runsc's own overlay
 *   (`--overlay2=none`; its default keeps writes in a file of its own), so that what the
 *   sandbox writes reaches the root layer's folder at once: a stop, a snapshot and the
 *   host's reads see it;
 * - the OCI seccomp profile enforced inside the sandbox too (the same denials as the
 *   container tier, see bundle/writer.ts's gvisorSeccomp);
 * - open TCP connections dropped when a sandbox is saved (pause to disk, fork) instead of
 *   failing the save.
 */
export function runscFlags(platform: GvisorPlatform): string[] {
  return [`--platform=${platform}`, '--file-access=shared', '--overlay2=none', '--oci-seccomp', '--net-disconnect-ok'];
}
