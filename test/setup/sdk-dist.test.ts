/**
 * packages/sdk/dist, what plain `node` loads for `@sandboxd/sdk` and what the server packs:
 * built when stale and only then, and safe when several processes build at once (each
 * renames a finished build into place; nobody is left with half a package or a leftover).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { it } from 'node:test';
import { ensureSdkDist, SDK_DIR, SDK_DIST, sdkFingerprint } from '@sandboxd/sdk/build';

const ROOT = resolve(import.meta.dirname, '../..');

/** Runs the build script in another process; resolves with its exit code and output. */
function build(...args: string[]) {
  return new Promise<{ code: number | null; out: string }>((res) => {
    const p = spawn(process.execPath, ['--import', 'tsx', 'packages/sdk/scripts/build.ts', ...args], { cwd: ROOT });
    let out = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (out += b));
    p.on('close', (code) => res({ code, out }));
  });
}

it('builds only when its inputs changed', async () => {
  await ensureSdkDist();
  assert.deepEqual(await ensureSdkDist(), { dir: SDK_DIST, built: false });
  const r = await build('--if-stale');
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /dist is current/);
});

it('three forced builds at once each succeed and leave one whole, current package', { timeout: 120_000 }, async () => {
  const runs = await Promise.all([build(), build(), build()]);
  for (const r of runs) assert.equal(r.code, 0, r.out);
  assert.equal(readFileSync(join(SDK_DIST, '.sandboxd-stamp'), 'utf8').trim(), sdkFingerprint());
  const manifest = JSON.parse(readFileSync(join(SDK_DIST, 'package.json'), 'utf8'));
  assert.equal(manifest.name, '@sandboxd/sdk');
  for (const f of ['index.js', 'index.d.ts', 'types.d.ts', 'README.md'])
    assert.ok(readdirSync(SDK_DIST).includes(f), f);
  assert.deepEqual(
    readdirSync(SDK_DIR).filter((f) => f.startsWith('.dist-')),
    [],
    'no temporary builds left',
  );
  // Plain node, as examples/hello.mjs runs, loads the build.
  const { SandboxdClient } = await import(join(SDK_DIST, 'index.js'));
  assert.equal(typeof SandboxdClient, 'function');
});
