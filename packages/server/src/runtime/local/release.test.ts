import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { type ReleaseHost, teardown } from './release.js';

/**
 * A release host whose parts record what they free; `failAt` names the step at which the
 * server "dies" (the step throws, as a kill -9 would stop it there).
 */
function host(dir: string, failAt?: string): { h: ReleaseHost; steps: string[] } {
  const steps: string[] = [];
  const step = (name: string) => async () => {
    if (name === failAt) throw new Error(`killed at ${name}`);
    steps.push(name);
  };
  const bundleDir = join(dir, 'bundle');
  const h = {
    cgroupParent: 'sandboxd-release-test-none',
    commands: { drop: () => steps.push('commands') },
    crun: { delete: step('crun delete'), kill: step('crun kill') },
    roots: { release: step('root') },
    volumes: { release: step('volume') },
    network: { detach: step('network') },
    state: { dirOf: () => join(dir, 'state') },
    checkpointsDir: join(dir, 'checkpoints'),
    bundles: {
      remove: async () => {
        await step('bundle')();
        rmSync(bundleDir, { recursive: true, force: true });
      },
    },
    records: new Map(),
  } as unknown as ReleaseHost;
  mkdirSync(join(dir, 'state'), { recursive: true });
  mkdirSync(bundleDir, { recursive: true });
  return { h, steps };
}

describe('teardown', () => {
  const dirs: string[] = [];
  const fresh = () => {
    const d = mkdtempSync(join(tmpdir(), 'sandboxd-release-'));
    dirs.push(d);
    return d;
  };
  after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('frees everything, the state dir last', async () => {
    const dir = fresh();
    const { h, steps } = host(dir);
    await teardown(h, 'sbx_a', null);
    assert.deepEqual(steps.slice(-1), ['bundle']);
    assert.ok(!existsSync(join(dir, 'state')));
    assert.ok(!existsSync(join(dir, 'bundle')));
  });

  // A restart finds pending releases by their state dirs: one stopped at any step before
  // the end must still have its state dir, or what is left (the bundle) is never freed.
  for (const failAt of ['crun delete', 'root', 'network', 'bundle']) {
    it(`stopped at "${failAt}", the state dir is still there for a restart to finish the release`, async () => {
      const dir = fresh();
      const { h } = host(dir, failAt);
      await assert.rejects(teardown(h, 'sbx_a', null));
      assert.ok(existsSync(join(dir, 'state')), 'the state dir went before the release was done');
    });
  }
});
