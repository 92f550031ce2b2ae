/**
 * Layer semantics through the real unpack path (umoci): a hand-made 3-layer image with
 * whiteouts, an opaque dir, symlinks, hardlinks, setuid, owners and modes, imported from an
 * OCI layout, an OCI archive and a `docker save` style archive.
 */
import assert from 'node:assert/strict';
import {
  chmod,
  chown,
  link,
  lstat,
  mkdir,
  readdir,
  readFile,
  readlink,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { writeOciImage } from './oci-write.js';
import { runTool, toolEnv } from './run.js';
import { ImageStore } from './store.js';
import { tarDir, tempDir } from '../../../../test/images.js';

async function put(root: string, rel: string, content: string, mode = 0o644, uid = 0, gid = 0): Promise<void> {
  const p = join(root, rel);
  await mkdir(join(p, '..'), { recursive: true });
  await writeFile(p, content);
  await chown(p, uid, gid);
  await chmod(p, mode); // after chown: chown clears setuid
}

async function dir(root: string, rel: string, mode = 0o755, uid = 0, gid = 0): Promise<void> {
  const p = join(root, rel);
  await mkdir(p, { recursive: true });
  await chown(p, uid, gid);
  await chmod(p, mode);
}

/** Writes the three layers; returns their tar paths. */
async function makeLayers(base: string): Promise<string[]> {
  const l1 = join(base, 'l1');
  await dir(l1, '.');
  await put(l1, 'etc/keep', 'keep\n');
  await put(l1, 'etc/gone', 'gone\n');
  await put(l1, 'opq/old1', 'old\n');
  await put(l1, 'opq/sub/old2', 'old\n');
  await put(l1, 'data/a', 'hardlinked\n');
  await link(join(l1, 'data/a'), join(l1, 'data/b'));
  await symlink('data/a', join(l1, 'link'));
  await symlink('/etc/keep', join(l1, 'abslink'));
  await put(l1, 'bin/su', '#!/bin/sh\n', 0o4755);
  await put(l1, 'bin/sg', '#!/bin/sh\n', 0o2755);
  await dir(l1, 'home/user', 0o700, 1000, 1000);
  await put(l1, 'home/user/file', 'mine\n', 0o600, 1000, 1000);
  await dir(l1, 'secret', 0o700);
  await put(l1, 'doomed/inner', 'x\n');

  const l2 = join(base, 'l2');
  await dir(l2, '.');
  await put(l2, 'etc/.wh.gone', '');
  await put(l2, 'opq/.wh..wh..opq', '');
  await put(l2, 'opq/new', 'new\n');
  await put(l2, 'hl/x', 'pair\n', 0o640, 1000, 1000);
  await link(join(l2, 'hl/x'), join(l2, 'hl/y'));
  await dir(l2, 'tmp', 0o1777);

  const l3 = join(base, 'l3');
  await dir(l3, '.');
  await put(l3, '.wh.doomed', '');
  await put(l3, 'etc/keep', 'keep v3\n');

  const tars = [];
  for (const [i, d] of [l1, l2, l3].entries()) {
    const t = join(base, `layer${i + 1}.tar`);
    await tarDir(d, t);
    tars.push(t);
  }
  return tars;
}

async function walk(root: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(root, { withFileTypes: true, recursive: true })) out.push(join(e.parentPath, e.name));
  return out;
}

async function exists(p: string): Promise<boolean> {
  return lstat(p).then(
    () => true,
    () => false,
  );
}

/** Asserts every property the layers above promise. */
async function assertSemantics(rootfs: string): Promise<void> {
  const r = (p: string) => join(rootfs, p);
  assert.equal(await exists(r('etc/gone')), false, 'whiteout removes etc/gone');
  assert.equal(await exists(r('etc/keep')), true);
  assert.equal(await readFile(r('etc/keep'), 'utf8'), 'keep v3\n', 'upper layer wins');
  assert.deepEqual((await readdir(r('opq'))).sort(), ['new'], 'opaque dir hides lower content');
  assert.equal(await exists(r('doomed')), false, 'whiteout removes a whole dir');
  const wh = (await walk(rootfs)).filter((p) => p.includes('.wh.'));
  assert.deepEqual(wh, [], 'no whiteout files left');
  assert.equal(await readlink(r('link')), 'data/a');
  assert.equal(await readlink(r('abslink')), '/etc/keep');
  const [a, b] = [await lstat(r('data/a')), await lstat(r('data/b'))];
  assert.equal(a.ino, b.ino, 'hardlink pair shares an inode');
  assert.equal(a.nlink, 2);
  const [x, y] = [await lstat(r('hl/x')), await lstat(r('hl/y'))];
  assert.equal(x.ino, y.ino, 'hardlink pair in upper layer shares an inode');
  assert.equal(x.uid, 1000);
  assert.equal(x.mode & 0o7777, 0o640);
  assert.equal((await lstat(r('bin/su'))).mode & 0o7777, 0o4755, 'setuid kept');
  assert.equal((await lstat(r('bin/sg'))).mode & 0o7777, 0o2755, 'setgid kept');
  const home = await lstat(r('home/user'));
  assert.deepEqual([home.uid, home.gid, home.mode & 0o7777], [1000, 1000, 0o700]);
  const f = await lstat(r('home/user/file'));
  assert.deepEqual([f.uid, f.gid, f.mode & 0o7777], [1000, 1000, 0o600]);
  const s = await lstat(r('secret'));
  assert.deepEqual([s.uid, s.gid, s.mode & 0o7777], [0, 0, 0o700]);
  assert.equal((await lstat(r('tmp'))).mode & 0o7777, 0o1777);
  const top = await stat(rootfs);
  assert.deepEqual([top.uid, top.gid, top.mode & 0o7777], [0, 0, 0o755], 'rootfs owned by real root');
}

describe('layer semantics', () => {
  let tmp: { dir: string; cleanup: () => Promise<void> };
  let layout: string;
  let configDigest: string;

  before(async () => {
    tmp = await tempDir('layers');
    const tars = await makeLayers(join(tmp.dir, 'src'));
    layout = join(tmp.dir, 'layout');
    const w = await writeOciImage(layout, {
      tag: 't',
      layers: tars,
      config: { env: ['A=1', 'B=x=y', 'NOEQ', 'PATH=/bin'], workingDir: '/work', user: '1000:1000' },
    });
    configDigest = w.configDigest;
    await writeOciImage(layout, { tag: 'bare', layers: [tars[0]], config: {} });
    await writeOciImage(join(tmp.dir, 'only-bare'), { tag: 'x', layers: [tars[0]], config: {} });
    await writeOciImage(join(tmp.dir, 'only-full'), { tag: 'y', layers: tars, config: {} });
  });
  after(async () => tmp.cleanup());

  test('from an OCI layout dir', async () => {
    const store = new ImageStore({ dir: join(tmp.dir, 's1') });
    const img = await store.importArchive(layout, 'test/layers:t');
    assert.equal(img.digest, configDigest);
    assert.equal(img.canonicalRef, 'docker.io/test/layers:t');
    assert.deepEqual(img.env, { A: '1', B: 'x=y', PATH: '/bin' });
    assert.equal(img.workingDir, '/work');
    assert.equal(img.user, '1000:1000');
    assert.ok(img.sizeBytes > 0);
    await assertSemantics(img.rootfsDir);
    const again = await store.resolve('test/layers:t');
    assert.equal(again.rootfsDir, img.rootfsDir);
    assert.equal(store.stats.unpacks, 1);
    assert.deepEqual(await readdir(join(tmp.dir, 's1', 'tmp')), [], 'work dirs removed');
  });

  test('config defaults: WorkingDir /, User root', async () => {
    const store = new ImageStore({ dir: join(tmp.dir, 's2') });
    const img = await store.importArchive(layout, 'local/bare:bare');
    assert.equal(img.workingDir, '/');
    assert.equal(img.user, 'root');
    assert.deepEqual(img.env, {});
  });

  test('from a docker save style archive and an OCI archive', async () => {
    const docker = join(tmp.dir, 'docker.tar');
    const oci = join(tmp.dir, 'oci.tar');
    const policy = join(tmp.dir, 'policy.json');
    await writeFile(policy, JSON.stringify({ default: [{ type: 'insecureAcceptAnything' }] }));
    const env = toolEnv({ TMPDIR: tmp.dir });
    await runTool(
      'skopeo',
      ['--policy', policy, 'copy', '--quiet', `oci:${layout}:t`, `docker-archive:${docker}:sbx/layers:2`],
      { timeoutMs: 60_000, env },
    );
    await runTool('skopeo', ['--policy', policy, 'copy', '--quiet', `oci:${layout}:t`, `oci-archive:${oci}:t`], {
      timeoutMs: 60_000,
      env,
    });
    const s3 = new ImageStore({ dir: join(tmp.dir, 's3') });
    const d = await s3.importArchive(docker); // name taken from RepoTags
    assert.equal(d.canonicalRef, 'docker.io/sbx/layers:2');
    assert.deepEqual(d.env, { A: '1', B: 'x=y', PATH: '/bin' });
    assert.equal(d.user, '1000:1000');
    await assertSemantics(d.rootfsDir);
    const s4 = new ImageStore({ dir: join(tmp.dir, 's4') });
    const o = await s4.importArchive(oci, 'sbx/oci:1');
    assert.equal(o.digest, configDigest);
    await assertSemantics(o.rootfsDir);
  });

  test('a ref moved to another image; prune drops the unnamed one unless in use', async () => {
    const store = new ImageStore({ dir: join(tmp.dir, 's6') });
    const a = await store.importArchive(join(tmp.dir, 'only-bare'), 'p/q:1');
    const b = await store.importArchive(join(tmp.dir, 'only-full'), 'p/q:1');
    assert.notEqual(a.digest, b.digest);
    assert.equal((await store.resolve('p/q:1')).digest, b.digest);
    assert.deepEqual(await store.prune([a.digest], { minAgeMs: 0 }), [], 'kept while in use');
    assert.deepEqual(await store.prune(), [], 'kept while fresh');
    assert.deepEqual(await store.prune([], { minAgeMs: 0 }), [a.digest]);
    assert.equal(await exists(a.rootfsDir), false);
    assert.equal(await exists(b.rootfsDir), true);
  });

  test('bad imports are validation errors', async () => {
    const store = new ImageStore({ dir: join(tmp.dir, 's5') });
    const isValidation = (re: RegExp) => (e: unknown) =>
      e instanceof SandboxdError && e.kind === 'validation' && re.test(e.message);
    await assert.rejects(store.importArchive(join(tmp.dir, 'nope.tar'), 'a/b:1'), isValidation(/no such file/));
    await writeFile(join(tmp.dir, 'junk.tar'), 'not a tar at all');
    await assert.rejects(store.importArchive(join(tmp.dir, 'junk.tar'), 'a/b:1'), isValidation(/tar|archive/));
    await assert.rejects(store.importArchive(join(tmp.dir, 'src'), 'a/b:1'), isValidation(/OCI image layout/));
    await assert.rejects(store.importArchive(layout, 'a/b:nomatch'), isValidation(/several images/));
    await assert.rejects(store.importArchive(layout), isValidation(/several images|pass a ref/));
    await assert.rejects(store.importArchive(layout, 'Bad/Ref'), isValidation(/lowercase/));
    assert.deepEqual(await store.list(), []);
  });
});
