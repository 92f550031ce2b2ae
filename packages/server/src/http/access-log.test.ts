import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import pino from 'pino';
import { buildApp } from '../app.js';
import { loadConfig } from '../config.js';
import { ManualClock } from '../domain/clock.js';
import { FakeDriver } from '../runtime/fake/driver.js';
import { SqliteStore } from '../store/sqlite/store.js';

/** The app on the fake driver with its log lines kept, at `level`. */
async function appLogging(level: string) {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      cb();
    },
  });
  const adminKey = `sk_${'L'.repeat(40)}`;
  const config = loadConfig(
    {},
    { runtime: 'fake', dbPath: ':memory:', dataDir: '/nonexistent', bootstrap: { apiKey: adminKey }, port: 8080 },
  );
  const app = await buildApp({
    config,
    driver: new FakeDriver(),
    clock: new ManualClock(Date.UTC(2030, 0, 1)),
    store: new SqliteStore(':memory:'),
    logger: pino({ level }, sink),
  });
  await app.start();
  await app.http.ready();
  return { app, lines, auth: { authorization: `Bearer ${adminKey}` } };
}

describe('access log', () => {
  it('writes one line per request at info: method, url, status, time; errors too', async () => {
    const { app, lines, auth } = await appLogging('info');
    try {
      lines.length = 0;
      assert.equal((await app.http.inject({ method: 'GET', url: '/api/v1/sandboxes', headers: auth })).statusCode, 200);
      assert.equal(
        (await app.http.inject({ method: 'GET', url: '/api/v1/sandboxes/sbx_nope', headers: auth })).statusCode,
        404,
      );
      const access = lines.filter((l) => /request/.test(String(l.msg)));
      assert.deepEqual(
        access.map((l) => l.msg),
        ['request completed', 'request completed'],
      );
      assert.deepEqual(
        access.map((l) => [
          (l.req as { method: string; url: string }).url,
          (l.res as { statusCode: number }).statusCode,
        ]),
        [
          ['/api/v1/sandboxes', 200],
          ['/api/v1/sandboxes/sbx_nope', 404],
        ],
      );
      assert.ok(
        access.every((l) => typeof l.responseTime === 'number' && (l.req as { method: string }).method === 'GET'),
      );
      assert.ok(!JSON.stringify(lines).includes('Bearer'), 'credentials never logged');
    } finally {
      await app.close();
    }
  });

  it("keeps 'incoming request' at debug", async () => {
    const { app, lines, auth } = await appLogging('debug');
    try {
      lines.length = 0;
      await app.http.inject({ method: 'GET', url: '/api/v1/sandboxes', headers: auth });
      assert.deepEqual(
        lines.filter((l) => /request/.test(String(l.msg))).map((l) => l.msg),
        ['incoming request', 'request completed'],
      );
    } finally {
      await app.close();
    }
  });
});
