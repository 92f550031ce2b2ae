import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { loadConfig } from '../config.js';
import { systemdAnalyzeMissing, verifyUnit } from '../../test/systemd.js';
import { UsageError } from './command.js';
import {
  type HostProbe,
  hostChecks,
  INSTALL_PATHS,
  install,
  type InstallOptions,
  newApiKey,
  parseInstallArgs,
  UNIT_SOURCE,
} from './install.js';

const tmp = mkdtempSync(join(tmpdir(), 'sandboxd-install-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const freshRoot = () => {
  const d = join(tmp, `root${n++}`);
  mkdirSync(d);
  return d;
};
const opts = (root: string, more: Partial<InstallOptions> = {}): InstallOptions => ({
  ...parseInstallArgs(['--root', root]),
  ...more,
});
/** A host with everything the checks look for, `over` replacing parts. */
const goodHost = (over: Partial<HostProbe> = {}): HostProbe => ({
  uid: () => 0,
  kernel: () => '6.1.0-18-amd64',
  exists: (p) => p !== '/sys/fs/cgroup/memory',
  read: (p) =>
    ({
      '/sys/fs/cgroup/cgroup.controllers': 'cpuset cpu io memory hugetlb pids rdma misc\n',
      '/proc/sys/user/max_user_namespaces': '63000\n',
      '/proc/filesystems': 'nodev\tsysfs\nnodev\toverlay\n\text4\n',
    })[p] ?? null,
  which: (c) => `/usr/bin/${c}`,
  freeBytes: () => 100 * 2 ** 30,
  ...over,
});
const quiet = () => {};

describe('sandboxd install: arguments', () => {
  it('defaults, and each option', () => {
    const d = parseInstallArgs([]);
    assert.deepEqual(
      { root: d.root, dryRun: d.dryRun, force: d.force, start: d.start, listen: d.listen, port: d.port },
      { root: '/', dryRun: false, force: false, start: false, listen: '127.0.0.1', port: 8080 },
    );
    const o = parseInstallArgs([
      '--root',
      '/x/y',
      '--dry-run',
      '--force',
      '--public-host',
      'sbx.example.com',
      '--listen',
      '0.0.0.0',
      '--port',
      '9000',
      '--admin-email',
      'ops@example.com',
    ]);
    assert.equal(o.root, '/x/y');
    assert.equal(o.publicHost, 'sbx.example.com');
    assert.equal(o.port, 9000);
    assert.equal(o.adminEmail, 'ops@example.com');
  });

  it('bad arguments are refused, naming what was wrong', () => {
    const cases: [string[], RegExp][] = [
      [['--bogus'], /unknown argument "--bogus"/],
      [['--root'], /--root needs a value/],
      [['--port', '0'], /--port must be a port number/],
      [['--port', '8080x'], /--port must be a port number/],
      [['--public-host', 'a b'], /--public-host must be a host name/],
      [['--listen', 'localhost'], /--listen must be an IP address/],
      [['--admin-email', 'nobody'], /--admin-email must be an email address/],
      [['--start', '--root', '/tmp/x'], /--start .* not with --root/],
      [['--start', '--dry-run'], /exclude each other/],
    ];
    for (const [args, re] of cases)
      assert.throws(
        () => parseInstallArgs(args),
        (e: Error) => e instanceof UsageError && re.test(e.message),
        args.join(' '),
      );
  });

  it('generated keys are what SANDBOXD_BOOTSTRAP_API_KEY accepts, and differ', () => {
    const keys = new Set(Array.from({ length: 50 }, newApiKey));
    assert.equal(keys.size, 50);
    for (const k of keys) assert.match(k, /^sk_[A-Za-z0-9]{40}$/);
  });
});

describe("the config file's bootstrap admin (what the installer writes)", () => {
  it('is read from the file, each SANDBOXD_BOOTSTRAP_* variable over its field, and checked', () => {
    const dir = freshRoot();
    const file = join(dir, 'config.json');
    const key = newApiKey();
    writeFileSync(file, JSON.stringify({ bootstrap: { apiKey: key, adminEmail: 'a@example.com' } }));
    assert.deepEqual(loadConfig({ SANDBOXD_CONFIG: file }).bootstrap, {
      apiKey: key,
      adminEmail: 'a@example.com',
      adminPassword: undefined,
    });
    const other = newApiKey();
    const env = loadConfig({ SANDBOXD_CONFIG: file, SANDBOXD_BOOTSTRAP_API_KEY: other }).bootstrap;
    assert.equal(env.apiKey, other);
    assert.equal(env.adminEmail, 'a@example.com');
    for (const [bad, re] of [
      [{ bootstrap: 'sk_x' }, /bootstrap must be an object/],
      [{ bootstrap: { apiKey: 5 } }, /bootstrap\.apiKey must be a string/],
      [{ bootstrap: { apikey: key } }, /bootstrap\.apikey is not a setting/],
      [{ bootstrap: { apiKey: 'sk_short' } }, /must look like sk_/],
    ] as const) {
      writeFileSync(file, JSON.stringify(bad));
      assert.throws(() => loadConfig({ SANDBOXD_CONFIG: file }), re);
    }
  });
});

describe('sandboxd install: host checks', () => {
  it('a complete host: every check ok', () => {
    const checks = hostChecks(goodHost(), { dataDir: '/var/lib/sandboxd' });
    assert.deepEqual(
      checks.map((c) => c.name),
      [
        'root',
        'kernel',
        'cgroups',
        'user namespaces',
        'filesystems',
        'loop devices',
        'OCI runtime',
        'nftables',
        'disk',
        'uid ranges',
      ],
    );
    for (const c of checks) assert.equal(c.ok, true, `${c.name}: ${c.detail}`);
  });

  it('each missing piece is reported with what to do', () => {
    const host = goodHost({
      uid: () => 1000,
      kernel: () => '5.10.0-28-amd64',
      exists: (p) => p === '/sys/fs/cgroup/memory' || p === '/sys/fs/cgroup/cpu',
      read: (p) =>
        ({
          '/proc/sys/user/max_user_namespaces': '0\n',
          '/proc/filesystems': 'nodev\tsysfs\n\text4\n',
          '/etc/subuid': 'debian:100000:65536\n',
          '/etc/subgid': 'debian:100000:65536\n',
        })[p] ?? null,
      which: () => null,
      freeBytes: () => 2 ** 30,
    });
    const checks = hostChecks(host, { dataDir: '/var/lib/sandboxd' });
    for (const c of checks) {
      assert.equal(c.ok, false, c.name);
      assert.ok(c.fix && c.fix.length > 10, `${c.name} says what to do`);
    }
    const by = Object.fromEntries(checks.map((c) => [c.name, c]));
    assert.match(by.cgroups.detail, /lacking cpuacct, pids, freezer, devices/);
    assert.match(by.filesystems.detail, /missing overlay/);
    assert.match(by['uid ranges'].detail, /\/etc\/subuid debian:100000:65536/);
    assert.match(by.kernel.fix ?? '', /5\.19/);
    const v2 = hostChecks(
      goodHost({ read: (p) => (p === '/sys/fs/cgroup/cgroup.controllers' ? 'cpu io\n' : goodHost().read(p)) }),
      { dataDir: '/d' },
    );
    assert.match(v2.find((c) => c.name === 'cgroups')?.fix ?? '', /memory, pids/);
    const high = hostChecks(goodHost({ read: (p) => (p === '/etc/subuid' ? 'a:1000:5000\n' : goodHost().read(p)) }), {
      dataDir: '/d',
      uidRangeStart: 100_000,
    });
    assert.equal(high.find((c) => c.name === 'uid ranges')?.ok, true, 'a range below the sandboxes is fine');
  });
});

describe('sandboxd install into a directory tree', () => {
  const mode = (p: string) => statSync(p).mode & 0o777;

  it('writes the data dir, the config with a new admin key, the unit and the launcher; loadConfig takes the config', () => {
    const root = freshRoot();
    const out: string[] = [];
    const r = install(opts(root), (s) => out.push(s), goodHost());
    const at = (p: string) => join(root, p);
    assert.equal(mode(at(INSTALL_PATHS.dataDir)), 0o711);
    assert.equal(mode(at(INSTALL_PATHS.configDir)), 0o700);
    assert.equal(mode(at(INSTALL_PATHS.config)), 0o600);
    assert.equal(mode(at(INSTALL_PATHS.unit)), 0o644);
    assert.equal(mode(at(INSTALL_PATHS.launcher)), 0o755);
    assert.equal(readFileSync(at(INSTALL_PATHS.unit), 'utf8'), readFileSync(UNIT_SOURCE, 'utf8'));
    assert.match(r.apiKey ?? '', /^sk_[A-Za-z0-9]{40}$/);
    const cfg = loadConfig({ SANDBOXD_CONFIG: at(INSTALL_PATHS.config) });
    assert.equal(cfg.bootstrap.apiKey, r.apiKey);
    assert.equal(cfg.dataDir, '/var/lib/sandboxd');
    assert.equal(cfg.runDir, '/run/sandboxd');
    assert.equal(cfg.signupEnabled, false);
    assert.deepEqual(cfg.trustedProxies, []);
    assert.match(out.join(''), /host checks:\n {2}ok {7}root/);
    const launcher = readFileSync(at(INSTALL_PATHS.launcher), 'utf8');
    assert.match(launcher, /^#!\/bin\/sh\n/);
    assert.ok(launcher.includes(`'${process.execPath}'`), launcher);
    assert.match(launcher, /packages\/server\/bin\/sandboxd\.js' "\$@"\n$/);
  });

  it('re-running keeps the config and its keys; --force replaces them', () => {
    const root = freshRoot();
    const first = install(opts(root), quiet, goodHost());
    const cfgPath = join(root, INSTALL_PATHS.config);
    const before = readFileSync(cfgPath, 'utf8');
    const out: string[] = [];
    const again = install(opts(root), (s) => out.push(s), goodHost());
    assert.equal(again.apiKey, undefined, 'no new key');
    assert.equal(again.configKept, true);
    assert.equal(readFileSync(cfgPath, 'utf8'), before);
    assert.match(out.join(''), /keep .*config\.json: it exists/);
    writeFileSync(join(root, INSTALL_PATHS.dataDir, 'sandboxd.db'), '');
    const forced: string[] = [];
    const f = install(opts(root, { force: true }), (s) => forced.push(s), goodHost());
    assert.ok(f.apiKey && f.apiKey !== first.apiKey);
    assert.equal(loadConfig({ SANDBOXD_CONFIG: cfgPath }).bootstrap.apiKey, f.apiKey);
    assert.match(forced.join(''), /holds a database already: a new admin key applies only to an empty one/);
  });

  it('--dry-run says what it would do and changes nothing; a wrong data dir mode is fixed', () => {
    const root = freshRoot();
    const out: string[] = [];
    const r = install(opts(root, { dryRun: true }), (s) => out.push(s), goodHost());
    assert.equal(r.apiKey, undefined);
    assert.match(out.join(''), /would create .*var\/lib\/sandboxd \(mode 711\)/);
    assert.match(out.join(''), /would write .*sandboxd\.service/);
    assert.equal(existsSync(join(root, 'var')), false);
    assert.equal(existsSync(join(root, 'etc')), false);
    mkdirSync(join(root, INSTALL_PATHS.dataDir), { recursive: true, mode: 0o700 });
    const fix: string[] = [];
    install(opts(root), (s) => fix.push(s), goodHost());
    assert.match(fix.join(''), /chmod 711 .*sandboxd \(was 700\)/);
    assert.equal(mode(join(root, INSTALL_PATHS.dataDir)), 0o711);
  });
});

describe('the systemd unit', {
  skip: systemdAnalyzeMissing() ?? false,
}, () => {
  it('systemd-analyze verify: the installed unit, with no warning', () => {
    const root = freshRoot();
    install(opts(root), quiet, goodHost());
    const r = verifyUnit(
      readFileSync(join(root, INSTALL_PATHS.unit), 'utf8'),
      join(root, INSTALL_PATHS.launcher),
      root,
    );
    assert.equal(r.output, '');
    assert.equal(r.status, 0);
  });

  it('verify is not a formality: a unit with a mistake is reported', () => {
    const root = freshRoot();
    const bad = readFileSync(UNIT_SOURCE, 'utf8').replace(/^KillMode=process$/m, 'KillMode=sometimes');
    const r = verifyUnit(bad, '/bin/true', root);
    assert.match(r.output, /KillMode|kill mode/i);
  });

  it('the stop leaves sandboxes alone, and the run dir survives it', () => {
    const unit = readFileSync(UNIT_SOURCE, 'utf8');
    const settings = new Map<string, string>();
    for (const line of unit.split('\n')) {
      const m = /^([A-Za-z]+)=(.*)$/.exec(line);
      if (m) settings.set(m[1], m[2]);
    }
    assert.equal(settings.get('KillMode'), 'process', 'the default (control-group) kills every sandbox on v1 hosts');
    assert.equal(settings.get('RuntimeDirectoryPreserve'), 'yes');
    assert.equal(settings.get('Restart'), 'on-failure');
    assert.equal(settings.get('Environment'), `SANDBOXD_CONFIG=${INSTALL_PATHS.config}`);
    const stopSec = Number(settings.get('TimeoutStopSec')?.replace(/s$/, ''));
    assert.ok(stopSec * 1000 > loadConfig({}).shutdownGraceMs, 'above the default shutdown grace');
    for (const forbidden of [
      'ProtectSystem',
      'PrivateTmp',
      'ProtectHome',
      'PrivateDevices',
      'ReadWritePaths',
      'PrivateMounts',
    ])
      assert.equal(settings.has(forbidden), false, `${forbidden} would give the server a mount namespace of its own`);
  });
});
