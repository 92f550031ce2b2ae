import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { it } from 'node:test';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');

it('set-up refuses to run without root and says how to fix it, changing nothing', () => {
  const r = spawnSync(
    'setpriv',
    ['--reuid=65534', '--regid=65534', '--clear-groups', 'bash', 'scripts/setup.sh', '--no-images'],
    {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 30_000,
    },
  );
  assert.equal(r.status, 1);
  assert.match(r.stderr, /run as root/);
  assert.match(r.stderr, /sudo npm start/);
});

it('set-up is idempotent: a second run on a prepared host installs nothing', () => {
  const r = spawnSync('bash', ['scripts/setup.sh', '--no-images'], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.doesNotMatch(r.stdout + r.stderr, /installing/);
});

it('the local driver refuses to start without root with a clear error', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbxd-noroot-'));
  chmodSync(dir, 0o777);
  try {
    const script = `import { LocalDriver } from './packages/server/src/runtime/local/driver.ts';
      try { await new LocalDriver({ dataDir: '${dir}/data', imageDir: '${dir}/images' }).init(); } catch (e) { console.log(e.message); }`;
    const r = spawnSync(
      'setpriv',
      [
        '--reuid=65534',
        '--regid=65534',
        '--clear-groups',
        process.execPath,
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        script,
      ],
      {
        cwd: ROOT,
        encoding: 'utf8',
        timeout: 60_000,
      },
    );
    assert.match(r.stdout, /needs root/, r.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
