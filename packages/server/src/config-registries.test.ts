import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ConfigError, loadConfig } from './config.js';
import { DEFAULT_REGISTRIES_ALLOWED } from './runtime/local/images/pull-policy.js';

test('registriesAllowed: default the public registries; env and file; * and none; bad entries refused', () => {
  assert.deepEqual(loadConfig({}).registriesAllowed, [...DEFAULT_REGISTRIES_ALLOWED]);
  assert.deepEqual(loadConfig({ SANDBOXD_REGISTRIES_ALLOWED: 'ghcr.io, 127.0.0.1:5000' }).registriesAllowed, [
    'ghcr.io',
    '127.0.0.1:5000',
  ]);
  assert.deepEqual(loadConfig({ SANDBOXD_REGISTRIES_ALLOWED: '*' }).registriesAllowed, ['*']);
  assert.deepEqual(loadConfig({ SANDBOXD_REGISTRIES_ALLOWED: 'none' }).registriesAllowed, []);
  assert.throws(() => loadConfig({ SANDBOXD_REGISTRIES_ALLOWED: 'ghcr.io,http://x' }), ConfigError);
  const dir = mkdtempSync(join(tmpdir(), 'sbx-config-'));
  try {
    const file = join(dir, 'c.json');
    writeFileSync(
      file,
      JSON.stringify({
        registriesAllowed: ['quay.io', 'reg.internal:5000'],
        registryCredentials: {
          'ghcr.io': { username: 'u', password: 'p', accounts: ['acc_1'] },
          'docker.io': { username: 'd', password: 'p' },
          'quay.io': { username: 'q', password: 'p', accounts: '*' },
        },
      }),
    );
    const c = loadConfig({ SANDBOXD_CONFIG: file });
    assert.deepEqual(c.registriesAllowed, ['quay.io', 'reg.internal:5000']);
    assert.deepEqual(c.registryCredentials['ghcr.io'].accounts, ['acc_1']);
    assert.equal(c.registryCredentials['docker.io'].accounts, undefined);
    assert.equal(c.registryCredentials['quay.io'].accounts, '*');
    writeFileSync(
      file,
      JSON.stringify({ registryCredentials: { 'ghcr.io': { username: 'u', password: 'p', accounts: 'all' } } }),
    );
    assert.throws(() => loadConfig({ SANDBOXD_CONFIG: file }), ConfigError);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
