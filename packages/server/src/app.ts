import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import type { Config } from './config.js';
import { OffsetClock, systemClock, type Clock } from './domain/clock.js';
import { createHttpServer } from './http/server.js';
import { FrontDoor } from './http/front-door.js';
import { Metrics } from './http/metrics.js';
import { RateLimits } from './http/rate-limit.js';
import { terminalFeature } from './http/terminal-ws.js';
import { Reaper } from './lifecycle/reaper.js';
import { attachPortProxy } from './proxy/index.js';
import type { RuntimeDriver } from './runtime/driver.js';
import { createFakeDriver } from './runtime/fake/driver.js';
import { bootstrap, type BootstrapResult } from './services/bootstrap.js';
import { createServices, type ServiceDeps, type Services } from './services/index.js';
import { SqliteStore } from './store/sqlite/store.js';
import type { Store } from './store/store.js';

/** Options of {@link buildApp}. */
export interface BuildAppOptions {
  config: Readonly<Config>;
  /** Default: the fake driver (main.ts passes the configured one). */
  driver?: RuntimeDriver;
  /** Default: the wall clock, or a movable one when `config.testClock`. */
  clock?: Clock;
  /** Default: SQLite at `config.dbPath`. */
  store?: Store;
  /** Default: pino at `config.logLevel` to stderr. */
  logger?: Logger;
  /** Time of the rate limits, ms (default `performance.now`; tests move it by hand). */
  rateLimitNow?: () => number;
  /** Route modules of other features (terminals, proxy), registered on the same server. */
  extraRoutes?: Array<(app: FastifyInstance, app2: Sandboxd) => Promise<void> | void>;
}

/** The assembled server. Nothing runs until {@link Sandboxd.start}. */
export interface Sandboxd {
  http: FastifyInstance;
  /** Where the proxy and WebSocket features claim raw requests and upgrades. */
  frontDoor: FrontDoor;
  services: Services;
  reaper: Reaper;
  store: Store;
  driver: RuntimeDriver;
  clock: Clock;
  metrics: Metrics;
  /** Request rate limits and login/sign-up throttles (real monotonic time, not `clock`). */
  rateLimits: RateLimits;
  log: Logger;
  /** Driver init + recover, reconcile the store with it, bootstrap an empty database, start the reaper. */
  start(): Promise<{ bootstrap: BootstrapResult | null }>;
  /** Stops accepting, finishes in-flight requests, stops the reaper; sandboxes keep running. */
  close(): Promise<void>;
}

/** The composition root: the one place that constructs stores, drivers and services. */
export function buildApp(opts: BuildAppOptions): Sandboxd {
  const { config } = opts;
  const log = opts.logger ?? createLogger(config.logLevel);
  const testClock = config.testClock && !opts.clock ? new OffsetClock() : null;
  const clock = opts.clock ?? testClock ?? systemClock;
  const store = opts.store ?? new SqliteStore(config.dbPath);
  const driver = opts.driver ?? createFakeDriver();
  const deps: ServiceDeps = { store, driver, clock, config, log };
  const services = createServices(deps);
  const reaper = new Reaper(deps, services.sandboxes);
  const metrics = new Metrics(store);
  const rateLimits = new RateLimits(config.rateLimit, opts.rateLimitNow ?? (() => performance.now()));
  let ready = false;
  const self: Sandboxd = {
    http: undefined as unknown as FastifyInstance,
    frontDoor: new FrontDoor(),
    services,
    reaper,
    store,
    driver,
    clock,
    metrics,
    rateLimits,
    log,
    async start() {
      await driver.init();
      const recovered = await driver.recover();
      log.info({ adopted: recovered.adopted.length, cleaned: recovered.cleaned.length }, 'runtime recovered');
      if (recovered.failed?.length)
        log.warn({ failed: recovered.failed }, 'some leftovers could not be removed; the next start tries again');
      await reaper.reconcile({ startup: true });
      await reaper.tick();
      const b = await bootstrap(deps, services);
      reaper.start();
      ready = true;
      return { bootstrap: b };
    },
    async close() {
      ready = false;
      // Connections that turn idle after close() began would otherwise live until keep-alive expires.
      const sweep = setInterval(() => self.http.server.closeIdleConnections?.(), 100);
      try {
        await self.http.close();
      } finally {
        clearInterval(sweep);
      }
      await reaper.stop();
      await driver.close();
      store.close();
    },
  };
  self.http = createHttpServer(
    { services, config, metrics, rateLimits, reaper, testClock, isReady: () => ready },
    {
      logger: log,
      frontDoor: self.frontDoor,
      extraRoutes: [terminalFeature, ...(opts.extraRoutes ?? [])].map((r) => (app: FastifyInstance) => r(app, self)),
    },
  );
  // Claimed before any extra route registers, so sandbox hosts never reach other claims.
  attachPortProxy(self, config);
  return self;
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
        req: (req: { method: string; url: string; socket?: { remoteAddress?: string } }) => ({
          method: req.method,
          url: req.url.replace(/([?&](?:token|key)=)[^&]*/gi, '$1[redacted]'),
          remoteAddress: req.socket?.remoteAddress,
        }),
      },
    },
    pino.destination({ dest: 2, sync: true }),
  );
}
