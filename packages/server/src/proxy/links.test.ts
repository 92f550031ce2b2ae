import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { PortLinks } from './links.js';

describe('PortLinks', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbxd-links-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const secretPath = join(dir, 'sub', 'proxy-link.key');
  const g = { sandboxId: `sbx_${'a'.repeat(20)}`, port: 8000 };

  it('signs a grant that verifies for that sandbox and port until it expires', () => {
    const links = new PortLinks({ secretPath });
    const t = links.sign({ ...g, expiresAt: 2_000 });
    assert.equal(links.verify(t, { ...g, now: 1_999 }), true);
    assert.equal(links.verify(t, { ...g, now: 2_000 }), false, 'expired');
    assert.equal(links.verify(t, { ...g, port: 8001, now: 0 }), false, 'other port');
    assert.equal(links.verify(t, { ...g, sandboxId: `sbx_${'b'.repeat(20)}`, now: 0 }), false, 'other sandbox');
    const [, mac] = t.split('.');
    assert.equal(links.verify(`3000.${mac}`, { ...g, now: 0 }), false, 'expiry changed');
    for (const bad of ['', 'x', `2000.${mac}x`, `2000.${mac.slice(1)}`, `-1.${mac}`])
      assert.equal(links.verify(bad, { ...g, now: 0 }), false, bad);
    assert.equal(links.remainingSeconds(t, 500), 1);
  });

  it('keeps its secret in a 0600 file, so another instance (a restart) accepts old links', () => {
    const a = new PortLinks({ secretPath });
    const t = a.sign({ ...g, expiresAt: 10_000 });
    assert.equal(statSync(secretPath).mode & 0o777, 0o600);
    assert.match(readFileSync(secretPath, 'utf8'), /^[0-9a-f]{64}\n$/);
    assert.equal(new PortLinks({ secretPath }).verify(t, { ...g, now: 0 }), true);
    const other = new PortLinks({ secretPath: join(dir, 'other.key') });
    assert.equal(other.verify(t, { ...g, now: 0 }), false, 'another secret');
  });
});
