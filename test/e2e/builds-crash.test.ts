/**
 * Black-box, real runtime: kill -9 of the server in the middle of image builds, then a
 * restart on the same data dir. Each build that was running or queued ends `error` saying
 * the server stopped; its step sandboxes are gone (from the API and from the runtime); the
 * image store holds no half layer (no unnamed image of the instance, no work dir of the dead
 * process); no template appeared; and new builds work, reusing the layers finished before
 * the crash. A graceful stop (SIGTERM) mid-build also ends it `error`, never `ready`.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { newAccount, RUNTIME, type Server, startServer, until } from './harness.js';
import { BUSYBOX, Builds, DEBIAN, instanceImages, stopClean, withDockerfile } from './builds-support.js';

describe('image builds across a kill -9 (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 900_000,
}, () => {
  let s: Server;
  let b: Builds;
  let accountId: string;

  before(async () => {
    s = await startServer();
    const a = await newAccount(s, { tokens: 1_000_000, plan: 'PRO' });
    b = new Builds(s, a.key);
    accountId = a.id;
  });
  after(() => stopClean(s, [b]));

  /** Sandbox dirs the runtime keeps for this server (its records: one per sandbox it holds). */
  const runtimeSandboxes = () => {
    const dir = join(s.dataDir, 'sandboxes');
    return existsSync(dir) ? readdirSync(dir) : [];
  };
  const restart = async () => {
    s = await startServer({ dataDir: s.dataDir, port: s.port });
    b = new Builds(s, b.key);
  };

  it('kill -9 mid-RUN: after restart the build is `error` saying so, no sandbox or half layer is left, and a new build works', async () => {
    const df = (tail: string) =>
      [
        `FROM ${DEBIAN}`,
        'RUN head -c 2000000 /dev/urandom > /before && echo layer-one',
        'WORKDIR /w',
        `RUN echo running-the-long-step && ${tail}`,
        'RUN echo after > /after',
        '',
      ].join('\n');
    const running = await b.started({ name: 'crash', tag: 'v1' }, withDockerfile(df('sleep 600')));
    // A second build waits behind it or runs beside it: both must end the same way.
    const other = await b.started(
      { name: 'crash-other' },
      withDockerfile(`FROM ${BUSYBOX}\nRUN echo other && sleep 600\n`),
    );
    await until(
      'the long step to run',
      async () => ((await b.logText(running.id)).includes('running-the-long-step') ? true : undefined),
      300_000,
    );
    const step = (await b.stepSandboxes(running.id))[0];
    assert.ok(step, 'the long step runs in a sandbox');
    const before = runtimeSandboxes();
    assert.ok(before.length >= 1, `the runtime holds the step sandbox: ${before}`);
    const killedPid = s.proc.pid!;

    await s.kill('SIGKILL');
    await restart();

    for (const id of [running.id, other.id]) {
      const got = await b.get(id);
      assert.equal(got.status, 200, got.text);
      const build = got.body.build;
      assert.equal(build.state, 'error', JSON.stringify(build));
      assert.equal(build.error.kind, 'unavailable', JSON.stringify(build.error));
      assert.match(build.error.message, /server stopped during the build/i, build.error.message);
      assert.ok(build.finishedAt);
      const end = (await b.logs(id, { follow: true })).at(-1);
      assert.equal(end?.type === 'end' && end.state, 'error');
    }
    assert.ok(!(await b.templates()).some((t) => t.name.startsWith('crash')), 'no template');
    // The step sandboxes are gone: from the API, and from the runtime (its sandbox records) once reconciled.
    await until('the step sandboxes to go', async () => ((await b.stepSandboxes()).length === 0 ? true : undefined));
    assert.equal((await s.api('GET', `/api/v1/sandboxes/${step.id}`, { key: b.key })).status, 404);
    await until('the runtime to drop them', async () => (runtimeSandboxes().length === 0 ? true : undefined));
    // No half image: every image of this instance in the store is named; no work dir of the dead process.
    const store = await until('the store to settle', async () => {
      const x = instanceImages(s.dataDir);
      return x.unnamed.length === 0 ? x : undefined;
    });
    assert.deepEqual(
      store.work.filter((w) => w.startsWith(`${killedPid}.`)),
      [],
      'no work dir of the killed server',
    );
    const layers = store.refs.filter((r) => r.startsWith(`snapshot/${accountId}/_l.`));
    assert.ok(layers.length >= 1, 'the layer finished before the crash is kept (or collected), whole');

    // A new build works, and the layer made before the crash serves it from the cache (or it reran).
    const fresh = await b.run({ name: 'crash', tag: 'v2' }, withDockerfile(df('echo short')));
    assert.equal(fresh.state, 'ready', JSON.stringify(fresh.error));
    assert.ok(fresh.steps.cached >= 1, `cached ${JSON.stringify(fresh.steps)}`);
    const id = await b.sandbox('templates/crash:v2');
    assert.equal((await b.sh(id, 'test -s /before && cat /after && pwd')).stdout, 'after\n/w\n');
    await b.deleteSandbox(id);
    assert.deepEqual(await b.stepSandboxes(), []);
  });

  it('a graceful stop mid-build ends it `error` too (never ready, never half), and nothing is left', async () => {
    const running = await b.started(
      { name: 'stopped' },
      withDockerfile(`FROM ${BUSYBOX}\nRUN echo going && sleep 600\n`),
    );
    await until('the step to run', async () => ((await b.logText(running.id)).includes('going') ? true : undefined));
    assert.equal(await s.kill('SIGTERM'), 0, 'the server exits cleanly');
    await restart();
    const build = (await b.get(running.id)).body.build;
    assert.equal(build.state, 'error', JSON.stringify(build));
    assert.equal(build.error.kind, 'unavailable', JSON.stringify(build.error));
    assert.match(build.error.message, /shut|stopp/i);
    assert.deepEqual(await b.stepSandboxes(), []);
    await until('the runtime to drop the step sandbox', async () =>
      runtimeSandboxes().length === 0 ? true : undefined,
    );
    assert.deepEqual(instanceImages(s.dataDir).unnamed, []);
    assert.ok(!(await b.templates()).some((t) => t.name === 'stopped'));
  });
});
