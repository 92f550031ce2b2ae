import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { SandboxdError } from '@sandboxd/protocol';
import { checkMapping, idmappedBind, idmappedBinds, idmappedOciBind } from './idmap.js';
import { removeAndCheckLeaks } from '../../../../test/local-driver.js';
import { hostSnapshot, mountsUnder, unmount, type HostSnapshot } from './mounts.js';

const root = realpathSync(mkdtempSync(join(tmpdir(), 'sbx-idmap-')));
const src = join(root, 'src');
let snap: HostSnapshot;
const BASE = 231072;

/** Runs a shell command as host uid/gid `id` (no supplementary groups), bounded. */
function shAs(id: number, cmd: string): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile('/bin/sh', ['-c', cmd], { uid: id, gid: id, timeout: 10_000 }, (err, _out, stderr) =>
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stderr }),
    );
  });
}

before(async () => {
  snap = await hostSnapshot();
  chmodSync(root, 0o711); // the test's unprivileged writers must reach dst
  mkdirSync(join(src, 'sub'), { recursive: true });
  writeFileSync(join(src, 'root-file'), 'r');
  writeFileSync(join(src, 'user-file'), 'u');
  chownSync(join(src, 'user-file'), 1000, 1000);
  writeFileSync(join(src, 'far-file'), 'f');
  chownSync(join(src, 'far-file'), 70000, 70000); // outside a 65536-id range
});

after(async () => {
  await removeAndCheckLeaks(root, snap);
});

describe('idmappedBind', () => {
  it('shows ids shifted by uidBase and stores writes by uidBase+N as N', async () => {
    const dst = join(root, 'dst');
    mkdirSync(dst);
    await idmappedBind(src, dst, { uidBase: BASE });
    try {
      assert.equal(lstatSync(join(dst, 'root-file')).uid, BASE);
      assert.equal(lstatSync(join(dst, 'root-file')).gid, BASE);
      assert.equal(lstatSync(join(dst, 'user-file')).uid, BASE + 1000);
      assert.equal(lstatSync(join(dst, 'far-file')).uid, 65534, 'ids outside the range show as overflow');
      assert.equal(lstatSync(dst).uid, BASE);
      // The source is untouched.
      assert.equal(lstatSync(join(src, 'root-file')).uid, 0);

      // Sandbox root (host uid BASE) owns the tree through the mount and can write...
      const w = await shAs(BASE, `echo hi > ${dst}/made-by-sbx-root && mkdir ${dst}/sub/d`);
      assert.equal(w.code, 0, w.stderr);
      assert.equal(lstatSync(join(src, 'made-by-sbx-root')).uid, 0, 'lands as uid 0 on disk');
      assert.equal(lstatSync(join(src, 'made-by-sbx-root')).gid, 0);
      assert.equal(lstatSync(join(src, 'sub', 'd')).uid, 0);
      // ...while another host uid cannot write as sandbox root through it.
      const other = await shAs(BASE + 1000, `echo x > ${dst}/not-allowed`);
      assert.notEqual(other.code, 0);
      // Writes by sandbox uid 1000 land as 1000 (into a dir it owns through the mount).
      mkdirSync(join(src, 'home'));
      chownSync(join(src, 'home'), 1000, 1000);
      const h = await shAs(BASE + 1000, `echo hi > ${dst}/home/f`);
      assert.equal(h.code, 0, h.stderr);
      assert.equal(lstatSync(join(src, 'home', 'f')).uid, 1000);
      // A host uid outside the range cannot create files there.
      const out = await shAs(5000, `touch ${dst}/home/nope`);
      assert.notEqual(out.code, 0);
    } finally {
      await unmount([dst]);
    }
    assert.deepEqual(await mountsUnder(dst), []);
  });

  it('binds several pairs with one mapping and honours a custom size', async () => {
    const a = join(root, 'a');
    const b = join(root, 'b');
    mkdirSync(a);
    mkdirSync(b);
    await idmappedBinds(
      [
        [src, a],
        [join(src, 'sub'), b],
      ],
      { uidBase: 400000, size: 100 },
    );
    try {
      assert.equal(lstatSync(join(a, 'root-file')).uid, 400000);
      assert.equal(lstatSync(join(a, 'user-file')).uid, 65534, 'uid 1000 is outside a 100-id range');
      assert.equal(lstatSync(b).uid, 400000);
    } finally {
      await unmount([a, b]);
    }
  });

  it('rejects mappings that would reach host root or overflow, and relative paths', async () => {
    assert.throws(() => checkMapping({ uidBase: 0 }), SandboxdError);
    assert.throws(() => checkMapping({ uidBase: 1.5 }), SandboxdError);
    assert.throws(() => checkMapping({ uidBase: 0xffff0000 }), SandboxdError);
    assert.deepEqual(checkMapping({ uidBase: 100000 }), { uidBase: 100000, size: 65536 });
    await assert.rejects(
      idmappedBind('rel', join(root, 'x'), { uidBase: BASE }),
      (e: unknown) => e instanceof SandboxdError && e.kind === 'validation',
    );
    await assert.rejects(
      idmappedBind(join(root, 'missing'), join(root, 'x2'), { uidBase: BASE }),
      (e: unknown) => e instanceof SandboxdError && e.kind === 'internal',
    );
  });
});

describe('idmappedOciBind', () => {
  it('describes a crun per-mount idmapping with the sandbox range', () => {
    const m = idmappedOciBind('/v', '/data', { uidBase: 100000, readonly: true });
    assert.deepEqual(m, {
      destination: '/data',
      type: 'bind',
      source: '/v',
      options: ['bind', 'nosuid', 'nodev', 'ro'],
      uidMappings: [{ containerID: 0, hostID: 100000, size: 65536 }],
      gidMappings: [{ containerID: 0, hostID: 100000, size: 65536 }],
    });
  });
});
