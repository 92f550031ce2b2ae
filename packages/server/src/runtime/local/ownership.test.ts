/**
 * What a local driver treats as its own on a host (needs root and crun): the marker on its
 * containers, recovery that serves before the leftovers are gone and keeps what they hold,
 * containers that are not its own left alone, containers an earlier version ran in the
 * shared runtime root removed, and a graceful close that leaves no pooled thing behind.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { makeTestDriver } from '../../../test/local-driver.js';
import { testId } from '../conformance.js';
import type { SandboxSpec } from '../driver.js';
import { INSTANCE_ANNOTATION } from './bundle/oci-config.js';
import { OciRuntime, processStart } from './commands/oci-runtime.js';
import { LocalDriver, type LocalDriverOptions } from './driver.js';
import { hostVethName, instanceGroup } from './network/addr.js';
import { recordFile } from './records.js';
import { loopsUnder, mountsUnder } from './rootfs/mounts.js';

const LIMITS = { memoryBytes: 64 << 20, cpus: 0.5, pids: 32, rootDiskBytes: 64 << 20 };
const spec = (id = testId('own')): SandboxSpec => ({
  id,
  image: 'local/busybox:latest',
  env: {},
  volumes: [],
  limits: LIMITS,
});

let base: string;
let opts: LocalDriverOptions;
let d1: LocalDriver;
let d2: LocalDriver | undefined;
/** Lets the second driver's leftover removal start (also called on failure, before cleaning up). */
let release = () => {};

before(async () => {
  const made = makeTestDriver('own');
  ({ dataDir: base, options: opts, driver: d1 } = made);
  await d1.init();
  await d1.recover();
});
after(async () => {
  release();
  const last = d2 ?? d1;
  try {
    // A delete answers before its release is over: the last test's deletes may still be
    // removing their containers' files (editing one then raced with it: ENOENT).
    await last.released();
    // Whatever failed: every container is this instance's again, so that destroyAll removes it.
    for (const id of sandboxIds()) {
      try {
        editJson(runtimeConfig(id), (c) => (c.annotations[INSTANCE_ANNOTATION] = d1.key));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e; // not running (any more)
      }
    }
  } finally {
    // Always: a driver left open keeps this test process (and npm test) from ever ending.
    await last.destroyAll();
    rmSync(base, { recursive: true, force: true });
  }
});

const stateDir = (id: string) => join(opts.dataDir, 'sandboxes', id);
/** The config.json a running container's marker is read from: crun's copy in its state dir (the bundle's goes once it runs). */
const runtimeConfig = (id: string) => join(d1.runDir, 'crun', id, 'config.json');
const record = (id: string) => JSON.parse(readFileSync(recordFile(stateDir(id)) ?? '', 'utf8'));
const editJson = (file: string, edit: (v: any) => void) => {
  const v = JSON.parse(readFileSync(file, 'utf8'));
  edit(v);
  writeFileSync(file, JSON.stringify(v));
};
const running = (r: { initPid: number; initStart: number }) => processStart(r.initPid) === r.initStart;
const alive = (id: string) => running(record(id));
const sandboxIds = () => readdirSync(join(opts.dataDir, 'sandboxes')).filter((n) => !n.startsWith('.'));
/** Pooled ids a sandbox took (its record names them): these stay. */
const takenFromPools = () => new Set(sandboxIds().flatMap((id) => [record(id).netId, record(id).rootId]));
/** Pooled networks of this driver: netns `sbx-netpool_*` whose host veth is in its interface group, no sandbox's. */
async function pooledNets(): Promise<string[]> {
  const group = String(instanceGroup(opts.bridge!));
  const ours = (id: string) => {
    try {
      return readFileSync(`/sys/class/net/${hostVethName(id)}/netdev_group`, 'utf8').trim() === group;
    } catch {
      return false;
    }
  };
  const taken = takenFromPools();
  const names = existsSync('/run/netns') ? readdirSync('/run/netns') : [];
  return names.filter((n) => n.startsWith('sbx-netpool_') && ours(n.slice(4)) && !taken.has(n.slice(4)));
}
/** Mounts and loop devices of pooled roots no sandbox took. */
async function pooledRoots(): Promise<string[]> {
  const taken = takenFromPools();
  const pooled = (p: string) => {
    const m = /\/(rootpool_[0-9a-f]+)/.exec(p);
    return m !== null && !taken.has(m[1]);
  };
  return [
    ...(await mountsUnder(join(opts.dataDir, 'roots'))).map((m) => m.mountPoint).filter(pooled),
    ...(await loopsUnder(join(opts.dataDir, 'roots'))).map((l) => l.backingFile).filter(pooled),
  ];
}

it('marks every container with its instance key; a graceful close removes the pools and keeps the sandboxes', async () => {
  const ids: string[] = [];
  for (let i = 0; i < 5; i++) ids.push((await d1.create(spec())).id);
  const conf = JSON.parse(readFileSync(runtimeConfig(ids[0]), 'utf8'));
  assert.equal(conf.annotations[INSTANCE_ANNOTATION], d1.key);
  assert.match(d1.key, /^[0-9a-f]{10}$/);
  assert.equal(d1.runDir, join(opts.runDir!, d1.key));
  // The pools refill in the background (slowly when the host's network stack is busy):
  // wait, bounded, for pooled things to exist.
  for (let i = 0; i < 600 && ((await pooledNets()).length === 0 || (await pooledRoots()).length === 0); i++)
    await new Promise((r) => setTimeout(r, 100));
  assert.ok((await pooledNets()).length > 0, 'a network is pooled');
  assert.ok((await pooledRoots()).length > 0, 'a root is pooled');
  await d1.close();
  assert.deepEqual(await pooledNets(), [], 'no pooled network left');
  assert.deepEqual(await pooledRoots(), [], 'no pooled root, mount or loop device left');
  for (const id of ids) assert.ok(alive(id), `${id} still runs`);
});

it('serves before leftovers are gone, keeps their ids and uid ranges, never touches what is not its own', async () => {
  const ids = sandboxIds().sort();
  assert.equal(ids.length, 5);
  const [kept, left1, left2, foreign, legacy] = ids;
  // Two sandboxes a crash left half made (their containers still run): leftovers.
  for (const id of [left1, left2]) editJson(recordFile(stateDir(id)) ?? '', (r) => (r.phase = 'creating'));
  // One container that carries another instance's marker: not this instance's.
  editJson(runtimeConfig(foreign), (c) => (c.annotations[INSTANCE_ANNOTATION] = 'someoneelse'));
  // One that an earlier version ran in the runtime root every instance shared: a bundle in
  // this data dir (a plain one: a running sandbox's root and netns are no longer on the
  // host's mount table to start it again); its record keeps its uid range reserved.
  const own = new OciRuntime({ root: join(d1.runDir, 'crun') });
  const shared = new OciRuntime({ root: join(opts.runDir!, 'crun') });
  await own.delete(legacy);
  const legacyBundle = join(stateDir(legacy), 'legacy');
  mkdirSync(legacyBundle);
  writeFileSync(
    join(legacyBundle, 'config.json'),
    JSON.stringify({
      ociVersion: '1.0.2',
      process: { user: { uid: 0, gid: 0 }, args: ['/dev/init', '-P'], env: ['PATH=/bin'], cwd: '/' },
      root: { path: (await d1.images.resolve('local/busybox:latest')).rootfsDir, readonly: true },
      mounts: [
        { destination: '/proc', type: 'proc', source: 'proc' },
        { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'mode=755'] },
        { destination: '/dev/init', type: 'bind', source: '/usr/bin/catatonit', options: ['rbind', 'ro'] },
      ],
      linux: {
        namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }, { type: 'network' }],
      },
    }),
  );
  await shared.run(legacy, legacyBundle);
  assert.equal((await shared.state(legacy))?.status, 'running');
  const recs = Object.fromEntries(ids.map((id) => [id, record(id)]));
  recs[legacy].initPid = (await shared.state(legacy))!.pid;
  recs[legacy].initStart = processStart(recs[legacy].initPid);

  const hold = new Promise<void>((r) => {
    release = r;
  });
  d2 = new LocalDriver({ ...opts, holdLeftovers: hold });
  await d2.init();
  const report = await d2.recover();
  assert.deepEqual(report.adopted, [kept]);
  // Two half-made sandboxes and the legacy container, with the pooled networks and roots they took.
  // (The legacy sandbox's network went with its first container: a running sandbox's netns
  // has no name on the host, so its veth pair goes when its last process does.)
  const leftIds = [left1, left2, legacy].flatMap((id) => [
    ...new Set([id, ...(id === legacy ? [] : [recs[id].netId ?? id]), recs[id].rootId ?? id]),
  ]);
  assert.equal(report.background?.pending(), leftIds.length);
  assert.ok(running(recs[left1]) && running(recs[left2]) && running(recs[legacy]), 'the leftovers still run');
  assert.equal((await d2.exec(kept, 'echo ok')).stdout, 'ok\n');

  // Nothing a leftover (or the foreign container) holds is handed out meanwhile.
  const taken = new Set([left1, left2, foreign, legacy].map((id) => recs[id].uidBase));
  const fresh: string[] = [];
  for (let i = 0; i < 5; i++) {
    const s = await d2.create(spec());
    fresh.push(s.id);
    assert.ok(
      !taken.has(record(s.id).uidBase),
      `a new sandbox got the uid range of a leftover (${record(s.id).uidBase})`,
    );
    assert.notEqual(record(s.id).address, '');
    // (The legacy sandbox's address went with its network, see above.)
    assert.ok(![left1, left2, foreign].map((id) => recs[id].address).includes(record(s.id).address));
  }
  await assert.rejects(d2.create(spec(left1)), (e: Error & { kind?: string }) => e.kind === 'conflict');

  release();
  const done = await report.background!.done;
  assert.deepEqual(done.cleaned.sort(), leftIds.sort());
  assert.deepEqual(done.failed, []);
  assert.equal(report.background!.pending(), 0);
  assert.ok(![left1, left2, legacy].some((id) => running(recs[id])), 'the leftovers were killed');
  assert.equal(await shared.state(legacy), null, 'the legacy container is gone');
  assert.ok(!existsSync(stateDir(left1)) && !existsSync(stateDir(legacy)));
  assert.ok(alive(foreign) && existsSync(stateDir(foreign)), 'the foreign container was left alone');

  for (const id of fresh) await d2.delete(id);
});
