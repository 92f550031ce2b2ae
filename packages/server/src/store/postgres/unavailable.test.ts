import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { makeTestApp } from '../../../test/app.js';
import { pgBinDir, startPostgres } from '../../../test/postgres.js';
import { isDatabaseUnavailable } from './unavailable.js';

describe('isDatabaseUnavailable', () => {
  it('knows a lost or refused database from a failing query', () => {
    for (const e of [
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
      new Error('Connection terminated unexpectedly'),
      Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }),
      Object.assign(new Error('the database system is starting up'), { code: '57P03' }),
    ])
      assert.equal(isDatabaseUnavailable(e), true, e.message);
    for (const e of [
      Object.assign(new Error('duplicate key value violates unique constraint'), { code: '23505' }),
      Object.assign(new Error('syntax error at or near "x"'), { code: '42601' }),
      new Error('anything else'),
      null,
      'text',
    ])
      assert.equal(isDatabaseUnavailable(e), false, String(e));
  });
});

// Found by the chaos soak (test/soak/chaos.ts, pg-kill): while PostgreSQL restarted, every
// request of the api replicas answered 500 "Internal server error".
describe('PostgreSQL down: 503, then back', {
  skip: pgBinDir() === null && 'needs PostgreSQL (scripts/setup.sh --test)',
}, () => {
  it('a crashed database answers 503 unavailable (not 500), and requests work again once it is back', async () => {
    const pg = await startPostgres({ durable: true }); // its commits survive the kill -9
    const databaseUrl = await pg.createSchema();
    const t = await makeTestApp({ databaseUrl, warmPool: [] });
    try {
      const { key } = await t.newAccount();
      assert.equal((await t.req({ method: 'GET', url: '/api/v1/account', key })).statusCode, 200);
      pg.crash();
      let down: Awaited<ReturnType<typeof t.req>> | undefined;
      for (let i = 0; i < 50; i++) {
        down = await t.req({ method: 'GET', url: '/api/v1/account', key });
        if (down.statusCode !== 200) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(down?.statusCode, 503, down?.body);
      const body = down!.json();
      assert.equal(body.kind, 'unavailable');
      assert.match(body.message, /database is unavailable/);
      await pg.restart();
      let up = 0;
      for (let i = 0; i < 100 && up !== 200; i++) {
        up = (await t.req({ method: 'GET', url: '/api/v1/account', key })).statusCode;
        if (up !== 200) await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(up, 200, 'requests work again once the database is back');
    } finally {
      await t.close();
      await pg.stop();
    }
  });
});
