import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, writeFileSync, rmSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { SandboxdError } from '@sandboxd/protocol';
import {
  hostSnapshot,
  isUnder,
  keyedLock,
  loopDetach,
  loopMount,
  loopsUnder,
  mountHelper,
  mountsUnder,
  parseMountinfo,
  run,
  snapshotDiff,
  unmount,
  unmountUnder,
  type HostSnapshot,
} from './mounts.js';

const root = realpathSync(mkdtempSync(join(tmpdir(), 'sbx-mounts-')));
let snap: HostSnapshot;
const children: ChildProcess[] = [];

/** A 64 MiB ext4 image made once for the tests below. */
const image = join(root, 'disk.img');

before(async () => {
  snap = await hostSnapshot();
  writeFileSync(image, '');
  await run('truncate', ['-s', '64M', image]);
  await run('mkfs.ext4', ['-F', '-q', '-b', '4096', '-m', '0', image]);
});

after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await new Promise((r) => setTimeout(r, 50));
  await unmountUnder(root).catch(() => undefined);
  const loops = await loopsUnder(root).catch(() => []);
  await loopDetach(loops.map((l) => l.device)).catch(() => undefined);
  rmSync(root, { recursive: true, force: true });
  const d = snapshotDiff(snap, await hostSnapshot(), root);
  if (d.others.length) console.log(`# other host activity meanwhile (not ours):\n# ${d.others.join('\n# ')}`);
  assert.deepEqual(d.mine, [], 'mounts or loop devices leaked');
});

describe('mountinfo parsing', () => {
  it('unescapes paths and finds the file system type after the separator', () => {
    const text = [
      '36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue',
      '37 36 0:22 / /proc rw - proc proc rw',
      '',
    ].join('\n');
    const [a, b] = parseMountinfo(text);
    assert.equal(a.mountPoint, '/mnt/with space');
    assert.equal(a.root, '/mnt1');
    assert.equal(a.fsType, 'ext3');
    assert.equal(a.source, '/dev/root');
    assert.equal(a.parentId, 35);
    assert.equal(b.fsType, 'proc');
  });

  it('isUnder matches whole path components only', () => {
    assert.ok(isUnder('/a/b', '/a/b'));
    assert.ok(isUnder('/a/b/c', '/a/b'));
    assert.ok(!isUnder('/a/bc', '/a/b'));
    assert.ok(isUnder('/a/b/c', '/a/b/'));
  });
});

describe('keyedLock', () => {
  it('runs calls with one key in order and other keys concurrently', async () => {
    const lock = keyedLock();
    const log: string[] = [];
    const step = (k: string, n: number, ms: number) =>
      lock(k, async () => {
        log.push(`${k}${n}+`);
        await new Promise((r) => setTimeout(r, ms));
        log.push(`${k}${n}-`);
        if (n === 1) throw new Error('x');
        return n;
      });
    const all = Promise.allSettled([step('a', 1, 30), step('a', 2, 1), step('b', 1, 1)]);
    const [r1, r2] = await all;
    assert.equal(r1.status, 'rejected');
    assert.deepEqual(r2, { status: 'fulfilled', value: 2 });
    assert.ok(log.indexOf('a1-') < log.indexOf('a2+'), log.join(' '));
    assert.ok(log.indexOf('b1-') < log.indexOf('a1-'), log.join(' '));
  });
});

describe('loop mounts', () => {
  it('loopMount attaches with autoclear; unmount frees the loop device', async () => {
    const mnt = join(root, 'm1');
    mkdirSync(mnt);
    await loopMount(image, mnt);
    const m = await mountsUnder(root);
    assert.deepEqual(
      m.map((x) => [x.mountPoint, x.fsType]),
      [[mnt, 'ext4']],
    );
    const loops = await loopsUnder(image);
    assert.equal(loops.length, 1);
    assert.equal(loops[0].autoclear, true);
    assert.equal(loops[0].deleted, false);
    assert.equal(m[0].source, loops[0].device);
    assert.match(m[0].options, /nosuid/);
    assert.match(m[0].options, /nodev/);
    await unmount([mnt]);
    assert.deepEqual(await mountsUnder(root), []);
    assert.deepEqual(await loopsUnder(image), []);
    await unmount([mnt]); // not mounted: no-op
  });

  it('loop-remove leaves a bound loop device and ignores missing ones; a bad number is refused', async () => {
    // (Removing unbound devices is what npm test does after every run, and checks.)
    const mnt = join(root, 'm-remove');
    mkdirSync(mnt);
    await loopMount(image, mnt);
    const [dev] = await loopsUnder(image);
    const n = dev.device.replace('/dev/loop', '');
    assert.equal((await mountHelper(['loop-remove', n, '999999'])).trim(), '0');
    assert.ok(existsSync(`/sys/block/loop${n}`), 'the bound device stays');
    assert.equal((await loopsUnder(image)).length, 1, 'still attached');
    await assert.rejects(mountHelper(['loop-remove', 'x']), /bad loop device number/);
    await unmount([mnt]);
    assert.deepEqual(await loopsUnder(image), []);
  });

  it('strict unmount of a busy mount is a conflict and leaves it; lazy detaches it', async () => {
    const mnt = join(root, 'm2');
    mkdirSync(mnt);
    await loopMount(image, mnt);
    const holder = spawn('sleep', ['30'], { cwd: mnt, stdio: 'ignore' });
    children.push(holder);
    await new Promise((r) => holder.once('spawn', r));
    await assert.rejects(
      unmount([mnt], { strict: true }),
      (e: unknown) => e instanceof SandboxdError && e.kind === 'conflict',
    );
    assert.equal((await mountsUnder(mnt)).length, 1);
    await unmount([mnt]); // lazy: gone from the tree, the loop device lives while sleep holds it
    assert.deepEqual(await mountsUnder(mnt), []);
    assert.equal((await loopsUnder(image)).length, 1);
    holder.kill('SIGKILL');
    await new Promise((r) => holder.once('exit', r));
    for (let i = 0; i < 100 && (await loopsUnder(image)).length; i++) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(await loopsUnder(image), [], 'autoclear frees the device once the last user is gone');
  });

  it('unmountUnder removes stacked and nested mounts, newest first', async () => {
    const base = join(root, 'm3');
    mkdirSync(base);
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', base]);
    mkdirSync(join(base, 'inner'));
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', join(base, 'inner')]);
    assert.equal((await mountsUnder(base)).length, 2);
    const odd = join(base, 'inner', 'with space\\and\ttab');
    mkdirSync(odd);
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', odd]);
    assert.deepEqual(
      (await mountsUnder(odd)).map((m) => m.mountPoint),
      [odd],
      'escaped paths are found',
    );
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', base]); // stacked on top
    assert.equal((await mountsUnder(base)).length, 4);
    const done = await unmountUnder(base);
    assert.equal(done.length, 4);
    assert.deepEqual(await mountsUnder(base), []);
  });
});

describe('cgroup-view (how crun run is started)', () => {
  it('runs the program from a read-only bind of its own binary, in a private mount namespace only, and says so in _LIBCONTAINER_CLONED_BINARY', async () => {
    // A copy of a shell under the test's folder (busybox: named sh), whose bind is looked for by path.
    mkdirSync(join(root, 'bin'));
    const prog = join(root, 'bin', 'sh');
    await run('cp', ['/bin/busybox', prog]);
    const script = `grep ' ${prog} ' /proc/self/mountinfo; echo "env=$_LIBCONTAINER_CLONED_BINARY"; { echo x > /proc/self/exe; } 2>&1; true`;
    const out = await mountHelper(['cgroup-view', 'memory', '--', prog, '-c', script]);
    // (Not "Text file busy", which any running binary answers: the mount refuses the write.)
    assert.match(out, /can't create \/proc\/self\/exe: Read-only file system/, out);
    const [line, env] = out.trim().split('\n');
    assert.match(line, / ro,nosuid,nodev[ ,]/, `the binary is a read-only mount: ${line}`);
    assert.equal(env, 'env=1');
    assert.deepEqual(await mountsUnder(prog), [], 'nothing of it shows on the host');
  });
});
