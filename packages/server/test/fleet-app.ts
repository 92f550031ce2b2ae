import type { KubeConfig } from '@kubernetes/client-node';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import pino from 'pino';
import { buildApp, type Sandboxd } from '../src/app.js';
import { loadConfig, type Config } from '../src/config.js';
import { ManualClock } from '../src/domain/clock.js';
import type { FleetDriver } from '../src/runtime/remote/fleet/fleet.js';
import type { AccountRecord } from '../src/store/store.js';
import { SqliteStore } from '../src/store/sqlite/store.js';
import type { FakeRunners } from './fake-runners.js';

/** An API process (role `api`) over fake runners, as app.ts builds it; for unit tests. */
export interface FleetApp {
  app: Sandboxd;
  fleet: FleetDriver;
  clock: ManualClock;
  /** `inject` with the admin key unless `key` says otherwise (null: none). */
  req(o: InjectOptions & { key?: string | null }): Promise<LightMyRequestResponse>;
  /** A new account with `tokens`, as the store has it. */
  account(tokens?: number): Promise<AccountRecord>;
  close(): Promise<void>;
}

/**
 * Builds and starts an `api` app whose runners are `runners` at `urls` (SANDBOXD_RUNNERS;
 * `overrides.runners` may name a Kubernetes Service instead, with `opts.kubeConfig`), on in-memory SQLite (or the PostgreSQL of
 * `overrides.databaseUrl`), with a manual clock; health checks and the reaper are driven by
 * hand (`fleet.refresh()`, `app.reaper.reconcile()`).
 */
export async function makeFleetApp(
  runners: FakeRunners,
  urls: string[],
  overrides: Partial<Config> = {},
  opts: { kubeConfig?: KubeConfig } = {},
): Promise<FleetApp> {
  const adminKey = `sk_${'F'.repeat(40)}`;
  const config = loadConfig(
    {},
    {
      role: 'api',
      runners: { kind: 'urls', urls },
      runnerToken: 'test-runner-token-0123456789',
      runtime: 'fake',
      dbPath: ':memory:',
      dataDir: '/nonexistent',
      bootstrap: { apiKey: adminKey },
      warmPool: [],
      ...overrides,
    },
  );
  const clock = new ManualClock(Date.UTC(2030, 0, 1));
  const app = await buildApp({
    config,
    clock,
    store: overrides.databaseUrl ? undefined : new SqliteStore(':memory:'),
    logger: pino({ level: 'silent' }),
    runners: { connect: runners.connect, poll: false, kubeConfig: opts.kubeConfig },
  });
  await app.start();
  await app.reaper.stop(); // tests drive the reaper by hand
  await app.http.ready();
  let n = 0;
  return {
    app,
    fleet: app.fleet!,
    clock,
    req: ({ key, ...o }) => {
      const headers = { ...(o.headers ?? {}) } as Record<string, string>;
      const k = key === undefined ? adminKey : key;
      if (k !== null && !('authorization' in headers)) headers.authorization = `Bearer ${k}`;
      return app.http.inject({ ...o, headers });
    },
    async account(tokens = 1000) {
      const id = `acc_fleet_${process.pid}_${Date.now().toString(36)}_${n++}`;
      await app.store.createAccount(
        { id, email: `${id}@example.com`, passwordHash: null, plan: 'PRO', admin: false, createdAt: clock.now() },
        { tokens, reason: 'signup' },
      );
      return (await app.store.getAccount(id))!;
    },
    close: () => app.close(),
  };
}
