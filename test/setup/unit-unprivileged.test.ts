/**
 * `npm run test:unit` needs neither root nor the runtime: run here as an unprivileged user
 * (uid 65534) with a home and temp dir of its own. Skipped, with the reason, where that user
 * cannot read the checkout (a clone under a 0700 home).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { it } from 'node:test';

const ROOT = resolve(import.meta.dirname, '../..');
const AS_NOBODY = ['--reuid=65534', '--regid=65534', '--clear-groups'];

function unreadable(): string | false {
  if (process.getuid?.() !== 0) return 'needs root to switch to an unprivileged user';
  const r = spawnSync('setpriv', [...AS_NOBODY, 'test', '-r', join(ROOT, 'package.json')]);
  return r.status === 0 ? false : `uid 65534 cannot read ${ROOT} (a folder above it is not o+x)`;
}

it('npm run test:unit passes without root', { skip: unreadable() }, () => {
  const home = mkdtempSync(join(tmpdir(), 'sbxd-unit-nobody-'));
  // Sticky, as a shared temp dir is (/tmp): backup and restore refuse dirs others can rename in.
  chmodSync(home, 0o1777);
  // A test process's NODE_TEST_CONTEXT would make the nested runner report to this one.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  try {
    const r = spawnSync(
      'setpriv',
      // Two files at a time (node's default is one on a 2-core machine): the same tests, in
      // about half the time (the whole unit suite runs again here, as root, one file at a time).
      [...AS_NOBODY, 'env', `HOME=${home}`, `TMPDIR=${home}`, 'bash', 'scripts/test-unit.sh', '--test-concurrency=2'],
      { cwd: ROOT, encoding: 'utf8', timeout: 900_000, env },
    );
    const tail = `${r.stdout.slice(-3000)}\n${r.stderr.slice(-2000)}`;
    assert.equal(r.status, 0, tail);
    assert.match(r.stdout, /^ℹ fail 0$/m, tail);
    const passed = Number(/^ℹ pass (\d+)$/m.exec(r.stdout)?.[1] ?? 0);
    assert.ok(passed > 150, `only ${passed} tests ran: ${tail}`);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});
