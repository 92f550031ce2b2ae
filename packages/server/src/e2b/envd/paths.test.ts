import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import type { SandboxRecord } from '../../domain/sandbox.js';
import type { EnvdCall } from './context.js';
import { EnvdPaths } from './paths.js';

const call = (id: string): EnvdCall => ({
  accountId: 'acc',
  sandbox: { id } as SandboxRecord,
  user: undefined,
  defaultUser: undefined,
});

describe('envd paths', () => {
  it('looks a home up only for relative paths, per sandbox and user, cached briefly', async () => {
    const asked: string[] = [];
    let now = 0;
    const paths = new EnvdPaths(
      {
        whoami: async (_a, sandboxId, user) => {
          asked.push(`${sandboxId}/${user ?? '-'}`);
          if (user === 'ghost') throw new SandboxdError('validation', 'Unknown user', { unknownUser: true });
          const home = user === 'root' ? '/root' : user ? `/home/${user}` : '/';
          return { user: user ?? 'root', uid: 0, gid: 0, group: 'root', home };
        },
      },
      () => now,
    );
    assert.equal(await paths.resolve(call('a'), '/abs/x', 'user'), '/abs/x');
    assert.deepEqual(asked, []);
    assert.equal(await paths.resolve(call('a'), 'x', 'user'), '/home/user/x');
    assert.equal(await paths.resolve(call('a'), '~/y', 'user'), '/home/user/y');
    assert.equal(await paths.resolve(call('a'), 'x', 'root'), '/root/x');
    assert.equal(await paths.resolve(call('a'), 'x', undefined), '/x');
    assert.equal(await paths.resolve(call('b'), 'x', 'user'), '/home/user/x');
    assert.deepEqual(asked, ['a/user', 'a/root', 'a/-', 'b/user']);
    now += 31_000;
    await paths.resolve(call('a'), 'x', 'user');
    assert.equal(asked.length, 5, 'looked up again once stale');
    await assert.rejects(paths.resolve(call('a'), 'x', 'ghost'), { kind: 'validation' });
    await assert.rejects(paths.resolve(call('a'), 'x', 'ghost'), { kind: 'validation' });
    assert.equal(asked.filter((a) => a === 'a/ghost').length, 2, 'failures are not cached');
  });
});
