/**
 * Concurrency and crash safety: parallel resolves share one build/unpack; an unpack killed
 * with SIGKILL halfway leaves nothing that is taken as an image, and the next store start
 * deletes its leftovers.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdir, readdir, readFile, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { writeOciImage } from './oci-write.js';
import { ImageStore } from './store.js';
import { tarDir, tempDir } from '../../../../test/images.js';

const STORE_TS = new URL('./store.ts', import.meta.url).pathname;
const SERVER_DIR = new URL('../../../../', import.meta.url).pathname;

/** Pids of processes whose command line mentions `needle`. */
async function procsMentioning(needle: string): Promise<number[]> {
  const out: number[] = [];
  for (const p of await readdir('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    const cmd = await readFile(`/proc/${p}/cmdline`, 'utf8').catch(() => '');
    if (cmd.includes(needle)) out.push(Number(p));
  }
  return out;
}

async function waitFor<T>(what: string, ms: number, fn: () => Promise<T | undefined | false>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('concurrency and crash safety', () => {
  let tmp: { dir: string; cleanup: () => Promise<void> };
  before(async () => {
    tmp = await tempDir('conc');
  });
  after(async () => tmp.cleanup());

  test('two parallel resolves of one ref: one build, one unpack', async () => {
    const store = new ImageStore({ dir: join(tmp.dir, 's1') });
    const [a, b] = await Promise.all([store.resolve('local/busybox'), store.resolve('local/busybox:latest')]);
    assert.equal(a.rootfsDir, b.rootfsDir);
    assert.equal(a.ref, 'local/busybox');
    assert.equal(b.ref, 'local/busybox:latest');
    assert.deepEqual(store.stats, { pulls: 0, imports: 0, builds: 1, unpacks: 1 });
    const layout = await store.builtLayout('local/busybox:latest');
    assert.ok(layout);

    // Two refs of one digest imported in parallel: still one unpack.
    const s2 = new ImageStore({ dir: join(tmp.dir, 's2') });
    const [x, y] = await Promise.all([s2.importArchive(layout, 'a/x:1'), s2.importArchive(layout, 'a/y:1')]);
    assert.equal(x.rootfsDir, y.rootfsDir);
    assert.equal(s2.stats.unpacks, 1);
    assert.equal((await s2.list()).length, 2);
  });

  test('stale work dirs of dead processes are removed at start, live ones kept', async () => {
    const dir = join(tmp.dir, 's3');
    await mkdir(join(dir, 'tmp', '999999999.1.dead', 'out', 'rootfs'), { recursive: true });
    await mkdir(join(dir, 'tmp', 'garbage'), { recursive: true });
    const ownStart = (await readFile('/proc/self/stat', 'utf8')).split(') ')[1].split(' ')[19];
    const live = `${process.pid}.${ownStart}.live`;
    await mkdir(join(dir, 'tmp', live), { recursive: true });
    new ImageStore({ dir });
    assert.deepEqual(await readdir(join(dir, 'tmp')), [live]);
  });

  test('an unpack killed with SIGKILL leaves no image, and is cleaned at next start', async () => {
    // A layer with one 256 MiB file: umoci needs a while to write it, time to kill.
    const src = join(tmp.dir, 'big');
    await mkdir(join(src, 'data'), { recursive: true });
    await writeFile(join(src, 'data/blob'), '');
    await truncate(join(src, 'data/blob'), 256 * 1024 * 1024);
    const tar = join(tmp.dir, 'big.tar');
    await tarDir(src, tar);
    const layout = join(tmp.dir, 'big-layout');
    await writeOciImage(layout, { tag: 'big', layers: [tar], config: {}, gzip: false });

    const dir = join(tmp.dir, 's4');
    const script = join(tmp.dir, 'child.mts');
    await writeFile(
      script,
      `import { ImageStore } from ${JSON.stringify(STORE_TS)};\n` +
        `const s = new ImageStore({ dir: ${JSON.stringify(dir)} });\n` +
        `await s.importArchive(${JSON.stringify(layout)}, 'crash/big:1');\nconsole.log('finished');\n`,
    );
    const child = spawn(process.execPath, ['--import', 'tsx', script], {
      cwd: SERVER_DIR,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    try {
      // Wait until umoci has started writing the rootfs, then kill the store's process.
      const rootfs = await waitFor('unpack to start', 60_000, async () => {
        const work = (await readdir(join(dir, 'tmp')).catch(() => []))[0];
        const p = work && join(dir, 'tmp', work, 'out', 'rootfs');
        return p && (await readdir(join(p, 'data')).catch(() => [])).length > 0 ? p : undefined;
      });
      process.kill(child.pid!, 'SIGKILL');
      await exited;
      assert.equal(out, '', 'child was killed before it finished');
      // umoci got SIGKILL too (parent-death signal), so nothing writes on.
      await waitFor('umoci to die', 5000, async () => (await procsMentioning(rootfs)).length === 0);
      const written = await stat(join(rootfs, 'data/blob')).then(
        (s) => s.size,
        () => 0,
      );
      console.log(`# killed mid-unpack: ${written} of ${256 * 1024 * 1024} bytes written`);
      assert.ok(written < 256 * 1024 * 1024, 'umoci stopped writing when its parent died');
    } finally {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, 'SIGKILL');
      await exited;
    }
    assert.deepEqual(await readdir(join(dir, 'by-digest')), [], 'no half image');
    assert.deepEqual(await readdir(join(dir, 'refs')), []);
    assert.equal((await readdir(join(dir, 'tmp'))).length, 1, 'leftover work dir before restart');
    const store = new ImageStore({ dir });
    assert.deepEqual(await readdir(join(dir, 'tmp')), [], 'cleaned at start');
    assert.deepEqual(await store.list(), []);
    assert.equal(await store.has('crash/big:1'), false);
  });
});
