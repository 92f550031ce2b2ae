/**
 * Black-box, real runtime: several sandboxd instances on one host. Each owns only what it
 * made (two servers sharing one run dir never touch each other's sandboxes); a second
 * server on a data dir or bridge in use is refused; a graceful stop leaves no pooled
 * network or root; `npm run teardown` removes every trace of an instance and keeps its
 * database and volumes.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { instanceKey } from '../../packages/server/src/instance.js';
import { cgroupParentLeft } from '../../packages/server/src/runtime/local/bundle/cgroups.js';
import { hostVethName, instanceGroup } from '../../packages/server/src/runtime/local/network/addr.js';
import { runTool } from '../../packages/server/src/runtime/local/network/exec.js';
import { nftTableName } from '../../packages/server/src/runtime/local/network/rules.js';
import { recordFile } from '../../packages/server/src/runtime/local/records.js';
import { loopsUnder } from '../../packages/server/src/runtime/local/rootfs/mounts.js';
import { IMAGE, RUNTIME, type Server, startServer } from './harness.js';
import { releaseSlot, TEST_IMAGE_DIR } from './local-runtime.js';

const ROOT = resolve(import.meta.dirname, '../..');
const base = mkdtempSync(join(tmpdir(), 'sandboxd-inst-'));
chmodSync(base, 0o711);
/** One run dir for every instance here: the situation of two servers on the default `/run/sandboxd`. */
const sharedRunDir = join(base, 'run');
const instances: Instance[] = [];

/** One instance's data dir and settings (own bridge, subnet, uid range; default cgroup folder). */
interface Instance {
  dataDir: string;
  key: string;
  bridge: string;
  subnet: string;
  env: Record<string, string>;
}

function instance(n: number): Instance {
  const dataDir = join(base, `data${n}`);
  const p = process.pid % 1000;
  const bridge = `sbxi${n}p${p}`;
  const subnet = `10.95.${(p % 60) * 4 + n}.0/24`;
  const env = {
    SANDBOXD_RUNTIME: 'local',
    SANDBOXD_IMAGE_DIR: TEST_IMAGE_DIR,
    SANDBOXD_RUN_DIR: sharedRunDir,
    SANDBOXD_BRIDGE: bridge,
    SANDBOXD_SUBNET: subnet,
    SANDBOXD_UID_RANGE_START: String(2_090_000_000 + n * 40 * 65536),
    SANDBOXD_CGROUP_PARENT: '', // the default: sandboxd-<key>
  };
  const inst = { dataDir, key: instanceKey(dataDir), bridge, subnet, env };
  chmodSync(dataDir, 0o711);
  instances.push(inst);
  return inst;
}

const start = (i: Instance) => startServer({ dataDir: i.dataDir, env: i.env });

/** Runs `npm run teardown`'s script for `i` (its env, as `npm start` would have). */
function teardown(i: Instance): Promise<{ code: number | null; out: string }> {
  return new Promise((res) => {
    const child = spawn('bash', ['scripts/teardown.sh'], {
      cwd: ROOT,
      env: { ...process.env, SANDBOXD_DATA_DIR: i.dataDir, SANDBOXD_LOG_LEVEL: 'warn', ...i.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('exit', (code) => res({ code, out }));
  });
}

after(async () => {
  // Whatever a failed test left: each instance's own teardown (idempotent).
  for (const i of instances) {
    const r = await teardown(i);
    if (r.code !== 0) console.log(`# teardown of ${i.dataDir}: ${r.out}`);
    releaseSlot(i.dataDir); // the harness's claim of a host slot (its settings went unused)
  }
  rmSync(base, { recursive: true, force: true });
});

async function create(s: Server, body: Record<string, unknown> = {}): Promise<string> {
  const r = await s.api('POST', '/api/v1/sandboxes', { body: { image: IMAGE, ...body } });
  assert.equal(r.status, 201, r.text);
  return r.body.sandbox.id;
}

async function echo(s: Server, id: string, text = 'ok'): Promise<string> {
  const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, { body: { command: `echo ${text}` } });
  assert.equal(r.status, 200, r.text);
  return r.body.stdout;
}

const state = async (s: Server, id: string) => (await s.api('GET', `/api/v1/sandboxes/${id}`)).body.sandbox?.state;
const record = (i: Instance, id: string) =>
  JSON.parse(readFileSync(recordFile(join(i.dataDir, 'sandboxes', id)) ?? '', 'utf8'));
/** The instance's host veths: those in its interface group (each sandbox's is routed, on no bridge). */
const instanceVeths = async (i: Instance) => {
  const group = String(instanceGroup(i.bridge));
  return readdirSync('/sys/class/net').filter((n) => {
    if (!/^sv[0-9a-f]{10}$/.test(n)) return false; // the anchor device is in the group too
    try {
      return readFileSync(`/sys/class/net/${n}/netdev_group`, 'utf8').trim() === group;
    } catch {
      return false;
    }
  });
};
const netnsNames = () => (existsSync('/run/netns') ? readdirSync('/run/netns') : []);
const mountsIn = (dir: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.split(' ')[4]?.startsWith(`${dir}/`));

/** Live processes (zombies are dead, only not yet reaped) whose cgroup lies in `sandboxd-<key>`. */
function processesOf(i: Instance): string[] {
  const out: string[] = [];
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      if (/^[ZX]/.test(stat.slice(stat.lastIndexOf(')') + 2))) continue;
      if (readFileSync(`/proc/${p}/cgroup`, 'utf8').includes(`/sandboxd-${i.key}/`))
        out.push(`${p} ${stat.slice(0, 60)}`);
    } catch {
      /* gone */
    }
  }
  return out;
}

/** Everything of instance `i` still on the host (`ids`: sandbox, network and root ids it used). */
async function tracesOf(i: Instance, ids: string[]): Promise<string[]> {
  const left: string[] = [];
  const add = (what: string, xs: string[]) => xs.length && left.push(`${what}: ${xs.join(', ')}`);
  add('mounts', mountsIn(i.dataDir));
  add(
    'loop devices',
    (await loopsUnder(i.dataDir)).map((l) => l.device),
  );
  add(
    'netns',
    netnsNames().filter((n) => ids.some((id) => n === `sbx-${id}`)),
  );
  add(
    'links',
    ids.map(hostVethName).filter((v) => existsSync(`/sys/class/net/${v}`)),
  );
  add('bridge', existsSync(`/sys/class/net/${i.bridge}`) ? [i.bridge] : []);
  add(
    'routes',
    (await runTool('ip', ['route', 'show', 'table', 'all'])).stdout.split('\n').filter((l) => l.includes(i.subnet)),
  );
  add(
    'nft tables',
    (await runTool('nft', ['list', 'tables'])).stdout.split('\n').filter((l) => l.includes(nftTableName(i.bridge))),
  );
  add('cgroups', await cgroupParentLeft(`sandboxd-${i.key}`));
  add('processes', processesOf(i));
  add('run dir', existsSync(join(sharedRunDir, i.key)) ? [join(sharedRunDir, i.key)] : []);
  return left;
}

describe('instances on one host', { skip: RUNTIME !== 'local' && 'needs the real runtime', timeout: 600_000 }, () => {
  it("two servers sharing a run dir never touch each other's sandboxes; B's stop and teardown leave A's running", async () => {
    const ia = instance(0);
    const ib = instance(1);
    const a = await start(ia);
    let b: Server | undefined;
    try {
      const aIds = [await create(a), await create(a)];
      b = await start(ib);
      for (const id of aIds) {
        assert.equal(await state(a, id), 'started');
        assert.equal(await echo(a, id), 'ok\n', 'A answers after B started');
      }
      const bId = await create(b);
      assert.equal(await echo(b, bId, 'b'), 'b\n');
      const bUsed = [bId, record(ib, bId).netId, record(ib, bId).rootId].filter(Boolean);
      assert.equal(await b.kill('SIGTERM'), 0);
      for (const id of aIds) assert.equal(await echo(a, id), 'ok\n', "A answers after B's stop");
      const td = await teardown(ib);
      assert.equal(td.code, 0, td.out);
      assert.deepEqual(await tracesOf(ib, bUsed), [], "B's teardown left nothing of B");
      for (const id of aIds) assert.equal(await echo(a, id), 'ok\n', "A answers after B's teardown");
      assert.ok(existsSync(`/sys/class/net/${ia.bridge}`), "A's bridge stays");
      assert.ok(existsSync(join(sharedRunDir, ia.key)), "A's run dir stays");
    } finally {
      await b?.kill('SIGTERM');
      await a.kill('SIGTERM');
    }
    assert.equal((await teardown(ia)).code, 0);
  });

  it('a second server on a data dir or a bridge in use is refused with the holder named; the first is unaffected', async () => {
    const ia = instance(2);
    const a = await start(ia);
    try {
      const id = await create(a);
      const logs = () => new Set(readdirSync(ia.dataDir).filter((f) => f.endsWith('.stderr.log')));
      const before = logs();
      await assert.rejects(start(ia), /server exited with 1/);
      const log = [...logs()].find((f) => !before.has(f))!;
      assert.equal(
        readFileSync(join(ia.dataDir, log), 'utf8').trim(),
        `sandboxd: data dir ${ia.dataDir} is in use by another sandboxd (pid ${a.proc.pid}); stop it first`,
      );

      // Its own data dir, A's bridge: refused before touching anything.
      const other = join(base, 'other');
      const c = mkdtempSync(`${other}-`);
      chmodSync(c, 0o711);
      await assert.rejects(startServer({ dataDir: c, env: { ...ia.env } }), /server exited with 1/);
      // (The test harness's own claim of a host slot, `.e2e-slot`, aside.)
      const [clog, ...rest] = readdirSync(c).filter((f) => f !== '.e2e-slot');
      assert.deepEqual(rest, [], 'nothing made in its data dir but its log');
      assert.match(
        readFileSync(join(c, clog), 'utf8'),
        new RegExp(
          `^sandboxd: bridge ${ia.bridge} is in use by another sandboxd \\(pid ${a.proc.pid}, data dir ${ia.dataDir}\\)`,
        ),
      );
      releaseSlot(c);
      rmSync(c, { recursive: true, force: true });

      // The teardown is refused too while A runs.
      const td = await teardown(ia);
      assert.notEqual(td.code, 0);
      assert.match(td.out, new RegExp(`data dir ${ia.dataDir} is in use by another sandboxd \\(pid ${a.proc.pid}\\)`));

      assert.equal((await a.api('GET', '/healthz')).status, 200);
      assert.equal(await echo(a, id), 'ok\n');
    } finally {
      await a.kill('SIGTERM');
    }
    assert.equal((await teardown(ia)).code, 0);
  });

  it('a graceful stop leaves no pooled network or root; the next start adopts the sandboxes', async () => {
    const ia = instance(3);
    let a = await start(ia);
    let ids: string[] = [];
    const taken = () => new Set(ids.flatMap((id) => [record(ia, id).netId, record(ia, id).rootId]));
    const pooledNets = async () => {
      const ports = new Set(await instanceVeths(ia));
      return netnsNames().filter(
        (n) => n.startsWith('sbx-netpool_') && ports.has(hostVethName(n.slice(4))) && !taken().has(n.slice(4)),
      );
    };
    const pooledRoots = async () =>
      [
        ...mountsIn(join(ia.dataDir, 'roots')).map((l) => l.split(' ')[4]),
        ...(await loopsUnder(join(ia.dataDir, 'roots'))).map((l) => l.backingFile),
      ].filter((p) => {
        const m = /\/(rootpool_[0-9a-f]+)/.exec(p);
        return m !== null && !taken().has(m[1]);
      });
    try {
      ids = [await create(a), await create(a)];
      // The pools refill in the background: wait, bounded, until something is pooled.
      for (let i = 0; i < 600 && ((await pooledNets()).length === 0 || (await pooledRoots()).length === 0); i++)
        await new Promise((r) => setTimeout(r, 100));
      assert.ok((await pooledNets()).length > 0 && (await pooledRoots()).length > 0, 'the pools hold something');
      assert.equal(await a.kill('SIGTERM'), 0);
      assert.deepEqual(await pooledNets(), [], 'no pooled netns or veth left');
      assert.deepEqual(await pooledRoots(), [], 'no pooled root mount or loop device left');
      const veths = new Set(ids.map((id) => hostVethName(record(ia, id).netId)));
      assert.deepEqual(
        (await instanceVeths(ia)).filter((p) => !veths.has(p)),
        [],
        "only the sandboxes' ports remain",
      );

      a = await start(ia);
      for (const id of ids) {
        assert.equal(await state(a, id), 'started');
        assert.equal(await echo(a, id), 'ok\n', `${id} was adopted`);
      }
    } finally {
      await a.kill('SIGTERM');
    }
    assert.equal((await teardown(ia)).code, 0);
  });

  it('npm run teardown removes every trace of a stopped instance, keeps its database and volumes; it starts again', async () => {
    const ia = instance(4);
    let a = await start(ia);
    let withVolume = '';
    let plain = '';
    let used: string[] = [];
    try {
      withVolume = await create(a, { volumes: { '/data': { name: 'keep', sizeGb: 1 } } });
      plain = await create(a);
      const w = await a.api('POST', `/api/v1/sandboxes/${withVolume}/exec`, {
        body: { command: 'echo kept > /data/f && sync /data/f' },
      });
      assert.equal(w.body.exitCode, 0, w.text);
      used = [withVolume, plain].flatMap((id) => [id, record(ia, id).netId, record(ia, id).rootId]).filter(Boolean);
    } finally {
      assert.equal(await a.kill('SIGTERM'), 0);
    }
    assert.notDeepEqual(await tracesOf(ia, used), [], 'the stopped server left its sandboxes running');
    const td = await teardown(ia);
    assert.equal(td.code, 0, td.out);
    assert.match(td.out, /2 running sandboxes stopped/);
    assert.deepEqual(await tracesOf(ia, used), []);
    assert.ok(existsSync(join(ia.dataDir, 'sandboxd.db')), 'the database stays');
    const images = readdirSync(join(ia.dataDir, 'volumes')).filter((v) =>
      existsSync(join(ia.dataDir, 'volumes', v, 'volume.img')),
    );
    assert.equal(images.length, 1, 'the volume file stays');
    assert.equal((await teardown(ia)).code, 0, 'a second teardown finds nothing to do');

    a = await start(ia);
    try {
      assert.equal(await state(a, withVolume), 'stopped');
      assert.equal(await state(a, plain), 'stopped');
      const again = await create(a, { volumes: { '/data': 'keep' } });
      const r = await a.api('POST', `/api/v1/sandboxes/${again}/exec`, { body: { command: 'cat /data/f' } });
      assert.equal(r.body.stdout, 'kept\n', 'the volume kept its data');
    } finally {
      await a.kill('SIGTERM');
    }
    assert.equal((await teardown(ia)).code, 0);
  });
});
