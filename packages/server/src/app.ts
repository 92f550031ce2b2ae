import { SandboxdError } from '@sandboxd/protocol';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { ConfigError, type Config } from './config.js';
import { NO_ROOM } from './domain/capacity.js';
import { OffsetClock, systemClock, type Clock } from './domain/clock.js';
import { codePortGuard } from './e2b/code-port.js';
import { EnvdDoor } from './e2b/envd/door.js';
import { filesystemService } from './e2b/envd/filesystem.js';
import { Filesystem } from './e2b/envd/gen/filesystem_pb.js';
import { Process } from './e2b/envd/gen/process_pb.js';
import { processService } from './e2b/envd/process.js';
import { EnvdPaths } from './e2b/envd/paths.js';
import { envdRest } from './e2b/envd/rest.js';
import { AccessTokens } from './e2b/tokens.js';
import { FrontDoor } from './http/front-door.js';
import { Metrics } from './http/metrics.js';
import { RateLimits } from './http/rate-limit.js';
import { readiness } from './http/readiness.js';
import { createHttpServer } from './http/server.js';
import { TerminalGateway } from './http/terminal-ws.js';
import { Presence } from './lifecycle/presence.js';
import { Reaper } from './lifecycle/reaper.js';
import { PortAccess } from './proxy/access.js';
import { LEGACY_LINK_KEY_FILE, loadPortLinkSecret } from './proxy/link-secret.js';
import { PortLinks } from './proxy/links.js';
import { PublicHosts } from './proxy/host.js';
import { PortProxy } from './proxy/proxy.js';
import { sandboxPortDialer } from './proxy/dial.js';
import { SandboxTargets } from './proxy/targets.js';
import type { RuntimeDriver } from './runtime/driver.js';
import type { FleetDriver } from './runtime/remote/fleet/fleet.js';
import { RunnerServer } from './runner/server.js';
import { createFakeDriver } from './runtime/fake/driver.js';
import { ProcessHost } from './runtime/processes/host.js';
import { TerminalHost } from './runtime/terminals/host.js';
import { CLOSE } from './runtime/terminals/types.js';
import { AccountService } from './services/accounts.js';
import { AuthService } from './services/auth.js';
import { BuildService } from './services/builds.js';
import { TrustedProxies } from './http/trusted-proxies.js';
import { bootstrap, type BootstrapResult } from './services/bootstrap.js';
import { CapacityService } from './services/capacity.js';
import { CodeService } from './services/code.js';
import type { ServiceDeps } from './services/context.js';
import { EventService } from './services/events.js';
import { ExecService } from './services/exec.js';
import { FileService } from './services/files.js';
import { ProcessService } from './services/processes.js';
import { ImageService } from './services/images.js';
import type { Services } from './services/index.js';
import { SandboxService } from './services/sandboxes.js';
import { StorageGuard } from './services/storage.js';
import { TerminalService } from './services/terminals.js';
import { TimeoutService } from './services/timeout.js';
import { LifecycleService } from './services/lifecycle.js';
import { SnapshotService } from './services/snapshots.js';
import { keyringProblem, SecretService } from './services/secrets.js';
import { loadSecretKeyring, type SecretKeyring } from './services/secrets-crypto.js';
import { VolumeService } from './services/volumes.js';
import { MemoryCounters } from './store/memory-counters.js';
import { PostgresStore } from './store/postgres/store.js';
import { SqliteStore } from './store/sqlite/store.js';
import type { Store } from './store/store.js';
import { createFleet, type FleetOptions, runnerGauges } from './app-fleet.js';

/** Options of {@link buildApp}: the config, and parts tests replace. */
export interface BuildAppOptions {
  config: Readonly<Config>;
  /** Default: the driver `config.runtime` names (`local`: crun; `fake`: tests only). */
  driver?: RuntimeDriver;
  /** Default: the wall clock, or a movable one when `config.testClock`. */
  clock?: Clock;
  /** Default: SQLite at `config.dbPath`. */
  store?: Store;
  /** Default: pino at `config.logLevel` to stderr. */
  logger?: Logger;
  /**
   * Time of the rate limits, ms (tests move it by hand). Default: `performance.now` for the
   * memory counters (immune to wall-clock steps), `Date.now` for the database's (shared).
   */
  rateLimitNow?: () => number;
  /** Role `api`: how runners are reached and watched (see {@link FleetOptions}). */
  runners?: FleetOptions;
}

/**
 * The assembled server. Nothing runs until {@link Sandboxd.start}. The fields are for
 * main.ts and for tests that look inside; no part of the server receives this object.
 */
export interface Sandboxd {
  http: FastifyInstance;
  services: Services;
  reaper: Reaper;
  store: Store;
  driver: RuntimeDriver;
  /** Role `api`: the driver, as the fleet of runners it is (their states, a health check now); else null. */
  fleet: FleetDriver | null;
  clock: Clock;
  log: Logger;
  /**
   * Driver init + recover, reconcile the store with it, bootstrap an empty database, start
   * the reaper. Resolves once live sandboxes are adopted; leftovers of an earlier run are
   * removed in the background (`sandboxd_recovery_pending`, a log line when done).
   */
  start(): Promise<{ bootstrap: BootstrapResult | null }>;
  /** Stops accepting, finishes in-flight requests, stops the reaper; sandboxes keep running. */
  close(): Promise<void>;
  /**
   * `npm run teardown`, instead of {@link start}: stops every started sandbox in the
   * database (as a stop does: `stopped`, unused minutes refunded; reason `teardown`), marks
   * unfinished creates `error`, then has the driver remove every trace of the instance from
   * the host (volumes' files and the database stay), and closes the database.
   */
  removeFromHost(): Promise<{ stopped: number }>;
}

/**
 * The database of `config`: PostgreSQL when `SANDBOXD_DATABASE_URL` is set (shared by
 * replicas, migrated by whichever starts first), else SQLite at `dbPath`. Also the operator
 * commands' (`sandboxd secrets-key`).
 */
export async function openStore(config: Readonly<Config>, log?: Logger): Promise<Store> {
  return config.databaseUrl
    ? PostgresStore.open(config.databaseUrl, {
        onPoolError: (err) => log?.warn({ err }, 'database: an idle PostgreSQL connection failed; it is replaced'),
      })
    : new SqliteStore(config.dbPath);
}

/**
 * The composition root: the ONE place that constructs the store, the driver, the services,
 * the HTTP server, the terminal gateway and the port proxy, and hands each the narrow
 * dependencies it uses.
 */
export async function buildApp(opts: BuildAppOptions): Promise<Sandboxd> {
  const { config } = opts;
  const log = opts.logger ?? createLogger(config.logLevel);
  const testClock = config.testClock && !opts.clock ? new OffsetClock() : null;
  const clock = opts.clock ?? testClock ?? systemClock;
  // The database: PostgreSQL when SANDBOXD_DATABASE_URL is set (shared by replicas, migrated
  // by whichever starts first), else SQLite in the data dir.
  const store = opts.store ?? (await openStore(config, log));
  // Role api: the sandboxes live on runners; the fleet finds each one's runner in the records.
  const fleet =
    !opts.driver && config.role === 'api' ? await createFleet(config, store, log, clock, opts.runners) : null;
  const driver: RuntimeDriver = opts.driver ?? fleet ?? (await createDriver(config, log));
  const presence = new Presence({ store, clock, config });
  const deps: ServiceDeps = { store, driver, clock, config, log, presence };

  // Shared by the services that need them, and by the proxy.
  // Its secret is the database's, shared by the replicas; start() loads it before serving.
  let linkSecret: Buffer | null = null;
  const portLinks = new PortLinks({
    secret: () => {
      if (!linkSecret) throw new Error('the port-link secret is read at start-up; the app is not started');
      return linkSecret;
    },
  });
  const storage = new StorageGuard([config.dataDir, dirname(config.dbPath)], config.minFreeMb * 2 ** 20);

  const capacity = new CapacityService({ driver, store, config }, { subject: fleet ? NO_ROOM.runners : NO_ROOM.host });
  // The secrets' keys: loaded at start-up (made at the first); never in the database.
  let keyring: SecretKeyring | null = null;
  let keyringBroken: string | null = null;
  const secrets = new SecretService({
    store,
    driver,
    clock,
    log: log.child({ component: 'secrets' }),
    keyring: () => {
      if (keyringBroken) throw new SandboxdError('unavailable', keyringBroken);
      if (!keyring) throw new Error('the secrets keys are read at start-up; the app is not started');
      return keyring;
    },
  });
  const sandboxes = new SandboxService({ ...deps, portLinks, storage, capacity, secrets });
  // A sandbox that goes frees room: the next create or health check measures again.
  sandboxes.onGone(() => capacity.forget());
  const accounts = new AccountService(deps);
  const auth = new AuthService(deps);
  // Terminals live where their PTYs run: on the runner (the driver's own), else held here.
  const terminalHost = driver.terminals
    ? null
    : new TerminalHost({
        execTty: (id, o) => driver.execTty(id, o),
        log: log.child({ component: 'terminals' }),
        shares: config.fairShare,
      });
  const terminals = new TerminalService({ ...deps, storage }, sandboxes, driver.terminals ?? terminalHost!);
  // Processes started through the API are tracked where they run: on the runner (the
  // driver's own), else here.
  const processHost = driver.processes ? null : ProcessHost.over(driver, { shares: config.fairShare });
  const processes = new ProcessService(deps, sandboxes, driver.processes ?? processHost!);
  const lifecycle = new LifecycleService({ ...deps, storage, capacity }, sandboxes);
  const snapshots = new SnapshotService({ ...deps, storage }, sandboxes);
  const builds = new BuildService({ ...deps, sandboxes, sandboxList: sandboxes, storage });
  const services: Services = {
    sandboxes,
    capacity,
    accounts,
    auth,
    terminals,
    timeout: new TimeoutService(deps, sandboxes),
    lifecycle,
    snapshots,
    exec: new ExecService({ driver, clock, storage, shares: config.fairShare }, sandboxes, processes),
    processes,
    // Reaches port 49999 as the port proxy reaches ports (its targets are made below).
    code: new CodeService(
      { clock, sandboxes },
      {
        dial: (id, port) => sandboxPortDialer(targets, tunnel)(id, port),
        runsPerSandbox: config.fairShare.codeRunsPerSandbox,
      },
    ),
    files: new FileService({ driver, clock, storage, shares: config.fairShare }, sandboxes),
    events: new EventService(deps),
    volumes: new VolumeService(deps),
    images: new ImageService(deps),
    secrets,
    builds,
  };
  const reaper = new Reaper(deps, sandboxes, lifecycle);
  // A runner that stops answering (for SANDBOXD_RUNNER_DOWN_MS) or answers again: reconcile
  // now, and the next capacity check measures again.
  fleet?.onChange(() => {
    capacity.forget();
    reaper.nudge();
  });
  let recoveryPending = () => 0;
  const metrics = new Metrics(
    () => sandboxes.countByState(),
    () => capacity.report(),
    () => recoveryPending(),
  );
  metrics.gaugeBy('sandboxd_warm_pool_ready', 'Started sandboxes ready to be claimed, by pooled image.', 'image', () =>
    driver.warmPool ? driver.warmPool() : {},
  );
  if (fleet) runnerGauges(metrics, () => fleet.runners());
  // The rate-limit counters: this process's memory, or the store's database (shared by replicas).
  const shared = config.rateLimit.store === 'database';
  const rateLimits = new RateLimits(
    config.rateLimit,
    shared ? store : new MemoryCounters(),
    opts.rateLimitNow ?? (shared ? () => Date.now() : () => performance.now()),
  );
  const frontDoor = new FrontDoor(
    config.tls ? { cert: readFileSync(config.tls.certPath), key: readFileSync(config.tls.keyPath) } : null,
  );
  const accessTokens = new AccessTokens(store);
  const gateway = new TerminalGateway({
    log: log.child({ component: 'terminals' }),
    maxSocketsPerAccount: config.rateLimit.terminalSocketsPerAccount,
    maxSocketsPerSandbox: config.fairShare.terminalSocketsPerSandbox,
  });

  let ready = false;
  const http = createHttpServer(
    {
      services,
      config,
      metrics,
      rateLimits,
      reaper,
      testClock,
      isReady: () => ready,
      readiness: readiness({ started: () => ready, store, runners: fleet ? () => fleet.runners() : null }),
      gateway,
      accessTokens,
      runners: fleet ? () => fleet.runners() : null,
    },
    { logger: log, frontDoor },
  );

  // The port proxy claims requests for `*.<publicHost>` on the front door, before fastify.
  // With the local runtime every target must lie in its subnet; the fake runtime has no
  // network, so the proxy connects nowhere (502).
  // With sandboxes on a runner (role api), their addresses route only on its host: the
  // proxy connects through the runner's tunnel, and the runner checks the address.
  const tunnel = driver.tunnel?.bind(driver);
  const targets = new SandboxTargets({
    locate: (id) => sandboxes.locate(id),
    allowedSubnet: config.runtime === 'local' && config.role === 'all' ? config.subnet : null,
    tunnel,
  });
  sandboxes.onGone((id) => targets.forget(id));
  const trusted = new TrustedProxies(config.trustedProxies);
  const access = new PortAccess({
    links: portLinks,
    accountOfKey: (key) =>
      auth.fromApiKey(key).then(
        (p) => p.account.id,
        () => null,
      ),
    trafficToken: (id, token) => accessTokens.verifyTraffic(id, token),
    now: () => clock.now(),
    trusted,
  });
  // E2B's in-sandbox API (envd) claims its requests first: `E2b-Sandbox-Id`, or the Host
  // `49983-<id>.<publicHost>` that the port proxy would otherwise take.
  const envdPaths = new EnvdPaths(services.files, () => clock.now());
  const envdLog = log.child({ component: 'envd' });
  const envd = new EnvdDoor({
    publicHost: config.publicHost,
    tokens: accessTokens,
    findSandbox: (id) => store.getSandbox(id),
    templates: config.e2bTemplates,
    charge: (accountId) => rateLimits.chargeAccount(accountId),
    now: () => clock.now(),
    log: envdLog,
    routes: (router) => {
      router.service(Process, processService({ services }));
      router.service(
        Filesystem,
        filesystemService({ files: services.files, paths: envdPaths, now: () => clock.now() }),
      );
    },
    rest: envdRest({ files: services.files, paths: envdPaths, log: envdLog }),
    forwardPort: (req, res, addr) => proxy.handleRequestAt(req, res, addr),
  });
  frontDoor.claimRequests(envd.claims, envd.handle);
  // E2B's SDKs with only E2B_DOMAIN set call their control API at `api.<domain>`.
  const publicHosts = new PublicHosts(config.publicHost);
  frontDoor.rewriteToFastify(
    (req) => publicHosts.names(req, 'api'),
    (url) => `/e2b${url.startsWith('/') ? url : `/${url}`}`,
  );
  const proxy = new PortProxy({
    publicHost: config.publicHost,
    timeoutMs: config.proxyTimeoutMs,
    maxConnsPerSandbox: config.proxyMaxConnsPerSandbox,
    targets,
    access,
    guard: codePortGuard({
      tokens: accessTokens,
      findSandbox: (id) => store.getSandbox(id),
      // The private-port rules (key, link, traffic token), as if the port were private.
      ownerCredential: (req, sb, addr) =>
        access.check({ req, ...addr, accountId: sb.accountId, portsPublic: false, upgrade: true }).then(
          () => true,
          () => false,
        ),
    }),
    log: log.child({ component: 'proxy' }),
    trusted,
  });
  proxy.attach(frontDoor);

  // Shutdown: terminal clients get close 1001 and the proxy's streams are cut, so closing
  // never waits on a client. Terminals held here end (exit, then 1001); those on a runner
  // live on, their clients reconnect through another replica.
  http.addHook('preClose', (done) => {
    if (terminalHost) terminalHost.closeAll();
    else gateway.closeClients(CLOSE.goingAway, 'server shutting down; reconnect');
    gateway.close();
    proxy.close();
    targets.close();
    done();
  });

  return {
    http,
    services,
    reaper,
    store,
    driver,
    fleet,
    clock,
    log,
    async start() {
      // The secrets shared by replicas: made once in the database (the first start's), then read.
      await accessTokens.init();
      linkSecret = await loadPortLinkSecret(store, {
        legacyKeyFile: join(config.dataDir, LEGACY_LINK_KEY_FILE),
        log: log.child({ component: 'proxy' }),
      });
      // The secrets' keys (SANDBOXD_SECRETS_KEY, else the key file, made 0600 at the first start).
      // A key file that cannot be made (no data dir, read-only) leaves secrets unavailable;
      // a bad key or key file stops the start.
      let loaded: ReturnType<typeof loadSecretKeyring> | null = null;
      try {
        loaded = loadSecretKeyring(config, { create: true });
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code !== 'ENOENT' && code !== 'EACCES' && code !== 'EROFS' && code !== 'ENOTDIR') throw e;
        keyringBroken = `the secrets key file ${config.secretsKeyFile} cannot be made (${code}): secrets are unavailable; set SANDBOXD_SECRETS_KEY or SANDBOXD_SECRETS_KEY_FILE`;
        log.warn({ file: config.secretsKeyFile, code }, keyringBroken);
      }
      if (loaded) {
        keyring = loaded.keyring;
        if (loaded.made) log.info({ file: loaded.source }, 'secrets key file made: back it up with the data dir');
        const why = await keyringProblem(store, keyring);
        if (why) {
          keyringBroken =
            "This server's secrets keys do not decrypt this database's secrets: every server sharing a database needs the same SANDBOXD_SECRETS_KEY or key file (docs/secrets.md)";
          log.error(
            { source: loaded.source, why },
            "this server's secrets keys do not decrypt the database's secrets: secrets are unavailable here until every server has the same keys",
          );
        }
      }
      // Known to be running before anything it starts can be seen half-done by another server.
      await presence.beat();
      secrets.listen();
      await driver.init();
      const recovered = await driver.recover();
      const background = recovered.background;
      const pending = background?.pending() ?? 0;
      log.info(
        { adopted: recovered.adopted.length, cleaned: recovered.cleaned.length, pending },
        pending
          ? 'runtime recovered; removing the leftovers of the earlier run in the background'
          : 'runtime recovered',
      );
      if (recovered.failed?.length)
        log.warn({ failed: recovered.failed }, 'some leftovers could not be removed; the next start tries again');
      if (background && pending) {
        recoveryPending = () => background.pending();
        void background.done.then(({ cleaned, failed }) => {
          log.info(
            { cleaned: cleaned.length, ids: cleaned.slice(0, 100), failed: failed.length },
            'leftovers of the earlier run removed',
          );
          if (failed.length) log.warn({ failed }, 'some leftovers could not be removed; the next start tries again');
        });
      }
      await reaper.reconcile({ startup: true });
      // Unfinished snapshots are a crash's only for the reaper (with a shared database, another may be making them).
      const reaping = await reaper.holdLease();
      if (reaping) await snapshots.reconcile();
      // Builds an earlier run left unfinished end `error`; stray cache layers go (the reaper's job, as snapshots).
      await builds.recover({ startup: true, sweep: reaping });
      builds.startTimer();
      await reaper.tick();
      // The audit trail's listener and timers; the rules of every sandbox that has some go to the driver again.
      await secrets.start();
      if (!keyringBroken)
        void secrets
          .resync()
          .catch((err) => log.warn({ err }, 'pushing the secret rules of sandboxes at start-up failed; retried later'));
      const b = await bootstrap(deps, services);
      reaper.start();
      ready = true;
      return { bootstrap: b };
    },
    async close() {
      ready = false;
      // Running builds end `error` and their sandboxes go, while the driver and the store still serve
      // (and their log followers get their end line, so no request keeps the HTTP server open).
      await builds.close();
      // Connections that turn idle after close() began would otherwise live until keep-alive expires.
      const sweep = setInterval(() => http.server.closeIdleConnections?.(), 100);
      try {
        await http.close();
      } finally {
        clearInterval(sweep);
      }
      await reaper.stop();
      await secrets.close();
      await presence
        .stop()
        .catch((err) => log.warn({ err }, 'releasing the presence lease failed; it runs out by itself'));
      await driver.close();
      await store.close();
    },
    async removeFromHost() {
      const started = await store.listSandboxesByState(['started', 'paused']);
      let stopped = 0;
      const queue = [...started];
      const worker = async () => {
        for (let r = queue.shift(); r; r = queue.shift()) {
          try {
            if (await sandboxes.stop(r, { reason: 'teardown', discard: true })) stopped++;
          } catch (err) {
            log.warn({ err, sandboxId: r.id }, 'teardown: stopping a sandbox failed; it is marked lost');
          }
        }
      };
      await Promise.all([worker(), worker(), worker(), worker()]);
      // Creates a crash cut short: `error`, fully refunded; stops that failed: `error`, lost.
      await reaper.reconcile({ startup: true });
      try {
        await driver.destroyAll?.();
      } finally {
        await store.close();
      }
      return { stopped };
    },
  };
}

/** The assembled runner (`SANDBOXD_ROLE=runner`): one host's runtime served to API processes. */
export interface SandboxdRunner {
  server: RunnerServer;
  driver: RuntimeDriver;
  log: Logger;
  /** Driver init + recover, then listens on `config.host:config.port`; resolves with the address. */
  start(): Promise<string>;
  /** Stops serving (streams are cut); sandboxes keep running. */
  close(): Promise<void>;
}

/**
 * The composition root of the runner role: the driver `config.runtime` names (local: crun)
 * behind the runner protocol on its own port, with the token and TLS of the config.
 */
export async function buildRunner(opts: {
  config: Readonly<Config>;
  driver?: RuntimeDriver;
  logger?: Logger;
}): Promise<SandboxdRunner> {
  const { config } = opts;
  const log = opts.logger ?? createLogger(config.logLevel);
  if (!config.runnerToken) throw new ConfigError('SANDBOXD_RUNNER_TOKEN is required when SANDBOXD_ROLE is runner');
  const driver = opts.driver ?? (await createDriver({ ...config, role: 'all' }, log));
  const terminals = new TerminalHost({
    execTty: (id, o) => driver.execTty(id, o),
    log: log.child({ component: 'terminals' }),
    shares: config.fairShare,
  });
  const server = new RunnerServer({
    driver,
    terminals,
    processes: ProcessHost.over(driver, { shares: config.fairShare }),
    token: config.runnerToken,
    nodeName: config.nodeName,
    tls: config.tls ? { cert: readFileSync(config.tls.certPath), key: readFileSync(config.tls.keyPath) } : null,
    log: log.child({ component: 'runner' }),
  });
  return {
    server,
    driver,
    log,
    async start() {
      await driver.init();
      const recovered = await driver.recover();
      server.recovered = recovered;
      log.info(
        {
          adopted: recovered.adopted.length,
          cleaned: recovered.cleaned.length,
          pending: recovered.background?.pending() ?? 0,
        },
        'runtime recovered',
      );
      // Which ones went, so that a sandbox its api records still call started can be traced.
      void recovered.background?.done.then(({ cleaned, failed }) =>
        log.info(
          { cleaned: cleaned.length, ids: cleaned.slice(0, 100), failed: failed.length },
          'leftovers of the earlier run removed',
        ),
      );
      return server.listen(config.host, config.port);
    },
    async close() {
      server.drain();
      // The terminals end with the runner: clients get exit and 1001, shells are hung up.
      terminals.closeAll('runner shutting down');
      await server.drainTerminalSockets();
      await server.close();
      await driver.close();
    },
  };
}

/**
 * The driver `config.runtime` names (roles `all` and `runner`). The local driver is loaded
 * on demand, so a server or test on the fake runtime never loads the crun driver's modules.
 */
async function createDriver(config: Readonly<Config>, log: Logger): Promise<RuntimeDriver> {
  if (config.runtime === 'fake') return createFakeDriver();
  const { createLocalDriver } = await import('./runtime/local/driver.js');
  return createLocalDriver(config, log);
}

/** Structured logs to stderr; credentials and one-time tokens are redacted. */
export function createLogger(level: string): Logger {
  return pino(
    {
      level,
      redact: {
        paths: [
          'req.headers.authorization',
          'req.headers["x-api-key"]',
          'req.headers.cookie',
          'res.headers["set-cookie"]',
        ],
        censor: '[redacted]',
      },
      serializers: {
        // remoteAddress: the client's (fastify's req.ip: X-Forwarded-For only from a trusted proxy).
        req: (req: { method: string; url: string; ip?: string; socket?: { remoteAddress?: string } }) => ({
          method: req.method,
          url: req.url.replace(/([?&](?:token|key)=)[^&]*/gi, '$1[redacted]'),
          remoteAddress: req.ip ?? req.socket?.remoteAddress,
        }),
      },
    },
    pino.destination({ dest: 2, sync: true }),
  );
}
