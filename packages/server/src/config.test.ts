import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { buildLimits, ConfigError, DEFAULT_FAIR_SHARE, DEFAULT_PLANS, loadConfig, planIsolation } from './config.js';
import {
  MAX_EXITED_PROCESSES,
  MAX_FOLLOWERS_PER_PROCESS,
  MAX_FOLLOWERS_PER_SANDBOX,
  MAX_RUNNING_PROCESSES,
} from './runtime/processes/types.js';
import { MAX_CLIENTS_PER_TERMINAL, MAX_TERMINALS_PER_SANDBOX } from './runtime/terminals/types.js';

describe('loadConfig', () => {
  it('has the documented defaults and is frozen', () => {
    const c = loadConfig({});
    assert.equal(c.port, 8080);
    assert.equal(c.host, '127.0.0.1');
    assert.equal(c.publicHost, 'sandbox.localhost:8080');
    assert.equal(c.region, 'local');
    assert.equal(c.terminalIdleMs, 1_800_000);
    assert.equal(c.imageDir, join(c.dataDir, 'images'));
    assert.deepEqual(c.plans.FREE.limits, {
      memoryBytes: 2 * 1024 ** 3,
      cpus: 1,
      pids: 512,
      rootDiskBytes: 10 * 1024 ** 3,
    });
    assert.equal(c.plans.FREE.concurrency, 5);
    assert.equal(c.plans.PRO.maxLifetimeMs, 86_400_000);
    assert.equal(c.testClock, false);
    assert.ok(Object.isFrozen(c) && Object.isFrozen(c.plans.FREE.limits));
  });

  it('secrets key: SANDBOXD_SECRETS_KEY, SANDBOXD_SECRETS_KEY_FILE (default <dataDir>/secrets.key)', () => {
    const d = loadConfig({ SANDBOXD_DATA_DIR: '/srv/sbx' });
    assert.equal(d.secretsKeyFile, '/srv/sbx/secrets.key');
    assert.equal(d.secretsKey, undefined);
    const c = loadConfig({ SANDBOXD_SECRETS_KEY: 'abc', SANDBOXD_SECRETS_KEY_FILE: '/etc/sandboxd/secrets.key' });
    assert.equal(c.secretsKey, 'abc');
    assert.equal(c.secretsKeyFile, '/etc/sandboxd/secrets.key');
  });

  it('pools the default image by default; SANDBOXD_WARM_POOL names images and sizes, or off; bad entries are refused by name', () => {
    assert.deepEqual(loadConfig({}).warmPool, [
      { image: 'local/debian:bookworm', size: 4 },
      { image: 'local/code-interpreter:latest', size: 1 },
    ]);
    assert.deepEqual(loadConfig({ SANDBOXD_WARM_POOL: 'off' }).warmPool, []);
    assert.deepEqual(loadConfig({ SANDBOXD_WARM_POOL: 'a/b:1=2, 127.0.0.1:5000/x:y=0,c=10' }).warmPool, [
      { image: 'a/b:1', size: 2 },
      { image: 'c', size: 10 },
    ]);
    for (const bad of ['a/b:1', 'a=-1', 'a=x', '=3', 'a=1,a=2', 'a=10001'])
      assert.throws(
        () => loadConfig({ SANDBOXD_WARM_POOL: bad }),
        (e: Error) => e instanceof ConfigError && /SANDBOXD_WARM_POOL/.test(e.message),
        bad,
      );
  });

  it('reads SANDBOXD_* and rejects bad values by name', () => {
    const c = loadConfig({
      SANDBOXD_PORT: '9000',
      SANDBOXD_DATA_DIR: '/tmp/x',
      SANDBOXD_TEST_CLOCK: '1',
      SANDBOXD_RUNTIME: 'fake',
    });
    assert.equal(c.port, 9000);
    assert.equal(c.dbPath, '/tmp/x/sandboxd.db');
    assert.equal(c.publicHost, 'sandbox.localhost:9000');
    assert.equal(c.testClock, true);
    assert.throws(() => loadConfig({ SANDBOXD_PORT: 'abc' }), /SANDBOXD_PORT/);
    assert.throws(() => loadConfig({ SANDBOXD_EGRESS: 'all' }), /SANDBOXD_EGRESS/);
    assert.throws(() => loadConfig({ SANDBOXD_BOOTSTRAP_API_KEY: 'short' }), ConfigError);
  });

  it('SANDBOXD_EGRESS (nat is the old name of internet), _VIA, _DNS, the per-sandbox shares; plan egress levels', () => {
    assert.equal(loadConfig({}).egress, 'none');
    assert.equal(loadConfig({ SANDBOXD_EGRESS: 'internet' }).egress, 'internet');
    assert.equal(loadConfig({ SANDBOXD_EGRESS: 'nat' }).egress, 'internet');
    assert.equal(loadConfig({}).egressVia, undefined);
    assert.equal(loadConfig({ SANDBOXD_EGRESS_VIA: 'veth-x:198.51.100.1' }).egressVia, 'veth-x:198.51.100.1');
    assert.equal(loadConfig({ SANDBOXD_EGRESS_VIA: 'eth1' }).egressVia, 'eth1');
    assert.throws(() => loadConfig({ SANDBOXD_EGRESS_VIA: 'eth1:nope' }), /SANDBOXD_EGRESS_VIA/);
    assert.throws(() => loadConfig({ SANDBOXD_EGRESS_VIA: 'a name' }), /SANDBOXD_EGRESS_VIA/);
    assert.deepEqual(loadConfig({ SANDBOXD_EGRESS_DNS: '203.0.113.53, 198.51.100.1:5353' }).egressDns, [
      { host: '203.0.113.53', port: 53 },
      { host: '198.51.100.1', port: 5353 },
    ]);
    assert.throws(() => loadConfig({ SANDBOXD_EGRESS_DNS: 'dns.example' }), /SANDBOXD_EGRESS_DNS/);
    assert.throws(() => loadConfig({ SANDBOXD_EGRESS_DNS: '1.1.1.1:0' }), /SANDBOXD_EGRESS_DNS/);
    assert.equal(loadConfig({}).egressCaFile, undefined);
    assert.throws(
      () => loadConfig({ SANDBOXD_EGRESS_CA_FILE: '/nonexistent/ca.pem' }),
      /SANDBOXD_EGRESS_CA_FILE.*ENOENT/,
    );
    assert.throws(
      () => loadConfig({ SANDBOXD_EGRESS_CA_FILE: '/etc/hostname' }),
      /SANDBOXD_EGRESS_CA_FILE.*no PEM certificate/,
    );
    const d = loadConfig({});
    assert.deepEqual(
      [d.egressDnsPendingPerSandbox, d.egressProxyConnectionsPerSandbox, d.egressProxyIdleTimeoutMs],
      [64, 512, 600_000],
    );
    const share = loadConfig({
      SANDBOXD_EGRESS_DNS_PENDING_PER_SANDBOX: '8',
      SANDBOXD_EGRESS_PROXY_CONNECTIONS_PER_SANDBOX: '16',
      SANDBOXD_EGRESS_PROXY_IDLE_TIMEOUT_MS: '30000',
    });
    assert.deepEqual(
      [share.egressDnsPendingPerSandbox, share.egressProxyConnectionsPerSandbox, share.egressProxyIdleTimeoutMs],
      [8, 16, 30_000],
    );
    assert.throws(() => loadConfig({ SANDBOXD_EGRESS_DNS_PENDING_PER_SANDBOX: '0' }), /PENDING_PER_SANDBOX/);
    assert.throws(() => loadConfig({ SANDBOXD_EGRESS_PROXY_IDLE_TIMEOUT_MS: '10m' }), /IDLE_TIMEOUT_MS/);
    const c = loadConfig({}, { plans: { LOW: { ...DEFAULT_PLANS.FREE, egress: 'allow' } } });
    assert.deepEqual([c.plans.FREE.egress, c.plans.PRO.egress, c.plans.LOW.egress], ['internet', 'internet', 'allow']);
    assert.throws(
      () => loadConfig({}, { plans: { BAD: { ...DEFAULT_PLANS.FREE, egress: 'all' as 'none' } } }),
      /plans\.BAD\.egress/,
    );
  });

  it("isolation: every plan allows both tiers with the instance's default (SANDBOXD_ISOLATION, container); plans narrow them; bad values refused by name", () => {
    const c = loadConfig({});
    assert.equal(c.isolation, 'container');
    assert.deepEqual(c.plans.FREE.isolations, ['container', 'gvisor']);
    assert.deepEqual(planIsolation(c.plans.PRO, c.isolation), {
      allowed: ['container', 'gvisor'],
      default: 'container',
    });
    const g = loadConfig({ SANDBOXD_ISOLATION: 'gvisor' });
    assert.equal(planIsolation(g.plans.FREE, g.isolation).default, 'gvisor');
    assert.throws(
      () => loadConfig({ SANDBOXD_ISOLATION: 'kata' }),
      (e: Error) => {
        assert.ok(e instanceof ConfigError);
        assert.match(e.message, /SANDBOXD_ISOLATION.*container, gvisor/);
        return true;
      },
    );
    const strict = { ...DEFAULT_PLANS.FREE, isolations: ['gvisor' as const], defaultIsolation: 'gvisor' as const };
    const s = loadConfig({}, { plans: { STRICT: strict } });
    assert.deepEqual(planIsolation(s.plans.STRICT, s.isolation), { allowed: ['gvisor'], default: 'gvisor' });
    assert.throws(
      () =>
        loadConfig(
          {},
          { plans: { BAD: { ...DEFAULT_PLANS.FREE, isolations: ['gvisor'], defaultIsolation: 'container' } } },
        ),
      /plans\.BAD\.defaultIsolation must be one of its isolations \(gvisor\)/,
    );
    assert.throws(
      () => loadConfig({}, { plans: { BAD: { ...DEFAULT_PLANS.FREE, isolations: [] } } }),
      /plans\.BAD\.isolations/,
    );
    assert.throws(
      () => loadConfig({}, { plans: { BAD: { ...DEFAULT_PLANS.FREE, isolations: ['vm' as 'gvisor'] } } }),
      /plans\.BAD\.isolations must be a non-empty list of container, gvisor/,
    );
    // The instance default must be one every plan without its own default allows.
    assert.throws(
      () =>
        loadConfig(
          { SANDBOXD_ISOLATION: 'gvisor' },
          { plans: { OLD: { ...DEFAULT_PLANS.FREE, isolations: ['container'] } } },
        ),
      /SANDBOXD_ISOLATION is gvisor, which plan OLD does not allow/,
    );
  });

  it("image builds: SANDBOXD_BUILDS_MAX, SANDBOXD_BUILD_STEP_TIMEOUT_MS and the plans' build limits, with their defaults", () => {
    const c = loadConfig({});
    assert.equal(c.buildsMax, 2);
    assert.equal(c.buildStepTimeoutMs, 1_800_000);
    assert.equal(c.buildUploadTtlMs, 86_400_000);
    assert.equal(loadConfig({ SANDBOXD_BUILD_UPLOAD_TTL_MS: '3600000' }).buildUploadTtlMs, 3_600_000);
    assert.throws(() => loadConfig({ SANDBOXD_BUILD_UPLOAD_TTL_MS: '5' }), /SANDBOXD_BUILD_UPLOAD_TTL_MS/);
    assert.deepEqual(buildLimits(c.plans.FREE), {
      maxBuilds: 2,
      buildContextBytes: 512 * 2 ** 20,
      buildCacheBytes: 10 * 2 ** 30,
    });
    const e = loadConfig({ SANDBOXD_BUILDS_MAX: '5', SANDBOXD_BUILD_STEP_TIMEOUT_MS: '60000' });
    assert.deepEqual([e.buildsMax, e.buildStepTimeoutMs], [5, 60_000]);
    assert.throws(() => loadConfig({ SANDBOXD_BUILDS_MAX: '0' }), /SANDBOXD_BUILDS_MAX/);
    assert.throws(() => loadConfig({ SANDBOXD_BUILD_STEP_TIMEOUT_MS: '10' }), /SANDBOXD_BUILD_STEP_TIMEOUT_MS/);
    const p = loadConfig({}, { plans: { BIG: { ...DEFAULT_PLANS.FREE, maxBuilds: 4, buildCacheBytes: 5 } } });
    assert.deepEqual(buildLimits(p.plans.BIG), { maxBuilds: 4, buildContextBytes: 512 * 2 ** 20, buildCacheBytes: 5 });
    assert.throws(
      () => loadConfig({}, { plans: { BAD: { ...DEFAULT_PLANS.FREE, maxBuilds: 0 } } }),
      /plans\.BAD\.maxBuilds/,
    );
    assert.throws(
      () => loadConfig({}, { plans: { BAD: { ...DEFAULT_PLANS.FREE, buildCacheBytes: -1 } } }),
      /plans\.BAD\.buildCacheBytes/,
    );
  });

  it('SANDBOXD_ROLE, SANDBOXD_RUNNERS, SANDBOXD_RUNNER_TOKEN, SANDBOXD_NODE_NAME, SANDBOXD_RUNNER_DOWN_MS: defaults, forms and refusals by name', () => {
    const c = loadConfig({});
    assert.equal(c.role, 'all');
    assert.equal(c.runners, null);
    assert.equal(c.runnerToken, undefined);
    assert.ok(c.nodeName.length > 0);
    const token = 'a-runner-token-of-some-length';
    const runner = loadConfig({ SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: token, SANDBOXD_NODE_NAME: 'node-1' });
    assert.deepEqual([runner.role, runner.runnerToken, runner.nodeName], ['runner', token, 'node-1']);
    const api = loadConfig({
      SANDBOXD_ROLE: 'api',
      SANDBOXD_RUNNER_TOKEN: token,
      SANDBOXD_RUNNERS: ' https://r1.example:7443/ , http://10.0.0.2:8081',
    });
    assert.deepEqual(api.runners, { kind: 'urls', urls: ['https://r1.example:7443', 'http://10.0.0.2:8081'] });
    assert.deepEqual(
      loadConfig({ SANDBOXD_ROLE: 'api', SANDBOXD_RUNNER_TOKEN: token, SANDBOXD_RUNNERS: 'k8s:sandboxd/runners' })
        .runners,
      { kind: 'k8s', namespace: 'sandboxd', service: 'runners' },
    );
    const refused: [Record<string, string>, RegExp][] = [
      [{ SANDBOXD_ROLE: 'both' }, /SANDBOXD_ROLE must be one of all, api, runner/],
      [{ SANDBOXD_ROLE: 'runner' }, /SANDBOXD_RUNNER_TOKEN is required when SANDBOXD_ROLE is runner/],
      [
        { SANDBOXD_ROLE: 'api', SANDBOXD_RUNNERS: 'http://r:1' },
        /SANDBOXD_RUNNER_TOKEN is required when SANDBOXD_ROLE is api/,
      ],
      [{ SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: 'short' }, /SANDBOXD_RUNNER_TOKEN must have at least 16/],
      [
        { SANDBOXD_ROLE: 'api', SANDBOXD_RUNNER_TOKEN: token },
        /SANDBOXD_RUNNERS is required when SANDBOXD_ROLE is api/,
      ],
      [{ SANDBOXD_RUNNERS: 'ftp://r:1' }, /SANDBOXD_RUNNERS: "ftp:\/\/r:1" must be an http/],
      [{ SANDBOXD_RUNNERS: 'http://r:1/x' }, /must have no path/],
      [{ SANDBOXD_RUNNERS: 'http://u:p@r:1' }, /without credentials/],
      [{ SANDBOXD_RUNNERS: 'http://r:1,http://r:1/' }, /named twice/],
      [{ SANDBOXD_RUNNERS: 'not a url' }, /is not a URL/],
      [{ SANDBOXD_RUNNERS: 'k8s:Bad/x' }, /k8s:<namespace>\/<service>/],
      [{ SANDBOXD_RUNNERS: 'k8s:ns' }, /k8s:<namespace>\/<service>/],
      [{ SANDBOXD_NODE_NAME: 'a b' }, /SANDBOXD_NODE_NAME must be/],
      [{ SANDBOXD_RUNNER_DOWN_MS: '100' }, /SANDBOXD_RUNNER_DOWN_MS/],
      [{ SANDBOXD_RUNNER_DOWN_MS: 'soon' }, /SANDBOXD_RUNNER_DOWN_MS/],
    ];
    assert.equal(c.runnerDownMs, 5000, 'SANDBOXD_RUNNER_DOWN_MS default');
    assert.equal(loadConfig({ SANDBOXD_RUNNER_DOWN_MS: '30000' }).runnerDownMs, 30_000);
    for (const [env, msg] of refused)
      assert.throws(
        () => loadConfig(env),
        (e: unknown) => e instanceof ConfigError && msg.test(e.message),
        JSON.stringify(env),
      );
  });

  it('SANDBOXD_DATABASE_URL: unset is SQLite in the data dir; a postgres URL is kept; anything else is refused by name without echoing it', () => {
    assert.equal(loadConfig({}).databaseUrl, undefined);
    assert.equal(loadConfig({ SANDBOXD_DATABASE_URL: '' }).databaseUrl, undefined);
    for (const url of ['postgres://u:p@db.example:5432/sandboxd', 'postgresql://localhost/sbx?sslmode=require'])
      assert.equal(loadConfig({ SANDBOXD_DATABASE_URL: url }).databaseUrl, url);
    for (const bad of ['mysql://u:secret@h/db', 'sqlite:///x.db', 'not a url', 'localhost:5432'])
      assert.throws(
        () => loadConfig({ SANDBOXD_DATABASE_URL: bad }),
        (e: Error) =>
          e instanceof ConfigError &&
          /SANDBOXD_DATABASE_URL must be a postgres:\/\//.test(e.message) &&
          !/secret/.test(e.message),
        bad,
      );
  });

  it('with SANDBOXD_DATABASE_URL the rate-limit counters default to the database (shared by replicas); an explicit store wins', () => {
    const url = 'postgres://u@db.example/sandboxd';
    assert.equal(loadConfig({}).rateLimit.store, 'memory');
    assert.equal(loadConfig({ SANDBOXD_DATABASE_URL: url }).rateLimit.store, 'database');
    assert.equal(
      loadConfig({ SANDBOXD_DATABASE_URL: url, SANDBOXD_RATE_LIMIT_STORE: 'memory' }).rateLimit.store,
      'memory',
    );
  });

  it('SANDBOXD_REAPER_LEASE_MS: 3 s by default, at least twice the reaper interval', () => {
    assert.equal(loadConfig({}).reaperLeaseMs, 3000);
    assert.equal(loadConfig({ SANDBOXD_REAPER_LEASE_MS: '5000' }).reaperLeaseMs, 5000);
    assert.throws(
      () => loadConfig({ SANDBOXD_REAPER_LEASE_MS: '1500', SANDBOXD_REAPER_INTERVAL_MS: '1000' }),
      /SANDBOXD_REAPER_LEASE_MS \(1500\) must be at least twice SANDBOXD_REAPER_INTERVAL_MS \(1000\)/,
    );
    assert.throws(
      () => loadConfig({ SANDBOXD_REAPER_LEASE_MS: 'soon' }),
      /SANDBOXD_REAPER_LEASE_MS must be an integer/,
    );
  });

  it('port proxy: the per-sandbox share of connections, 256 by default, at least 1', () => {
    assert.equal(loadConfig({}).proxyMaxConnsPerSandbox, 256);
    assert.equal(loadConfig({ SANDBOXD_PROXY_MAX_CONNS_PER_SANDBOX: '32' }).proxyMaxConnsPerSandbox, 32);
    assert.throws(
      () => loadConfig({ SANDBOXD_PROXY_MAX_CONNS_PER_SANDBOX: '0' }),
      /SANDBOXD_PROXY_MAX_CONNS_PER_SANDBOX/,
    );
  });

  it('capacity: maxSandboxes (0: no count limit) and the create floors of memory and disk, by env or file', () => {
    const d = loadConfig({});
    assert.deepEqual([d.maxSandboxes, d.createMinMemoryMb, d.createMinFreeMb], [0, 256, 512]);
    const c = loadConfig({
      SANDBOXD_MAX_SANDBOXES: '2000',
      SANDBOXD_CREATE_MIN_MEMORY_MB: '1024',
      SANDBOXD_MIN_FREE_MB: '1000',
    });
    assert.deepEqual([c.maxSandboxes, c.createMinMemoryMb, c.createMinFreeMb], [2000, 1024, 2000]);
    assert.equal(loadConfig({ SANDBOXD_MIN_FREE_MB: '0' }).createMinFreeMb, 0, 'twice an absent floor');
    assert.equal(loadConfig({ SANDBOXD_CREATE_MIN_FREE_MB: '0' }).createMinFreeMb, 0);
    assert.throws(() => loadConfig({ SANDBOXD_MAX_SANDBOXES: '-1' }), /SANDBOXD_MAX_SANDBOXES/);
    assert.throws(() => loadConfig({ SANDBOXD_MAX_SANDBOXES: 'lots' }), /SANDBOXD_MAX_SANDBOXES/);
    assert.throws(
      () => loadConfig({ SANDBOXD_CREATE_MIN_FREE_MB: '100' }),
      /SANDBOXD_CREATE_MIN_FREE_MB \(100\) must be 0 or at least SANDBOXD_MIN_FREE_MB \(256\)/,
    );
    const dir = mkdtempSync(join(tmpdir(), 'sbx-cfg-'));
    try {
      const f = join(dir, 'c.json');
      writeFileSync(f, JSON.stringify({ maxSandboxes: 7 }));
      assert.equal(loadConfig({ SANDBOXD_CONFIG: f }).maxSandboxes, 7);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('fair shares: the documented defaults, SANDBOXD_FAIR_SHARE_* over the file over them, bad values refused by name', () => {
    assert.deepEqual(loadConfig({}).fairShare, {
      terminalsPerSandbox: 32,
      clientsPerTerminal: 16,
      terminalSocketsPerSandbox: 64,
      runningProcessesPerSandbox: 64,
      exitedProcessesPerSandbox: 16,
      followersPerProcess: 16,
      followersPerSandbox: 128,
      watchesPerSandbox: 16,
      fileTransfersPerSandbox: 32,
      execsPerSandbox: 128,
      codeRunsPerSandbox: 16,
    });
    assert.equal(DEFAULT_FAIR_SHARE.terminalsPerSandbox, MAX_TERMINALS_PER_SANDBOX);
    assert.equal(DEFAULT_FAIR_SHARE.clientsPerTerminal, MAX_CLIENTS_PER_TERMINAL);
    assert.equal(DEFAULT_FAIR_SHARE.runningProcessesPerSandbox, MAX_RUNNING_PROCESSES);
    assert.equal(DEFAULT_FAIR_SHARE.exitedProcessesPerSandbox, MAX_EXITED_PROCESSES);
    assert.equal(DEFAULT_FAIR_SHARE.followersPerProcess, MAX_FOLLOWERS_PER_PROCESS);
    assert.equal(DEFAULT_FAIR_SHARE.followersPerSandbox, MAX_FOLLOWERS_PER_SANDBOX);
    const dir = mkdtempSync(join(tmpdir(), 'sandboxd-cfg-'));
    try {
      const file = join(dir, 'c.json');
      writeFileSync(file, JSON.stringify({ fairShare: { clientsPerTerminal: 4, watchesPerSandbox: 8 } }));
      const c = loadConfig({
        SANDBOXD_CONFIG: file,
        SANDBOXD_FAIR_SHARE_CLIENTS_PER_TERMINAL: '2',
        SANDBOXD_FAIR_SHARE_EXITED_PROCESSES_PER_SANDBOX: '0',
      }).fairShare;
      assert.equal(c.clientsPerTerminal, 2, 'env over file');
      assert.equal(c.watchesPerSandbox, 8, 'file over default');
      assert.equal(c.exitedProcessesPerSandbox, 0, 'nothing exited kept');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    assert.throws(
      () => loadConfig({ SANDBOXD_FAIR_SHARE_WATCHES_PER_SANDBOX: '0' }),
      /SANDBOXD_FAIR_SHARE_WATCHES_PER_SANDBOX/,
    );
    assert.throws(() => loadConfig({ SANDBOXD_FAIR_SHARE_FILE_TRANSFERS_PER_SANDBOX: 'x' }), ConfigError);
  });

  it('an unknown default plan is a startup error; a config file can add plans', () => {
    assert.throws(() => loadConfig({ SANDBOXD_DEFAULT_PLAN: 'GOLD' }), /GOLD/);
    const dir = mkdtempSync(join(tmpdir(), 'sbx-cfg-'));
    try {
      const f = join(dir, 'c.json');
      writeFileSync(
        f,
        JSON.stringify({ port: 7000, defaultPlan: 'TEAM', plans: { TEAM: { concurrency: 10, limits: { cpus: 2 } } } }),
      );
      const c = loadConfig({ SANDBOXD_CONFIG: f });
      assert.equal(c.port, 7000);
      assert.equal(c.plans.TEAM.concurrency, 10);
      assert.equal(c.plans.TEAM.limits.cpus, 2);
      assert.equal(c.plans.TEAM.limits.pids, 512);
      writeFileSync(f, JSON.stringify({ plans: { lower: {} } }));
      assert.throws(() => loadConfig({ SANDBOXD_CONFIG: f }), /plan name/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
