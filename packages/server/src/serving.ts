import { buildApp, buildRunner } from './app.js';
import { ConfigError, loadConfig } from './config.js';
import { acquireInstanceLock, InstanceLockedError } from './instance.js';
import { bootstrapBanner } from './services/bootstrap.js';
import { DowngradeError } from './store/release-marker.js';

/** Serves in this process as `SANDBOXD_ROLE` says, until SIGTERM or SIGINT. */
export async function serveProcess(): Promise<void> {
  const config = loadConfig();
  // Before anything touches the data dir or the host: one process per data dir and per bridge.
  await acquireInstanceLock({
    dataDir: config.dataDir,
    bridge: config.runtime === 'local' && config.role !== 'api' ? config.bridge : undefined,
    role: 'server',
  });
  if (config.role === 'runner') return runner(config);
  const app = await buildApp({ config });
  if (config.runtime === 'fake') app.log.warn('runtime is "fake": sandboxes run no processes (tests only)');
  if (config.testClock) app.log.warn('SANDBOXD_TEST_CLOCK is on: POST /api/v1/_test/clock moves time (tests only)');
  const { bootstrap } = await app.start();
  const address = await app.http.listen({ host: config.host, port: config.port });
  if (bootstrap) process.stdout.write(bootstrapBanner(bootstrap, { baseUrl: address }));
  app.log.info({ address, runtime: config.runtime, role: config.role }, 'sandboxd listening');

  let closing = false;
  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    app.log.info({ signal }, 'shutting down: finishing in-flight requests; sandboxes keep running');
    const force = setTimeout(() => {
      app.log.error('graceful shutdown timed out');
      process.exit(1);
    }, config.shutdownGraceMs);
    force.unref();
    app.close().then(
      () => process.exit(0),
      (err) => {
        app.log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

/** `SANDBOXD_ROLE=runner`: only the runner protocol, on `SANDBOXD_PORT`. */
async function runner(config: ReturnType<typeof loadConfig>): Promise<void> {
  const r = await buildRunner({ config });
  if (config.runtime === 'fake') r.log.warn('runtime is "fake": sandboxes run no processes (tests only)');
  const address = await r.start();
  r.log.info({ address, node: config.nodeName, runtime: config.runtime }, 'sandboxd runner listening');
  let closing = false;
  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    r.log.info({ signal }, 'runner shutting down; sandboxes keep running');
    const force = setTimeout(() => process.exit(1), config.shutdownGraceMs);
    force.unref();
    r.close().then(
      () => process.exit(0),
      (err) => {
        r.log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

/**
 * Prints why serving could not start: a config or lock problem or a refused downgrade plainly,
 * anything else with its stack.
 */
export function reportFatal(e: unknown): void {
  const plain = e instanceof ConfigError || e instanceof InstanceLockedError || e instanceof DowngradeError;
  process.stderr.write(`sandboxd: ${plain ? (e as Error).message : ((e as Error).stack ?? String(e))}\n`);
}
