import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { SandboxdError } from '@sandboxd/protocol';
import { VolumeStore } from './volumes.js';
import { idmappedBind } from './idmap.js';
import { removeAndCheckLeaks } from '../../../../test/local-driver.js';
import { hostSnapshot, loopsUnder, mountsUnder, run, unmount, type HostSnapshot } from './mounts.js';

const root = realpathSync(mkdtempSync(join(tmpdir(), 'sbx-volumes-')));
const SMALL = 0.0625; // 64 MiB, in GiB
let snap: HostSnapshot;
let store: VolumeStore;
const children: ChildProcess[] = [];

const isKind = (kind: string, msg?: RegExp) => (e: unknown) =>
  e instanceof SandboxdError && e.kind === kind && (!msg || msg.test(e.message));
function sh(cmd: string, uid?: number): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile('/bin/sh', ['-c', cmd], { uid, gid: uid, timeout: 60_000, killSignal: 'SIGKILL' }, (err, stdout, stderr) =>
      res({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }),
    );
  });
}
const mountCount = async (p: string) => (await mountsUnder(p)).filter((m) => m.mountPoint === p).length;
const loopCount = async (name: string) => (await loopsUnder(join(store.dir, name, 'volume.img'))).length;

before(async () => {
  snap = await hostSnapshot();
  chmodSync(root, 0o711);
  store = new VolumeStore({ dir: join(root, 'volumes') });
});

after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await new Promise((r) => setTimeout(r, 50));
  await removeAndCheckLeaks(root, snap);
});

describe('VolumeStore', () => {
  it('ensure creates once; another size is a conflict naming the existing size', async () => {
    assert.deepEqual(await store.ensure('v-size', SMALL), { name: 'v-size', sizeGb: SMALL });
    assert.deepEqual(await store.ensure('v-size', SMALL), { name: 'v-size', sizeGb: SMALL });
    await assert.rejects(store.ensure('v-size', 1), (e: unknown) => {
      assert.ok(e instanceof SandboxdError);
      assert.equal(e.kind, 'conflict');
      assert.equal(e.status, 409);
      assert.match(e.message, /exists with size 0\.063 GB/);
      return true;
    });
    const img = join(store.dir, 'v-size', 'volume.img');
    assert.equal(statSync(img).size, 64 << 20);
    assert.ok(statSync(img).blocks * 512 < 8 << 20, 'sparse');
    assert.equal(statSync(store.dir).mode & 0o777, 0o700);
    await assert.rejects(store.ensure('../x', 1), isKind('validation'));
    await assert.rejects(store.ensure('ok', 0), isKind('validation'));
    await assert.rejects(store.ensure('ok', 2000), isKind('validation'));
    // Concurrent ensures of one new name make one volume.
    const r = await Promise.all([store.ensure('v-race', SMALL), store.ensure('v-race', SMALL)]);
    assert.deepEqual(r[0], r[1]);
    assert.deepEqual(
      (await store.list()).map((v) => v.name),
      ['v-race', 'v-size'],
    );
    await store.delete('v-race');
    await store.delete('v-size');
  });

  it('mounts once for several sandboxes; unmounts and detaches on the last release', async () => {
    await store.ensure('shared', SMALL);
    const p1 = await store.acquire('shared', 'sb1');
    const p2 = await store.acquire('shared', 'sb2');
    assert.equal(p1, p2);
    assert.equal(await mountCount(p1), 1);
    assert.equal(await loopCount('shared'), 1);
    assert.equal(lstatSync(p1).uid, 0, 'canonical owner on disk is root');
    assert.deepEqual((await store.list()).find((v) => v.name === 'shared')?.mountedBy, ['sb1', 'sb2']);
    await assert.rejects(store.delete('shared'), isKind('conflict', /mounted by sb1, sb2/));
    await store.release('shared', 'sb1');
    assert.equal(await mountCount(p1), 1);
    await store.release('shared', 'sb2');
    assert.equal(await mountCount(p1), 0);
    assert.equal(await loopCount('shared'), 0);
    await store.release('shared', 'sb2'); // no-op
    await store.delete('shared');
    await assert.rejects(store.delete('shared'), isKind('not_found'));
    await assert.rejects(store.acquire('shared', 'sb1'), isKind('not_found'));
  });

  it('caps writes with ENOSPC and keeps data across release and re-acquire', { timeout: 120_000 }, async (t) => {
    await store.ensure('capped', SMALL);
    const mnt = await store.acquire('capped', 'sb1');
    writeFileSync(join(mnt, 'keep'), 'kept\n');
    const r = await sh(`dd if=/dev/zero of=${mnt}/fill bs=1M count=256 2>&1; echo rc=$?`);
    assert.match(r.stdout, /No space left on device/);
    const written = statSync(join(mnt, 'fill')).size;
    t.diagnostic(`wrote ${written} bytes into a 64 MiB volume`);
    assert.ok(written > (64 << 20) * 0.7 && written <= 64 << 20, String(written));
    assert.ok(statSync(join(store.dir, 'capped', 'volume.img')).blocks * 512 <= 64 << 20);
    rmSync(join(mnt, 'fill'));
    await store.release('capped', 'sb1');
    const again = await store.acquire('capped', 'sb3');
    assert.equal(readFileSync(join(again, 'keep'), 'utf8'), 'kept\n');
    await store.release('capped', 'sb3');
    await store.delete('capped');
  });

  it('lets sandboxes with different uidBase share a volume, each seeing root as root', async () => {
    await store.ensure('multi', SMALL);
    const host = await store.acquire('multi', 'a');
    await store.acquire('multi', 'b');
    const [va, vb] = [join(root, 'va'), join(root, 'vb')];
    mkdirSync(va);
    mkdirSync(vb);
    await idmappedBind(host, va, { uidBase: 500000 });
    await idmappedBind(host, vb, { uidBase: 565536 });
    try {
      const w = await sh(`echo from-a > ${va}/by-a`, 500000);
      assert.equal(w.code, 0, w.stderr);
      assert.equal(lstatSync(join(host, 'by-a')).uid, 0, 'stored as root on disk');
      assert.equal(lstatSync(join(vb, 'by-a')).uid, 565536, "root-owned in b's view");
      const w2 = await sh(`echo from-b >> ${vb}/by-a`, 565536);
      assert.equal(w2.code, 0, w2.stderr);
      assert.equal(readFileSync(join(host, 'by-a'), 'utf8'), 'from-a\nfrom-b\n');
    } finally {
      await unmount([va, vb]);
    }
    await store.release('multi', 'a');
    await store.release('multi', 'b');
    await store.delete('multi');
  });

  it('a busy host mount stays mounted on release and is reused; delete is refused meanwhile', async () => {
    await store.ensure('busy', SMALL);
    const mnt = await store.acquire('busy', 's1');
    const holder = spawn('sleep', ['30'], { cwd: mnt, stdio: 'ignore' });
    children.push(holder);
    await new Promise((r) => holder.once('spawn', r));
    await store.release('busy', 's1');
    assert.equal(await mountCount(mnt), 1);
    await assert.rejects(store.delete('busy'), isKind('conflict'));
    assert.equal(await store.acquire('busy', 's2'), mnt);
    assert.equal(await loopCount('busy'), 1);
    // A lazily detached mount keeps its loop device: acquire must reuse that device,
    // never attach the image a second time.
    await run('umount', ['-l', mnt]);
    assert.equal(await mountCount(mnt), 0);
    assert.equal(await loopCount('busy'), 1);
    writeFileSync(join(`/proc/${holder.pid}/cwd`, 'seen'), 'x'); // written through the detached mount
    await store.release('busy', 's2');
    const again = await store.acquire('busy', 's3');
    assert.equal(await loopCount('busy'), 1);
    assert.equal(readFileSync(join(again, 'seen'), 'utf8'), 'x');
    holder.kill('SIGKILL');
    await new Promise((r) => holder.once('exit', r));
    await store.release('busy', 's3');
    assert.equal(await loopCount('busy'), 0);
    await store.delete('busy');
  });

  it('a loop device still attached to an unlinked image of that name is never mounted as the volume', async () => {
    await store.ensure('replaced', SMALL);
    const mnt = await store.acquire('replaced', 's1');
    writeFileSync(join(mnt, 'old'), 'old data\n');
    // The old file system stays in use through a lazily detached mount (as a deleted
    // sandbox's last process can keep it), and its image is unlinked meanwhile.
    const holder = spawn('sleep', ['30'], { cwd: mnt, stdio: 'ignore' });
    children.push(holder);
    await new Promise((r) => holder.once('spawn', r));
    await run('umount', ['-l', mnt]);
    await store.release('replaced', 's1');
    rmSync(join(store.dir, 'replaced'), { recursive: true, force: true });
    const img = join(store.dir, 'replaced', 'volume.img');
    assert.deepEqual(
      (await loopsUnder(img)).map((l) => l.deleted),
      [true],
      'the old device is still attached to the unlinked image',
    );
    await store.ensure('replaced', SMALL);
    const again = await store.acquire('replaced', 's2');
    assert.equal(existsSync(join(again, 'old')), false, 'the old image was mounted as the new volume');
    assert.deepEqual((await loopsUnder(img)).map((l) => l.deleted).sort(), [false, true]);
    holder.kill('SIGKILL');
    await new Promise((r) => holder.once('exit', r));
    await store.release('replaced', 's2');
    await store.delete('replaced');
  });

  it('recover() rebuilds holders from live sandboxes and unmounts the rest', async () => {
    for (const n of ['r-live', 'r-dead', 'r-idle']) await store.ensure(n, SMALL);
    await store.acquire('r-live', 'alive');
    await store.acquire('r-live', 'gone');
    await store.acquire('r-dead', 'gone');
    writeFileSync(join(root, 'volumes', '.tmp-halfmade'), ''); // an interrupted ensure
    mkdirSync(join(root, 'volumes', '.tmp-halfdir'));
    // Restart: a new store knows nothing; only 'alive' survived.
    const fresh = new VolumeStore({ dir: join(root, 'volumes') });
    await fresh.recover(
      new Map([
        ['alive', ['r-live', 'no-such-volume']],
        ['idle', []],
      ]),
    );
    const list = await fresh.list();
    assert.deepEqual(
      list.map((v) => [v.name, v.mountedBy]),
      [
        ['r-dead', []],
        ['r-idle', []],
        ['r-live', ['alive']],
      ],
    );
    assert.equal(await mountCount(fresh.mountPath('r-live')), 1);
    assert.equal(await mountCount(fresh.mountPath('r-dead')), 0);
    assert.equal(await loopCount('r-dead'), 0);
    assert.deepEqual(
      readdirSync(fresh.dir).filter((f) => f.startsWith('.')),
      [],
    );
    await assert.rejects(fresh.delete('r-live'), isKind('conflict'));
    await fresh.release('r-live', 'alive');
    assert.equal(await mountCount(fresh.mountPath('r-live')), 0);
    for (const n of ['r-live', 'r-dead', 'r-idle']) await fresh.delete(n);
    assert.deepEqual(await fresh.list(), []);
  });
});
