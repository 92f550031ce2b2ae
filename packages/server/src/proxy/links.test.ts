import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { PortLinks } from './links.js';

describe('PortLinks', () => {
  const g = { sandboxId: `sbx_${'a'.repeat(20)}`, port: 8000 };
  const withSecret = (secret: Buffer) => new PortLinks({ secret: () => secret });

  it('signs a grant that verifies for that sandbox and port until it expires', () => {
    const links = withSecret(randomBytes(32));
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

  it('another instance with the same secret (a replica, a restart) accepts its links; another secret does not', () => {
    const secret = randomBytes(32);
    const t = withSecret(secret).sign({ ...g, expiresAt: 10_000 });
    assert.equal(withSecret(Buffer.from(secret)).verify(t, { ...g, now: 0 }), true);
    assert.equal(withSecret(randomBytes(32)).verify(t, { ...g, now: 0 }), false, 'another secret');
  });
});
