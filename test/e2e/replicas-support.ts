/**
 * The topology of the replica suites: one PostgreSQL, one runner, two api replicas over
 * them, an account with tokens and one running sandbox.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { pgBinDir, startPostgres, type TestPostgres } from '../../packages/server/test/postgres.js';
import { newAccount, RUNTIME, type Server, startServer } from './harness.js';

/** Why suites of api replicas on PostgreSQL cannot run here (for `describe`'s `skip`), or undefined. */
export const replicasSkip: string | undefined =
  RUNTIME !== 'local'
    ? 'needs SANDBOXD_E2E_RUNTIME=local'
    : pgBinDir() === null
      ? 'needs PostgreSQL (scripts/setup.sh --test)'
      : undefined;

/** The health check of a runner started with `token`, for `startServer`'s `ready`. */
export function runnerReady(token: string): { path: string; headers: Record<string, string> } {
  return { path: '/runner/v1/health', headers: { authorization: `Bearer ${token}` } };
}

/**
 * One runner and two api replicas sharing one PostgreSQL database, started by
 * {@link start}; {@link stop} stops whatever started (also after a start that failed half
 * way, or parts the test killed).
 */
export class ReplicaPair {
  readonly token = `e2e-replicas-${randomBytes(8).toString('hex')}`;
  pg?: TestPostgres;
  runner?: Server;
  apiA?: Server;
  apiB?: Server;
  /** The environment of an api replica (to start more). */
  apiEnv: Record<string, string> = {};

  /** Starts the four processes, then makes an account and a running sandbox of `image` through api A. */
  async start(o: {
    nodeName: string;
    image: string;
    durable?: boolean;
    /** The runner's data dir (default a new one) and environment beyond its role's. */
    runnerDataDir?: string;
    runnerEnv?: Record<string, string>;
  }): Promise<{
    runner: Server;
    apiA: Server;
    apiB: Server;
    apiEnv: Record<string, string>;
    key: string;
    id: string;
  }> {
    this.pg = await startPostgres({ durable: o.durable });
    const runner = await startServer({
      dataDir: o.runnerDataDir,
      env: {
        ...o.runnerEnv,
        SANDBOXD_ROLE: 'runner',
        SANDBOXD_RUNNER_TOKEN: this.token,
        SANDBOXD_NODE_NAME: o.nodeName,
      },
      ready: runnerReady(this.token),
    });
    this.runner = runner;
    this.apiEnv = {
      SANDBOXD_ROLE: 'api',
      SANDBOXD_RUNNERS: runner.baseUrl,
      SANDBOXD_RUNNER_TOKEN: this.token,
      SANDBOXD_DATABASE_URL: await this.pg.createDatabase(),
      // Replicas share the secrets' key (docs/secrets.md): each has a data dir of its own.
      SANDBOXD_SECRETS_KEY: randomBytes(32).toString('base64'),
    };
    const apiA = await startServer({ env: this.apiEnv });
    this.apiA = apiA;
    const apiB = await startServer({ env: this.apiEnv });
    this.apiB = apiB;
    const key = (await newAccount(apiA, { tokens: 1_000_000, plan: 'PRO' })).key;
    const c = await apiA.api('POST', '/api/v1/sandboxes', { key, body: { image: o.image, timeoutMs: 600_000 } });
    assert.equal(c.status, 201, c.text);
    return { runner, apiA, apiB, apiEnv: this.apiEnv, key, id: c.body.sandbox.id as string };
  }

  async stop(): Promise<void> {
    await this.apiB?.stop();
    await this.apiA?.stop();
    await this.runner?.stop();
    await this.pg?.stop();
  }
}
