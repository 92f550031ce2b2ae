/**
 * Pulling for real: Debian's docker-registry on 127.0.0.1 (plain and with htpasswd auth),
 * the locally built busybox image pushed into it with skopeo, pulled back through the store.
 */
import assert from 'node:assert/strict';
import { lstat, mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { buildBusyboxLayout, BUSYBOX_CONFIG } from './build-busybox.js';
import { MT, readBlobJson, readIndex, type Descriptor, type OciManifest } from './oci-read.js';
import { tagManifest, writeBlob } from './oci-write.js';
import type { Progress } from './pull.js';
import { ImageStore } from './store.js';
import {
  freePort,
  htpasswdLine,
  pushLayout,
  startRegistry,
  tempDir,
  type TestRegistry,
} from '../../../../test/images.js';

const isNotFound = (e: unknown) =>
  e instanceof SandboxdError && e.kind === 'template_not_found' && e.message === 'Template not found';

describe('registry pulls', () => {
  let tmp: { dir: string; cleanup: () => Promise<void> };
  let reg: TestRegistry | undefined;
  let authReg: TestRegistry | undefined;
  let layout: string;
  let bbConfig: string;
  let bbManifest: string;
  const creds = { username: 'sbx', password: `pw-${process.pid}` };

  before(async () => {
    tmp = await tempDir('registry');
    layout = join(tmp.dir, 'layout');
    const work = join(tmp.dir, 'bbwork');
    await mkdir(work);
    const bb = await buildBusyboxLayout(layout, 'latest', work, { timeoutMs: 60_000 });
    bbConfig = bb.configDigest;
    bbManifest = bb.manifestDigest;
    await makeMultiArch(layout, bb.manifestDigest);
    await mkdir(join(tmp.dir, 'reg'));
    reg = await startRegistry(join(tmp.dir, 'reg'));
    for (const t of ['1', '2']) await pushLayout(layout, 'latest', `${reg.host}/sbx/busybox:${t}`, tmp.dir);
    await pushLayout(layout, 'multi', `${reg.host}/sbx/multi:1`, tmp.dir, undefined, true);
  });

  after(async () => {
    await reg?.stop();
    await authReg?.stop();
    await tmp?.cleanup();
  });

  test('pull by tag: rootfs and config as built', async () => {
    const store = new ImageStore({
      dir: join(tmp.dir, 's1'),
      insecureRegistries: [reg!.host],
      registriesAllowed: [reg!.host],
    });
    const events: Progress[] = [];
    const t0 = Date.now();
    const img = await store.pull(`${reg!.host}/sbx/busybox:1`, { onProgress: (p) => events.push(p) });
    console.log(`# pull + unpack of busybox from loopback registry: ${Date.now() - t0} ms`);
    assert.equal(img.digest, bbConfig);
    assert.equal(img.manifestDigest, bbManifest);
    assert.equal(img.env.PATH, BUSYBOX_CONFIG.env[0].slice(5));
    assert.equal(img.workingDir, '/');
    assert.equal(img.user, 'root');
    assert.deepEqual(img.cmd, ['/bin/sh']);
    const bin = await lstat(join(img.rootfsDir, 'bin/busybox'));
    assert.equal(bin.mode & 0o7777, 0o755);
    assert.ok(bin.size > 500_000);
    assert.equal((await lstat(join(img.rootfsDir, 'tmp'))).mode & 0o7777, 0o1777);
    assert.equal((await lstat(join(img.rootfsDir, 'root'))).mode & 0o7777, 0o700);
    assert.match(await readFile(join(img.rootfsDir, 'etc/passwd'), 'utf8'), /^root:x:0:0:/);
    assert.deepEqual([events[0].phase, events.at(-1)?.phase], ['pulling', 'done']);
    assert.ok(events.some((e) => e.phase === 'unpacking'));
    assert.ok(
      events.some((e) => e.phase === 'pulling' && (e.bytes ?? 0) > 500_000),
      'bytes reported',
    );

    // Cached: no second pull; a second tag of the same image shares the rootfs.
    const again = await store.resolve(`${reg!.host}/sbx/busybox:1`);
    assert.equal(again.rootfsDir, img.rootfsDir);
    const other = await store.resolve(`${reg!.host}/sbx/busybox:2`);
    assert.equal(other.rootfsDir, img.rootfsDir);
    assert.deepEqual(store.stats, { pulls: 2, imports: 0, builds: 0, unpacks: 1 });
    assert.deepEqual(
      (await store.list()).map((i) => i.ref),
      [`${reg!.host}/sbx/busybox:1`, `${reg!.host}/sbx/busybox:2`],
    );

    // remove: the rootfs stays while another ref names it, goes with the last one.
    await store.remove(`${reg!.host}/sbx/busybox:1`);
    assert.ok(await lstat(img.rootfsDir));
    await store.remove(`${reg!.host}/sbx/busybox:2`);
    await assert.rejects(lstat(img.rootfsDir));
    await assert.rejects(store.remove(`${reg!.host}/sbx/busybox:2`), isNotFound);
  });

  test('pull by digest and from a multi-arch index (picks linux/amd64)', async () => {
    const store = new ImageStore({
      dir: join(tmp.dir, 's2'),
      insecureRegistries: [reg!.host],
      registriesAllowed: [reg!.host],
    });
    const byDigest = await store.resolve(`${reg!.host}/sbx/busybox@${bbManifest}`);
    assert.equal(byDigest.digest, bbConfig);
    const multi = await store.resolve(`${reg!.host}/sbx/multi:1`);
    assert.equal(multi.digest, bbConfig, 'the amd64 entry, not the arm64 one');
    assert.equal(store.stats.unpacks, 1);
  });

  test('unknown tag, repository, registry: template_not_found', async () => {
    const dead = `127.0.0.1:${await freePort()}`;
    const store = new ImageStore({
      dir: join(tmp.dir, 's3'),
      insecureRegistries: [reg!.host, dead],
      registriesAllowed: [reg!.host, dead],
    });
    const check = async (ref: string) => {
      await assert.rejects(
        store.resolve(ref),
        (e: unknown) => isNotFound(e) && (e as SandboxdError).details !== undefined,
      );
      await assert.rejects(store.resolve(ref), (e: unknown) => {
        assert.deepEqual((e as SandboxdError).details, { image: ref });
        return true;
      });
    };
    await check(`${reg!.host}/sbx/busybox:nope`);
    await check(`${reg!.host}/sbx/nothing:1`);
    await check(`${dead}/sbx/busybox:1`);
    await check('local/nothing:1');
    // A plain-http registry not marked insecure is not reachable as https.
    const strict = new ImageStore({ dir: join(tmp.dir, 's4'), registriesAllowed: [reg!.host] });
    await assert.rejects(strict.resolve(`${reg!.host}/sbx/busybox:1`), isNotFound);
    await assert.rejects(
      store.pull('local/busybox:latest'),
      (e: unknown) => e instanceof SandboxdError && e.kind === 'validation',
    );
    assert.deepEqual(await store.list(), []);
  });

  test('registry with basic auth: credentials from options', async (t) => {
    const line = await htpasswdLine(creds.username, creds.password);
    if (!line) {
      t.skip('no bcrypt on this host (python3 crypt with blowfish missing): auth not tested');
      return;
    }
    await mkdir(join(tmp.dir, 'areg'));
    authReg = await startRegistry(join(tmp.dir, 'areg'), { htpasswd: line });
    await pushLayout(layout, 'latest', `${authReg.host}/sbx/private:1`, tmp.dir, creds);
    const ref = `${authReg.host}/sbx/private:1`;
    const anon = new ImageStore({
      dir: join(tmp.dir, 's5'),
      insecureRegistries: [authReg.host],
      registriesAllowed: [authReg.host],
    });
    await assert.rejects(anon.resolve(ref), isNotFound);
    const wrong = new ImageStore({
      dir: join(tmp.dir, 's6'),
      insecureRegistries: [authReg.host],
      registriesAllowed: [authReg.host],
      credentials: { [authReg.host]: { username: 'sbx', password: 'wrong' } },
    });
    await assert.rejects(wrong.resolve(ref), isNotFound);
    const good = new ImageStore({
      dir: join(tmp.dir, 's7'),
      insecureRegistries: [authReg.host],
      registriesAllowed: [authReg.host],
      credentials: { [authReg.host]: creds },
    });
    const img = await good.resolve(ref);
    assert.equal(img.digest, bbConfig);
    await authReg.stop();
  });
});

/**
 * Adds tag `multi` to `layout`: an index with an arm64 image (same layers, arm64 config)
 * listed first and the amd64 busybox manifest second.
 */
async function makeMultiArch(layout: string, amd64Manifest: string): Promise<void> {
  const man = await readBlobJson<OciManifest>(layout, amd64Manifest);
  const cfg = await readBlobJson<Record<string, unknown>>(layout, man.config.digest);
  const armCfg = await writeBlob(layout, Buffer.from(JSON.stringify({ ...cfg, architecture: 'arm64' })));
  const armMan = await writeBlob(layout, Buffer.from(JSON.stringify({ ...man, config: { ...man.config, ...armCfg } })));
  const amdSize = (await readIndex(layout)).manifests.find((m) => m.digest === amd64Manifest)!.size;
  const entries: Descriptor[] = [
    { mediaType: MT.manifest, ...armMan, platform: { architecture: 'arm64', os: 'linux' } },
    { mediaType: MT.manifest, digest: amd64Manifest, size: amdSize, platform: { architecture: 'amd64', os: 'linux' } },
  ];
  const index = await writeBlob(
    layout,
    Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT.index, manifests: entries })),
  );
  await tagManifest(layout, 'multi', { mediaType: MT.index, ...index });
}
