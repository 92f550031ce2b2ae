import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { SqliteStore } from '../store/sqlite/store.js';
import { loadPortLinkSecret } from './link-secret.js';

/** A logger that keeps what it was told. */
function notes() {
  const said: Array<{ level: string; msg: string }> = [];
  return {
    said,
    log: {
      info: (_o: object, msg: string) => void said.push({ level: 'info', msg }),
      warn: (_o: object, msg: string) => void said.push({ level: 'warn', msg }),
    } as never,
  };
}

describe('the port-link secret (database, shared by replicas)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbxd-link-secret-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, text?: string) => {
    const p = join(dir, name);
    if (text !== undefined) writeFileSync(p, text, { mode: 0o600 });
    return p;
  };

  it('is made once, kept in the database and read back; nothing is written to the data dir', async () => {
    const s = new SqliteStore(':memory:');
    const n = notes();
    const missing = join(dir, 'none', 'proxy-link.key');
    const a = await loadPortLinkSecret(s, { legacyKeyFile: missing, log: n.log });
    assert.equal(a.length, 32);
    assert.deepEqual(Buffer.from((await s.getMeta('proxy.portLinkSecret')) ?? '', 'base64'), a);
    assert.deepEqual(await loadPortLinkSecret(s, { legacyKeyFile: missing, log: n.log }), a, 'a restart');
    assert.deepEqual(n.said, []);
    await s.close();
  });

  it("an older version's key file is carried over on the first start, then never used again", async () => {
    const s = new SqliteStore(':memory:');
    const key = randomBytes(32);
    const n = notes();
    const old = file('old.key', `${key.toString('hex')}\n`);
    assert.deepEqual(await loadPortLinkSecret(s, { legacyKeyFile: old, log: n.log }), key);
    assert.match(n.said[0].msg, /moved into the database/);
    // Another replica's own (different) file: the database's key wins, and the file is reported.
    const other = file('other.key', randomBytes(32).toString('hex'));
    assert.deepEqual(await loadPortLinkSecret(s, { legacyKeyFile: other, log: n.log }), key);
    assert.equal(n.said[1].level, 'warn');
    assert.match(n.said[1].msg, /no longer accepted/);
    await s.close();
  });

  it('a key file that holds no usable key is reported and ignored', async () => {
    const s = new SqliteStore(':memory:');
    const n = notes();
    const bad = file('bad.key', 'not hex\n');
    const got = await loadPortLinkSecret(s, { legacyKeyFile: bad, log: n.log });
    assert.equal(got.length, 32);
    assert.match(n.said[0].msg, /ignored/);
    await s.close();
  });

  it('a malformed secret in the database stops the start with a message naming it', async () => {
    const s = new SqliteStore(':memory:');
    await s.setMeta('proxy.portLinkSecret', 'c2hvcnQ=');
    await assert.rejects(
      loadPortLinkSecret(s, { legacyKeyFile: join(dir, 'none.key'), log: notes().log }),
      /proxy\.portLinkSecret.*at least 32 bytes/,
    );
    await s.close();
  });
});
