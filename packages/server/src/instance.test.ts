import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { acquireInstanceLock, InstanceLockedError, instanceKey } from './instance.js';

const base = mkdtempSync(join(tmpdir(), 'sbxd-instance-'));
after(() => rmSync(base, { recursive: true, force: true }));
// Bridge names unique to this run, so parallel runs on one host do not meet.
const bridge = (n: number) => `t${process.pid % 100000}b${n}`;

describe('instance key', () => {
  it('is 10 hex digits, stable, the same for every spelling of the data dir, different per dir', () => {
    const dir = join(base, 'key', 'data');
    const key = instanceKey(dir);
    assert.match(key, /^[0-9a-f]{10}$/);
    assert.equal(instanceKey(dir), key);
    assert.equal(instanceKey(`${dir}/../data/`), key);
    symlinkSync(dir, join(base, 'key', 'link'));
    assert.equal(instanceKey(join(base, 'key', 'link')), key);
    assert.notEqual(instanceKey(join(base, 'key', 'other')), key);
  });
});

describe('instance lock', () => {
  it('refuses a second holder of a data dir or a bridge, naming the data dir, the bridge and the pid', async () => {
    const a = join(base, 'a');
    const b = join(base, 'b');
    mkdirSync(b);
    const lock = await acquireInstanceLock({ dataDir: a, bridge: bridge(1), role: 'server' });
    try {
      await assert.rejects(
        acquireInstanceLock({ dataDir: `${a}/.`, role: 'server' }),
        (e: Error) =>
          e instanceof InstanceLockedError &&
          e.message === `data dir ${a} is in use by another sandboxd (pid ${process.pid}); stop it first`,
      );
      await assert.rejects(
        acquireInstanceLock({ dataDir: b, bridge: bridge(1), role: 'teardown' }),
        (e: Error) =>
          e instanceof InstanceLockedError &&
          e.message.startsWith(
            `bridge ${bridge(1)} is in use by another sandboxd (pid ${process.pid}, data dir ${a}); give each instance its own SANDBOXD_BRIDGE`,
          ),
      );
      // The refused one held nothing: b is free.
      const other = await acquireInstanceLock({ dataDir: b, bridge: bridge(2), role: 'server' });
      await other.release();
    } finally {
      await lock.release();
    }
    const again = await acquireInstanceLock({ dataDir: a, bridge: bridge(1), role: 'teardown' });
    await assert.rejects(
      acquireInstanceLock({ dataDir: a, role: 'server' }),
      /in use by another sandboxd \(pid \d+, removing it from the host\)/,
    );
    await again.release();
  });

  it('is released by the kernel when its holder is killed with SIGKILL', async () => {
    const dir = join(base, 'killed');
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', join(import.meta.dirname, '../test/testdata/lock-child.ts'), dir, bridge(3)],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const exited = new Promise((r) => child.once('exit', r));
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (d: Buffer) => d.toString().includes('locked') && resolve());
        child.once('exit', () => reject(new Error('child exited before locking')));
      });
      await assert.rejects(acquireInstanceLock({ dataDir: dir, role: 'server' }), new RegExp(`\\(pid ${child.pid}\\)`));
    } finally {
      child.kill('SIGKILL');
      await exited;
    }
    const lock = await acquireInstanceLock({ dataDir: dir, bridge: bridge(3), role: 'server' });
    await lock.release();
  });
});
