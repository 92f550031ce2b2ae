/**
 * Builds with servers sharing one PostgreSQL database (replicas; one fake runtime behind
 * both): a build runs on the server that accepted it, another server's cancel ends it there,
 * and a build whose server is gone is ended by another one, its step sandbox deleted.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { plan, run, stage } from '../../test/builds.js';
import { withTestPostgres } from '../../test/postgres.js';
import type { AccountRecord, BuildRecord } from '../store/store.js';
import type { BuildService } from './builds.js';

withTestPostgres('builds across replicas', (server) => {
  /** Two apps on one fresh database and one fake runtime; `fn` runs with them and an account. */
  async function pair(fn: (a: TestApp, b: TestApp, account: AccountRecord) => Promise<void>): Promise<void> {
    const databaseUrl = await server().createSchema();
    const a = await makeTestApp({ databaseUrl, warmPool: [] });
    const b = await makeTestApp({ databaseUrl, warmPool: [] }, { driver: a.driver });
    try {
      const { id } = await a.newAccount();
      await fn(a, b, (await a.app.store.getAccount(id))!);
    } finally {
      await a.close();
      await b.close();
    }
  }
  const service = (t: TestApp) => t.app.services.builds as BuildService;
  const until = async (what: string, ok: () => Promise<boolean>) => {
    for (let i = 0; i < 300; i++) {
      if (await ok()) return;
      await sleep(20);
    }
    assert.fail(`${what} did not happen`);
  };
  const slow = plan(stage('local/busybox:latest', [run('sleep 2')]));

  describe('builds across replicas (PostgreSQL)', () => {
    it("another server's cancel ends a build where it runs: its sandbox goes, no template", async () =>
      pair(async (a, b, account) => {
        const started = await service(a).start(account, slow, { name: 'x', tag: 'latest', source: 'dockerfile' });
        await until('the step runs', async () => (await a.driver.list()).length === 1);
        const c = await service(b).cancel(account.id, started.id);
        assert.equal(c.state, 'cancelled');
        await until('the step sandbox goes', async () => (await a.driver.list()).length === 0);
        const seen: BuildRecord = await service(a).get(account.id, started.id);
        assert.equal(seen.state, 'cancelled');
        assert.deepEqual(await service(a).listTemplates(account.id), []);
        // The follow of a reader on the other server ends with the build.
        const events = [];
        for await (const e of service(b).logs(account.id, started.id, { follow: true })) events.push(e);
        assert.deepEqual(events.at(-1), { type: 'end', state: 'cancelled' });
      }));

    it('a build whose server is gone is ended by another server, its step sandbox deleted; one whose server runs is left alone', async () =>
      pair(async (a, b, account) => {
        const started = await service(a).start(account, slow, { name: 'y', tag: 'latest', source: 'dockerfile' });
        await until('the step runs', async () => (await a.driver.list()).length === 1);
        await service(b).tick();
        assert.equal((await service(b).get(account.id, started.id)).state, 'building', 'its server runs');
        // Server A's presence runs out (as after a kill -9 of it).
        const holder = (await a.app.store.getBuild(started.id))!.holder!;
        assert.ok(await b.app.store.releaseLease(`presence:${holder}`, holder));
        await service(b).tick();
        const lost = await service(b).get(account.id, started.id);
        assert.equal(lost.state, 'error');
        assert.match(lost.error?.message ?? '', /server stopped during the build/);
        await until('the step sandbox goes', async () => (await a.driver.list()).length === 0);
        assert.deepEqual(await service(a).listTemplates(account.id), []);
      }));
  });
});
