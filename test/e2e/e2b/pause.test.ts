/**
 * E2B's pause, connect-resumes and onTimeout pause with the unchanged npm `e2b` SDK against
 * the real server (SANDBOXD_E2E_RUNTIME=local for real containers under crun): a paused
 * sandbox is listed as paused, its in-sandbox calls fail cleanly, `Sandbox.connect` resumes
 * it with a background process still alive, and a sandbox created with
 * `lifecycle: {onTimeout: 'pause'}` is paused, not killed, at its timeout.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Sandbox } from 'e2b';
import { type E2bEnv, startE2b } from './support.js';

/** A label of this run, so lists see only this run's sandboxes. */
const RUN = `pause-${process.pid}-${Date.now()}`;

/** Polls `fn` until it returns a value (not undefined), at most `tries` times 250 ms apart. */
async function until<T>(what: string, fn: () => Promise<T | undefined>, tries = 120): Promise<T> {
  for (let i = 0; i < tries; i++) {
    const v = await fn();
    if (v !== undefined) return v;
    await sleep(250);
  }
  throw new Error(`gave up waiting for ${what}`);
}

describe("E2B's pause and resume through the e2b SDK", { timeout: 600_000 }, () => {
  let e: E2bEnv;
  before(async () => {
    e = await startE2b();
  });
  after(async () => {
    await e?.s.stop();
  });

  const idsOf = async (state: Array<'running' | 'paused'>) =>
    (await Sandbox.list({ query: { metadata: { suite: RUN }, state } }).nextItems()).map((x) => x.sandboxId);

  it('pause; listed as paused; envd calls fail cleanly; connect resumes it with its background process alive', async () => {
    const sbx = await Sandbox.create('base', { metadata: { suite: RUN }, timeoutMs: 120_000 });
    try {
      const bg = await sbx.commands.run(
        'i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done',
        {
          background: true,
          timeoutMs: 0,
        },
      );
      const count = async () => Number((await sbx.files.read('/tmp/count')).trim() || '0');
      await until('the counter', async () => ((await sbx.files.exists('/tmp/count')) ? true : undefined));

      assert.equal(await sbx.pause(), true, 'paused');
      assert.equal(await sbx.pause(), false, "already paused: E2B's 409, which the SDK answers false");
      assert.equal(await sbx.isRunning(), false);
      const info = await sbx.getInfo();
      assert.equal(info.state, 'paused');
      assert.deepEqual(await idsOf(['paused']), [sbx.sandboxId]);
      assert.deepEqual(await idsOf(['running']), []);
      assert.deepEqual(await idsOf(['running', 'paused']), [sbx.sandboxId]);
      // In-sandbox calls to a paused sandbox: the SDK's "not running" error, never a 500.
      for (const call of [() => sbx.commands.run('true'), () => sbx.files.read('/tmp/count')])
        await assert.rejects(call(), (err: Error) => {
          assert.doesNotMatch(err.message, /500|internal/i);
          assert.match(err.message, /paused|not running|unavailable/i);
          return true;
        });

      const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 90_000 });
      assert.equal((await again.getInfo()).state, 'running');
      assert.deepEqual(await idsOf(['running']), [sbx.sandboxId]);
      assert.equal((await again.commands.run('echo resumed')).stdout, 'resumed\n');
      // The process started before the pause continued where it was.
      const listed = await again.commands.list();
      assert.ok(
        listed.some((p) => p.pid === bg.pid),
        `pid ${bg.pid} in ${JSON.stringify(listed.map((p) => p.pid))}`,
      );
      const at = await count();
      await until('the counter to move on', async () => ((await count()) > at ? true : undefined));
      // Connect to a running sandbox is as before.
      assert.equal((await Sandbox.connect(sbx.sandboxId)).sandboxId, sbx.sandboxId);
      // betaPause (deprecated name in 2.51) and the static form pause too; a paused one can be killed.
      assert.equal(await again.betaPause(), true);
      assert.equal(await Sandbox.pause(sbx.sandboxId), false);
    } finally {
      assert.equal(await sbx.kill(), true, 'killed while paused');
    }
    assert.deepEqual(await idsOf(['running', 'paused']), []);
  });

  it("lifecycle onTimeout 'pause': at its timeout the sandbox is paused, not killed; connect resumes it", async () => {
    const sbx = await Sandbox.create('base', {
      metadata: { suite: RUN },
      lifecycle: { onTimeout: 'pause' },
      timeoutMs: 60_000,
    });
    try {
      assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false });
      await sbx.files.write('/home/user/kept.txt', 'kept');
      await sbx.setTimeout(1_000);
      await until('the sandbox to pause at its timeout', async () =>
        (await sbx.getInfo()).state === 'paused' ? true : undefined,
      );
      assert.deepEqual(await idsOf(['paused']), [sbx.sandboxId]);
      const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 });
      assert.equal(await again.files.read('/home/user/kept.txt'), 'kept');
      assert.equal((await again.commands.run('echo back')).stdout, 'back\n');
      assert.equal((await again.getInfo()).state, 'running');
    } finally {
      await sbx.kill();
    }
  });
});
