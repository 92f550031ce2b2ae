/**
 * Pause, resume, stop and start on the real runtime, where the conformance suite cannot
 * look: frozen processes use no CPU and continue where they were, PTYs survive a pause,
 * a restarted driver adopts paused and stopped sandboxes, a crash mid-stop or mid-start
 * ends stopped, a warm-pool claim stops and starts, a stopped sandbox starts from the image
 * it was made from whatever the pull policy says of its reference now, and nothing is left
 * on the host.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { isSandboxdError } from '@sandboxd/protocol';
import { startFakeRegistry } from '../../../test/fake-registry.js';
import { makeTestDriver } from '../../../test/local-driver.js';
import type { PtyProcess, SandboxSpec } from '../driver.js';
import { cgroupLimits, cpuUsageNs, sandboxCgroupDir } from './bundle/cgroup-fs.js';
import { isFrozen } from './bundle/freezer.js';
import { LocalDriver, type LocalDriverOptions } from './driver.js';
import { hostVethName } from './network/addr.js';
import { recordFile } from './records.js';
import { loopsUnder } from './rootfs/mounts.js';

const IMAGE = 'local/busybox:latest';
const LIMITS = { memoryBytes: 128 << 20, cpus: 0.5, pids: 64, rootDiskBytes: 64 << 20 };
const made: { driver: LocalDriver; dataDir: string }[] = [];
/** Image caches of single tests, removed after their drivers. */
const imageDirs: string[] = [];
after(async () => {
  for (const m of made) {
    await m.driver.destroyAll();
    rmSync(m.dataDir, { recursive: true, force: true });
  }
  for (const d of imageDirs) rmSync(d, { recursive: true, force: true });
});

let seq = 0;
const spec = (over: Partial<SandboxSpec> = {}): SandboxSpec => ({
  id: `lc_${process.pid}_${seq++}`,
  image: IMAGE,
  env: { K: 'v' },
  volumes: [],
  limits: LIMITS,
  ...over,
});

async function setup(tag: string, over: Partial<LocalDriverOptions> = {}) {
  const m = makeTestDriver(tag, over);
  made.push(m);
  await m.driver.init();
  await m.driver.recover();
  return m;
}

/** The same instance in a new driver object, as after a restart of the server process. */
async function restart(m: { driver: LocalDriver; options: LocalDriverOptions; dataDir: string }): Promise<LocalDriver> {
  await m.driver.close();
  const d = new LocalDriver(m.options);
  await d.init();
  await d.recover();
  const entry = made.find((x) => x.dataDir === m.dataDir)!;
  entry.driver = d;
  m.driver = d;
  return d;
}

const cpuUsage = (parent: string, cid: string) => cpuUsageNs(parent, cid);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function counter(d: LocalDriver, id: string): Promise<number> {
  return Number((await d.exec(id, 'cat /tmp/c')).stdout.trim() || '0');
}

function waitFor(pty: PtyProcess, pattern: RegExp, timeoutMs = 5000): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const t = setTimeout(
      () => reject(new Error(`timed out waiting for ${pattern}; saw ${JSON.stringify(seen)}`)),
      timeoutMs,
    );
    pty.onData((c) => {
      seen += c.toString();
      const m = seen.match(pattern);
      if (m) {
        clearTimeout(t);
        resolve(m);
      }
    });
  });
}

describe('local lifecycle', () => {
  it('freezes a busy process (no CPU, no progress) and thaws it where it was', async () => {
    const m = await setup('lcfreeze');
    const d = m.driver;
    const s = await d.create(spec());
    // Written to a temp file and renamed: a reader (or the freeze) never sees a truncated file.
    await d.execBackground(
      s.id,
      "sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.05; done' &",
    );
    for (let i = 0; i < 100 && (await counter(d, s.id)) < 3; i++) await sleep(20);
    await d.pause(s.id);
    const cid = d.containerIdOf(s.id)!;
    const parent = m.options.cgroupParent!;
    assert.equal(await isFrozen(parent, cid), true, 'the kernel says frozen');
    const cpu0 = cpuUsage(parent, cid);
    const value = readFileSync(`/proc/${(await d.inspect(s.id))!.pid}/root/tmp/c`, 'utf8').trim();
    await sleep(300);
    assert.equal(cpuUsage(parent, cid), cpu0, 'a frozen sandbox uses no CPU');
    assert.equal(readFileSync(`/proc/${(await d.inspect(s.id))!.pid}/root/tmp/c`, 'utf8').trim(), value);
    await assert.rejects(d.exec(s.id, 'echo x'), (e) => isSandboxdError(e) && e.kind === 'conflict');
    await d.resume(s.id);
    const after = await counter(d, s.id);
    assert.ok(after >= Number(value) && after <= Number(value) + 3, `went on from ${value}, at ${after}`);
    for (let i = 0; i < 100 && (await counter(d, s.id)) <= after; i++) await sleep(20);
    assert.ok((await counter(d, s.id)) > after, 'it counts again');
    await d.delete(s.id);
  });

  it('keeps a PTY open across pause and resume (same shell)', async () => {
    const m = await setup('lcpty');
    const d = m.driver;
    const s = await d.create(spec());
    const pty = await d.execTty(s.id, { argv: ['/bin/sh'], cols: 80, rows: 24 });
    let exited = false;
    pty.onExit(() => {
      exited = true;
    });
    const first = waitFor(pty, /pid=(\d+)\b/);
    pty.write('echo pid=$$\r');
    const pid = (await first)[1];
    await d.pause(s.id);
    pty.write('echo later=$$\r'); // queued while frozen
    await sleep(300);
    await d.resume(s.id);
    assert.equal((await waitFor(pty, /later=(\d+)\b/))[1], pid);
    assert.equal(exited, false);
    pty.write('exit 0\r');
    await d.delete(s.id);
  });

  it('stops and starts with volumes re-acquired and the address given back meanwhile', async () => {
    const m = await setup('lcvol', { netPoolSize: 0 });
    const d = m.driver;
    const vol = `lcv_${process.pid}`;
    const before = (await d.capacity()).addresses!.free;
    const s = await d.create(spec({ volumes: [{ name: vol, mountPath: '/data', sizeGb: 1 }], hostname: 'lchost' }));
    await d.exec(s.id, 'echo v > /data/f; echo r > /root/f');
    assert.equal((await d.capacity()).addresses!.free, before - 1);
    await d.stop(s.id);
    assert.equal((await d.capacity()).addresses!.free, before, 'a stopped sandbox holds no address');
    assert.deepEqual((await d.listVolumes()).find((v) => v.name === vol)?.mountedBy, []);
    const again = await d.start(s.id, { limits: { ...LIMITS, memoryBytes: 96 << 20 } });
    assert.equal(again.state, 'running');
    assert.equal((await d.exec(s.id, 'cat /data/f /root/f; hostname; echo $K')).stdout, 'v\nr\nlchost\nv\n');
    const memLimit = cgroupLimits(m.options.cgroupParent!, d.containerIdOf(s.id)!).memoryBytes;
    assert.equal(memLimit, 96 << 20, 'the limits given to start apply');
    assert.deepEqual((await d.listVolumes()).find((v) => v.name === vol)?.mountedBy, [s.id]);
    await d.delete(s.id);
    await d.deleteVolume(vol);
  });

  it('a restarted driver adopts a paused sandbox and a stopped one', async () => {
    const m = await setup('lcrestart');
    const p = await m.driver.create(spec());
    const st = await m.driver.create(spec());
    await m.driver.exec(st.id, 'echo before > /f');
    await m.driver.pause(p.id);
    await m.driver.stop(st.id);
    const d = await restart(m);
    assert.equal((await d.inspect(p.id))?.state, 'paused');
    assert.equal((await d.inspect(st.id))?.state, 'stopped');
    await assert.rejects(d.exec(p.id, 'echo x'), (e) => isSandboxdError(e) && e.kind === 'conflict');
    await d.resume(p.id);
    assert.equal((await d.exec(p.id, 'echo up')).stdout, 'up\n');
    await d.start(st.id, { limits: LIMITS });
    assert.equal((await d.exec(st.id, 'cat /f')).stdout, 'before\n');
  });

  it('a stopped sandbox starts again from its cached image after its registry is no longer allowed for its account', async () => {
    const fake = await startFakeRegistry();
    // A cache of its own: the shared one keeps no image of a registry that is gone after this test.
    const imageDir = mkdtempSync(join(tmpdir(), 'sbx-lc-images-'));
    imageDirs.push(imageDir);
    try {
      const m = await setup('lcpolicy', {
        imageDir,
        netPoolSize: 0,
        registriesAllowed: [fake.host],
        insecureRegistries: [fake.host],
      });
      const s = await m.driver.create(
        spec({ image: `${fake.host}/sbx/tiny:1`, pullAs: { accountId: 'acc_lc', admin: false } }),
      );
      await m.driver.stop(s.id);
      await fake.stop();
      // The operator no longer lets accounts pull from that registry.
      m.options.registriesAllowed = ['docker.io'];
      const d = await restart(m);
      assert.equal((await d.start(s.id, { limits: LIMITS })).state, 'running');
      await d.delete(s.id);
    } finally {
      await fake.stop();
    }
  });

  it('after a crash mid-stop or mid-start, recovery leaves the sandbox stopped with its layer', async () => {
    const m = await setup('lccrash');
    const a = await m.driver.create(spec()); // crash while stopping: its container still runs
    const b = await m.driver.create(spec()); // crash while starting: a half-made container runs
    for (const id of [a.id, b.id]) await m.driver.exec(id, `echo ${id} > /f`);
    await m.driver.pause(a.id); // frozen when the stop began
    const stateFile = (id: string) => recordFile(join(m.options.dataDir, 'sandboxes', id)) ?? '';
    for (const [id, phase] of [
      [a.id, 'stopping'],
      [b.id, 'starting'],
    ]) {
      const rec = JSON.parse(readFileSync(stateFile(id), 'utf8'));
      writeFileSync(stateFile(id), JSON.stringify({ ...rec, phase }));
    }
    const d = await restart(m);
    for (const id of [a.id, b.id]) {
      assert.equal((await d.inspect(id))?.state, 'stopped', id);
      assert.equal(JSON.parse(readFileSync(stateFile(id), 'utf8')).phase, 'stopped');
      await d.start(id, { limits: LIMITS });
      assert.equal((await d.exec(id, 'cat /f')).stdout, `${id}\n`);
    }
  });

  it('stops and starts a sandbox claimed from the warm pool, also after a restart', async () => {
    const m = await setup('lcwarm', { warmPool: [{ image: IMAGE, size: 1 }], warmLimits: LIMITS });
    await m.driver.refillPools();
    const s = await m.driver.create(spec());
    const cid = m.driver.containerIdOf(s.id)!;
    assert.notEqual(cid, s.id, 'claimed from the pool');
    await m.driver.exec(s.id, 'echo warm > /f');
    await m.driver.pause(s.id);
    assert.equal((await m.driver.inspect(s.id))?.state, 'paused');
    await m.driver.resume(s.id);
    await m.driver.stop(s.id);
    const d = await restart(m);
    assert.equal((await d.inspect(s.id))?.state, 'stopped');
    await d.start(s.id, { limits: LIMITS });
    assert.equal((await d.exec(s.id, 'cat /f; echo $K; hostname')).stdout, `warm\nv\n${s.id}\n`);
    await d.stop(s.id);
    await d.start(s.id, { limits: LIMITS });
    assert.equal((await d.exec(s.id, 'cat /f')).stdout, 'warm\n');
  });

  it('leaves no mount, loop device, netns, veth or cgroup after the delete of a stopped sandbox', async () => {
    const m = await setup('lcleak', { netPoolSize: 0 });
    const d = m.driver;
    const s = await d.create(spec());
    await d.stop(s.id);
    await d.start(s.id, { limits: LIMITS });
    await d.stop(s.id);
    const img = join(m.dataDir, 'data', 'roots', `${s.id}.img`);
    assert.ok(existsSync(img), 'the layer is kept while stopped');
    await d.delete(s.id);
    await (d as LocalDriver).released();
    assert.equal(await d.inspect(s.id), null);
    // The instance's run dir (a tmpfs of its own) stays while the driver lives.
    const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .filter((l) => l.includes(m.dataDir) && l.split(' ')[4] !== (d as LocalDriver).runDir);
    assert.deepEqual(mounts, []);
    assert.deepEqual(await loopsUnder(m.dataDir), []);
    assert.ok(!existsSync(img));
    assert.ok(!existsSync(`/run/netns/sbx-${s.id}`));
    assert.ok(!existsSync(`/sys/class/net/${hostVethName(s.id)}`));
    const addresses = (await d.capacity()).addresses!;
    assert.equal(addresses.free, addresses.total, 'every address is free again');
    assert.ok(!existsSync(sandboxCgroupDir(m.options.cgroupParent!, s.id)));
  });
});
