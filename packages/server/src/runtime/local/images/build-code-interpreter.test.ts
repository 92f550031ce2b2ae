/**
 * The definition of local/code-interpreter: its revision follows its files and build steps
 * (no hand-bumped number), and its config declares the code server as its service. The
 * build itself is checked in build.test.ts.
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  CI_BASE_LABEL,
  CI_PACKAGES,
  CI_SOURCE_DIR,
  ciBaseRevision,
  ciConfig,
  ciRevision,
} from './build-code-interpreter.js';
import { DEBIAN_PACKAGES } from './build-debian.js';

test('the revision is a hash of the files: any edit, new file or mode change gives another', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-ci-rev-'));
  try {
    await mkdir(join(dir, 'server'));
    await writeFile(join(dir, 'server', 'main.py'), 'print(1)\n');
    const a = await ciRevision(dir);
    assert.match(a, /^[0-9a-f]{16}$/);
    assert.equal(await ciRevision(dir), a, 'stable');
    await writeFile(join(dir, 'server', 'main.py'), 'print(2)\n');
    const b = await ciRevision(dir);
    assert.notEqual(b, a);
    await chmod(join(dir, 'server', 'main.py'), 0o755);
    const c = await ciRevision(dir);
    assert.notEqual(c, b);
    await mkdir(join(dir, 'kernels'));
    await writeFile(join(dir, 'kernels', 'k.mjs'), '');
    assert.notEqual(await ciRevision(dir), c);
    // Bytecode caches are not part of the definition.
    const d = await ciRevision(dir);
    await mkdir(join(dir, 'server', '__pycache__'));
    await writeFile(join(dir, 'server', '__pycache__', 'main.cpython-311.pyc'), 'x');
    assert.equal(await ciRevision(dir), d);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('the base revision follows the package list; the repository dir is what the image copies', async () => {
  assert.equal(new Set(CI_PACKAGES).size, CI_PACKAGES.length, 'no package twice');
  assert.match(ciBaseRevision(), /^[0-9a-f]{16}$/);
  assert.notEqual(ciBaseRevision('trixie'), ciBaseRevision('bookworm'));
  for (const p of DEBIAN_PACKAGES) assert.ok(CI_PACKAGES.includes(p), `has local/debian's ${p}`);
  for (const p of ['sudo', 'python3-ipykernel', 'python3-pandas', 'python3-matplotlib', 'nodejs', 'r-cran-irkernel'])
    assert.ok(CI_PACKAGES.includes(p), p);
  assert.match(CI_SOURCE_DIR, /images\/code-interpreter$/);
  assert.match(await ciRevision(), /^[0-9a-f]{16}$/);
});

test('the config declares the code server as the service on 49999 with /health', () => {
  const cfg = ciConfig('abc');
  assert.deepEqual(JSON.parse(cfg.labels['org.sandboxd.service.cmd']), [
    '/usr/bin/python3',
    '/opt/sandboxd-ci/server/supervise.py',
  ]);
  assert.equal(cfg.labels['org.sandboxd.service.port'], '49999');
  assert.equal(cfg.labels['org.sandboxd.service.health'], '/health');
  assert.equal(cfg.labels[CI_BASE_LABEL], 'abc');
  assert.equal(cfg.labels['org.sandboxd.setuid'], 'allow', 'sudo works for user');
  assert.equal(cfg.user, 'root');
});
