/**
 * Black-box, real runtime: image builds FROM a pulled image. A registry on 127.0.0.1 that the
 * operator listed (docker-registry, serving the local busybox image pushed there) is pulled
 * from by a tenant's `FROM` and `COPY --from`, and the template works; a registry the
 * operator did not list, or a listed one reached by a loopback name, is refused with the
 * Dockerfile line before anything runs, and is never asked (a recording registry). The
 * server has an image cache of its own (the pulled refs never reach the shared one).
 */
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type FakeRegistry, startFakeRegistry } from '../../packages/server/test/fake-registry.js';
import { pushLayout, startRegistry, type TestRegistry, tempDir } from '../../packages/server/test/images.js';
import { Builds, withDockerfile } from './builds-support.js';
import { newAccount, RUNTIME, type Server, startServer } from './harness.js';
import { TEST_IMAGE_DIR } from './local-runtime.js';

describe('image builds from a pulled image (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 600_000,
}, () => {
  let tmp: { dir: string; cleanup: () => Promise<void> };
  let reg: TestRegistry | undefined;
  let unlisted: FakeRegistry | undefined;
  let s: Server | undefined;
  let b: Builds;
  let image = '';

  before(async () => {
    tmp = await tempDir('builds-pull');
    await mkdir(join(tmp.dir, 'reg'));
    reg = await startRegistry(join(tmp.dir, 'reg'));
    await pushLayout(join(TEST_IMAGE_DIR, 'layouts', 'busybox_latest'), 'latest', `${reg.host}/sbx/busybox:1`, tmp.dir);
    image = `${reg.host}/sbx/busybox:1`;
    unlisted = await startFakeRegistry();
    s = await startServer({
      env: {
        SANDBOXD_IMAGE_DIR: join(tmp.dir, 'images'),
        SANDBOXD_REGISTRIES_ALLOWED: reg.host,
        SANDBOXD_INSECURE_REGISTRIES: `${reg.host},${unlisted.host},localhost:${reg.host.split(':')[1]}`,
      },
    });
    b = new Builds(s, (await newAccount(s, { tokens: 100_000 })).key);
  });
  after(async () => {
    await b?.purge().catch(() => undefined);
    await s?.stop(); // its image cache is in tmp: it goes with it
    await reg?.stop();
    await unlisted?.stop();
    await tmp?.cleanup();
  });

  it("a tenant's FROM and COPY --from of a listed registry pull the image; the template works", async () => {
    const build = await b.run(
      { name: 'pulled' },
      withDockerfile(
        [
          `FROM ${image} AS src`,
          'RUN echo from-stage > /stage.txt',
          `FROM ${image}`,
          `COPY --from=${image} /bin/busybox /copied-busybox`,
          'COPY --from=src /stage.txt /stage.txt',
          'RUN echo pulled > /p',
          '',
        ].join('\n'),
      ),
    );
    assert.equal(build.state, 'ready', `${JSON.stringify(build.error)}\n${await b.logText(build.id)}`);
    const id = await b.sandbox('templates/pulled');
    const r = await b.sh(id, 'cat /p /stage.txt; test -x /copied-busybox && echo copied');
    assert.equal(r.stdout, 'pulled\nfrom-stage\ncopied\n', r.stderr);
    await b.deleteSandbox(id);
  });

  it('an unlisted registry, or a listed one by a loopback name, is refused with the line and never asked', async () => {
    const before = (await b.list()).length;
    const port = reg!.host.split(':')[1];
    for (const [df, line] of [
      [`FROM ${unlisted!.host}/sbx/evil:1\n`, 1],
      [`FROM ${image}\nCOPY --from=${unlisted!.host}/sbx/evil:1 /x /x\n`, 2],
      [`FROM localhost:${port}/sbx/busybox:1\n`, 1],
    ] as const) {
      const r = await b.start({ name: 'refused' }, withDockerfile(df));
      assert.equal(r.status, 400, `${df}: ${r.text}`);
      assert.equal(r.body.kind, 'validation');
      assert.match(r.body.message, new RegExp(`line ${line}`, 'i'), r.text);
      assert.match(r.body.message, /SANDBOXD_REGISTRIES_ALLOWED/, r.text);
    }
    assert.deepEqual(unlisted!.seen, [], 'the unlisted registry was never asked');
    assert.equal((await b.list()).length, before, 'no build was made');
  });
});
