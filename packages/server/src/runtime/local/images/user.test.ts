import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { readImageFile, resolveImageUser, resolveInRoot } from './user.js';

// Image rootfs folders are untrusted: whatever the layers held, unpacked on the host.
describe('image user lookup on an untrusted rootfs', () => {
  const base = mkdtempSync(join(tmpdir(), 'image-user-'));
  after(() => rmSync(base, { recursive: true, force: true }));
  const rootfs = (name: string, build: (r: string) => void) => {
    const r = join(base, name);
    mkdirSync(r);
    build(r);
    return r;
  };

  it('reads names from the image', () => {
    const r = rootfs('plain', (d) => {
      mkdirSync(join(d, 'etc'));
      writeFileSync(join(d, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n');
      writeFileSync(join(d, 'etc/group'), 'root:x:0:\nstaff:x:50:\n');
    });
    assert.equal(resolveImageUser(r, 'app'), '1000:1001');
    assert.equal(resolveImageUser(r, 'app:staff'), '1000:50');
    assert.equal(resolveImageUser(r, '7:8'), '7:8');
    assert.throws(() => resolveImageUser(r, 'nobody'), /not in the image's \/etc\/passwd/);
  });

  it("follows links inside the image only: etc -> /etc names the image's /etc, never the host's", () => {
    const r = rootfs('links', (d) => {
      mkdirSync(join(d, 'private/etc'), { recursive: true });
      writeFileSync(join(d, 'private/etc/passwd'), 'app:x:42:42::/:/bin/sh\n');
      symlinkSync('/private/etc', join(d, 'etc'));
    });
    assert.equal(resolveImageUser(r, 'app'), '42:42');
    assert.equal(
      resolveInRoot(r, '/etc/../../../../etc/passwd'),
      join(r, 'private/etc/passwd'),
      '.. stops at the image root',
    );
    const host = rootfs('hostlink', (d) => symlinkSync('/etc', join(d, 'etc')));
    assert.equal(resolveInRoot(host, '/etc/passwd'), undefined, "the image has no /etc: the host's must not be used");
    assert.throws(() => resolveImageUser(host, 'root:root'), /not in the image/);
    const up = rootfs('uplink', (d) => symlinkSync('../../../../../../etc', join(d, 'etc')));
    assert.throws(() => resolveImageUser(up, 'root'), /not in the image/);
    const loop = rootfs('loop', (d) => {
      symlinkSync('b', join(d, 'a'));
      symlinkSync('a', join(d, 'b'));
      symlinkSync('/a', join(d, 'etc'));
    });
    assert.equal(resolveInRoot(loop, '/etc/passwd'), undefined);
  });

  it('never blocks on a FIFO, opens a device or reads an endless file', () => {
    const fifo = rootfs('fifo', (d) => {
      mkdirSync(join(d, 'etc'));
      execFileSync('mkfifo', [join(d, 'etc/passwd')]);
    });
    assert.equal(readImageFile(fifo, '/etc/passwd'), undefined);
    assert.throws(() => resolveImageUser(fifo, 'app'), /not in the image/);
    const zero = rootfs('zero', (d) => {
      mkdirSync(join(d, 'etc'));
      symlinkSync('/dev/zero', join(d, 'etc/passwd'));
    });
    assert.equal(readImageFile(zero, '/etc/passwd'), undefined, '/dev/zero inside the image does not exist');
    const dev = rootfs('dev', (d) => {
      mkdirSync(join(d, 'etc'));
      execFileSync('mknod', [join(d, 'etc/passwd'), 'c', '1', '5']);
    });
    assert.equal(readImageFile(dev, '/etc/passwd'), undefined);
    const big = rootfs('big', (d) => {
      mkdirSync(join(d, 'etc'));
      writeFileSync(join(d, 'etc/passwd'), Buffer.alloc(5 << 20, 'a'));
    });
    assert.equal(readImageFile(big, '/etc/passwd'), undefined);
  });
});
