/**
 * Runner discovery against a fake Kubernetes API server on loopback (test/fake-kube-api.ts):
 * it answers the EndpointSlice list and watch of one namespace (label selector,
 * resourceVersion, bookmarks, 410 Gone for a compacted resourceVersion) the way
 * kube-apiserver does, over plain HTTP.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { FakeKubeApi, kubeConfig, NS, SVC, slice, TOKEN } from '../../../test/fake-kube-api.js';
import { type K8sRunner, parseK8sRunners, runnersOf, watchK8sRunners } from './k8s-discovery.js';

/** Waits (bounded) until `check` stops throwing. */
async function eventually(check: () => void, what: string): Promise<void> {
  let last: unknown;
  for (let i = 0; i < 1000; i++) {
    try {
      check();
      return;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${what}: ${last instanceof Error ? last.message : last}`);
}

const quiet = { info() {}, warn() {} };

describe('watchK8sRunners against a fake Kubernetes API', () => {
  const api = new FakeKubeApi();
  before(() => api.start());
  after(() => api.close());

  it('lists, then follows adds, not-ready, terminating and removed endpoints; ignores other services', async () => {
    api.apply(
      'ADDED',
      slice('runner-a', [
        { ip: '10.0.0.1', node: 'node-1' },
        { ip: '10.0.0.2', node: 'node-2', ready: false },
      ]),
    );
    api.apply('ADDED', slice('other-x', [{ ip: '10.9.9.9', node: 'node-9' }], { service: 'something-else' }));
    const seen: K8sRunner[][] = [];
    const w = watchK8sRunners({
      namespace: NS,
      service: SVC,
      onChange: (r) => seen.push(r),
      log: quiet,
      kubeConfig: kubeConfig(api.url),
      backoff: { initialMs: 10, maxMs: 50 },
    });
    try {
      const current = () => seen.at(-1);
      await eventually(
        () => assert.deepEqual(current(), [{ url: 'http://10.0.0.1:8090', nodeName: 'node-1' }]),
        'first list',
      );
      assert.equal(seen.length, 1);
      assert.equal(api.requests.find((r) => !r.watch)?.labelSelector, `kubernetes.io/service-name=${SVC}`);
      assert.equal(api.requests.find((r) => !r.watch)?.auth, `Bearer ${TOKEN}`);
      await eventually(() => assert.equal(api.openWatches, 1), 'a watch is open');

      // node-2 becomes ready; a second slice adds node-3.
      api.apply(
        'MODIFIED',
        slice('runner-a', [
          { ip: '10.0.0.1', node: 'node-1' },
          { ip: '10.0.0.2', node: 'node-2' },
        ]),
      );
      api.apply('ADDED', slice('runner-b', [{ ip: '10.0.0.3', node: 'node-3' }]));
      await eventually(
        () =>
          assert.deepEqual(
            current()?.map((r) => r.nodeName),
            ['node-1', 'node-2', 'node-3'],
          ),
        'added endpoints',
      );
      // node-1 is not ready any more, node-2 terminates.
      api.apply(
        'MODIFIED',
        slice('runner-a', [
          { ip: '10.0.0.1', node: 'node-1', ready: false },
          { ip: '10.0.0.2', node: 'node-2', ready: false, terminating: true },
        ]),
      );
      await eventually(
        () =>
          assert.deepEqual(
            current()?.map((r) => r.nodeName),
            ['node-3'],
          ),
        'not ready',
      );
      // The other service's slice changes: no call.
      const calls = seen.length;
      api.apply('MODIFIED', slice('other-x', [{ ip: '10.9.9.8', node: 'node-9' }], { service: 'something-else' }));
      api.apply('DELETED', slice('runner-b', []));
      await eventually(() => assert.deepEqual(current(), []), 'removed');
      assert.equal(seen.length, calls + 1, 'one call for the removal, none for the other service');
      assert.equal(api.lists, 1, 'no re-list while the watch holds');
    } finally {
      w.stop();
    }
    await eventually(() => assert.equal(api.openWatches, 0), 'stop() closes the watch');
  });

  it('a dropped watch is resumed and misses nothing; a 410 Gone leads to a fresh list', async () => {
    const seen: K8sRunner[][] = [];
    const lists0 = api.lists;
    const watches0 = api.watches;
    const w = watchK8sRunners({
      namespace: NS,
      service: SVC,
      port: 'runner',
      scheme: 'https',
      onChange: (r) => seen.push(r),
      log: quiet,
      kubeConfig: kubeConfig(api.url),
      backoff: { initialMs: 10, maxMs: 50 },
    });
    const nodes = () => seen.at(-1)?.map((r) => r.nodeName);
    try {
      api.apply('ADDED', slice('runner-c', [{ ip: '10.0.0.4', node: 'node-4' }]));
      await eventually(
        () => assert.deepEqual(seen.at(-1), [{ url: 'https://10.0.0.4:8090', nodeName: 'node-4' }]),
        'listed',
      );
      await eventually(() => assert.equal(api.openWatches, 1), 'watching');

      // The connection drops; a change happens while no watch is open.
      api.drop();
      api.apply('ADDED', slice('runner-d', [{ ip: '10.0.0.5', node: 'node-5' }]));
      await eventually(() => assert.deepEqual(nodes(), ['node-4', 'node-5']), 'the change made while disconnected');
      await eventually(() => assert.equal(api.openWatches, 1), 'watching again');
      assert.ok(api.watches - watches0 >= 2, 'a new watch');

      // History is compacted: the resumed watch gets 410 Gone and the client lists again.
      const listsBefore = api.lists;
      api.compact();
      api.apply('DELETED', slice('runner-c', []));
      await eventually(() => assert.deepEqual(nodes(), ['node-5']), 'state after the re-list');
      assert.ok(api.lists > listsBefore, 're-listed after 410');
      await eventually(() => assert.equal(api.openWatches, 1), 'watching after the re-list');
      api.apply('ADDED', slice('runner-e', [{ ip: '10.0.0.6', node: 'node-6' }]));
      await eventually(() => assert.deepEqual(nodes(), ['node-5', 'node-6']), 'events after the re-list');
      assert.ok(api.lists > lists0);
    } finally {
      w.stop();
      api.apply('DELETED', slice('runner-d', []));
      api.apply('DELETED', slice('runner-e', []));
    }
  });

  it('a failing list is retried with backoff; nothing is reported until one succeeds; stop() ends everything', async () => {
    api.apply('ADDED', slice('runner-f', [{ ip: '10.0.0.7', node: 'node-7' }]));
    api.failLists = 3;
    const warnings: string[] = [];
    const seen: K8sRunner[][] = [];
    const lists0 = api.lists;
    const w = watchK8sRunners({
      namespace: NS,
      service: SVC,
      onChange: (r) => seen.push(r),
      log: { info() {}, warn: (_o, msg) => warnings.push(msg) },
      kubeConfig: kubeConfig(api.url),
      backoff: { initialMs: 10, maxMs: 40 },
    });
    await eventually(() => assert.deepEqual(seen, [[{ url: 'http://10.0.0.7:8090', nodeName: 'node-7' }]]), 'listed');
    assert.equal(api.lists - lists0, 4, 'three failures, then the list that worked');
    assert.equal(warnings.filter((m) => /list failed/.test(m)).length, 3);
    await eventually(() => assert.equal(api.openWatches, 1), 'watching');
    w.stop();
    await eventually(() => assert.equal(api.openWatches, 0), 'closed');
    const requests = api.requests.length;
    api.apply('DELETED', slice('runner-f', []));
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(api.requests.length, requests, 'no request after stop()');
    assert.equal(seen.length, 1, 'no call after stop()');
  });

  it('a rejected token is retried, not fatal', async () => {
    const warnings: unknown[] = [];
    const w = watchK8sRunners({
      namespace: NS,
      service: SVC,
      onChange: () => assert.fail('no runners without a list'),
      log: { info() {}, warn: (o) => warnings.push(o) },
      kubeConfig: kubeConfig(api.url, 'wrong'),
      backoff: { initialMs: 10, maxMs: 20 },
    });
    await eventually(() => assert.ok(warnings.length >= 2), 'retried');
    w.stop();
    assert.match(JSON.stringify(warnings[0]), /401/);
  });
});

describe('runnersOf', () => {
  const s = (over: Partial<V1EndpointSlice>): V1EndpointSlice => ({
    ...slice('s', [{ ip: '10.0.0.1', node: 'n1' }]),
    ...over,
  });
  it('picks the port by name or number, else the first; brackets IPv6; skips FQDN slices; one runner per URL', () => {
    const ports = [
      { name: 'metrics', port: 9100 },
      { name: 'runner', port: 8090 },
    ];
    assert.deepEqual(runnersOf([s({ ports })], undefined, 'http'), [{ url: 'http://10.0.0.1:9100', nodeName: 'n1' }]);
    assert.deepEqual(runnersOf([s({ ports })], 'runner', 'https'), [{ url: 'https://10.0.0.1:8090', nodeName: 'n1' }]);
    assert.deepEqual(runnersOf([s({ ports })], 8090, 'http'), [{ url: 'http://10.0.0.1:8090', nodeName: 'n1' }]);
    assert.deepEqual(runnersOf([s({ ports })], 'nope', 'http'), []);
    const v6 = s({ addressType: 'IPv6', endpoints: [{ addresses: ['fd00::1'], nodeName: 'n6' }] });
    assert.deepEqual(runnersOf([v6], undefined, 'http'), [{ url: 'http://[fd00::1]:8090', nodeName: 'n6' }]);
    assert.deepEqual(runnersOf([s({ addressType: 'FQDN' })], undefined, 'http'), []);
    // `ready` unset means ready; the same address in two slices is one runner.
    const noCond = s({ endpoints: [{ addresses: ['10.0.0.1'] }] });
    assert.deepEqual(runnersOf([noCond, s({})], undefined, 'http'), [{ url: 'http://10.0.0.1:8090', nodeName: '' }]);
  });
});

describe('parseK8sRunners', () => {
  it('accepts k8s:<namespace>/<service> and nothing else', () => {
    assert.deepEqual(parseK8sRunners('k8s:sandboxd/sandboxd-runner'), {
      namespace: 'sandboxd',
      service: 'sandboxd-runner',
    });
    for (const bad of ['k8s:sandboxd', 'k8s:/svc', 'k8s:Ns/svc', 'http://10.0.0.1:8090', 'k8s:a/b/c', 'k8s:-a/b'])
      assert.equal(parseK8sRunners(bad), null, bad);
  });
});
