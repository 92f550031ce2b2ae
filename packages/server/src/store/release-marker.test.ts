import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { RELEASE } from '../release.js';
import { MIGRATIONS } from './migrations/index.js';
import { compareReleases, DowngradeError } from './release-marker.js';
import { openDatabase } from './sqlite/open.js';

const dir = mkdtempSync(join(tmpdir(), 'sandboxd-release-marker-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Every file of the dir with a hash of its bytes. */
function files(d: string): Record<string, string> {
  return Object.fromEntries(
    readdirSync(d).map((n) => [
      n,
      createHash('sha256')
        .update(readFileSync(join(d, n)))
        .digest('hex'),
    ]),
  );
}

/** The marker's rows, read without opening the file as a server would (which marks it). */
function marker(path: string): Record<string, string> {
  const db = new Database(path, { readonly: true });
  try {
    const rows = db.prepare('SELECT key, value FROM instance_meta').all() as { key: string; value: string }[];
    return Object.fromEntries(rows.map((r) => [r.key, r.value]));
  } finally {
    db.close();
  }
}

describe('release marker (SQLite)', () => {
  it('orders releases by major.minor.patch numbers; refuses what is not one', () => {
    assert.ok(compareReleases('0.2.0', '0.10.0') < 0);
    assert.ok(compareReleases('1.0.0', '0.99.99') > 0);
    assert.equal(compareReleases('0.2.0', '0.2.0'), 0);
    assert.throws(() => compareReleases('0.2', '0.2.0'), /"0\.2" is not a sandboxd release version/);
  });

  it('this package is a release version', () => {
    assert.match(RELEASE, /^\d+\.\d+\.\d+$/);
  });

  it("0.1.0's file (schema 10, no marker) migrates forward and is marked with this release", () => {
    const path = join(dir, 'forward.db');
    openDatabase(path, { migrations: MIGRATIONS.filter((m) => m.version <= 10) }).close();
    const db = openDatabase(path, { clock: () => 1234 });
    assert.equal(db.pragma('user_version', { simple: true }), MIGRATIONS.at(-1)?.version);
    db.close();
    assert.deepEqual(marker(path), { release: RELEASE, release_since: '1234' });
  });

  it("0.2.0's file (schema 12), and the earlier build that also called itself 0.2.0 (664cc61, schema 11), migrate forward and are marked with this release", () => {
    for (const schema of [12, 11]) {
      const path = join(dir, `from-0.2.0-schema-${schema}.db`);
      openDatabase(path, {
        release: '0.2.0',
        migrations: MIGRATIONS.filter((m) => m.version <= schema),
        clock: () => 1,
      }).close();
      assert.deepEqual(marker(path), { release: '0.2.0', release_since: '1' });
      const db = openDatabase(path, { clock: () => 2 });
      assert.equal(db.pragma('user_version', { simple: true }), MIGRATIONS.at(-1)?.version);
      db.close();
      assert.deepEqual(marker(path), { release: RELEASE, release_since: '2' });
    }
  });

  it('a newer release marks it; the marker keeps the time a release first served it', () => {
    const path = join(dir, 'newer.db');
    openDatabase(path, { release: '0.0.1', clock: () => 1 }).close();
    openDatabase(path, { release: '0.0.1', clock: () => 2 }).close();
    assert.deepEqual(marker(path), { release: '0.0.1', release_since: '1' });
    openDatabase(path, { release: '99.0.0', clock: () => 3 }).close();
    openDatabase(path, { release: '99.0.0', clock: () => 4 }).close();
    assert.deepEqual(marker(path), { release: '99.0.0', release_since: '3' });
  });

  it('refuses a file a newer release served (same schema), saying what to do, changing no byte', () => {
    const sub = mkdtempSync(join(dir, 'down-'));
    const path = join(sub, 'sandboxd.db');
    openDatabase(path, { release: '0.9.0' }).close();
    const before = files(sub);
    assert.throws(
      () => openDatabase(path, { release: '0.3.0' }),
      (e: Error) => {
        assert.ok(e instanceof DowngradeError);
        assert.equal(
          e.message,
          `the database ${path} was last served by sandboxd 0.9.0; this is sandboxd 0.3.0, an older release. ` +
            'Downgrades are not supported: run sandboxd 0.9.0 or newer on it, or restore the backup taken before ' +
            'the upgrade (sandboxd restore; docs/upgrades.md). Nothing was changed.',
        );
        return true;
      },
    );
    assert.deepEqual(files(sub), before);
  });

  it('refuses a newer schema, naming the schema versions too, changing no byte', () => {
    const sub = mkdtempSync(join(dir, 'schema-'));
    const path = join(sub, 'sandboxd.db');
    openDatabase(path, { release: '0.9.0' }).close();
    const before = files(sub);
    assert.throws(
      () => openDatabase(path, { release: '0.1.0', migrations: MIGRATIONS.filter((m) => m.version <= 10) }),
      (e: Error) => {
        assert.ok(e instanceof DowngradeError);
        assert.match(
          e.message,
          new RegExp(
            `last served by sandboxd 0\\.9\\.0; this is sandboxd 0\\.1\\.0, an older release \\(database schema version ${MIGRATIONS.at(-1)?.version} is newer than this server \\(10\\)\\)\\. Downgrades are not supported`,
          ),
        );
        return true;
      },
    );
    assert.deepEqual(files(sub), before);
  });
});
