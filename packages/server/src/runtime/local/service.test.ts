/**
 * Image-declared services (service.ts) on the real runtime, with test images made here: a
 * busybox rootfs plus a layer whose service is busybox's httpd on port 49999 (it counts its
 * starts and keeps the env it got in /run), one whose service never answers, and ones with
 * malformed labels. The images live in an image store of this file's own (a temp dir).
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
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
import { declaredService, SERVICE_LABELS } from './service.js';

describe('declaredService (labels)', () => {
  const ok = {
    [SERVICE_LABELS.cmd]: '["/bin/srv","-x"]',
    [SERVICE_LABELS.port]: '49999',
    [SERVICE_LABELS.health]: '/health',
  };
  it('reads the three labels; none: no service', () => {
    assert.deepEqual(declaredService(ok, 'i'), { argv: ['/bin/srv', '-x'], port: 49999, health: '/health' });
    assert.equal(declaredService({ other: 'x' }, 'i'), null);
    assert.equal(declaredService(undefined, 'i'), null);
  });
  for (const [name, over] of [
    ['cmd not JSON', { [SERVICE_LABELS.cmd]: '/bin/srv -x' }],
    ['cmd empty', { [SERVICE_LABELS.cmd]: '[]' }],
    ['cmd relative', { [SERVICE_LABELS.cmd]: '["srv"]' }],
    ['cmd not strings', { [SERVICE_LABELS.cmd]: '["/bin/srv", 1]' }],
    ['port 0', { [SERVICE_LABELS.port]: '0' }],
    ['port too big', { [SERVICE_LABELS.port]: '65536' }],
    ['port not a number', { [SERVICE_LABELS.port]: 'http' }],
    ['health relative', { [SERVICE_LABELS.health]: 'health' }],
    ['health with a space', { [SERVICE_LABELS.health]: '/he alth' }],
    ['health with CRLF', { [SERVICE_LABELS.health]: '/h\r\nX-Injected: 1' }],
    ['health an absolute URL', { [SERVICE_LABELS.health]: 'http://169.254.169.254/' }],
    ['health too long', { [SERVICE_LABELS.health]: `/${'h'.repeat(4096)}` }],
    [
      'cmd too long (kept in every record of its sandboxes)',
      { [SERVICE_LABELS.cmd]: JSON.stringify(['/bin/srv', 'x'.repeat(70_000)]) },
    ],
    ['port with a sign', { [SERVICE_LABELS.port]: '+80' }],
    ['port with spaces', { [SERVICE_LABELS.port]: ' 80 ' }],
    ['port in exponent form', { [SERVICE_LABELS.port]: '1e3' }],
  ] as const) {
    it(`refuses ${name} with validation naming the label`, () => {
      const labels: Record<string, string> = { ...ok, ...over };
      assert.throws(
        () => declaredService(labels, 'img'),
        (e) => e instanceof SandboxdError && e.kind === 'validation' && e.message.includes(Object.keys(over)[0]),
      );
    });
  }
  it('refuses a declaration missing one label', () => {
    for (const k of Object.values(SERVICE_LABELS)) {
      const labels: Record<string, string> = { ...ok };
      delete labels[k];
      assert.throws(() => declaredService(labels, 'img'), /is missing/);
    }
  });
});

const LIMITS = { memoryBytes: 128 << 20, cpus: 0.5, pids: 64, rootDiskBytes: 64 << 20 };
const BUSYBOX = 'local/busybox:latest';
const GOOD = 'test/svc:good';
const SILENT = 'test/svc:silent';
const MISSING = 'test/svc:missing';
const MALFORMED = 'test/svc:malformed';

/** The service of GOOD: counts its starts, keeps its env, serves /www (health: /www/health). */
const RUN_SH = `#!/bin/sh
echo started >> /run/svc-starts
env > /run/svc-env
echo $$ > /run/svc-pid
mkdir -p /tmp/www && echo ok > /tmp/www/health
exec /bin/busybox httpd -f -p 49999 -h /tmp/www
`;

const labels = (cmd: string[], port = '49999', health = '/health') => ({
  [SERVICE_LABELS.cmd]: JSON.stringify(cmd),
  [SERVICE_LABELS.port]: port,
  [SERVICE_LABELS.health]: health,
});

/** Builds the test images into a fresh image store at `<dir>/images`. */
async function makeImages(dir: string): Promise<string> {
  const shared = new ImageStore({ dir: TEST_IMAGE_DIR });
  const busybox = await shared.resolve(BUSYBOX);
  const base = join(dir, 'base.tar');
  await tarDir(busybox.rootfsDir, base);
  const add = join(dir, 'add');
  await mkdir(join(add, 'svc'), { recursive: true });
  await writeFile(join(add, 'svc', 'run.sh'), RUN_SH);
  await chmod(join(add, 'svc', 'run.sh'), 0o755);
  const layer = join(dir, 'add.tar');
  await tarDir(add, layer);
  const layout = join(dir, 'layout');
  const env = ['PATH=/bin:/sbin:/usr/bin', 'FROM_IMAGE=yes'];
  const images: [string, Record<string, string>][] = [
    [GOOD, labels(['/svc/run.sh'])],
    [SILENT, labels(['/bin/sleep', '100000'])],
    [MISSING, labels(['/svc/not-there'])],
    [MALFORMED, { ...labels(['/svc/run.sh']), [SERVICE_LABELS.port]: 'eighty' }],
  ];
  const store = new ImageStore({ dir: join(dir, 'images') });
  for (const [ref, l] of images) {
    const tag = ref.split(':')[1];
    await writeOciImage(layout, { tag, layers: [base, layer], config: { env, labels: l, cmd: ['/bin/sh'] } });
    await store.importArchive(layout, ref);
  }
  return join(dir, 'images');
}

/** What of a driver is left on the host: netns and veths of its bridge, mounts, sandbox dirs, cgroups. */
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

describe('image-declared services on the local runtime', () => {
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
    imgs = await tempDir('svc');
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

  it('cold create: the service runs (as root, image env only) and answers before create resolves; envs.json holds the create env', async () => {
    const { driver: d } = await driver('svcup');
    const s = await d.create(spec('up', GOOD, { SECRET_ONE: 'a b"c', TWO: '2' }));
    // No wait: the create resolved once /health answered.
    const health = await d.exec(s.id, 'wget -qO- http://127.0.0.1:49999/health');
    assert.equal(health.stdout, 'ok\n', health.stderr);
    assert.equal((await d.exec(s.id, 'cat /run/svc-starts')).stdout, 'started\n');
    const env = (await d.exec(s.id, 'cat /run/svc-env')).stdout;
    assert.match(env, /^FROM_IMAGE=yes$/m);
    assert.doesNotMatch(env, /SECRET_ONE/); // the sandbox's env is in envs.json, not the service's
    const envs = await d.exec(
      s.id,
      'cat /run/sandboxd/envs.json; stat -c "%a %u" /run/sandboxd/envs.json /run/sandboxd',
    );
    const [json, fileMode, dirMode] = envs.stdout.trim().split('\n');
    assert.deepEqual(JSON.parse(json), { SECRET_ONE: 'a b"c', TWO: '2' });
    assert.equal(fileMode, '644 0');
    assert.equal(dirMode, '755 0');
    // The service is a child of the sandbox's init (PID 1), not of the exec that started it.
    const ppid = await d.exec(s.id, 'awk "{print \\$4}" /proc/$(cat /run/svc-pid)/stat');
    assert.equal(ppid.stdout.trim(), '1');
    await d.delete(s.id);
  });

  it('a sandbox without egress (none) is still probed from the host: its create answers', async () => {
    const { driver: d } = await driver('svcnone');
    const s = await d.create({ ...spec('none', GOOD), egress: 'none' });
    assert.equal((await d.exec(s.id, 'cat /run/svc-starts')).stdout, 'started\n');
    await d.delete(s.id);
  });

  it('stop then start: the service starts again and answers before start resolves', async () => {
    const { driver: d } = await driver('svcss');
    const s = await d.create(spec('ss', GOOD, { K: 'v' }));
    await d.stop(s.id);
    await d.start(s.id, { limits: LIMITS });
    assert.equal((await d.exec(s.id, 'wget -qO- http://127.0.0.1:49999/health')).stdout, 'ok\n');
    assert.equal((await d.exec(s.id, 'cat /run/svc-starts')).stdout, 'started\nstarted\n');
    assert.deepEqual(JSON.parse((await d.exec(s.id, 'cat /run/sandboxd/envs.json')).stdout), { K: 'v' });
    // Pause and resume keep the processes: no second start.
    await d.pause(s.id);
    await d.resume(s.id);
    assert.equal((await d.exec(s.id, 'cat /run/svc-starts')).stdout, 'started\nstarted\n');
    await d.delete(s.id);
  });

  it('a snapshot of such a sandbox starts the service when a sandbox is created from it', async () => {
    const { driver: d } = await driver('svcsnap');
    const s = await d.create(spec('sn', GOOD, { FIRST: '1' }));
    const ref = `snapshot/test/svc-${process.pid}`;
    await d.snapshot(s.id, ref);
    await d.delete(s.id);
    const r = await d.create(spec('rs', ref, { SECOND: '2' }));
    assert.equal((await d.exec(r.id, 'wget -qO- http://127.0.0.1:49999/health')).stdout, 'ok\n');
    // One start recorded by the first sandbox (in the snapshot), one by this one.
    assert.equal((await d.exec(r.id, 'cat /run/svc-starts')).stdout, 'started\nstarted\n');
    assert.deepEqual(JSON.parse((await d.exec(r.id, 'cat /run/sandboxd/envs.json')).stdout), { SECOND: '2' });
    await d.delete(r.id);
    await d.deleteImage(ref);
  });

  it('warm pool: the service is started and healthy at fill time; a claim writes the create env', async () => {
    const { driver: d } = await driver('svcwarm', { warmPool: [{ image: GOOD, size: 1 }], warmLimits: LIMITS });
    await d.refillPools();
    assert.deepEqual(d.warmPool(), { [GOOD]: 1 });
    const s = await d.create(spec('wm', GOOD, { CLAIMED: 'yes' }));
    assert.notEqual(d.containerIdOf(s.id), s.id, 'the create claimed the pooled sandbox');
    assert.equal((await d.exec(s.id, 'cat /run/svc-starts')).stdout, 'started\n');
    assert.deepEqual(JSON.parse((await d.exec(s.id, 'cat /run/sandboxd/envs.json')).stdout), { CLAIMED: 'yes' });
    assert.equal((await d.exec(s.id, 'wget -qO- http://127.0.0.1:49999/health')).stdout, 'ok\n');
    await d.delete(s.id);
  });

  it('a pooled sandbox whose service stopped answering is not handed out: the create starts its own', async () => {
    const m = await driver('svcdead', {
      warmPool: [{ image: GOOD, size: 1 }],
      warmLimits: LIMITS,
      serviceStartTimeoutMs: 1500,
    });
    await m.driver.refillPools();
    assert.deepEqual(m.driver.warmPool(), { [GOOD]: 1 });
    // The pooled sandbox's httpd (the service; nothing restarts it) is killed from the host.
    const parent = m.options.cgroupParent!;
    const pooled = readdirSync(cgroupParentDir(parent)).filter((n) => n.startsWith('warm_'));
    assert.equal(pooled.length, 1, `${pooled}`);
    const cmdline = (pid: number) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      } catch {
        return ''; // ended meanwhile
      }
    };
    const httpd = cgroupProcsOf(parent, pooled[0]).filter((pid) => cmdline(pid).includes('httpd'));
    // busybox httpd forks a child per connection: one may still be serving the fill's probe.
    assert.ok(httpd.length >= 1, 'the service runs in the pooled sandbox');
    for (const pid of httpd) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // a connection's child that ended meanwhile
      }
    }
    const s = await m.driver.create(spec('dead', GOOD, { K: 'v' }));
    assert.equal(m.driver.containerIdOf(s.id), s.id, 'started for the create, not claimed');
    assert.equal((await m.driver.exec(s.id, 'wget -qO- http://127.0.0.1:49999/health')).stdout, 'ok\n');
    assert.deepEqual(JSON.parse((await m.driver.exec(s.id, 'cat /run/sandboxd/envs.json')).stdout), { K: 'v' });
    await m.driver.delete(s.id);
  });

  it('a service that never answers fails the create after the timeout, leaving nothing behind', async () => {
    const m = await driver('svcslow', { serviceStartTimeoutMs: 1500 });
    await assert.rejects(
      m.driver.create(spec('slow', SILENT)),
      (e) =>
        e instanceof SandboxdError && e.kind === 'upstream_timeout' && /GET \/health on port 49999/.test(e.message),
    );
    await m.driver.released();
    assert.deepEqual(await m.driver.list(), []);
    assert.deepEqual(traces(m.options.bridge!, m.dataDir, m.options.cgroupParent!), []);
  });

  it('a service program that is missing fails the create with validation, leaving nothing behind', async () => {
    const m = await driver('svcmiss');
    await assert.rejects(
      m.driver.create(spec('miss', MISSING)),
      (e) => e instanceof SandboxdError && e.kind === 'validation' && e.message.includes('/svc/not-there'),
    );
    await m.driver.released();
    assert.deepEqual(traces(m.options.bridge!, m.dataDir, m.options.cgroupParent!), []);
  });

  it('malformed labels: validation at create, nothing started', async () => {
    const m = await driver('svcbad');
    await assert.rejects(
      m.driver.create(spec('bad', MALFORMED)),
      (e) => e instanceof SandboxdError && e.kind === 'validation' && e.message.includes(SERVICE_LABELS.port),
    );
    assert.deepEqual(traces(m.options.bridge!, m.dataDir, m.options.cgroupParent!), []);
  });
});
