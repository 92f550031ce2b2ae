import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { isSandboxdError } from '@sandboxd/protocol';
import { makeTestDriver, removeAndCheckLeaks, TEST_IMAGE_DIR } from '../../../test/local-driver.js';
import { testId } from '../conformance.js';
import type { SandboxSpec } from '../driver.js';
import { freezeAsked } from './bundle/freezer.js';
import { LocalDriver, type LocalDriverOptions } from './driver.js';
import { hostSnapshot, type HostSnapshot } from './rootfs/mounts.js';

const LIMITS = { memoryBytes: 256 << 20, cpus: 1, pids: 128, rootDiskBytes: 512 << 20 };
const OWNER = `t_${process.pid}`;
let n = 0;
const snapRef = (name: string) => `snapshot/${OWNER}/${name}-${Date.now().toString(36)}.${n++}`;

describe('local driver snapshots', () => {
  let driver: LocalDriver;
  let options: LocalDriverOptions;
  let base: string;
  let hostBefore: HostSnapshot;
  const made: string[] = [];
  const spec = (image: string, over: Partial<SandboxSpec> = {}): SandboxSpec => ({
    id: testId('snap'),
    image,
    env: {},
    volumes: [],
    limits: LIMITS,
    ...over,
  });
  const sh = async (id: string, cmd: string) => {
    const r = await driver.exec(id, cmd, { timeoutMs: 60_000 });
    assert.equal(r.exitCode, 0, `${cmd}\n${r.stdout}\n${r.stderr}`);
    return r.stdout;
  };
  const snapshot = async (id: string, name: string) => {
    const ref = snapRef(name);
    made.push(ref);
    return driver.snapshot(id, ref);
  };
  const cgroupOf = (id: string) => [options.cgroupParent!, driver.containerIdOf(id)!] as const;

  before(async () => {
    hostBefore = await hostSnapshot();
    ({ driver, options, dataDir: base } = makeTestDriver('snap'));
    await driver.init();
    await driver.recover();
  });
  after(async () => {
    for (const ref of made) await driver.deleteImage(ref).catch(() => undefined);
    await driver.destroyAll();
    await removeAndCheckLeaks(base, hostBefore);
    const left = readdirSync(join(TEST_IMAGE_DIR, 'by-digest')).filter((d) => {
      try {
        const rec = JSON.parse(readFileSync(join(TEST_IMAGE_DIR, 'by-digest', d, 'image.json'), 'utf8'));
        return rec.snapshot?.instance === driver.key;
      } catch {
        return false;
      }
    });
    assert.deepEqual(left, [], 'no snapshot of the instance is left after destroyAll');
  });

  it('keeps a package installed with dpkg, deletions, replaced dirs, owners, modes and links (debian)', async () => {
    const a = (await driver.create(spec('local/debian:bookworm'))).id;
    await sh(
      a,
      [
        'set -e',
        'mkdir -p /root/pkg/DEBIAN /root/pkg/usr/share/hello-snap',
        "printf 'Package: hello-snap\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: t <t@example.com>\\nDescription: snapshot test\\n' > /root/pkg/DEBIAN/control",
        'echo hello from the package > /root/pkg/usr/share/hello-snap/hello.txt',
        'dpkg-deb --build /root/pkg /root/hello-snap.deb >/dev/null',
        'dpkg -i /root/hello-snap.deb >/dev/null',
        'rm -rf /root/pkg /root/hello-snap.deb',
        // A file of the image deleted (whiteout), a dir of the image replaced (opaque).
        'rm /etc/debian_version',
        'rm -rf /etc/apt && mkdir /etc/apt && echo only > /etc/apt/only.txt',
        // Owners, setuid, hard and symbolic links, an empty dir, a fifo.
        'echo mine > /home/owned.txt && chown 1000:1001 /home/owned.txt',
        'cp /bin/true /usr/local/bin/suid && chmod 4755 /usr/local/bin/suid',
        'echo linked > /root/a && ln /root/a /root/b && ln -s /root/a /root/sym',
        'mkdir -m 0710 /srv/empty && mkfifo /srv/fifo',
      ].join('\n'),
    );
    const info = await snapshot(a, 'deb');
    assert.ok(info.sizeBytes > 0 && info.sizeBytes < 64 << 20, `sizeBytes ${info.sizeBytes}`);
    const base = await driver.resolveImage('local/debian:bookworm');
    assert.deepEqual([info.env, info.user, info.workingDir], [base.env, base.user, base.workingDir]);
    const b = (await driver.create(spec(info.ref))).id;
    assert.match(await sh(b, 'dpkg -s hello-snap'), /Status: install ok installed/);
    assert.equal(await sh(b, 'cat /usr/share/hello-snap/hello.txt'), 'hello from the package\n');
    assert.equal((await driver.exec(b, 'test -e /etc/debian_version')).exitCode, 1, 'the whiteout deletes the file');
    assert.equal(await sh(b, 'ls -A /etc/apt'), 'only.txt\n', 'the opaque dir replaces the image dir');
    assert.equal(await sh(b, 'stat -c %u:%g /home/owned.txt'), '1000:1001\n');
    assert.equal(await sh(b, 'stat -c %a:%u /usr/local/bin/suid'), '4755:0\n');
    assert.equal(await sh(b, 'stat -c %h /root/a; test /root/a -ef /root/b && readlink /root/sym'), '2\n/root/a\n');
    assert.equal(await sh(b, 'stat -c %a /srv/empty; stat -c %F /srv/fifo'), '710\nfifo\n');
    // The base image's files are shared, not changed: a sandbox of the base sees them as they were.
    const c = (await driver.create(spec('local/debian:bookworm'))).id;
    assert.equal((await driver.exec(c, 'test -e /etc/debian_version && test -e /etc/apt/sources.list.d')).exitCode, 0);
    assert.equal((await driver.exec(c, 'dpkg -s hello-snap')).exitCode, 1);
    // A snapshot of a sandbox made from a snapshot has both layers.
    await sh(b, 'echo second > /root/second.txt');
    const info2 = await snapshot(b, 'deb2');
    const d = (await driver.create(spec(info2.ref))).id;
    assert.equal(
      await sh(d, 'cat /root/second.txt /usr/share/hello-snap/hello.txt'),
      'second\nhello from the package\n',
    );
    for (const id of [a, b, c, d]) await driver.delete(id);
  });

  it('freezes a running sandbox only for the copy: its processes go on afterwards', async () => {
    const a = (await driver.create(spec('local/busybox:latest'))).id;
    await driver.execBackground(a, 'i=0; while :; do i=$((i+1)); echo $i > /root/counter; sleep 0.05; done');
    const count = async () => Number((await sh(a, 'cat /root/counter 2>/dev/null || echo 0')).trim());
    for (let i = 0; i < 100 && (await count()) < 3; i++) await sleep(20);
    const info = await snapshot(a, 'running');
    assert.equal(await freezeAsked(...cgroupOf(a)), false, 'thawed after the snapshot');
    const before = await count();
    let later = before;
    for (let i = 0; i < 200 && later <= before; i++) {
      await sleep(20);
      later = await count();
    }
    assert.ok(later > before, 'the counter goes on');
    const b = (await driver.create(spec(info.ref))).id;
    assert.ok(Number((await sh(b, 'cat /root/counter')).trim()) >= 3);
    await driver.delete(b);
    await driver.delete(a);
  });

  it('leaves a paused sandbox paused, and copies a killed one from its image file', async () => {
    const a = (await driver.create(spec('local/busybox:latest'))).id;
    await sh(a, 'echo paused > /root/state');
    await driver.pause(a);
    const p = await snapshot(a, 'paused');
    assert.equal(await freezeAsked(...cgroupOf(a)), true, 'still paused');
    await driver.resume(a);
    assert.equal(await sh(a, 'cat /root/state'), 'paused\n');
    await sh(a, 'echo killed > /root/state');
    await driver.kill(a);
    const k = await snapshot(a, 'killed');
    for (const [ref, want] of [
      [p.ref, 'paused\n'],
      [k.ref, 'killed\n'],
    ]) {
      const b = (await driver.create(spec(ref))).id;
      assert.equal(await sh(b, 'cat /root/state'), want);
      await driver.delete(b);
    }
    await driver.delete(a);
  });

  it("keeps a deleted snapshot's files while a sandbox runs from it, removes them after", async () => {
    const a = (await driver.create(spec('local/busybox:latest'))).id;
    await sh(a, 'echo x > /root/x');
    const info = await snapshot(a, 'inuse');
    const dir = join(TEST_IMAGE_DIR, 'by-digest', info.digest.slice('sha256:'.length));
    const b = (await driver.create(spec(info.ref))).id;
    await driver.deleteImage(info.ref);
    await assert.rejects(driver.resolveImage(info.ref), (e) => isSandboxdError(e) && e.kind === 'template_not_found');
    assert.ok(existsSync(dir), 'kept for the sandbox');
    assert.equal(await sh(b, 'cat /root/x; ls /bin | wc -l | tr -d " "').then((s) => s.split('\n')[0]), 'x');
    await driver.delete(b);
    await driver.released();
    await driver.deleteImage(info.ref); // missing: no-op, but collects
    assert.ok(!existsSync(dir), 'removed once unused');
    // One left in use at the end: destroyAll removes it (after()).
    const last = await snapshot(a, 'inuse-at-end');
    await driver.create(spec(last.ref));
    await driver.deleteImage(last.ref);
    await driver.delete(a);
  });

  it('finds its snapshots after a restart; removes half-made ones at init', async () => {
    const a = (await driver.create(spec('local/busybox:latest'))).id;
    await sh(a, 'echo survives > /root/s');
    const info = await snapshot(a, 'restart');
    await driver.delete(a);
    // A crash mid-copy (a work dir of a dead process) and between the rename and the ref.
    const stale = join(TEST_IMAGE_DIR, 'tmp', `${process.pid}.0.deadbeef.snapshot`);
    mkdirSync(join(stale, 'out', 'rootfs', 'etc'), { recursive: true });
    const orphanHex = 'f'.repeat(56) + process.pid.toString(16).padStart(8, '0');
    const orphan = join(TEST_IMAGE_DIR, 'by-digest', orphanHex);
    mkdirSync(join(orphan, 'rootfs'), { recursive: true });
    writeFileSync(
      join(orphan, 'image.json'),
      JSON.stringify({
        ...(await driver.resolveImage(info.ref)),
        digest: `sha256:${orphanHex}`,
        snapshot: { ref: snapRef('orphan'), base: info.digest, instance: driver.key, sandbox: a },
      }),
    );
    await driver.close();
    driver = new LocalDriver(options);
    assert.ok(!existsSync(stale), 'the half-made copy is removed when the store opens');
    await driver.init();
    await driver.recover();
    assert.ok(!existsSync(orphan), 'the unnamed snapshot dir is removed at init');
    rmSync(orphan, { recursive: true, force: true });
    assert.ok((await driver.listSnapshots()).some((s) => s.ref === info.ref && s.digest === info.digest));
    const b = (await driver.create(spec(info.ref))).id;
    assert.equal(await sh(b, 'cat /root/s'), 'survives\n');
    await driver.delete(b);
  });

  it('leaves no mount of the layer on the host while copying', async () => {
    const a = (await driver.create(spec('local/busybox:latest'))).id;
    await sh(a, 'head -c 20000000 /dev/urandom > /root/big');
    const mounts = await hostSnapshot();
    const info = await snapshot(a, 'nomount');
    assert.equal(info.sizeBytes >= 20_000_000, true);
    const now = await hostSnapshot();
    assert.deepEqual(
      now.loops.filter((l) => !mounts.loops.includes(l)),
      [],
    );
    await driver.delete(a);
  });
});
