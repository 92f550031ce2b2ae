import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { StorageGuard } from '../services/storage.js';
import { toHttpError } from '../http/errors.js';
import { isOutOfSpace, OUT_OF_STORAGE_MESSAGE } from './storage.js';

describe('out of storage', () => {
  it('is told from codes and texts of Node, SQLite, tools and wrapped errors', () => {
    const enospc = Object.assign(new Error('write failed'), { code: 'ENOSPC' });
    assert.ok(isOutOfSpace(enospc));
    assert.ok(isOutOfSpace(Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' })));
    assert.ok(
      isOutOfSpace(new Error('mkfs.ext4 failed: No space left on device while writing out and closing file system')),
    );
    assert.ok(
      isOutOfSpace(
        new Error(
          'mkfs.ext4 -F failed: mkfs.ext4: Attempt to write block to filesystem resulted in short write while writing out and closing file system',
        ),
      ),
    );
    assert.ok(
      isOutOfSpace(new SandboxdError('internal', 'sandbox x failed to start: ENOSPC: no space left on device, write')),
    );
    assert.ok(isOutOfSpace(new Error('outer', { cause: enospc })));
    for (const e of [
      new Error('boom'),
      Object.assign(new Error('x'), { code: 'EACCES' }),
      null,
      undefined,
      'ENOSPC',
      42,
    ])
      assert.equal(isOutOfSpace(e), false, String(e));
  });

  it('answers 507 with a message that leaks no path; client errors keep their status', () => {
    for (const e of [
      Object.assign(new Error("ENOSPC: no space left on device, open '/var/lib/sandboxd/sandboxes/x/state.json'"), {
        code: 'ENOSPC',
      }),
      Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' }),
      new SandboxdError('internal', 'crun run failed: No space left on device /secret/path'),
    ]) {
      const r = toHttpError(e);
      assert.equal(r.status, 507);
      assert.deepEqual(r.body, { code: 507, kind: 'insufficient_storage', message: OUT_OF_STORAGE_MESSAGE });
      assert.equal(r.internal, false);
    }
    assert.equal(
      toHttpError(new SandboxdError('validation', 'No space left on device is not a valid name')).status,
      400,
    );
    assert.equal(toHttpError(new Error('boom')).status, 500);
  });

  it('the guard refuses below the floor, never with floor 0, and ignores paths not made yet', async () => {
    await assert.rejects(
      new StorageGuard([tmpdir()], Number.MAX_SAFE_INTEGER).check(),
      (e: SandboxdError) => e.kind === 'insufficient_storage' && e.status === 507,
    );
    await new StorageGuard([tmpdir()], 0).check();
    await new StorageGuard([tmpdir()], 1).check();
    await new StorageGuard(['/nonexistent/sandboxd'], Number.MAX_SAFE_INTEGER).check();
    assert.ok((await new StorageGuard([tmpdir()], 1).freeBytes()) > 0);
  });
});
