/**
 * Start commands and ready checks (service.ts: org.sandboxd.start.cmd, org.sandboxd.ready.cmd,
 * org.sandboxd.ready.timeout) on the real runtime, with test images made here: a busybox
 * rootfs plus a layer with /work (owned by 1000), whose user is 1000 and working dir /work.
 * The images live in an image store of this file's own (a temp dir).
 */
import assert from 'node:assert/strict';
import { chmod, chown, mkdir, writeFile } from 'node:fs/promises';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { makeTestDriver, TEST_IMAGE_DIR } from '../../../test/local-driver.js';
import { tarDir, tempDir } from '../../../test/images.js';
import { cgroupParentDir, cgroupProcsOf } from './bundle/cgroup-fs.js';
import type { LocalDriver } from './driver.js';
import { writeOciImage } from './images/oci-write.js';
import { ImageStore } from './images/store.js';
import { declaredStart, SERVICE_LABELS, START_LABELS } from './service.js';

describe('declaredStart (labels)', () => {
  it('reads the start command, the ready check and its timeout, each alone or together; none: null', () => {
    assert.equal(declaredStart({ other: 'x' }, 'i'), null);
    assert.equal(declaredStart(undefined, 'i'), null);
    assert.deepEqual(declaredStart({ [START_LABELS.cmd]: 'run me' }, 'i'), { cmd: 'run me' });
    assert.deepEqual(declaredStart({ [START_LABELS.ready]: 'test -f /x' }, 'i'), { ready: 'test -f /x' });
    assert.deepEqual(
      declaredStart({ [START_LABELS.cmd]: 'a', [START_LABELS.ready]: 'b', [START_LABELS.readyTimeout]: '2500' }, 'i'),
      { cmd: 'a', ready: 'b', readyTimeoutMs: 2500 },
    );
  });
  for (const [name, labels, label] of [
    ['an empty start command', { [START_LABELS.cmd]: '  ' }, START_LABELS.cmd],
    ['a start command with a NUL', { [START_LABELS.cmd]: 'a\0b' }, START_LABELS.cmd],
    ['a start command over 64 KiB', { [START_LABELS.cmd]: 'x'.repeat(70_000) }, START_LABELS.cmd],
    ['an empty ready check', { [START_LABELS.ready]: '' }, START_LABELS.ready],
    ['a timeout without a ready check', { [START_LABELS.readyTimeout]: '100' }, START_LABELS.readyTimeout],
    [
      'a timeout that is not a number',
      { [START_LABELS.ready]: 'true', [START_LABELS.readyTimeout]: '1e3' },
      START_LABELS.readyTimeout,
    ],
    ['a timeout of 0', { [START_LABELS.ready]: 'true', [START_LABELS.readyTimeout]: '0' }, START_LABELS.readyTimeout],
    [
      'a timeout over an hour',
      { [START_LABELS.ready]: 'true', [START_LABELS.readyTimeout]: '3600001' },
      START_LABELS.readyTimeout,
    ],
  ] as const) {
    it(`refuses ${name} with validation naming the label`, () => {
      assert.throws(
        () => declaredStart(labels as Record<string, string>, 'img'),
        (e) => e instanceof SandboxdError && e.kind === 'validation' && e.message.includes(label),
      );
    });
  }
});

const LIMITS = { memoryBytes: 128 << 20, cpus: 0.5, pids: 64, rootDiskBytes: 64 << 20 };
const BUSYBOX = 'local/busybox:latest';
/** Start: records its start (env, uid, cwd), then serves /work on 8080; ready: that answers. */
const SERVES = 'test/start:serves';
/** Start: becomes ready a while after it started; ready: the file it makes. */
const LATE = 'test/start:late';
/** A ready check that never passes (1.5 s timeout from its label). */
const NEVER = 'test/start:never';
/** A start command alone. */
const ONLY = 'test/start:only';
/** A service (HTTP health) and a ready check, both must hold. */
const BOTH = 'test/start:both';
const BAD = 'test/start:bad';

const START_SH =
  'echo "start [$GREETING] $(id -u) $(pwd)" >> /work/starts; exec /bin/busybox httpd -f -p 8080 -h /work';
const READY_SH = 'wget -qO- http://127.0.0.1:8080/starts >/dev/null';

/** Builds the test images into a fresh image store at `<dir>/images`. */
async function makeImages(dir: string): Promise<string> {
  const shared = new ImageStore({ dir: TEST_IMAGE_DIR });
  const busybox = await shared.resolve(BUSYBOX);
  const base = join(dir, 'base.tar');
  await tarDir(busybox.rootfsDir, base);
  const add = join(dir, 'add');
  await mkdir(join(add, 'work'), { recursive: true });
  await chown(join(add, 'work'), 1000, 1000);
  await mkdir(join(add, 'svc'), { recursive: true });
  await writeFile(
    join(add, 'svc', 'run.sh'),
    '#!/bin/sh\nmkdir -p /tmp/www && echo ok > /tmp/www/health\nexec /bin/busybox httpd -f -p 49999 -h /tmp/www\n',
  );
  await chmod(join(add, 'svc', 'run.sh'), 0o755);
  const layer = join(dir, 'add.tar');
  await tarDir(add, layer);
  const layout = join(dir, 'layout');
  const env = ['PATH=/bin:/sbin:/usr/bin', 'GREETING=image'];
  const images: [string, Record<string, string>][] = [
    [SERVES, { [START_LABELS.cmd]: START_SH, [START_LABELS.ready]: READY_SH }],
    [
      LATE,
      {
        [START_LABELS.cmd]: 'sleep 1; echo done > /work/ready-now',
        [START_LABELS.ready]: 'echo checking; test -f /work/ready-now',
      },
    ],
    [
      NEVER,
      {
        [START_LABELS.ready]: 'echo not yet; echo "the check says no" >&2; exit 3',
        [START_LABELS.readyTimeout]: '1500',
      },
    ],
    [ONLY, { [START_LABELS.cmd]: 'echo "only [$GREETING]" >> /work/starts' }],
    [
      BOTH,
      {
        [SERVICE_LABELS.cmd]: '["/svc/run.sh"]',
        [SERVICE_LABELS.port]: '49999',
        [SERVICE_LABELS.health]: '/health',
        [START_LABELS.cmd]: 'sleep 1; echo up > /work/both',
        [START_LABELS.ready]: 'test -f /work/both',
      },
    ],
    [BAD, { [START_LABELS.cmd]: 'true', [START_LABELS.readyTimeout]: '100' }],
  ];
  const store = new ImageStore({ dir: join(dir, 'images') });
  for (const [ref, labels] of images) {
    const tag = ref.split(':')[1];
    await writeOciImage(layout, {
      tag,
      layers: [base, layer],
      config: { env, labels, cmd: ['/bin/sh'], user: '1000:1000', workingDir: '/work' },
    });
    await store.importArchive(layout, ref);
  }
  return join(dir, 'images');
}

/** What of a driver is left on the host: veths of its bridge, mounts, sandbox dirs, cgroups. */
function traces(bridge: string, dataDir: string, cgroupParent: string): string[] {
  const ports = existsSync(`/sys/class/net/${bridge}/brif`) ? readdirSync(`/sys/class/net/${bridge}/brif`) : [];
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(dataDir) && !l.includes(' - tmpfs sandboxd-run '));
  const dirs = ['sandboxes', 'roots'].flatMap((d) =>
    existsSync(join(dataDir, 'data', d))
      ? readdirSync(join(dataDir, 'data', d))
          .filter((n) => !n.startsWith('.'))
          .map((n) => `${d}/${n}`)
      : [],
  );
  const cg = existsSync(cgroupParentDir(cgroupParent))
    ? readdirSync(cgroupParentDir(cgroupParent), { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => `cgroup ${e.name}`)
    : [];
  return [...ports.map((p) => `port ${p}`), ...mounts, ...dirs, ...cg];
}

describe('start commands and ready checks on the local runtime', () => {
  let imgs: { dir: string; cleanup: () => Promise<void> };
  let imageDir: string;
  const made: { driver: LocalDriver; dataDir: string }[] = [];
  const spec = (id: string, image: string, env: Record<string, string> = {}) => ({
    id: `${id}_${process.pid}`,
    image,
    env,
    volumes: [],
    limits: LIMITS,
  });

  before(async () => {
    imgs = await tempDir('start');
    imageDir = await makeImages(imgs.dir);
  });
  after(async () => {
    for (const m of made) {
      await m.driver.destroyAll();
      rmSync(m.dataDir, { recursive: true, force: true });
    }
    await imgs?.cleanup();
  });

  async function driver(tag: string, over: Parameters<typeof makeTestDriver>[1] = {}) {
    const m = makeTestDriver(tag, { imageDir, netPoolSize: 0, ...over });
    made.push(m);
    await m.driver.init();
    await m.driver.recover();
    return m;
  }

  it("cold create: the start command runs as the image's user in its working dir with the create's env; the create answers once the ready check passes", async () => {
    const { driver: d } = await driver('stup');
    const s = await d.create(spec('up', SERVES, { GREETING: 'create' }));
    // No wait: the create resolved once the ready check passed (httpd serves).
    assert.equal((await d.exec(s.id, READY_SH)).exitCode, 0);
    assert.equal((await d.exec(s.id, 'cat /work/starts')).stdout, 'start [create] 1000 /work\n');
    // Detached: a child of the sandbox's init.
    const ppid = await d.exec(
      s.id,
      'for p in /proc/[0-9]*; do grep -q httpd $p/cmdline 2>/dev/null && awk "{print \\$4}" $p/stat; done',
    );
    assert.equal(ppid.stdout.trim().split('\n')[0], '1');
    assert.deepEqual(JSON.parse((await d.exec(s.id, 'cat /run/sandboxd/envs.json')).stdout), { GREETING: 'create' });
    await d.delete(s.id);
  });

  it('a ready check that passes after a while: the create waits for it', async () => {
    const { driver: d } = await driver('stlate');
    const s = await d.create(spec('late', LATE));
    assert.equal((await d.exec(s.id, 'cat /work/ready-now')).stdout, 'done\n');
    await d.delete(s.id);
  });

  it('a start command alone runs at create; it is not awaited', async () => {
    const { driver: d } = await driver('stonly');
    const s = await d.create(spec('only', ONLY, { GREETING: 'mine' }));
    let out = '';
    for (let i = 0; i < 200 && out === ''; i++) {
      out = (await d.exec(s.id, 'cat /work/starts 2>/dev/null')).stdout;
      if (out === '') await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(out, 'only [mine]\n');
    await d.delete(s.id);
  });

  it('a service and a ready check: both hold before the create answers', async () => {
    const { driver: d } = await driver('stboth');
    const s = await d.create(spec('both', BOTH));
    assert.equal((await d.exec(s.id, 'cat /work/both')).stdout, 'up\n');
    assert.equal((await d.exec(s.id, 'wget -qO- http://127.0.0.1:49999/health')).stdout, 'ok\n');
    await d.delete(s.id);
  });

  it('a ready check that never passes fails the create (upstream_timeout, its exit code and output), leaving nothing behind', async () => {
    const m = await driver('stnever');
    await assert.rejects(m.driver.create(spec('never', NEVER)), (e) => {
      assert.ok(e instanceof SandboxdError, String(e));
      assert.equal(e.kind, 'upstream_timeout');
      assert.match(e.message, /ready command did not succeed within 1\.5 s \(last exit code 3\)/);
      const d = e.details as { exitCode: number; output: string };
      assert.equal(d.exitCode, 3);
      assert.equal(d.output, 'not yet\nthe check says no\n');
      return true;
    });
    await m.driver.released();
    assert.deepEqual(await m.driver.list(), []);
    assert.deepEqual(traces(m.options.bridge!, m.dataDir, m.options.cgroupParent!), []);
  });

  it('stop then start: the start command runs again and the start answers once the check passes', async () => {
    const { driver: d } = await driver('stss');
    const s = await d.create(spec('ss', SERVES, { GREETING: 'g' }));
    await d.stop(s.id);
    await d.start(s.id, { limits: LIMITS });
    assert.equal((await d.exec(s.id, READY_SH)).exitCode, 0);
    assert.equal((await d.exec(s.id, 'cat /work/starts')).stdout, 'start [g] 1000 /work\nstart [g] 1000 /work\n');
    await d.delete(s.id);
  });

  it('a snapshot of such a sandbox: a sandbox created from it runs the start command and its check', async () => {
    const { driver: d } = await driver('stsnap');
    const s = await d.create(spec('sn', SERVES, { GREETING: 'first' }));
    const ref = `snapshot/test/start-${process.pid}`;
    await d.snapshot(s.id, ref);
    await d.delete(s.id);
    const r = await d.create(spec('rs', ref, { GREETING: 'second' }));
    assert.equal((await d.exec(r.id, READY_SH)).exitCode, 0);
    assert.equal(
      (await d.exec(r.id, 'cat /work/starts')).stdout,
      'start [first] 1000 /work\nstart [second] 1000 /work\n',
    );
    await d.delete(r.id);
    await d.deleteImage(ref);
  });

  it("warm pool: the start command runs at the fill (the image's env), a claim checks readiness once and writes the create env", async () => {
    const { driver: d } = await driver('stwarm', { warmPool: [{ image: SERVES, size: 1 }], warmLimits: LIMITS });
    await d.refillPools();
    assert.deepEqual(d.warmPool(), { [SERVES]: 1 });
    const s = await d.create(spec('wm', SERVES, { GREETING: 'claimed' }));
    assert.notEqual(d.containerIdOf(s.id), s.id, 'the create claimed the pooled sandbox');
    assert.equal((await d.exec(s.id, 'cat /work/starts')).stdout, 'start [image] 1000 /work\n');
    assert.deepEqual(JSON.parse((await d.exec(s.id, 'cat /run/sandboxd/envs.json')).stdout), { GREETING: 'claimed' });
    assert.equal((await d.exec(s.id, 'echo "$GREETING"')).stdout, 'claimed\n');
    await d.delete(s.id);
  });

  it('a pooled sandbox whose ready check fails at the claim is not handed out: the create starts its own', async () => {
    const m = await driver('stwdead', { warmPool: [{ image: SERVES, size: 1 }], warmLimits: LIMITS });
    await m.driver.refillPools();
    assert.deepEqual(m.driver.warmPool(), { [SERVES]: 1 });
    const parent = m.options.cgroupParent!;
    const pooled = readdirSync(cgroupParentDir(parent)).filter((n) => n.startsWith('warm_'));
    assert.equal(pooled.length, 1, `${pooled}`);
    const cmdline = (pid: number) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      } catch {
        return '';
      }
    };
    const httpd = cgroupProcsOf(parent, pooled[0]).filter((pid) => cmdline(pid).includes('httpd'));
    assert.ok(httpd.length >= 1, 'the start command runs in the pooled sandbox');
    for (const pid of httpd) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // ended meanwhile
      }
    }
    const s = await m.driver.create(spec('wdead', SERVES, { GREETING: 'cold' }));
    assert.equal(m.driver.containerIdOf(s.id), s.id, 'started for the create, not claimed');
    assert.equal((await m.driver.exec(s.id, 'cat /work/starts')).stdout, 'start [cold] 1000 /work\n');
    await m.driver.delete(s.id);
  });

  it('skipImageStart: neither the start command nor the ready check runs (an image build step), at create or start', async () => {
    const { driver: d } = await driver('stskip', { warmPool: [{ image: SERVES, size: 1 }], warmLimits: LIMITS });
    await d.refillPools();
    const s = await d.create({ ...spec('skip', SERVES), skipImageStart: true });
    assert.equal(d.containerIdOf(s.id), s.id, 'never a pooled sandbox (it ran its start)');
    assert.equal((await d.exec(s.id, 'test -e /work/starts')).exitCode, 1);
    await d.stop(s.id);
    await d.start(s.id, { limits: LIMITS });
    assert.equal((await d.exec(s.id, 'test -e /work/starts')).exitCode, 1);
    const n = await d.create({ ...spec('skipn', NEVER), skipImageStart: true });
    assert.equal((await d.exec(n.id, 'echo ok')).stdout, 'ok\n');
    await d.delete(n.id);
    await d.delete(s.id);
  });

  it('malformed labels: validation naming the label at create, nothing started', async () => {
    const m = await driver('stbad');
    await assert.rejects(
      m.driver.create(spec('bad', BAD)),
      (e) => e instanceof SandboxdError && e.kind === 'validation' && e.message.includes(START_LABELS.readyTimeout),
    );
    assert.deepEqual(traces(m.options.bridge!, m.dataDir, m.options.cgroupParent!), []);
  });
});
