/**
 * The release record (deploy/releases.json) and the version of every package agree: the last
 * release listed is this tree's, every npm package, the CLI's and MCP server's constants and
 * the Python SDK carry it, and each release's schema versions are its migrations'.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { MCP_SERVER_VERSION } from '../../packages/mcp/src/server.js';
import { MIGRATIONS } from '../../packages/server/src/store/migrations/index.js';
import { PG_MIGRATIONS } from '../../packages/server/src/store/postgres/migrations.js';
import { RELEASE } from '../../packages/server/src/release.js';
import { releases } from '../e2e/previous-release.js';

const ROOT = resolve(import.meta.dirname, '../..');
const read = (p: string) => readFileSync(join(ROOT, p), 'utf8');

describe('release record', () => {
  const all = releases();
  const current = all.at(-1);

  it('lists releases oldest first, each a major.minor.patch, each landed one with its commit and date', () => {
    assert.ok(current);
    for (const [i, r] of all.entries()) {
      assert.match(r.version, /^\d+\.\d+\.\d+$/);
      if (i < all.length - 1) {
        assert.match(r.commit ?? '', /^[0-9a-f]{40}$/, `${r.version}'s commit`);
        assert.match(r.date ?? '', /^\d{4}-\d{2}-\d{2}$/, `${r.version}'s date`);
      }
    }
    const sorted = [...all].sort((a, b) => {
      const [x, y] = [a, b].map((r) => r.version.split('.').map(Number));
      return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
    });
    assert.deepEqual(sorted, all);
  });

  it("the last one is this tree's: every package and constant carries its version", () => {
    assert.equal(RELEASE, current?.version);
    for (const p of readdirSync(join(ROOT, 'packages'))) {
      let pkg: { version?: string; dependencies?: Record<string, string> };
      try {
        pkg = JSON.parse(read(`packages/${p}/package.json`));
      } catch {
        continue; // packages/python: not an npm package
      }
      assert.equal(pkg.version, RELEASE, `packages/${p}/package.json`);
      for (const [n, v] of Object.entries(pkg.dependencies ?? {}))
        if (n.startsWith('@sandboxd/')) assert.equal(v, RELEASE, `packages/${p}'s ${n}`);
    }
    assert.match(read('packages/cli/src/main.ts'), new RegExp(`const VERSION = '${RELEASE}';`));
    assert.equal(MCP_SERVER_VERSION, RELEASE);
    assert.match(read('packages/python/pyproject.toml'), new RegExp(`^version = "${RELEASE}"$`, 'm'));
    assert.match(read('packages/python/sandboxd/_version.py'), new RegExp(`__version__ = "${RELEASE}"`));
    // The example overlay names the release image of this version (`npm run image`'s tag).
    assert.match(
      read('deploy/kubernetes/overlays/example/kustomization.yaml'),
      new RegExp(`^\\s+newTag: ${RELEASE}$`, 'm'),
    );
  });

  it("this release's schema versions are its migrations'", () => {
    assert.deepEqual(current?.schema, {
      sqlite: MIGRATIONS.at(-1)?.version,
      postgres: PG_MIGRATIONS.at(-1)?.version,
    });
  });
});
