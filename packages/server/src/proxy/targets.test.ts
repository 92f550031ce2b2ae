import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ProxyError } from './reply.js';
import { SandboxTargets } from './targets.js';

const ID = `sbx_${'a'.repeat(20)}`;

function make(
  o: { address?: string; state?: string; running?: boolean; subnet?: string } = { subnet: '10.89.0.0/16' },
) {
  const calls = { locate: 0 };
  let now = 0;
  const rec = { id: ID, accountId: 'acc_1', state: o.state ?? 'started', portsPublic: true };
  const t = new SandboxTargets({
    // What SandboxService.locate answers: null unless started and running.
    locate: async () => {
      calls.locate++;
      if (rec.state !== 'started' || o.running === false) return null;
      return { accountId: rec.accountId, portsPublic: rec.portsPublic, address: o.address ?? '10.89.0.5' };
    },
    allowedSubnet: 'subnet' in o ? (o.subnet ?? null) : '10.89.0.0/16',
    now: () => now,
  });
  return { t, calls, rec, tick: (ms: number) => (now += ms) };
}

async function statusOf(p: Promise<unknown>): Promise<number> {
  try {
    await p;
    return 200;
  } catch (e) {
    assert.ok(e instanceof ProxyError);
    return e.status;
  }
}

describe('SandboxTargets', () => {
  it('resolves a started, running sandbox to its runtime address; 404 otherwise', async () => {
    const { t } = make();
    const target = await t.resolve(ID);
    assert.equal(target.address, '10.89.0.5');
    assert.equal(target.accountId, 'acc_1');
    t.close();
    assert.equal(await statusOf(make({ state: 'stopped' }).t.resolve(ID)), 404);
    assert.equal(await statusOf(make({ running: false }).t.resolve(ID)), 404);
  });

  it("refuses addresses outside the runtime subnet, and the host's own addresses in it", async () => {
    const subnet = '10.89.0.0/16';
    for (const [address, want] of [
      ['10.89.0.5', 200],
      ['10.89.255.254', 200],
      ['10.89.0.1', 502],
      ['10.89.0.0', 502],
      ['10.89.255.255', 502],
      ['10.90.0.5', 502],
      ['127.0.0.1', 502],
      ['0.0.0.0', 502],
      ['', 502],
      ['::1', 502],
      ['10.89.0.5.nip.io', 502],
    ] as const) {
      assert.equal(await statusOf(make({ address, subnet }).t.resolve(ID)), want, address);
    }
    const none = make({ subnet: undefined }).t;
    for (const a of ['10.88.0.2', '127.0.0.1', '0.0.0.0', '169.254.169.254'])
      assert.equal(none.addressAllowed(a), false, `no subnet: ${a}`);
    assert.equal(
      make({ subnet: '127.0.0.1/32' }).t.addressAllowed('127.0.0.1'),
      true,
      'a /32 is that one address (unit tests)',
    );
  });

  it('caches briefly, shares concurrent lookups, and forgets at once', async () => {
    const { t, calls, rec, tick } = make();
    const [a, b] = await Promise.all([t.resolve(ID), t.resolve(ID)]);
    assert.equal(a, b);
    assert.equal(calls.locate, 1);
    await t.resolve(ID);
    assert.equal(calls.locate, 1, 'cached');
    tick(1000);
    const again = await t.resolve(ID);
    assert.equal(calls.locate, 2, 'expired');
    assert.equal(again.pool, a.pool, 'same address keeps the pooled connections');
    tick(1000);
    const racing = t.resolve(ID);
    t.forget(ID); // the sandbox went while the lookup was in flight
    assert.equal(await statusOf(racing), 404, 'a lookup overtaken by forget() neither answers nor caches');
    assert.equal(calls.locate, 3);
    await t.resolve(ID);
    assert.equal(calls.locate, 4, 'nothing stale was cached');
    rec.state = 'stopped';
    t.forget(ID);
    assert.equal(await statusOf(t.resolve(ID)), 404);
    t.close();
  });
});
