import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { FakeKubeApi, kubeConfig, NS, SVC, slice } from '../../../../test/fake-kube-api.js';
import { FakeRunners } from '../../../../test/fake-runners.js';
import { makeFleetApp } from '../../../../test/fleet-app.js';
import { buildApp } from '../../../app.js';
import { ConfigError, loadConfig } from '../../../config.js';

/*
 * Role api with SANDBOXD_RUNNERS=k8s:<namespace>/<service>, as app.ts builds it: the runners
 * are the ready endpoints of the Service, from a fake Kubernetes API on loopback, each a fake
 * runner at that endpoint's URL. Runners come and go with the endpoints.
 */

/** Waits (bounded) until `check` stops throwing. */
async function eventually(check: () => void | Promise<void>, what: string): Promise<void> {
  let last: unknown;
  for (let i = 0; i < 500; i++) {
    try {
      await check();
      return;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${what}: ${last instanceof Error ? last.message : last}`);
}

const url = (n: number) => `http://10.0.0.${n}:8090`;

describe('role api over the runners of a Kubernetes Service (fake API)', () => {
  const kube = new FakeKubeApi();
  before(() => kube.start());
  after(() => kube.close());

  it("places over the Service's ready endpoints; one that goes is down, its sandboxes error after the limit; back, it is cleaned", async () => {
    kube.apply(
      'ADDED',
      slice('runners-1', [
        { ip: '10.0.0.1', node: 'node-1' },
        { ip: '10.0.0.2', node: 'node-2' },
      ]),
    );
    const runners = new FakeRunners({ [url(1)]: 'node-1', [url(2)]: 'node-2', [url(3)]: 'node-3' });
    const t = await makeFleetApp(
      runners,
      [],
      { runners: { kind: 'k8s', namespace: NS, service: SVC }, runnerDownMs: 5000 },
      { kubeConfig: kubeConfig(kube.url) },
    );
    try {
      assert.deepEqual(
        t.fleet.runners().map((r) => [r.node, r.url, r.state]),
        [
          ['node-1', url(1), 'up'],
          ['node-2', url(2), 'up'],
        ],
      );
      const acct = await t.account();
      const create = () => t.app.services.sandboxes.create(acct, { image: 'local/busybox:latest' });
      const where = async (id: string) => (await t.app.store.getSandbox(id))?.runner;
      const s1 = await create();
      const s2 = await create();
      assert.deepEqual([await where(s1.id), await where(s2.id)], ['node-1', 'node-2']);

      // A third runner's endpoint becomes ready: it joins, and takes the next create.
      kube.apply('ADDED', slice('runners-2', [{ ip: '10.0.0.3', node: 'node-3' }]));
      await eventually(() => assert.equal(t.fleet.runners().length, 3), 'node-3 joins');
      await t.fleet.refresh();
      assert.equal(await where((await create()).id), 'node-3');

      // node-1's endpoint is no longer ready: it is out at once, its sandboxes error past the limit.
      await t.fleet.refresh();
      kube.apply(
        'MODIFIED',
        slice('runners-1', [
          { ip: '10.0.0.1', node: 'node-1', ready: false },
          { ip: '10.0.0.2', node: 'node-2' },
        ]),
      );
      await eventually(
        () => assert.equal(t.fleet.runners().find((r) => r.node === 'node-1')?.state, 'removed'),
        'node-1 removed',
      );
      const next = await create();
      assert.notEqual(await where(next.id), 'node-1');
      assert.deepEqual((await t.app.reaper.reconcile()).lost, []);
      t.clock.advance(5000);
      assert.deepEqual((await t.app.reaper.reconcile()).lost, [s1.id]);
      assert.equal((await t.app.store.getSandbox(s1.id))?.details?.runner, 'node-1');

      // Ready again: it answers, and what it holds of the error sandbox is deleted.
      kube.apply(
        'MODIFIED',
        slice('runners-1', [
          { ip: '10.0.0.1', node: 'node-1' },
          { ip: '10.0.0.2', node: 'node-2' },
        ]),
      );
      await eventually(
        () => assert.ok(t.fleet.runners().some((r) => r.url === url(1) && r.state !== 'removed')),
        'node-1 listed again',
      );
      await t.fleet.refresh();
      assert.equal(t.fleet.runners().find((r) => r.node === 'node-1')?.state, 'up');
      assert.deepEqual((await t.app.reaper.reconcile()).orphans, [s1.id]);
      assert.deepEqual(await runners.ids(url(1)), []);
    } finally {
      await t.close();
    }
  });

  it('outside a pod and without a kube config, k8s: runners are a start-up error naming why', async () => {
    const config = loadConfig(
      {},
      {
        role: 'api',
        runners: { kind: 'k8s', namespace: NS, service: SVC },
        runnerToken: 'test-runner-token-0123456789',
        runtime: 'fake',
        dbPath: ':memory:',
      },
    );
    const had = process.env.KUBERNETES_SERVICE_HOST;
    delete process.env.KUBERNETES_SERVICE_HOST;
    try {
      await assert.rejects(
        buildApp({ config, logger: pino({ level: 'silent' }) }),
        (e: unknown) => e instanceof ConfigError && /not in a pod \(KUBERNETES_SERVICE_HOST is unset\)/.test(e.message),
      );
    } finally {
      if (had !== undefined) process.env.KUBERNETES_SERVICE_HOST = had;
    }
  });
});
