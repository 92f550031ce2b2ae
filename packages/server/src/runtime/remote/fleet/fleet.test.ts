import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isSandboxdError, type ErrorKind } from '@sandboxd/protocol';
import { FakeRunners, MemoryRecords } from '../../../../test/fake-runners.js';
import { CONFORMANCE_LIMITS } from '../../conformance.js';
import type { InjectionEvent, SandboxSpec } from '../../driver.js';
import type { RunnerDriver } from './member.js';
import { FleetDriver } from './fleet.js';
import { fixedUrls, type RunnerUrls } from './records.js';

/*
 * The fleet over fake runners (in memory, each with a health answer and a switch that makes
 * it stop answering), with in-memory records and a hand-moved clock; health checks run only
 * when a test calls refresh(). Fast; the real thing is test/e2e/fleet.test.ts.
 */

const MiB = 2 ** 20;
const silent = { info() {}, warn() {} };
const A = 'http://a:1';
const B = 'http://b:1';
const C = 'http://c:1';

async function rejectsWith(p: Promise<unknown>, kind: ErrorKind, message?: RegExp): Promise<Error> {
  let caught: Error | null = null;
  await assert.rejects(p, (e: unknown) => {
    assert.ok(isSandboxdError(e), `expected SandboxdError(${kind}), got ${String(e)}`);
    assert.equal(e.kind, kind, e.message);
    if (message) assert.match(e.message, message);
    caught = e;
    return true;
  });
  return caught!;
}

let seq = 0;
const spec = (over: Partial<SandboxSpec> = {}): SandboxSpec => ({
  id: `sb_${seq++}`,
  image: 'local/busybox:latest',
  env: {},
  volumes: [],
  limits: CONFORMANCE_LIMITS,
  ...over,
});
const vol = (name: string, mountPath = `/m_${name}`) => ({ name, mountPath, sizeGb: 1 });

/** A fleet (health checks by hand) over `runners` at `urls`, with a clock at `clock.t`. */
async function makeFleet(
  runners: FakeRunners,
  urls: string[] | RunnerUrls,
  o: { records?: MemoryRecords; downAfterMs?: number } = {},
) {
  const records = o.records ?? new MemoryRecords();
  const clock = { t: 1_000_000 };
  const fleet = new FleetDriver({
    source: Array.isArray(urls) ? fixedUrls(urls) : urls,
    connect: runners.connect,
    records,
    downAfterMs: o.downAfterMs ?? 5000,
    floors: { memoryBytes: 256 * MiB, diskBytes: 512 * MiB },
    log: silent,
    now: () => clock.t,
    poll: false,
    initWaitMs: 2000,
  });
  await fleet.init();
  return { fleet, records, clock };
}

/** A runner list a test changes (as the Kubernetes watch would). */
function watchedUrls(initial: string[]) {
  let push: ((urls: string[]) => void) | null = null;
  const source: RunnerUrls = {
    start(onUrls) {
      push = onUrls;
      onUrls(initial);
      return { stop() {} };
    },
  };
  return { source, set: (urls: string[]) => push!(urls) };
}

const two = () => new FakeRunners({ [A]: 'a', [B]: 'b' });

describe('fleet: placement', () => {
  it('spreads creates over the runners by load, counting what each runner reports', async () => {
    const runners = two();
    const { fleet } = await makeFleet(runners, [A, B]);
    for (let i = 0; i < 4; i++) await fleet.create(spec());
    assert.equal((await runners.ids(A)).length, 2);
    assert.equal((await runners.ids(B)).length, 2);
    // b gets three more behind the fleet's back: once it reports them, creates go to a.
    for (let i = 0; i < 3; i++) await runners.driver(B).create(spec());
    await fleet.refresh();
    for (let i = 0; i < 3; i++) await fleet.create(spec());
    assert.equal((await runners.ids(A)).length, 5);
    assert.equal((await runners.ids(B)).length, 5);
    await fleet.close();
  });

  it('a runner that has the image cached wins a tie', async () => {
    const runners = new FakeRunners({});
    runners.add(A, 'a');
    runners.add(B, 'b', { images: ['reg.example/only-b:1'] });
    const { fleet } = await makeFleet(runners, [A, B]);
    const s = await fleet.create(spec({ image: 'reg.example/only-b:1' }));
    assert.deepEqual(await runners.ids(B), [s.id], 'b has the image; a (first by name) does not');
    const t = await fleet.create(spec());
    assert.deepEqual(await runners.ids(A), [t.id], 'both have busybox: the less loaded');
    await fleet.close();
  });

  it('a runner without room gets no creates; with none, 503 capacity naming the resource of each', async () => {
    const runners = two();
    const { fleet } = await makeFleet(runners, [A, B]);
    for (let i = 0; i < 3; i++) await runners.driver(B).create(spec());
    runners.driver(A).hostCapacity.memoryAvailableBytes = 100 * MiB; // under the 256 MiB floor
    await fleet.refresh();
    const s = await fleet.create(spec());
    assert.ok((await runners.ids(B)).includes(s.id), 'b, though more loaded: a has no memory');
    assert.equal((await fleet.capacity()).memoryAvailableBytes, 16 * 2 ** 30, "capacity is b's, where a create goes");
    runners.driver(B).hostCapacity.addressTotal = 4; // its 4 sandboxes hold them all
    await fleet.refresh();
    const e = await rejectsWith(fleet.create(spec()), 'capacity', /^No runner has room for more sandboxes: /);
    assert.match(e.message, /a: memory is low .*; b: no free sandbox network address/);
    assert.deepEqual((e as unknown as { details: unknown }).details, {
      resource: 'memory',
      retryAfterMs: 5000,
      runners: [
        { node: 'a', full: ['memory'] },
        { node: 'b', full: ['addresses'] },
      ],
    });
    assert.equal((await fleet.capacity()).memoryAvailableBytes, 100 * MiB, 'none has room: the best ranked (a)');
    const status = fleet.runners();
    assert.deepEqual(
      status.map((r) => [r.node, r.state, r.sandboxes, r.full]),
      [
        ['a', 'up', 0, ['memory']],
        ['b', 'up', 4, ['addresses']],
      ],
    );
    await fleet.close();
  });

  it('no runner answers: creates and capacity answer 503 unavailable naming each', async () => {
    const runners = two();
    runners.setDown(A);
    runners.setDown(B, 'connect ETIMEDOUT');
    const { fleet } = await makeFleet(runners, [A, B]);
    await rejectsWith(fleet.create(spec()), 'unavailable', /No runner answers; .*ECONNREFUSED.*ETIMEDOUT/);
    await rejectsWith(fleet.capacity(), 'unavailable');
    assert.deepEqual(
      fleet.runners().map((r) => [r.url, r.node, r.state]),
      [
        [A, null, 'down'],
        [B, null, 'down'],
      ],
    );
    runners.setDown(A, null);
    await fleet.refresh();
    await fleet.create(spec());
    assert.equal((await runners.ids(A)).length, 1);
    await fleet.close();
  });
});

describe('fleet: routing', () => {
  it("calls go to the sandbox's runner; another replica finds it in the records once, then from memory", async () => {
    const runners = two();
    const { fleet, records } = await makeFleet(runners, [A, B]);
    const s1 = await fleet.create(spec());
    const s2 = await fleet.create(spec());
    assert.deepEqual([records.sandboxes.get(s1.id), records.sandboxes.get(s2.id)], ['a', 'b']);
    assert.equal((await fleet.exec(s1.id, 'echo one')).stdout, 'one\n');
    assert.ok(runners.calls.get(A)!.includes(`exec ${s1.id}`));
    assert.ok(!runners.calls.get(B)!.includes(`exec ${s1.id}`));

    let lookups = 0;
    const counted = Object.assign(Object.create(records), {
      runnerOf: (id: string) => {
        lookups++;
        return records.runnerOf(id);
      },
    }) as MemoryRecords;
    const { fleet: other } = await makeFleet(runners, [A, B], { records: counted });
    assert.equal((await other.exec(s2.id, 'echo two')).stdout, 'two\n');
    await assert.rejects(other.files.stat(s2.id, '/'), /The fake runtime has no file operations/);
    assert.ok(runners.calls.get(B)!.includes(`files.stat ${s2.id}`), 'file calls are routed too');
    // A process started through one replica is tracked by its runner: another replica lists it.
    const spec2 = { argv: ['/bin/sh', '-c', 'echo tracked'], run: {}, env: {}, tag: 'mine', startedAt: 0, held: false };
    const started = await fleet.processes.start(s2.id, spec2);
    assert.deepEqual(
      (await other.processes.list(s2.id)).map((p) => [p.pid, p.tag]),
      [[started.pid, 'mine']],
    );
    assert.ok(runners.calls.get(B)!.includes(`processes.list ${s2.id}`), 'process calls are routed too');
    await other.pause(s2.id);
    assert.equal((await other.inspect(s2.id))?.state, 'paused');
    assert.equal(lookups, 1, 'one look-up in the records, then memory');
    assert.deepEqual(await other.processes.list(s1.id), [], 'the processes of a sandbox of A are asked of A');
    assert.ok(runners.calls.get(A)!.includes(`processes.list ${s1.id}`));
    assert.equal(await other.inspect('sb_nowhere'), null);
    await rejectsWith(other.exec('sb_nowhere', 'true'), 'not_found');
    await fleet.close();
    await other.close();
  });

  it('a sandbox with no runner recorded is found on the runner that has it, and recorded', async () => {
    const runners = two();
    const { fleet, records } = await makeFleet(runners, [A, B]);
    await runners.driver(B).create(spec({ id: 'sb_legacy' }));
    assert.equal((await fleet.exec('sb_legacy', 'echo found')).stdout, 'found\n');
    assert.equal(records.sandboxes.get('sb_legacy'), 'b');
    await fleet.delete('sb_legacy');
    assert.deepEqual(await runners.ids(B), []);
    await fleet.close();
  });

  it('lists the sandboxes of every runner; images, snapshots and volumes of all, once each', async () => {
    const runners = two();
    const { fleet } = await makeFleet(runners, [A, B]);
    const ids = [(await fleet.create(spec())).id, (await fleet.create(spec())).id].sort();
    assert.deepEqual((await fleet.list()).map((s) => s.id).sort(), ids);
    assert.deepEqual((await fleet.listImages()).map((i) => i.ref).sort(), [
      'local/busybox:latest',
      'local/debian:bookworm',
    ]);
    await fleet.snapshot(ids[1], 'snapshot/acc/one');
    assert.deepEqual(
      (await fleet.listSnapshots()).map((i) => i.ref),
      ['snapshot/acc/one'],
    );
    await fleet.deleteImage('snapshot/acc/one');
    assert.deepEqual(await fleet.listSnapshots(), []);
    await fleet.close();
  });
});

describe('fleet: secrets', () => {
  it("setSecrets goes to the sandbox's runner; every runner's injections reach the fleet's listeners", async () => {
    const runners = two();
    const feeds = new Map<string, (e: InjectionEvent) => void>();
    const secretCalls: string[] = [];
    const connect = (url: string): RunnerDriver => {
      const d = runners.connect(url);
      return new Proxy(d, {
        get(t, prop, receiver) {
          if (prop === 'onInjection')
            return (l: (e: InjectionEvent) => void) => {
              feeds.set(url, l);
              return () => feeds.delete(url);
            };
          if (prop === 'setSecrets') return async (id: string) => void secretCalls.push(`${url} ${id}`);
          return Reflect.get(t, prop, receiver);
        },
      });
    };
    const fleet = new FleetDriver({
      source: fixedUrls([A, B]),
      connect,
      records: new MemoryRecords(),
      downAfterMs: 5000,
      floors: { memoryBytes: 256 * MiB, diskBytes: 512 * MiB },
      log: silent,
      poll: false,
      initWaitMs: 2000,
    });
    await fleet.init();
    const s1 = await fleet.create(spec());
    const s2 = await fleet.create(spec());
    await fleet.setSecrets(s2.id, []);
    assert.deepEqual(secretCalls, [`${B} ${s2.id}`]);
    const got: string[] = [];
    const off = fleet.onInjection((e) => got.push(e.sandboxId));
    const ev = (sandboxId: string) => ({
      sandboxId,
      secret: 'S',
      destination: 'a.test:443',
      method: 'GET',
      status: 200,
      at: 1,
    });
    feeds.get(A)?.(ev(s1.id));
    feeds.get(B)?.(ev(s2.id));
    off();
    feeds.get(A)?.(ev('after'));
    assert.deepEqual(got, [s1.id, s2.id]);
    await fleet.close();
  });
});

describe('fleet: isolation tiers', () => {
  it("a gVisor create goes only to a runner that offers gvisor; a fork to the source's runner; tiers are the union of the runners'", async () => {
    const runners = new FakeRunners({});
    runners.add(A, 'a', { isolations: ['container'] });
    runners.add(B, 'b');
    const { fleet, records } = await makeFleet(runners, [A, B]);
    assert.deepEqual(
      fleet.isolations().map((t) => [t.isolation, t.memorySnapshots]),
      [
        ['container', false],
        ['gvisor', true],
      ],
    );
    assert.deepEqual(
      fleet.runners().map((r) => r.isolations?.map((t) => t.isolation)),
      [['container'], ['container', 'gvisor']],
    );
    // B is busier, yet the gVisor sandboxes go there.
    await fleet.create(spec());
    await fleet.create(spec());
    const g = await fleet.create(spec({ isolation: 'gvisor' }));
    assert.ok((await runners.ids(B)).includes(g.id));
    await fleet.pause(g.id, { memory: 'disk' });
    assert.equal((await fleet.inspect(g.id))?.pausedMemory, 'disk');
    await fleet.resume(g.id);
    const forks = await fleet.fork!(g.id, [{ id: 'fk_1' }, { id: 'fk_2', hostname: 'two' }]);
    assert.deepEqual(
      forks.map((f) => f.id),
      ['fk_1', 'fk_2'],
    );
    const onB = await runners.ids(B);
    assert.ok(onB.includes('fk_1') && onB.includes('fk_2'), 'made on the source runner');
    assert.deepEqual([await records.runnerOf('fk_1'), await records.runnerOf('fk_2')], ['b', 'b'], 'recorded there');
    assert.deepEqual(
      runners.calls.get(A)?.filter((c) => c.startsWith('fork')),
      [],
    );
    // No runner that offers it: 400 naming the tier; its runner down: 503.
    runners.setDown(B);
    await fleet.refresh();
    await rejectsWith(fleet.create(spec({ isolation: 'gvisor' })), 'unavailable', /isolation gvisor/);
    await fleet.close();
    const only = new FakeRunners({});
    only.add(A, 'a', { isolations: ['container'] });
    const f2 = await makeFleet(only, [A]);
    await rejectsWith(f2.fleet.create(spec({ isolation: 'gvisor' })), 'validation', /offered by none of the runners/);
    await f2.fleet.close();
  });
});

describe('fleet: volumes and snapshots decide where', () => {
  it('a sandbox goes where its volumes live; 409 for volumes of two runners; 503 while their runner is down or full', async () => {
    const runners = two();
    const { fleet, records } = await makeFleet(runners, [A, B]);
    const first = await fleet.create(spec({ volumes: [vol('v1')] }));
    assert.deepEqual(await runners.ids(A), [first.id]);
    assert.equal(records.volumes.get('v1'), 'a');
    const second = await fleet.create(spec({ volumes: [vol('v2')] }));
    assert.deepEqual(await runners.ids(B), [second.id], 'the less loaded');
    const third = await fleet.create(spec({ volumes: [vol('v1', '/again')] }));
    assert.deepEqual(await runners.ids(A), [first.id, third.id].sort(), 'a, though more loaded: v1 lives there');
    await rejectsWith(
      fleet.create(spec({ volumes: [vol('v1'), vol('v2')] })),
      'conflict',
      /volumes live on different runners \(v1 on a; v2 on b\)/,
    );
    runners.driver(A).hostCapacity.diskFreeBytes = 1 * MiB;
    await fleet.refresh();
    await rejectsWith(
      fleet.create(spec({ volumes: [vol('v1')] })),
      'capacity',
      /runner a, where volume v1 lives; a: disk space is low/,
    );
    runners.setDown(A);
    await fleet.refresh();
    await rejectsWith(fleet.create(spec({ volumes: [vol('v1')] })), 'unavailable', /Runner a, where volume v1 lives/);
    assert.equal((await runners.ids(A)).length, 2, 'nothing was made');
    await fleet.close();
  });

  it('a new volume placed on another runner by a concurrent create: this create follows it', async () => {
    const runners = two();
    const records = new MemoryRecords();
    const { fleet } = await makeFleet(runners, [A, B], { records });
    let raced = false;
    records.beforeAssign = async (_id, runner) => {
      if (raced || runner !== 'a') return;
      raced = true;
      records.volumes.set('v9', 'b'); // another replica's create placed v9 on b in between
    };
    const s = await fleet.create(spec({ volumes: [vol('v9')] }));
    assert.ok(raced);
    assert.deepEqual(await runners.ids(B), [s.id]);
    assert.deepEqual(await runners.ids(A), []);
    await fleet.close();
  });

  it('a volume recorded nowhere but on a runner disk (made before runners were recorded) is found there', async () => {
    const runners = two();
    const { fleet, records } = await makeFleet(runners, [A, B]);
    await runners.driver(B).ensureVolume('old', 1);
    const s = await fleet.create(spec({ volumes: [vol('old')] }));
    assert.deepEqual(await runners.ids(B), [s.id]);
    assert.equal(records.volumes.get('old'), 'b');
    await rejectsWith(fleet.deleteVolume('old'), 'conflict');
    await fleet.delete(s.id);
    await fleet.deleteVolume('old');
    await rejectsWith(fleet.deleteVolume('old'), 'not_found');
    await runners.driver(A).ensureVolume('on_a', 1);
    runners.setDown(A);
    await fleet.refresh();
    await rejectsWith(fleet.deleteVolume('on_a'), 'unavailable', /none of the runners that answer; a: /);
    await fleet.close();
  });

  it('a create from a snapshot goes to the runner that holds it', async () => {
    const runners = two();
    const { fleet } = await makeFleet(runners, [A, B]);
    await fleet.create(spec());
    const src = await fleet.create(spec());
    assert.deepEqual(await runners.ids(B), [src.id]);
    await fleet.snapshot(src.id, 'snapshot/acc/snap');
    const again = await fleet.create(spec({ image: 'snapshot/acc/snap' }));
    assert.deepEqual(await runners.ids(B), [src.id, again.id].sort(), 'b holds it, though more loaded');
    await rejectsWith(fleet.create(spec({ image: 'snapshot/acc/none' })), 'template_not_found');
    runners.setDown(B);
    await fleet.refresh();
    await rejectsWith(
      fleet.create(spec({ image: 'snapshot/acc/snap' })),
      'unavailable',
      /none of the runners that answer/,
    );
    await fleet.close();
  });
});

describe('fleet: runners come, go and stop answering', () => {
  it('membership follows the list: a new runner takes creates, a removed one stands for its sandboxes', async () => {
    const runners = new FakeRunners({ [A]: 'a', [C]: 'c' });
    const list = watchedUrls([A]);
    const { fleet, clock } = await makeFleet(runners, list.source);
    const s = await fleet.create(spec());
    list.set([A, C]);
    await fleet.refresh();
    const t = await fleet.create(spec());
    assert.deepEqual(await runners.ids(C), [t.id], 'the new runner, less loaded');
    list.set([C]);
    clock.t += 7000;
    assert.deepEqual(
      fleet.runners().map((r) => [r.node, r.state]),
      [
        ['a', 'removed'],
        ['c', 'up'],
      ],
    );
    await rejectsWith(
      fleet.exec(s.id, 'true'),
      'unavailable',
      /Runner a, where sandbox .* lives, cannot be used: it is no longer among/,
    );
    const survey = await fleet.survey();
    assert.deepEqual(
      survey.sandboxes.map((x) => x.id),
      [t.id],
    );
    assert.equal(survey.absent('a')?.forMs, 7000);
    assert.equal(survey.absent('c'), null);
    await fleet.create(spec());
    assert.equal((await runners.ids(C)).length, 2, 'nothing goes to a');
    list.set([A, C]);
    await fleet.refresh();
    assert.equal((await fleet.exec(s.id, 'echo back')).stdout, 'back\n');
    await fleet.close();
  });

  it('a runner that fails a call is out at once; absent for as long as it is silent; back once it answers', async () => {
    const runners = two();
    const { fleet, clock } = await makeFleet(runners, [A, B]);
    await fleet.create(spec());
    const onB = await fleet.create(spec());
    let changes = 0;
    fleet.onChange(() => changes++);
    runners.setDown(B);
    await rejectsWith(fleet.exec(onB.id, 'true'), 'unavailable', /Runner http:\/\/b:1 is unreachable/);
    assert.equal(changes, 1, 'the failed call took b out');
    await rejectsWith(
      fleet.exec(onB.id, 'true'),
      'unavailable',
      /Runner b, where sandbox .* lives, cannot be used: it is not answering/,
    );
    const next = await fleet.create(spec());
    assert.ok((await runners.ids(A)).includes(next.id), 'not placed on b, before any health check');
    clock.t += 3000;
    await fleet.refresh();
    let survey = await fleet.survey();
    assert.deepEqual(survey.absent('b'), {
      host: 'b',
      forMs: 3000,
      reason: 'it is not answering (Runner http://b:1 is unreachable (connect ECONNREFUSED))',
    });
    assert.equal(survey.absent('a'), null);
    assert.notEqual(survey.absent(null), null, 'a sandbox with no runner recorded: not every runner answered');
    assert.equal(survey.absent('never-seen')?.forMs, 3000, 'silent since this fleet began');
    assert.deepEqual(
      fleet.runners().map((r) => [r.node, r.state, r.downForMs]),
      [
        ['a', 'up', undefined],
        ['b', 'down', 3000],
      ],
    );
    runners.setDown(B, null);
    await fleet.refresh();
    assert.equal(changes, 2);
    survey = await fleet.survey();
    assert.equal(survey.absent('b'), null);
    assert.equal(survey.absent(null), null);
    assert.equal((await fleet.exec(onB.id, 'echo ok')).stdout, 'ok\n');
    await fleet.close();
  });

  it('two URLs answering with one node name: the second is not used', async () => {
    const runners = new FakeRunners({ [A]: 'same', [B]: 'same' });
    const { fleet } = await makeFleet(runners, [A, B]);
    for (let i = 0; i < 3; i++) await fleet.create(spec());
    assert.equal((await runners.ids(A)).length + (await runners.ids(B)).length, 3);
    const used = (await runners.ids(A)).length ? A : B;
    assert.equal((await runners.ids(used)).length, 3, 'all on the one in use');
    const dup = fleet.runners().find((r) => r.url !== used)!;
    assert.equal(dup.state, 'down');
    assert.match(dup.reason ?? '', /node name is already used by/);
    await fleet.close();
  });

  it('a URL that answers with another node name: its old name is forgotten, not taken for the new', async () => {
    const runners = two();
    const { fleet, clock } = await makeFleet(runners, [A, B]);
    const s = await fleet.create(spec());
    runners.rename(A, 'a2');
    clock.t += 1000;
    await fleet.refresh();
    await rejectsWith(
      fleet.exec(s.id, 'true'),
      'unavailable',
      /Runner a, where sandbox .* lives, is not among the runners/,
    );
    assert.equal((await fleet.survey()).absent('a')?.forMs, 1000);
    assert.deepEqual(
      fleet.runners().map((r) => r.node),
      ['a2', 'b'],
    );
    await fleet.close();
  });
});
