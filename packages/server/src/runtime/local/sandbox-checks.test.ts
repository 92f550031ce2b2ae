import assert from 'node:assert/strict';
import { it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { checkMountPath, checkMountPathsDisjoint } from './sandbox-checks.js';

const refused = (f: () => void) => assert.throws(f, (e) => e instanceof SandboxdError && e.kind === 'validation');

it("refuses mount paths that are relative, dotted, the root or the runtime's own", () => {
  for (const p of ['data', '/a/../etc', '/a/./b', '/', '//', '/proc', '/proc/x', '/dev', '/sys', 'x\0'])
    refused(() => checkMountPath(p));
  for (const p of ['/data', '/mnt/shared', '/home/user/work']) checkMountPath(p);
});

it('refuses a mount path inside, or equal to, another one', () => {
  refused(() => checkMountPathsDisjoint(['/data', '/data/inner']));
  refused(() => checkMountPathsDisjoint(['/data/inner', '/data/']));
  refused(() => checkMountPathsDisjoint(['/data', '/data']));
  checkMountPathsDisjoint(['/data', '/database', '/mnt/a', '/mnt/b']);
  checkMountPathsDisjoint([]);
});
