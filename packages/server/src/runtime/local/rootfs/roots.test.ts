import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { SandboxdError } from '@sandboxd/protocol';
import { RootfsManager, volumeOciMount } from './roots.js';
import { idmappedOciBind } from './idmap.js';
import { removeAndCheckLeaks } from '../../../../test/local-driver.js';
import { hostSnapshot, loopsUnder, mountsUnder, readMounts, type HostSnapshot } from './mounts.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../../../../../..');
const root = realpathSync(mkdtempSync(join(tmpdir(), 'sbx-rootfs-')));
const lower = join(root, 'image');
const CAP = 64 << 20;
const BASE = 300000;
const crunState = join(root, 'crun');
const crunId = `sbxtest-rootfs-${process.pid}`;
let snap: HostSnapshot;
let mgr: RootfsManager;

function sh(
  file: string,
  args: string[],
  opts: { uid?: number; timeoutMs?: number } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(
      file,
      args,
      { uid: opts.uid, gid: opts.uid, timeout: opts.timeoutMs ?? 30_000, killSignal: 'SIGKILL', maxBuffer: 4 << 20 },
      (err, stdout, stderr) => res({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }),
    );
  });
}
const isKind = (kind: string) => (e: unknown) => e instanceof SandboxdError && e.kind === kind;

before(async () => {
  snap = await hostSnapshot();
  chmodSync(root, 0o711);
  mkdirSync(join(lower, 'bin'), { recursive: true });
  mkdirSync(join(lower, 'etc'));
  copyFileSync('/bin/busybox', join(lower, 'bin', 'busybox'));
  chmodSync(join(lower, 'bin', 'busybox'), 0o755);
  for (const a of ['sh', 'ls', 'id', 'touch', 'cat', 'echo']) symlinkSync('busybox', join(lower, 'bin', a));
  writeFileSync(join(lower, 'etc', 'hello'), 'from the image\n');
  mgr = new RootfsManager({ dir: join(root, 'sandboxes') });
});

after(async () => {
  await sh('crun', ['--root', crunState, 'delete', '-f', crunId]).catch(() => undefined);
  for (const id of await mgr.list().catch(() => [] as string[])) await mgr.release(id).catch(() => undefined);
  await removeAndCheckLeaks(root, snap);
});

describe('RootfsManager', () => {
  it('prepares an idmapped copy-on-write root; release leaves nothing', { timeout: 60_000 }, async () => {
    const { rootfs, volumes } = await mgr.prepare({ id: 'a1', lowerDir: lower, rootDiskBytes: CAP, uidBase: BASE });
    const dir = join(mgr.dir, 'a1');
    assert.equal(rootfs, join(dir, 'rootfs'));
    assert.deepEqual(volumes, []);
    assert.equal(lstatSync(join(rootfs, 'bin', 'busybox')).uid, BASE, 'image root shows as sandbox root');
    assert.equal(lstatSync(join(rootfs, 'etc', 'hello')).gid, BASE);
    assert.equal(lstatSync(rootfs).uid, BASE);
    assert.equal(readFileSync(join(rootfs, 'etc', 'hello'), 'utf8'), 'from the image\n');
    const st = statSync(dir);
    assert.equal(st.mode & 0o777, 0o710);
    assert.equal(st.gid, BASE);
    assert.equal(lstatSync(join(dir, 'layer', 'upper')).uid, BASE);
    const mounts = await mountsUnder(dir);
    assert.deepEqual(mounts.map((m) => m.fsType).sort(), ['ext4', 'overlay']);
    assert.match(mounts.find((m) => m.fsType === 'overlay')!.options, /nodev/);
    assert.ok(statSync(`${dir}.img`).blocks * 512 < 2 << 20, 'the image starts sparse');
    assert.equal(statSync(`${dir}.img`).size, CAP);
    assert.deepEqual(await mgr.list(), ['a1']);

    // Sandbox root writes through the merged view; the lower image is untouched.
    const w = await sh('/bin/sh', ['-c', `echo changed > ${rootfs}/etc/hello && touch ${rootfs}/new`], { uid: BASE });
    assert.equal(w.code, 0, w.stderr);
    assert.equal(readFileSync(join(lower, 'etc', 'hello'), 'utf8'), 'from the image\n');
    assert.equal(lstatSync(join(dir, 'layer', 'upper', 'new')).uid, BASE);
    // Other host users cannot even enter the sandbox directory.
    assert.notEqual((await sh('/bin/ls', [rootfs], { uid: 5000 })).code, 0);

    await mgr.release('a1');
    await mgr.release('a1'); // idempotent
    assert.deepEqual(await mountsUnder(mgr.dir), []);
    assert.deepEqual(await loopsUnder(mgr.dir), []);
    assert.deepEqual(
      readdirSync(mgr.dir).filter((f) => f !== '.templates'),
      [],
    );
    assert.deepEqual(await mgr.list(), []);
  });

  it('detach() takes the layer off the host mount table; it stays listed; release leaves nothing', {
    timeout: 60_000,
  }, async () => {
    const vol = join(root, 'vol-detach');
    mkdirSync(vol, { recursive: true });
    await mgr.prepare({ id: 'd1', lowerDir: lower, rootDiskBytes: CAP, uidBase: BASE, volumes: [vol] });
    const dir = join(mgr.dir, 'd1');
    assert.equal((await mountsUnder(dir)).length, 3, 'ext4, overlay and the staged volume');
    await mgr.detach('d1');
    await mgr.detach('d1'); // idempotent
    await mgr.detach('unknown');
    assert.deepEqual(await mountsUnder(dir), []);
    // With no sandbox holding it here, the loop device goes with the last mount (autoclear,
    // which the kernel runs from a work queue: a moment later).
    for (let i = 0; i < 100 && (await loopsUnder(`${dir}.img`)).length; i++)
      await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(await loopsUnder(`${dir}.img`), []);
    assert.ok(existsSync(`${dir}.img`), 'the image stays until release');
    assert.deepEqual(await mgr.list(), ['d1'], 'a detached layer is still found (recovery)');
    await mgr.release('d1');
    assert.deepEqual(await mgr.list(), []);
    assert.ok(!existsSync(dir) && !existsSync(`${dir}.img`));
  });

  it('caps the writable layer: ENOSPC at about rootDiskBytes, host keeps its space', {
    timeout: 120_000,
  }, async (t) => {
    const { rootfs } = await mgr.prepare({ id: 'full', lowerDir: lower, rootDiskBytes: CAP, uidBase: BASE });
    const img = join(mgr.dir, 'full.img');
    const r = await sh('/bin/sh', ['-c', `dd if=/dev/zero of=${rootfs}/fill bs=1M count=256 2>&1; echo rc=$?`], {
      uid: BASE,
      timeoutMs: 60_000,
    });
    assert.match(r.stdout, /No space left on device/);
    const written = statSync(join(rootfs, 'fill')).size;
    t.diagnostic(`wrote ${written} bytes of a ${CAP}-byte cap; host file holds ${statSync(img).blocks * 512}`);
    assert.ok(written > CAP * 0.85 && written <= CAP, `wrote ${written} of ${CAP}`);
    assert.ok(statSync(img).blocks * 512 <= CAP, 'the host file never grows past the cap');
    // Freed space is punched back out of the host file (ext4 discard -> loop hole punching).
    const rm = await sh('/bin/sh', ['-c', `rm ${rootfs}/fill && sync`], { uid: BASE });
    assert.equal(rm.code, 0, rm.stderr);
    assert.ok(statSync(img).blocks * 512 < CAP / 2, `host file keeps ${statSync(img).blocks * 512} bytes after rm`);
    await mgr.release('full');
    assert.ok(!existsSync(img));
  });

  it('prepares 200 roots at once: no helper loses the race for a loop device', { timeout: 180_000 }, async () => {
    // LOOP_CTL_GET_FREE gives every caller the same device until one configures it; without
    // the helpers taking turns, some of a burst of 200 lost 64 times in a row (a 500 on create).
    const ids = Array.from({ length: 200 }, (_, i) => `burst${i}`);
    const made = await Promise.allSettled(
      ids.map((id) => mgr.prepare({ id, lowerDir: lower, rootDiskBytes: CAP, uidBase: BASE })),
    );
    const failed = made.flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : []));
    await Promise.all(ids.map((id) => mgr.release(id)));
    assert.deepEqual(failed, []);
    assert.deepEqual(await mgr.list(), []);
  });

  it('refuses duplicates and bad arguments without leaving anything', async () => {
    await mgr.prepare({ id: 'dup', lowerDir: lower, rootDiskBytes: CAP, uidBase: BASE });
    await assert.rejects(
      mgr.prepare({ id: 'dup', lowerDir: lower, rootDiskBytes: CAP, uidBase: BASE }),
      isKind('conflict'),
    );
    await mgr.release('dup');
    await assert.rejects(
      mgr.prepare({ id: 'Bad/id', lowerDir: lower, rootDiskBytes: CAP, uidBase: BASE }),
      isKind('validation'),
    );
    await assert.rejects(
      mgr.prepare({ id: 'b', lowerDir: lower, rootDiskBytes: 1 << 20, uidBase: BASE }),
      isKind('validation'),
    );
    await assert.rejects(
      mgr.prepare({ id: 'b', lowerDir: join(root, 'nope'), rootDiskBytes: CAP, uidBase: BASE }),
      isKind('validation'),
    );
    await assert.rejects(
      mgr.prepare({ id: 'b', lowerDir: lower, rootDiskBytes: CAP, uidBase: 0 }),
      isKind('validation'),
    );
    assert.deepEqual(await mgr.list(), []);
  });

  it('prepares many sandboxes at once, each on its own loop device', { timeout: 60_000 }, async () => {
    const ids = Array.from({ length: 12 }, (_, i) => `par${i}`);
    await Promise.all(
      ids.map((id, i) => mgr.prepare({ id, lowerDir: lower, rootDiskBytes: CAP, uidBase: BASE + i * 65536 })),
    );
    assert.deepEqual(await mgr.list(), [...ids].sort());
    const loops = await loopsUnder(mgr.dir);
    assert.equal(new Set(loops.map((l) => l.device)).size, ids.length);
    assert.equal(lstatSync(join(mgr.dir, 'par11', 'rootfs', 'bin')).uid, BASE + 11 * 65536);
    await Promise.all(ids.map((id) => mgr.release(id)));
    assert.deepEqual(await mgr.list(), []);
    assert.deepEqual(await loopsUnder(mgr.dir), []);
  });

  it('stages volumes idmapped inside the sandbox directory', async () => {
    const vol = join(root, 'vol-stage');
    mkdirSync(vol);
    writeFileSync(join(vol, 'f'), 'v');
    const p = await mgr.prepare({
      id: 'v1',
      lowerDir: lower,
      rootDiskBytes: CAP,
      uidBase: BASE,
      volumes: [vol, lower],
    });
    assert.deepEqual(p.volumes, [join(mgr.dir, 'v1', 'volumes', '0'), join(mgr.dir, 'v1', 'volumes', '1')]);
    assert.equal(lstatSync(join(p.volumes[0], 'f')).uid, BASE);
    assert.equal(lstatSync(join(p.volumes[1], 'bin', 'busybox')).uid, BASE);
    assert.deepEqual(volumeOciMount(p.volumes[0], '/data'), {
      destination: '/data',
      type: 'bind',
      source: p.volumes[0],
      options: ['bind', 'nosuid', 'nodev'],
    });
    await mgr.release('v1');
    assert.deepEqual(await mountsUnder(mgr.dir), []);
    assert.equal(readFileSync(join(vol, 'f'), 'utf8'), 'v', 'release never touches volume contents');
  });

  it('list() finds what a killed process left behind; release() cleans it', { timeout: 60_000 }, async () => {
    const script = join(root, 'crash.mts');
    writeFileSync(
      script,
      `import { RootfsManager } from ${JSON.stringify(join(here, 'roots.ts'))};
const m = new RootfsManager({ dir: ${JSON.stringify(join(root, 'sandboxes'))} });
await m.prepare({ id: 'crashed', lowerDir: ${JSON.stringify(lower)}, rootDiskBytes: ${CAP}, uidBase: ${BASE} });
process.kill(process.pid, 'SIGKILL');\n`,
    );
    await new Promise<void>((res) =>
      execFile(process.execPath, ['--import', 'tsx', script], { cwd: repo, timeout: 30_000 }, () => res()),
    );
    const fresh = new RootfsManager({ dir: join(root, 'sandboxes') });
    assert.deepEqual(await fresh.list(), ['crashed']);
    assert.equal((await mountsUnder(join(fresh.dir, 'crashed'))).length, 2);
    // Even with its files gone, the mounts and the loop device are still found.
    await fresh.release('crashed');
    assert.deepEqual(await fresh.list(), []);
    assert.deepEqual(await loopsUnder(fresh.dir), []);
  });

  it('runs a real crun container as root in a user namespace on the prepared root', { timeout: 60_000 }, async (t) => {
    if ((await sh('crun', ['--version'])).code !== 0) return t.skip('crun is not installed');
    const staged = join(root, 'vol-staged');
    const direct = join(root, 'vol-direct');
    for (const v of [staged, direct]) {
      mkdirSync(v, { mode: 0o755 });
      chmodSync(v, 0o755);
      writeFileSync(join(v, 'f'), 'vol\n');
    }
    const p = await mgr.prepare({ id: 'ctr', lowerDir: lower, rootDiskBytes: CAP, uidBase: BASE, volumes: [staged] });
    const bundle = join(root, 'bundle');
    mkdirSync(bundle);
    assert.equal((await sh('crun', ['spec', '-b', bundle])).code, 0);
    const cfg = JSON.parse(readFileSync(join(bundle, 'config.json'), 'utf8'));
    cfg.process.terminal = false;
    cfg.process.args = [
      'sh',
      '-c',
      'id; touch /x; ls -ln /; echo s > /staged/g; echo d > /direct/g; ls -ln /staged /direct',
    ];
    cfg.root = { path: p.rootfs, readonly: false };
    cfg.linux.namespaces.push({ type: 'user' });
    cfg.linux.uidMappings = [{ containerID: 0, hostID: BASE, size: 65536 }];
    cfg.linux.gidMappings = [{ containerID: 0, hostID: BASE, size: 65536 }];
    cfg.mounts.push(volumeOciMount(p.volumes[0], '/staged'), idmappedOciBind(direct, '/direct', { uidBase: BASE }));
    writeFileSync(join(bundle, 'config.json'), JSON.stringify(cfg));
    mkdirSync(crunState);
    // This host's hybrid cgroup layout needs crun run in a private mount namespace without cgroup2.
    const cmd = `mountpoint -q /sys/fs/cgroup/unified && umount /sys/fs/cgroup/unified; exec crun --root ${crunState} run --bundle ${bundle} ${crunId} </dev/null`;
    const r = await sh('unshare', ['-m', '--propagation', 'private', 'sh', '-c', cmd], { timeoutMs: 30_000 });
    assert.equal(r.code, 0, r.stderr);
    t.diagnostic(r.stdout);
    assert.match(r.stdout, /uid=0(\(root\))? gid=0/);
    const lines = r.stdout.split('\n');
    for (const name of ['bin', 'etc', 'x']) {
      const l = lines.find((x) => x.trim().endsWith(` ${name}`));
      assert.match(l ?? '', /^\S+\s+\d+\s+0\s+0\s/, `/${name} owned by root inside: ${l}`);
    }
    assert.ok(
      lines.filter((x) => / g$/.test(x)).every((x) => /^\S+\s+\d+\s+0\s+0\s/.test(x)),
      r.stdout,
    );
    assert.equal(
      lstatSync(join(mgr.dir, 'ctr', 'layer', 'upper', 'x')).uid,
      BASE,
      'the layer stores sandbox root as uidBase',
    );
    assert.equal(lstatSync(join(staged, 'g')).uid, 0, 'volume files are stored canonically (uid 0)');
    assert.equal(lstatSync(join(direct, 'g')).uid, 0);
    await mgr.release('ctr');
    assert.deepEqual(
      (await readMounts()).filter((m) => m.mountPoint.startsWith(root)),
      [],
    );
  });
});
