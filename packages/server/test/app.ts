import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import pino from 'pino';
import { buildApp, type Sandboxd } from '../src/app.js';
import { loadConfig, type Config } from '../src/config.js';
import { ManualClock } from '../src/domain/clock.js';
import { FakeDriver } from '../src/runtime/fake/driver.js';
import { SqliteStore } from '../src/store/sqlite/store.js';
import type { Store } from '../src/store/store.js';

/**
 * A started app on the fake driver, an in-memory SQLite store (or `opts.store`, or the
 * PostgreSQL database of `overrides.databaseUrl`) and a manual clock; for unit tests.
 */
export interface TestApp {
  app: Sandboxd;
  driver: FakeDriver;
  clock: ManualClock;
  /** The bootstrap admin's API key. */
  adminKey: string;
  /** `inject` with the admin key unless `headers.authorization` is given (null: none). */
  req(o: InjectOptions & { key?: string | null }): Promise<LightMyRequestResponse>;
  /** Creates an account (via the admin API) and returns its id and a key. */
  newAccount(o?: { plan?: string; tokens?: number }): Promise<{ id: string; key: string }>;
  close(): Promise<void>;
}

/** The secrets key of test apps (base64 of 32 bytes). */
export const TEST_SECRETS_KEY = Buffer.alloc(32, 7).toString('base64');

/** Builds and starts a {@link TestApp}. */
export async function makeTestApp(
  overrides: Partial<Config> = {},
  opts: { driver?: FakeDriver; rateLimitNow?: () => number; store?: Store; logger?: pino.Logger } = {},
): Promise<TestApp> {
  const adminKey = `sk_${'A'.repeat(40)}`;
  const config = loadConfig(
    {},
    {
      runtime: 'fake',
      dbPath: ':memory:',
      dataDir: '/nonexistent',
      bootstrap: { apiKey: adminKey },
      port: 8080,
      // A fixed key: the data dir does not exist, so no key file could be made.
      secretsKey: TEST_SECRETS_KEY,
      ...overrides,
    },
  );
  const driver = opts.driver ?? new FakeDriver();
  const clock = new ManualClock(Date.UTC(2030, 0, 1));
  const app = await buildApp({
    config,
    driver,
    clock,
    // With a `databaseUrl` override, app.ts opens that PostgreSQL database itself.
    store: opts.store ?? (overrides.databaseUrl ? undefined : new SqliteStore(':memory:')),
    logger: opts.logger ?? pino({ level: 'silent' }),
    rateLimitNow: opts.rateLimitNow,
  });
  await app.start();
  await app.reaper.stop(); // tests drive the reaper by hand
  await app.http.ready();
  const req: TestApp['req'] = ({ key, ...o }) => {
    const headers = { ...(o.headers ?? {}) } as Record<string, string>;
    const k = key === undefined ? adminKey : key;
    if (k !== null && !('authorization' in headers)) headers.authorization = `Bearer ${k}`;
    return app.http.inject({ ...o, headers });
  };
  let n = 0;
  return {
    app,
    driver,
    clock,
    adminKey,
    req,
    async newAccount(o = {}) {
      const email = `user${++n}-${Date.now()}@example.com`;
      const r = await req({
        method: 'POST',
        url: '/api/v1/admin/accounts',
        payload: { email, password: 'password123', ...o },
      });
      if (r.statusCode !== 201) throw new Error(`newAccount: ${r.statusCode} ${r.body}`);
      const id = r.json().account.id as string;
      const k = await app.services.auth.createKey(id, 'test');
      return { id, key: k.key };
    },
    close: () => app.close(),
  };
}
