/**
 * A server killed with SIGKILL in the middle of a build (a child process on the real
 * runtime), then started again on its data dir: the build ends `error` saying why, its step
 * sandbox is gone from the runtime, no layer image without a row is left, the finished
 * steps stay cached, and a new build works.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import pino from 'pino';
import { assertNoImagesOf, buildConfig, plan, run, stage } from '../../test/builds.js';
import { makeTestDriver, removeAndCheckLeaks } from '../../test/local-driver.js';
import { buildApp, type Sandboxd } from '../app.js';
import { hostSnapshot } from '../runtime/local/rootfs/mounts.js';
import { SqliteStore } from '../store/sqlite/store.js';

const LOCAL = process.env.SANDBOXD_E2E_RUNTIME === 'local' && process.getuid?.() === 0;

describe('builds: kill -9 of the server mid-build', {
  skip: LOCAL ? false : 'needs SANDBOXD_E2E_RUNTIME=local',
}, () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c().catch((e) => console.error(e));
  });

  it('the build ends error, its sandbox and stray layers go, finished steps stay cached, a new build works', async () => {
    const hostBefore = await hostSnapshot();
    const { driver, options, dataDir: base } = makeTestDriver('bcrash');
    cleanups.push(async () => {
      await driver.destroyAll();
      await removeAndCheckLeaks(base, hostBefore);
      assertNoImagesOf(driver);
    });
    const dataDir = join(base, 'data');
    mkdirSync(dataDir, { recursive: true });
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(import.meta.dirname, '../../test/testdata/build-crash-child.ts'),
        JSON.stringify(options),
        dataDir,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const exited = new Promise((r) => child.once('exit', r));
    cleanups.push(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`the child did not start its build: ${out}`)), 120_000);
      child.stdout!.on('data', (b) => {
        out += b;
        const m = /running \S+ \S+\n/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[0]);
        }
      });
      child.once('exit', (code) => reject(new Error(`the child exited (${code}): ${out}`)));
    });
    const [, accountId, buildId] = line.trim().split(' ');
    child.kill('SIGKILL');
    await exited;

    // The same data dir and host settings again: what `npm start` after a crash does.
    const config = buildConfig(dataDir, options);
    const app: Sandboxd = await buildApp({
      config,
      driver,
      store: new SqliteStore(config.dbPath),
      logger: pino({ level: 'silent' }),
    });
    await app.start();
    cleanups.push(async () => {
      for (const t of await app.services.builds.listTemplates(accountId))
        await app.services.builds.deleteTemplate(accountId, t.name, t.tag);
      for (const l of await app.store.listLayers(accountId)) if (l.driverRef) await driver.deleteImage(l.driverRef);
      await app.close();
    });
    const b = await app.services.builds.get(accountId, buildId);
    assert.equal(b.state, 'error');
    assert.equal(b.error?.kind, 'unavailable');
    assert.match(b.error?.message ?? '', /server stopped during the build/);
    assert.deepEqual(await driver.list(), [], 'no sandbox is left in the runtime');
    const layers = (await app.store.listLayers(accountId)).filter((l) => l.driverRef !== '');
    assert.equal(layers.length, 1, 'the finished first step');
    const images = (await driver.listSnapshots()).map((i) => i.ref).filter((r) => r.includes(`/${accountId}/`));
    assert.deepEqual(images, [layers[0].driverRef], 'no layer image without its row');

    const account = (await app.store.getAccount(accountId))!;
    const again = await app.services.builds.start(
      account,
      plan(stage('local/busybox:latest', [run('echo first > /first'), run('echo second > /second')])),
      { name: 'after', tag: 'latest', source: 'dockerfile' },
    );
    let done = await app.services.builds.get(accountId, again.id);
    for (let i = 0; i < 600 && !['ready', 'error', 'cancelled'].includes(done.state); i++) {
      await new Promise((r) => setTimeout(r, 100));
      done = await app.services.builds.get(accountId, again.id);
    }
    assert.equal(done.state, 'ready', JSON.stringify(done.error));
    assert.equal(done.stepsCached, 2, 'FROM and the first step came from the cache');
  });
});
