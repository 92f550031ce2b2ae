import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { after, before, it } from 'node:test';
import { LocalDriver, type LocalDriverOptions } from './driver.js';
import { makeTestDriver } from '../../../test/local-driver.js';

let base: string;
let driver: LocalDriver;
let opts: LocalDriverOptions;

before(() => {
  const made = makeTestDriver('crash');
  base = made.dataDir;
  opts = made.options;
});
after(async () => {
  await driver?.destroyAll();
  rmSync(base, { recursive: true, force: true });
});

it('after a kill -9 mid-create, a new process adopts the finished sandboxes and cleans the rest', async () => {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      new URL('../../../test/testdata/crash-child.ts', import.meta.url).pathname,
      JSON.stringify(opts),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const created: string[] = [];
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`child created only ${created.length} sandboxes`)), 120_000);
    child.stdout.on('data', (d: Buffer) => {
      for (const m of d.toString().matchAll(/created (\S+)/g)) created.push(m[1]);
      // Kill it a moment into the create after the third: somewhere inside a create.
      if (created.length >= 3 && !child.killed)
        setTimeout(() => {
          child.kill('SIGKILL');
          clearTimeout(t);
          resolve();
        }, 40);
    });
    child.on('exit', () => {
      clearTimeout(t);
      resolve();
    });
  });
  await new Promise((r) => (child.exitCode !== null || child.signalCode !== null ? r(null) : child.on('exit', r)));

  driver = new LocalDriver(opts);
  await driver.init();
  const report = await driver.recover();
  for (const id of created) assert.ok(report.adopted.includes(id), `${id} was answered as created but not adopted`);
  const live = await driver.list();
  assert.deepEqual(live.map((s) => s.id).sort(), report.adopted.sort());
  for (const s of live) {
    assert.equal(s.state, 'running');
    assert.equal((await driver.exec(s.id, 'echo ok')).stdout, 'ok\n');
    // Its network (pooled or its own) survived recovery with its address.
    assert.match(
      (await driver.exec(s.id, 'ip -o -4 addr show eth0')).stdout,
      new RegExp(`inet ${s.address.replace(/\./g, '\\.')}/`),
    );
  }

  // Data synced to a volume before the kill is intact; the volume is still shared correctly.
  assert.equal((await driver.exec('crash_0', 'cat /data/f')).stdout, 'durable\n');
  const vol = (await driver.listVolumes()).find((v) => v.name === 'crashvol');
  assert.deepEqual(
    vol?.mountedBy.sort(),
    live
      .filter((s) => Number(s.id.split('_')[1]) % 2 === 0)
      .map((s) => s.id)
      .sort(),
  );
  // Everything half made was removed: a fresh create with the next id works.
  // The create after the last adopted one was the one cut, or not begun. (Not crash_<created>:
  // the create under way when the kill came may have finished unseen, and been adopted.)
  const next = `crash_${Math.max(created.length, ...live.map((s) => Number(s.id.split('_')[1]) + 1))}`;
  await driver.delete(next);
  const s = await driver.create({
    id: next,
    image: 'local/busybox:latest',
    env: {},
    volumes: [],
    limits: { memoryBytes: 64 << 20, cpus: 0.5, pids: 32, rootDiskBytes: 64 << 20 },
  });
  assert.equal(s.state, 'running');
});
