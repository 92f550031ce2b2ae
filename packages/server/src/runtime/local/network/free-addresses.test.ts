import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { hostFullError } from '../../../domain/capacity.js';
import { netnsName } from './addr.js';
import { runTool } from './exec.js';
import { NetworkManager, type NetworkOptions } from './manager.js';

// Names and addresses no one else uses; every sandbox id of this file starts with `fa_`.
const OPTS: NetworkOptions = { bridge: 'sbxt-fa', subnet: '10.89.251.0/29' };
const IDS = ['fa_0', 'fa_1', 'fa_2', 'fa_3', 'fa_4', 'fa_5'];

async function cleanUp(): Promise<void> {
  await new NetworkManager(OPTS).teardown();
  for (const id of IDS) {
    if (existsSync(`/run/netns/${netnsName(id)}`))
      await runTool('ip', ['netns', 'del', netnsName(id)], { allowFailure: true });
  }
}

describe('NetworkManager.freeAddresses', () => {
  it("is the subnet's addresses, with no cap of a bridge's ports (nothing on the host touched)", async () => {
    const count = (subnet: string) => new NetworkManager({ ...OPTS, subnet }).freeAddresses();
    assert.deepEqual(await count('10.89.0.0/16'), { free: 65_533, total: 65_533 });
    assert.deepEqual(await count('10.89.0.0/22'), { free: 1021, total: 1021 });
    assert.deepEqual(await count('10.89.0.0/29'), { free: 5, total: 5 });
  });

  describe('on the host (real kernel objects)', () => {
    let nm: NetworkManager;
    before(async () => {
      await cleanUp();
      nm = new NetworkManager(OPTS);
      await nm.init();
    });
    after(cleanUp);

    it('counts what this instance and the host hold; at none left attach says so and that means addresses', async () => {
      await nm.attach('fa_0');
      await nm.attach('fa_1');
      assert.deepEqual(await nm.freeAddresses(), { free: 3, total: 5 });
      const fresh = new NetworkManager(OPTS);
      await fresh.init();
      fresh.close();
      assert.deepEqual(await fresh.freeAddresses(), { free: 3, total: 5 }, 'read from the host');
      for (const id of IDS.slice(2, 5)) await nm.attach(id);
      assert.deepEqual(await nm.freeAddresses(), { free: 0, total: 5 });
      const e = await nm.attach('fa_5').then(
        () => assert.fail('a sixth network in a /29'),
        (err: unknown) => err,
      );
      assert.equal((hostFullError(e)?.details as { resource?: string } | undefined)?.resource, 'addresses', String(e));
      assert.ok(!existsSync(`/run/netns/${netnsName('fa_5')}`), 'nothing left of the refused attach');
      await nm.detach('fa_0');
      assert.deepEqual(await nm.freeAddresses(), { free: 1, total: 5 });
      for (const id of IDS) await nm.detach(id);
      assert.deepEqual(await nm.freeAddresses(), { free: 5, total: 5 });
    });
  });
});
