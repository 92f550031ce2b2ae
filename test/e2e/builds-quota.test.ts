/**
 * Black-box, real runtime: what a plan bounds in image builds. A build whose layers pass the
 * plan's `buildCacheBytes` ends `error` with kind `quota` and makes no template; builds past
 * the plan's `maxBuilds` wait `queued` and run after; a build whose step cannot get a sandbox
 * because the plan's concurrency is taken by running sandboxes waits or fails clearly; an
 * allow list beyond the plan's egress is refused before anything runs.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { newAccount, RUNTIME, type Server, startServer, until } from './harness.js';
import { BUSYBOX, Builds, gzip, stopClean, withDockerfile } from './builds-support.js';

describe('image builds and the plan (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 900_000,
}, () => {
  let s: Server;
  const accounts: Builds[] = [];
  const cfgDir = mkdtempSync(join(tmpdir(), 'sbx-builds-cfg-'));
  const config = join(cfgDir, 'config.json');
  writeFileSync(
    config,
    JSON.stringify({
      plans: {
        TINYCACHE: { buildCacheBytes: 1_000_000, concurrency: 5 },
        TINYCTX: { buildContextBytes: 200_000 },
        ONEBUILD: { maxBuilds: 1, concurrency: 5 },
        ONESANDBOX: { concurrency: 1 },
        NOEGRESS: { egress: 'none' },
        RULES: { egress: 'allow' },
      },
    }),
  );

  before(async () => {
    s = await startServer({ env: { SANDBOXD_CONFIG: config } });
  });
  after(async () => {
    await stopClean(s, accounts);
    rmSync(cfgDir, { recursive: true, force: true });
  });

  const account = async (plan: string) => {
    const b = new Builds(s, (await newAccount(s, { tokens: 100_000, plan })).key);
    accounts.push(b);
    return b;
  };

  it('buildCacheBytes: a build whose layers pass it ends `error` (quota), no template; a small one fits', async () => {
    const b = await account('TINYCACHE');
    const big = await b.run(
      { name: 'big' },
      withDockerfile(`FROM ${BUSYBOX}\nRUN head -c 4000000 /dev/urandom > /blob\nRUN echo after\n`),
    );
    assert.equal(big.state, 'error', JSON.stringify(big));
    assert.equal(big.error?.kind, 'quota', JSON.stringify(big.error));
    assert.equal((big.error?.details as Record<string, unknown> | undefined)?.quota, 'buildCacheBytes');
    assert.ok(!(await b.templates()).some((t) => t.name === 'big'), 'no template');
    assert.deepEqual(await b.stepSandboxes(), []);
    const small = await b.run({ name: 'small' }, withDockerfile(`FROM ${BUSYBOX}\nRUN echo small > /small\n`));
    assert.equal(small.state, 'ready', JSON.stringify(small.error));
  });

  it('buildContextBytes: a larger context, or a small gzip that inflates past it, is refused (413) and nothing is made', async () => {
    const b = await account('TINYCTX');
    const df = `FROM ${BUSYBOX}\nCOPY . /ctx/\n`;
    const big = await b.start({ name: 'ctx' }, withDockerfile(df, { 'blob.bin': randomBytes(400_000) }));
    assert.equal(big.status, 413, big.text);
    assert.equal(big.body.kind, 'payload_too_large');
    // The refusal came before the body was read: the connection must not be left to carry
    // the next requests (they would hang until its idle timeout, then fail).
    for (let i = 0; i < 3; i++) assert.deepEqual(await b.list(), []);
    const bomb = gzip(withDockerfile(df, { 'zeros.bin': Buffer.alloc(20_000_000) }));
    assert.ok(bomb.length < 100_000, `the gzip is small (${bomb.length} bytes)`);
    const r = await b.start({ name: 'ctx' }, bomb);
    assert.equal(r.status, 413, r.text);
    for (let i = 0; i < 3; i++) assert.deepEqual(await b.list(), [], 'no build was made');
    const fits = await b.run({ name: 'ctx' }, withDockerfile(df, { 'small.txt': 'small' }));
    assert.equal(fits.state, 'ready', JSON.stringify(fits.error));
  });

  it('maxBuilds: a second build waits `queued` while the first runs, then runs', async () => {
    const b = await account('ONEBUILD');
    const first = await b.started(
      { name: 'first' },
      withDockerfile(`FROM ${BUSYBOX}\nRUN echo first-running && sleep 600\n`),
    );
    await until('the first build to run', async () =>
      (await b.logText(first.id)).includes('first-running') ? true : undefined,
    );
    const second = await b.started({ name: 'second' }, withDockerfile(`FROM ${BUSYBOX}\nRUN echo second > /second\n`));
    const queued = (await b.get(second.id)).body.build;
    assert.equal(queued.state, 'queued', 'waits behind the running one');
    assert.deepEqual(await b.stepSandboxes(second.id), []);
    assert.equal((await b.cancel(first.id)).status, 200);
    const done = await b.wait(second.id);
    assert.equal(done.state, 'ready', JSON.stringify(done.error));
  });

  it("the plan's concurrency taken by running sandboxes: the build waits for a free slot or fails clearly, never runs past it", async () => {
    const b = await account('ONESANDBOX');
    const busy = await b.sandbox(BUSYBOX);
    const build = await b.started({ name: 'blocked' }, withDockerfile(`FROM ${BUSYBOX}\nRUN echo ran > /ran\n`));
    // Either it fails with the plan's limit named, or it waits (no step sandbox beside the running one).
    const settled = await until(
      'the build to fail or wait',
      async () => {
        const x = (await b.get(build.id)).body.build;
        if (x.state === 'error') return x;
        const log = await b.logText(build.id);
        return /wait|concurrency|limit/i.test(log) ? x : undefined;
      },
      120_000,
    );
    if (settled.state === 'error') {
      assert.equal(settled.error.kind, 'concurrency', JSON.stringify(settled.error));
      assert.match(settled.error.message, /Concurrency limit reached/);
      assert.equal(settled.error.details.line, 2, 'the step that could not get a sandbox');
    } else {
      assert.deepEqual(await b.stepSandboxes(build.id), [], 'no step sandbox past the limit');
      await b.deleteSandbox(busy);
      const done = await b.wait(build.id);
      assert.equal(done.state, 'ready', JSON.stringify(done.error));
    }
    const list = (await s.api('GET', '/api/v1/sandboxes', { key: b.key })).body.sandboxes as Array<{ id: string }>;
    assert.ok(list.length <= 1);
  });

  it('a log past its cap: the build goes on, one line says the rest is not kept, and the stream ends', async () => {
    const b = await account('PRO');
    const build = await b.run(
      { name: 'loud' },
      withDockerfile(`FROM ${BUSYBOX}\nRUN seq 1 120000\nRUN echo after-the-flood > /after\n`),
    );
    assert.equal(build.state, 'ready', JSON.stringify(build.error));
    const events = await b.logs(build.id, { follow: true });
    const logs = events.filter((e) => e.type === 'log') as Array<{ seq: number; text: string }>;
    assert.deepEqual(events.at(-1), { type: 'end', state: 'ready' });
    assert.ok(logs.length <= 100_001, `${logs.length} lines kept`);
    assert.deepEqual(
      logs.map((e) => e.seq),
      logs.map((_, i) => i),
    );
    assert.match(logs.at(-1)!.text, /limit.*not kept/);
    const id = await b.sandbox('templates/loud');
    assert.equal((await b.sh(id, 'cat /after')).stdout, 'after-the-flood\n', 'the steps after the cut ran');
    await b.deleteSandbox(id);
  });

  it('a RUN past the step timeout fails the build naming it (timedOut); its sandbox is gone', async () => {
    const t = await startServer({ env: { SANDBOXD_BUILD_STEP_TIMEOUT_MS: '3000' } });
    const b = new Builds(t, (await newAccount(t, { tokens: 100_000 })).key);
    try {
      const build = await b.run({ name: 'slow' }, withDockerfile(`FROM ${BUSYBOX}\nRUN echo going && sleep 600\n`));
      assert.equal(build.state, 'error', JSON.stringify(build));
      assert.equal(build.error?.details?.line, 2);
      assert.equal(
        (build.error?.details as Record<string, unknown> | undefined)?.timedOut,
        true,
        JSON.stringify(build.error),
      );
      assert.match(build.error!.message, /step timeout \(3000 ms\)/);
      assert.match(String(build.error?.details?.output), /going/);
      assert.deepEqual(await b.stepSandboxes(), []);
    } finally {
      await stopClean(t, [b]);
    }
  });

  it('allowDomains beyond the plan: 400 naming it before anything runs; within it, accepted', async () => {
    const none = await account('NOEGRESS');
    const r = await none.start({ name: 'net', allowDomains: ['example.com'] }, withDockerfile(`FROM ${BUSYBOX}\n`));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.kind, 'validation');
    assert.match(r.body.message, /allowDomains/);
    assert.deepEqual(await none.list(), []);
    const rules = await account('RULES');
    const ok = await rules.run(
      { name: 'net', allowDomains: ['example.com', '*.example.org'] },
      withDockerfile(`FROM ${BUSYBOX}\nRUN echo ok\n`),
    );
    assert.equal(ok.state, 'ready', JSON.stringify(ok.error));
    const bad = await rules.start({ name: 'net', allowDomains: ['*'] }, withDockerfile(`FROM ${BUSYBOX}\n`));
    assert.equal(bad.status, 400, bad.text);
  });
});
