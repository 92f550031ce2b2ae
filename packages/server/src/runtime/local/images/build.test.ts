/**
 * Offline builds of the two local images, in the shared test cache
 * (`.sandboxd-test/images`, git-ignored; override with SANDBOXD_TEST_IMAGE_DIR) so reruns
 * only check. The first run bootstraps Debian from the apt mirror: a minute or two.
 */
import assert from 'node:assert/strict';
import { lstat, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { test } from 'node:test';
import { ciRevision } from './build-code-interpreter.js';
import { DEBIAN_REVISION } from './build-debian.js';
import { ensureDefaultImages, imageRevision } from './defaults.js';
import { selectImage } from './oci-read.js';
import { ImageStore } from './store.js';
import { runTool, toolEnv } from './run.js';
import { tempDir } from '../../../../test/images.js';

const SHARED =
  process.env.SANDBOXD_TEST_IMAGE_DIR ?? resolve(import.meta.dirname, '../../../../../../.sandboxd-test/images');
const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const mode = async (p: string) => (await lstat(p)).mode & 0o7777;
const has = (p: string) =>
  lstat(p).then(
    () => true,
    () => false,
  );

/** Runs a command chrooted into an image rootfs (read-only use: no writes expected). */
function inRootfs(rootfs: string, cmd: string): Promise<string> {
  return runTool(
    '/usr/sbin/chroot',
    [rootfs, '/usr/bin/env', '-i', `PATH=${PATH}`, 'HOME=/root', '/bin/sh', '-c', cmd],
    { timeoutMs: 30_000 },
  );
}

test('local images build offline and come out right', { timeout: 30 * 60_000 }, async () => {
  const store = new ImageStore({ dir: SHARED });
  const t0 = Date.now();
  const [bb, deb] = await ensureDefaultImages(store, (m) => console.log(`# ${m}`));
  console.log(
    `# ensureDefaultImages: ${((Date.now() - t0) / 1000).toFixed(1)} s (builds this run: ${store.stats.builds})`,
  );

  // busybox
  assert.equal(bb.ref, 'local/busybox:latest');
  assert.deepEqual(bb.env, { PATH });
  assert.equal(bb.workingDir, '/');
  assert.equal(bb.user, 'root');
  const b = (p: string) => join(bb.rootfsDir, p);
  assert.equal(await mode(b('bin/busybox')), 0o755);
  assert.equal(await readFile(b('etc/group'), 'utf8').then((s) => s.startsWith('root:x:0:')), true);
  assert.match(await readFile(b('etc/passwd'), 'utf8'), /^root:x:0:0:root:\/root:\/bin\/sh$/m);
  assert.equal(await mode(b('tmp')), 0o1777);
  assert.equal(await mode(b('root')), 0o700);
  for (const app of ['bin/sh', 'bin/ls', 'usr/bin/env', 'sbin/ip', 'usr/bin/wget']) {
    assert.equal((await lstat(b(app))).isSymbolicLink(), true, app);
  }
  assert.equal(await inRootfs(bb.rootfsDir, 'echo hi from $(readlink /bin/sh)'), 'hi from /bin/busybox\n');

  // debian
  assert.equal(deb.ref, 'local/debian:bookworm');
  assert.equal(deb.env.PATH, PATH);
  assert.equal(deb.workingDir, '/root');
  assert.equal(deb.user, 'root');
  const d = (p: string) => join(deb.rootfsDir, p);
  for (const f of [
    'usr/bin/bash',
    'usr/bin/python3',
    'usr/bin/curl',
    'usr/bin/ps',
    'etc/ssl/certs/ca-certificates.crt',
  ]) {
    assert.ok(await has(d(f)), f);
  }
  assert.ok((await has(d('usr/bin/ip'))) || (await has(d('usr/sbin/ip'))), 'ip');
  assert.equal((await lstat(d('usr/bin/su'))).mode & 0o4000, 0o4000, 'su keeps its setuid bit');
  assert.deepEqual(
    (await readdir(d('var/lib/apt/lists'))).filter((f) => f !== 'partial' && f !== 'lock'),
    [],
    'apt lists cleaned',
  );
  assert.deepEqual(
    (await readdir(d('var/cache/apt'))).filter((f) => f.endsWith('.bin')),
    [],
    'apt caches cleaned',
  );
  assert.equal(await has(d('usr/share/man/man1')), false, 'no man pages');
  assert.ok(deb.sizeBytes < 300 * 1024 * 1024, `size ${deb.sizeBytes}`);
  for (const img of [bb, deb]) {
    const etc = (f: string) => readFile(join(img.rootfsDir, 'etc', f), 'utf8');
    assert.equal(await etc('hostname'), '', `${img.ref}: no host name baked in`);
    assert.equal(await etc('resolv.conf'), '', `${img.ref}: no host resolver baked in`);
    assert.match(await etc('hosts'), /^127\.0\.0\.1\tlocalhost$/m);
  }
  const out = await inRootfs(
    deb.rootfsDir,
    'bash -c \'echo "$BASH_VERSION" | cut -d. -f1\'; python3 -B -c "print(6*7)"; curl --version | head -c 4; echo; id -un',
  );
  assert.equal(out, '5\n42\ncurl\nroot\n');
  // E2B's base template user: uid/gid 1000, a home it owns, bash.
  assert.match(await readFile(d('etc/passwd'), 'utf8'), /^user:x:1000:1000::\/home\/user:\/bin\/bash$/m);
  assert.equal((await stat(d('home/user'))).uid, 1000, "/home/user is user's");
  assert.equal(imageRevision(deb), DEBIAN_REVISION);
  console.log(
    `# debian: ${(deb.sizeBytes / 1048576).toFixed(1)} MiB unpacked, busybox: ${(bb.sizeBytes / 1048576).toFixed(1)} MiB`,
  );

  // The built OCI layouts are real (skopeo reads them, so they could be pushed).
  const tmp = await tempDir('build');
  try {
    const policy = join(tmp.dir, 'policy.json');
    await writeFile(policy, JSON.stringify({ default: [{ type: 'insecureAcceptAnything' }] }));
    for (const [img, tag] of [
      [bb, 'latest'],
      [deb, 'bookworm'],
    ] as const) {
      const layout = await store.builtLayout(img.ref as 'local/busybox:latest');
      assert.ok(layout, `layout of ${img.ref}`);
      const raw = await runTool('skopeo', ['--policy', policy, 'inspect', '--raw', `oci:${layout}:${tag}`], {
        timeoutMs: 30_000,
        env: toolEnv({ TMPDIR: tmp.dir }),
      });
      assert.equal((JSON.parse(raw) as { config: { digest: string } }).config.digest, img.digest);
    }
  } finally {
    await tmp.cleanup();
  }

  // A second store on the same dir finds both without building.
  const again = new ImageStore({ dir: SHARED });
  const t1 = Date.now();
  const [bb2, deb2] = await Promise.all([again.resolve('local/busybox'), again.resolve('local/debian:bookworm')]);
  console.log(`# cached resolve of both: ${Date.now() - t1} ms`);
  assert.equal(bb2.digest, bb.digest);
  assert.equal(deb2.digest, deb.digest);
  assert.deepEqual(again.stats, { pulls: 0, imports: 0, builds: 0, unpacks: 0 });
});

test('local/code-interpreter builds offline with its kernels, the code server and its service labels', {
  timeout: 30 * 60_000,
}, async () => {
  const store = new ImageStore({ dir: SHARED });
  const ci = (await ensureDefaultImages(store, (m) => console.log(`# ${m}`)))[2];
  assert.equal(ci.ref, 'local/code-interpreter:latest');
  assert.equal(await readFile(join(ci.rootfsDir, 'etc/sandboxd-image-revision'), 'utf8'), `${await ciRevision()}\n`);
  const layout = await store.builtLayout('local/code-interpreter:latest');
  assert.ok(layout);
  const img = await selectImage(layout, 'latest');
  const labels = (img.config.config as { Labels?: Record<string, string> }).Labels ?? {};
  assert.deepEqual(JSON.parse(labels['org.sandboxd.service.cmd']), [
    '/usr/bin/python3',
    '/opt/sandboxd-ci/server/supervise.py',
  ]);
  assert.equal(labels['org.sandboxd.service.port'], '49999');
  assert.equal(labels['org.sandboxd.service.health'], '/health');
  assert.equal(img.manifest.layers.length, 2, 'Debian base + the repository files');
  const c = (p: string) => join(ci.rootfsDir, p);
  assert.equal((await stat(c('opt/sandboxd-ci/server/main.py'))).uid, 0);
  assert.equal((await lstat(c('opt/sandboxd-ci/server/main.py'))).mode & 0o777, 0o644);
  assert.match(await readFile(c('etc/sudoers.d/user'), 'utf8'), /^user ALL=\(ALL:ALL\) NOPASSWD: ALL$/m);
  assert.ok(await has(c('usr/local/share/jupyter/kernels/python3/kernel.json')), 'python kernel spec');
  assert.ok(await has(c('usr/local/share/jupyter/kernels/ir/kernel.json')), 'R kernel spec');
  const out = await inRootfs(
    ci.rootfsDir,
    'python3 -B -c "import ipykernel, jupyter_client, numpy, pandas, matplotlib, scipy, PIL, sklearn, seaborn, bs4, openpyxl, requests; print(1)"; node -e "console.log(process.versions.node.split(\'.\')[0] >= 18)"; R --version | head -c 9; echo; id -u user',
  );
  assert.equal(out, '1\ntrue\nR version\n1000\n');
  console.log(`# code-interpreter: ${(ci.sizeBytes / 1048576).toFixed(1)} MiB unpacked`);
});
