/**
 * `sandboxd install`: sets a host up to run sandboxd as a systemd service (docs/production.md).
 * Writes the data dir (/var/lib/sandboxd), the config (/etc/sandboxd/config.json, 0600, with a
 * generated admin API key), the unit (/etc/systemd/system/sandboxd.service, from
 * deploy/systemd/) and a launcher (/usr/local/bin/sandboxd, running this checkout), and checks
 * what the host lacks. `--root DIR` writes into a directory tree instead of `/`; `--dry-run`
 * only says what it would do; an existing config is kept (its keys never overwritten) unless
 * `--force`; nothing is started unless `--start`.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  constants,
  existsSync,
  fchmodSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statfsSync,
  writeSync,
} from 'node:fs';
import { release } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Command, UsageError } from './command.js';

/** Where things go on the host (under `--root`). */
export const INSTALL_PATHS = {
  dataDir: '/var/lib/sandboxd',
  configDir: '/etc/sandboxd',
  config: '/etc/sandboxd/config.json',
  unit: '/etc/systemd/system/sandboxd.service',
  launcher: '/usr/local/bin/sandboxd',
  runDir: '/run/sandboxd',
} as const;

/** The unit this command installs, as shipped in the repository. */
export const UNIT_SOURCE = fileURLToPath(new URL('../../../../deploy/systemd/sandboxd.service', import.meta.url));
const BIN = fileURLToPath(new URL('../../bin/sandboxd.js', import.meta.url));

/** Below this much free space on the data dir's file system the disk check reports missing. */
export const MIN_FREE_DISK_BYTES = 10 * 2 ** 30;
/** Kernel needed: idmapped mounts (mount_setattr) of ext4 layers under overlayfs. */
export const MIN_KERNEL: [number, number] = [5, 19];

export interface InstallOptions {
  root: string;
  dryRun: boolean;
  force: boolean;
  start: boolean;
  publicHost?: string;
  listen: string;
  port: number;
  adminEmail: string;
}

export function parseInstallArgs(args: string[]): InstallOptions {
  const o: InstallOptions = {
    root: '/',
    dryRun: false,
    force: false,
    start: false,
    listen: '127.0.0.1',
    port: 8080,
    adminEmail: 'admin@localhost',
  };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const value = () => {
      const v = args[++i];
      if (v === undefined || v === '') throw new UsageError(`${a} needs a value`);
      return v;
    };
    if (a === '--root') o.root = resolve(value());
    else if (a === '--dry-run') o.dryRun = true;
    else if (a === '--force') o.force = true;
    else if (a === '--start') o.start = true;
    else if (a === '--public-host') {
      o.publicHost = value();
      if (!/^[A-Za-z0-9.-]+(:\d{1,5})?$/.test(o.publicHost))
        throw new UsageError(`--public-host must be a host name with an optional :port, got "${o.publicHost}"`);
    } else if (a === '--listen') {
      o.listen = value();
      if (!/^[0-9A-Fa-f.:]+$/.test(o.listen)) throw new UsageError(`--listen must be an IP address, got "${o.listen}"`);
    } else if (a === '--port') {
      const v = value();
      o.port = Number(v);
      if (!/^\d{1,5}$/.test(v) || o.port < 1 || o.port > 65535)
        throw new UsageError(`--port must be a port number (1-65535), got "${v}"`);
    } else if (a === '--admin-email') {
      o.adminEmail = value();
      if (!/^[^\s@]+@[^\s@]+$/.test(o.adminEmail))
        throw new UsageError(`--admin-email must be an email address, got "${o.adminEmail}"`);
    } else throw new UsageError(`unknown argument "${a}"`);
  }
  if (o.start && o.root !== '/') throw new UsageError("--start starts the host's systemd unit: not with --root");
  if (o.start && o.dryRun) throw new UsageError('--start and --dry-run exclude each other');
  return o;
}

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** A new API key, `sk_` and 40 letters and digits (what SANDBOXD_BOOTSTRAP_API_KEY accepts). */
export function newApiKey(): string {
  let out = 'sk_';
  // 248 = 4 * 62: bytes at or above it are skipped, so every character is equally likely.
  while (out.length < 43) for (const b of randomBytes(64)) if (b < 248 && out.length < 43) out += ALNUM[b % 62];
  return out;
}

/** The config file a fresh install writes (keys of config.ts's Config; see docs/production.md). */
export function installConfig(o: InstallOptions, apiKey: string): Record<string, unknown> {
  return {
    dataDir: INSTALL_PATHS.dataDir,
    runDir: INSTALL_PATHS.runDir,
    host: o.listen,
    port: o.port,
    publicHost: o.publicHost ?? `sandbox.localhost:${o.port}`,
    signupEnabled: false,
    trustedProxies: [],
    bootstrap: { apiKey, adminEmail: o.adminEmail },
  };
}

/** The launcher: this checkout's `sandboxd` under the Node.js that runs this command. */
export function launcherScript(node = process.execPath, bin = BIN): string {
  return [
    '#!/bin/sh',
    '# Written by `sandboxd install`: runs the sandboxd of this checkout. Re-run the installer',
    '# after moving the checkout or changing Node.js.',
    `exec '${node.replace(/'/g, "'\\''")}' '${bin.replace(/'/g, "'\\''")}' "$@"`,
    '',
  ].join('\n');
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
  /** What to do when not ok. */
  fix?: string;
}

/** What the checks read; the real host by default (tests give a fake one). */
export interface HostProbe {
  uid(): number;
  kernel(): string;
  exists(path: string): boolean;
  read(path: string): string | null;
  which(cmd: string): string | null;
  freeBytes(path: string): number | null;
}

export function realHost(): HostProbe {
  return {
    uid: () => process.getuid?.() ?? -1,
    kernel: () => release(),
    exists: (p) => existsSync(p),
    read: (p) => {
      try {
        return readFileSync(p, 'utf8');
      } catch {
        return null;
      }
    },
    which: (cmd) => {
      const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/local/sbin', '/usr/sbin', '/sbin', '/usr/bin'];
      for (const d of dirs) if (d && existsSync(join(d, cmd))) return join(d, cmd);
      return null;
    },
    freeBytes: (p) => {
      let d = resolve(p);
      while (!existsSync(d) && d !== dirname(d)) d = dirname(d);
      try {
        const s = statfsSync(d);
        return s.bavail * s.bsize;
      } catch {
        return null;
      }
    },
  };
}

/** The host checks, in order; each says what was found and what to do when it is missing. */
export function hostChecks(h: HostProbe, o: { dataDir: string; uidRangeStart?: number }): Check[] {
  const out: Check[] = [];
  const add = (name: string, ok: boolean, detail: string, fix: string) => out.push({ name, ok, detail, fix });
  const uid = h.uid();
  add(
    'root',
    uid === 0,
    `uid ${uid}`,
    'run as root (sudo): the runtime makes namespaces, cgroups, mounts and nftables rules',
  );

  const [maj, min] = h
    .kernel()
    .split(/[.-]/)
    .map((x) => Number.parseInt(x, 10));
  const kernelOk = maj > MIN_KERNEL[0] || (maj === MIN_KERNEL[0] && min >= MIN_KERNEL[1]);
  add(
    'kernel',
    kernelOk,
    `Linux ${h.kernel()}`,
    `a kernel ${MIN_KERNEL.join('.')} or newer: sandboxes' roots are idmapped ext4 layers under overlayfs`,
  );

  const v2 = h.exists('/sys/fs/cgroup/cgroup.controllers') && !h.exists('/sys/fs/cgroup/memory');
  if (v2) {
    const have = (h.read('/sys/fs/cgroup/cgroup.controllers') ?? '').trim().split(/\s+/);
    const lack = ['memory', 'cpu', 'pids'].filter((c) => !have.includes(c));
    add(
      'cgroups',
      lack.length === 0,
      `cgroup v2, controllers: ${have.join(' ') || 'none'}`,
      `enable the cgroup v2 controllers ${lack.join(', ')} (kernel command line, e.g. cgroup_enable=memory)`,
    );
  } else {
    const lack = ['memory', 'cpu', 'cpuacct', 'pids', 'freezer', 'devices'].filter(
      (c) => !h.exists(`/sys/fs/cgroup/${c}`),
    );
    add(
      'cgroups',
      lack.length === 0,
      lack.length === 0
        ? 'cgroup v1 (memory, cpu, cpuacct, pids, freezer, devices)'
        : `cgroup v1, lacking ${lack.join(', ')}`,
      `mount the cgroup v1 hierarchies ${lack.join(', ')} under /sys/fs/cgroup, or boot with cgroup v2`,
    );
  }

  const userns = Number((h.read('/proc/sys/user/max_user_namespaces') ?? '0').trim());
  add(
    'user namespaces',
    userns > 0,
    `user.max_user_namespaces = ${userns}`,
    'sysctl -w user.max_user_namespaces=65536 (and in /etc/sysctl.d/): each sandbox has its own user namespace',
  );

  const fs = h.read('/proc/filesystems') ?? '';
  const lackFs = ['overlay', 'ext4'].filter((f) => !new RegExp(`\\s${f}$`, 'm').test(fs));
  add(
    'filesystems',
    lackFs.length === 0,
    lackFs.length === 0 ? 'overlay, ext4' : `missing ${lackFs.join(', ')}`,
    `modprobe ${lackFs.join(' ')} (and list it in /etc/modules-load.d/)`,
  );

  add(
    'loop devices',
    h.exists('/dev/loop-control'),
    h.exists('/dev/loop-control') ? '/dev/loop-control' : 'no /dev/loop-control',
    'modprobe loop: volumes and sandbox disks are loop-mounted ext4 images',
  );

  const oci = h.which('crun') ?? h.which('runc');
  add('OCI runtime', oci !== null, oci ?? 'neither crun nor runc', 'apt-get install crun (or run scripts/setup.sh)');
  const nft = h.which('nft');
  add('nftables', nft !== null, nft ?? 'no nft', 'apt-get install nftables (or run scripts/setup.sh)');

  const free = h.freeBytes(o.dataDir);
  const gib = (n: number) => `${(n / 2 ** 30).toFixed(1)} GiB`;
  add(
    'disk',
    free !== null && free >= MIN_FREE_DISK_BYTES,
    free === null ? `cannot read the free space of ${o.dataDir}` : `${gib(free)} free for ${o.dataDir}`,
    `at least ${gib(MIN_FREE_DISK_BYTES)} free on ${o.dataDir}'s file system (images, sandbox disks, volumes): see docs/production.md, Sizing`,
  );

  const start = o.uidRangeStart ?? 100_000;
  const clashes: string[] = [];
  for (const file of ['/etc/subuid', '/etc/subgid'])
    for (const line of (h.read(file) ?? '').split('\n')) {
      const [name, first, count] = line.trim().split(':');
      const a = Number(first);
      const n = Number(count);
      if (!name || !Number.isSafeInteger(a) || !Number.isSafeInteger(n)) continue;
      if (a + n > start) clashes.push(`${file} ${name}:${a}:${n}`);
    }
  add(
    'uid ranges',
    clashes.length === 0,
    clashes.length === 0
      ? `sandboxes use uids from ${start} up (65536 each); no /etc/subuid or /etc/subgid range there`
      : `sandbox uids start at ${start}, overlapping ${clashes.join(', ')}`,
    'give sandboxd ids no one else maps: set uidRangeStart (SANDBOXD_UID_RANGE_START) above those ranges, or move them below it',
  );
  return out;
}

/** The checkout the launcher runs (its root) and what of it the server loads. */
const CHECKOUT = fileURLToPath(new URL('../../../../', import.meta.url));
export const CODE_PATHS = [
  join(CHECKOUT, 'packages', 'server'),
  join(CHECKOUT, 'node_modules'),
  join(CHECKOUT, 'scripts'),
  process.execPath,
];

/**
 * Whether only root can change the code the service runs as root: each of `paths` (the
 * server's package, node_modules, scripts, the Node.js binary), after links, and every dir
 * above it must be owned by root and not writable by group or others (a dir with the sticky
 * bit excepted). A checkout cloned into a user's home fails this: that user could edit what
 * root then runs, and so become root.
 */
export function codeOwnerCheck(paths: readonly string[] = CODE_PATHS): Check {
  const bad: string[] = [];
  for (const p of paths) {
    let d: string;
    try {
      d = realpathSync(p);
    } catch {
      continue; // not there (e.g. no node_modules of its own): nothing to load from it
    }
    for (let i = 0; i < 64; i++) {
      const st = lstatSync(d);
      const othersWrite = (st.mode & 0o022) !== 0 && !(st.isDirectory() && st.mode & 0o1000);
      if (st.uid !== 0 || othersWrite) {
        bad.push(`${d} (uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)})`);
        break;
      }
      if (d === dirname(d)) break;
      d = dirname(d);
    }
  }
  return {
    name: 'code owner',
    ok: bad.length === 0,
    detail: bad.length ? `the service would run code others can change: ${bad.join(', ')}` : 'root only',
    fix: 'put the checkout (and Node.js) where only root can write, e.g. sudo git clone ... /opt/sandboxd (or chown -R root: and chmod -R go-w), then run the installer from there',
  };
}

/** One step of the install, printed; `apply` does it (skipped by --dry-run). */
interface Step {
  say: string;
  apply(): void;
}

/**
 * Writes `text` to `path` with `mode`, through a temporary file renamed over it (a link at
 * `path` is replaced, never written through). The temporary file is made with O_EXCL and
 * O_NOFOLLOW (a link planted at its name is removed first) and its mode set on the descriptor.
 */
export function writeFileAtomic(path: string, text: string, mode: number): void {
  const tmp = `${path}.tmp-${process.pid}`;
  rmSync(tmp, { force: true }); // unlinks a planted link itself, not what it names
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    fchmodSync(fd, mode);
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

/** Throws when `path` is a symbolic link (the installer writes only through real paths). */
function refuseLink(path: string): void {
  let st: ReturnType<typeof lstatSync> | undefined;
  try {
    st = lstatSync(path);
  } catch {
    return;
  }
  if (st.isSymbolicLink())
    throw new Error(`${path} is a symbolic link: remove it (the installer does not write through links)`);
}

/**
 * A directory the installer makes or fixes. An existing one must be a real directory (not a
 * link) owned by this user: a directory another user owns could be swapped under the secrets.
 */
function ensureDir(path: string, mode: number): Step[] {
  refuseLink(path);
  if (!existsSync(path))
    return [{ say: `create ${path} (mode ${mode.toString(8)})`, apply: () => mkdirTree(path, mode) }];
  const st = lstatSync(path);
  if (!st.isDirectory()) throw new Error(`${path} exists and is not a directory`);
  const uid = process.getuid?.();
  if (uid !== undefined && st.uid !== uid)
    throw new Error(
      `${path} is owned by uid ${st.uid}, not ${uid}: chown it (or remove it) and run the installer again`,
    );
  const have = st.mode & 0o777;
  if (have === mode) return [];
  return [{ say: `chmod ${mode.toString(8)} ${path} (was ${have.toString(8)})`, apply: () => chmodSync(path, mode) }];
}

function mkdirTree(path: string, mode: number): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o755 });
  mkdirSync(path, { mode });
  chmodSync(path, mode);
}

export interface InstallResult {
  /** The admin key, when this run generated one. */
  apiKey?: string;
  checks: Check[];
  configKept: boolean;
}

/** Does (or, with dryRun, describes) the install; writes its report to `out`. */
export function install(o: InstallOptions, out: (s: string) => void, probe: HostProbe = realHost()): InstallResult {
  const at = (p: string) => (o.root === '/' ? p : join(o.root, p));
  const steps: Step[] = [];
  const configPath = at(INSTALL_PATHS.config);
  // A link there would be kept as "the config" (or, with --force, replaced): refused instead.
  refuseLink(configPath);
  const configKept = existsSync(configPath) && !o.force;
  let apiKey: string | undefined;

  steps.push(...ensureDir(at(INSTALL_PATHS.dataDir), 0o711));
  steps.push(...ensureDir(at(INSTALL_PATHS.configDir), 0o700));
  if (configKept) out(`keep ${configPath}: it exists (its keys are not changed; --force writes a new one)\n`);
  else {
    apiKey = newApiKey();
    const text = `${JSON.stringify(installConfig(o, apiKey), null, 2)}\n`;
    steps.push({
      say: `${existsSync(configPath) ? 'replace' : 'write'} ${configPath} (mode 600, a new admin API key)`,
      apply: () => writeFileAtomic(configPath, text, 0o600),
    });
    if (existsSync(at(join(INSTALL_PATHS.dataDir, 'sandboxd.db'))))
      out(
        `note: ${at(INSTALL_PATHS.dataDir)} holds a database already: a new admin key applies only to an empty one (the existing accounts and keys stay)\n`,
      );
  }
  const unit = readFileSync(UNIT_SOURCE, 'utf8');
  steps.push({
    say: `write ${at(INSTALL_PATHS.unit)} (from deploy/systemd/sandboxd.service)`,
    apply: () => {
      mkdirSync(dirname(at(INSTALL_PATHS.unit)), { recursive: true, mode: 0o755 });
      writeFileAtomic(at(INSTALL_PATHS.unit), unit, 0o644);
    },
  });
  steps.push({
    say: `write ${at(INSTALL_PATHS.launcher)} (runs ${BIN})`,
    apply: () => {
      mkdirSync(dirname(at(INSTALL_PATHS.launcher)), { recursive: true, mode: 0o755 });
      writeFileAtomic(at(INSTALL_PATHS.launcher), launcherScript(), 0o755);
    },
  });

  const verb = o.dryRun ? 'would ' : '';
  for (const s of steps) {
    out(`${verb}${s.say}\n`);
    if (!o.dryRun) s.apply();
  }

  const checks = [...hostChecks(probe, { dataDir: at(INSTALL_PATHS.dataDir) }), codeOwnerCheck()];
  out('\nhost checks:\n');
  for (const c of checks)
    out(
      `  ${c.ok ? 'ok     ' : 'missing'}  ${c.name.padEnd(16)} ${c.detail}${c.ok ? '' : `\n           -> ${c.fix}`}\n`,
    );
  const missing = checks.filter((c) => !c.ok).length;
  out(missing ? `${missing} missing: sandboxes will not run on this host until fixed.\n` : 'all present.\n');
  return { apiKey: o.dryRun ? undefined : apiKey, checks, configKept };
}

function nextSteps(o: InstallOptions, apiKey: string | undefined, started: boolean): string {
  const url = `http://${o.listen.includes(':') ? `[${o.listen}]` : o.listen}:${o.port}`;
  const lines = ['', 'next:'];
  if (apiKey)
    lines.push(
      `  admin API key (shown once; also in ${INSTALL_PATHS.config}, bootstrap.apiKey):`,
      `    export SANDBOX_API_KEY=${apiKey}`,
    );
  lines.push(
    '  default images, once (~10 min): bash scripts/setup.sh --image-dir /var/lib/sandboxd/images',
    started
      ? '  started: systemctl status sandboxd'
      : '  start:   systemctl daemon-reload && systemctl enable --now sandboxd   (or: sandboxd install --start)',
    '  log:     journalctl -u sandboxd -f   (the first start prints a one-time console login link)',
    `  check:   curl -s ${url}/healthz`,
    `  console: ${url}/   (put TLS in front first: docs/production.md)`,
    `  first sandbox: curl -s -X POST ${url}/api/v1/sandboxes -H "Authorization: Bearer $SANDBOX_API_KEY" \\`,
    `                   -H 'content-type: application/json' -d '{"image":"local/debian:bookworm"}'`,
    '',
  );
  return lines.join('\n');
}

export const installCommand: Command = {
  summary: 'set this host up for production: data dir, config with an admin key, systemd unit, checks',
  usage: [
    'usage: sandboxd install [--root DIR] [--dry-run] [--force] [--start]',
    '                        [--public-host HOST[:PORT]] [--listen ADDR] [--port N] [--admin-email EMAIL]',
    '',
    `  writes ${INSTALL_PATHS.dataDir} (0711), ${INSTALL_PATHS.config} (0600, a generated admin API key),`,
    `  ${INSTALL_PATHS.unit} and ${INSTALL_PATHS.launcher}, then checks the host.`,
    '  --root DIR        install into the tree at DIR instead of / (packaging, images, tests)',
    '  --dry-run         print what would be done; change nothing',
    '  --force           replace an existing config (new keys); without it the config is kept',
    '  --start           then systemctl daemon-reload and enable --now sandboxd (refused when a check is missing)',
    '  --public-host     the host name of port URLs (publicHost; default sandbox.localhost:PORT)',
    '  --listen, --port  the address and port to serve on (default 127.0.0.1:8080: behind a proxy)',
    '  --admin-email     the admin account (default admin@localhost)',
    '',
    'See docs/production.md.',
  ].join('\n'),
  async run(args) {
    if (args.includes('--help') || args.includes('-h')) {
      process.stdout.write(`${installCommand.usage}\n`);
      return 0;
    }
    const o = parseInstallArgs(args);
    const out = (s: string) => process.stdout.write(s);
    let r: InstallResult;
    try {
      r = install(o, out);
    } catch (e) {
      process.stderr.write(`sandboxd install: ${(e as Error).message}\n`);
      return 1;
    }
    let started = false;
    if (o.start) {
      const missing = r.checks.filter((c) => !c.ok).map((c) => c.name);
      if (missing.length) {
        process.stderr.write(`sandboxd install: not starting, the host lacks: ${missing.join(', ')}\n`);
        out(nextSteps(o, r.apiKey, false));
        return 1;
      }
      for (const argv of [['daemon-reload'], ['enable', '--now', 'sandboxd']]) {
        const p = spawnSync('systemctl', argv, { stdio: 'inherit' });
        if (p.status !== 0) {
          process.stderr.write(
            `sandboxd install: systemctl ${argv.join(' ')} failed (${p.error?.message ?? `exit ${p.status}`})\n`,
          );
          out(nextSteps(o, r.apiKey, false));
          return 1;
        }
      }
      started = true;
    }
    if (!o.dryRun) out(nextSteps(o, r.apiKey, started));
    return 0;
  },
};
