/**
 * The builds service on the fake driver: the queue (per server, per account), E2B's
 * reservations, uploads, the checks of a build's options, the end of builds at shutdown and
 * at the next start. Steps and their effects are proven on the real runtime (builds.test.ts).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { plan, run, stage, tarOf } from '../../test/builds.js';
import { DEFAULT_PLANS } from '../config.js';
import type { AccountRecord, BuildRecord } from '../store/store.js';
import { MAX_PENDING_BUILDS, RESERVATION_TTL_MS, type BuildService } from './builds.js';

const BUSYBOX = 'local/busybox:latest';
const HASH = 'a'.repeat(64);

describe('builds service: queue, reservations, uploads, checks (fake driver)', () => {
  let t: TestApp;
  let builds: BuildService;
  let dataDir: string;
  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'sbx-builds-'));
    t = await makeTestApp({
      dataDir,
      buildsMax: 3,
      plans: {
        ONE: { ...DEFAULT_PLANS.FREE, maxBuilds: 1 },
        SMALL: { ...DEFAULT_PLANS.FREE, buildContextBytes: 1024, egress: 'allow' },
        ONESANDBOX: { ...DEFAULT_PLANS.FREE, concurrency: 1 },
      },
    });
    builds = t.app.services.builds as BuildService;
  });
  after(async () => {
    await t?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const account = async (plan = 'FREE'): Promise<AccountRecord> => {
    const { id } = await t.newAccount({ plan });
    return (await t.app.store.getAccount(id))!;
  };
  const start = (a: AccountRecord, p = plan(stage(BUSYBOX, [run('sleep 0.3')])), name = 'q') =>
    builds.start(a, p, { name, tag: 'latest', source: 'dockerfile' });
  const waitFinal = async (a: AccountRecord, id: string): Promise<BuildRecord> => {
    for (let i = 0; i < 300; i++) {
      const b = await builds.get(a.id, id);
      if (['ready', 'error', 'cancelled'].includes(b.state)) return b;
      await sleep(50);
    }
    throw new Error(`build ${id} did not end`);
  };

  it("runs at most the plan's maxBuilds of an account at once, and SANDBOXD_BUILDS_MAX of the server; the rest wait queued", async () => {
    const one = await account('ONE');
    const other = await account();
    const slow = plan(stage(BUSYBOX, [run('sleep 1')]));
    const a1 = await start(one, slow);
    const a2 = await start(one, slow);
    const b = [await start(other, slow), await start(other, slow), await start(other, slow)];
    const states = async () =>
      [
        ...(await Promise.all([a1, a2].map((x) => builds.get(one.id, x.id)))),
        ...(await Promise.all(b.map((x) => builds.get(other.id, x.id)))),
      ].map((x) => x.state);
    // The first of each account starts at once; of the server's 3, the other account's third waits.
    for (let i = 0; i < 200 && (await states()).filter((s) => s === 'building').length < 3; i++) await sleep(10);
    assert.deepEqual(await states(), ['building', 'queued', 'building', 'building', 'queued']);
    for (const x of [a1, a2]) assert.equal((await waitFinal(one, x.id)).state, 'ready');
    for (const x of b) assert.equal((await waitFinal(other, x.id)).state, 'ready');
    const ready = await builds.get(one.id, a2.id);
    assert.ok(ready.startedAt! >= (await builds.get(one.id, a1.id)).finishedAt!, 'the second waited for the first');
    assert.deepEqual(
      (await builds.listTemplates(one.id)).map((x) => `${x.name}:${x.tag}`),
      ['q:latest'],
    );
  });

  it("a step waits while the plan's concurrency is taken by the account's sandboxes, saying so, and goes on when one ends", async () => {
    const a = await account('ONESANDBOX');
    const busy = await t.app.services.sandboxes.create(a, { image: BUSYBOX });
    const b = await start(a, plan(stage(BUSYBOX, [run('echo ran')])), 'waits');
    let log = '';
    for (let i = 0; i < 200 && !/Waiting for a sandbox/.test(log); i++) {
      await sleep(20);
      log = (await t.app.store.listBuildLogs(b.id, 0, 100)).map((l) => l.text).join('\n');
    }
    assert.match(log, /Waiting for a sandbox: Concurrency limit reached: 1 sandboxes running/);
    assert.equal((await builds.get(a.id, b.id)).state, 'building');
    assert.equal((await t.app.services.sandboxes.list(a.id, { limit: 10 })).items.length, 1, 'only the busy one');
    await t.app.services.sandboxes.delete(a.id, busy.id);
    const done = await waitFinal(a, b.id);
    assert.equal(done.state, 'ready', JSON.stringify(done.error));
  });

  it('COPY --from on a plan of one sandbox at a time fails at once, saying why', async () => {
    const a = await account('ONESANDBOX');
    const p = plan(stage(BUSYBOX, []), stage(BUSYBOX, []));
    p.stages[1].steps.push({
      kind: 'copy',
      line: 9,
      text: 'COPY --from=0 /bin/sh /sh',
      from: { kind: 'stage', stage: 0 },
      sources: ['/bin/sh'],
      dest: '/sh',
    });
    const b = await start(a, p, 'two');
    const done = await waitFinal(a, b.id);
    assert.equal(done.state, 'error');
    assert.equal(done.error?.kind, 'concurrency');
    assert.match(done.error?.message ?? '', /COPY --from needs two sandboxes at once.*allows 1/);
    assert.deepEqual((await t.app.services.sandboxes.list(a.id, { limit: 10 })).items, []);
  });

  it('a queued build cancelled never runs; delete forgets a build and its log, not its template', async () => {
    const one = await account('ONE');
    const first = await start(one, plan(stage(BUSYBOX, [run('sleep 0.5')])), 'first');
    const second = await start(one, undefined, 'second');
    const c = await builds.cancel(one.id, second.id);
    assert.equal(c.state, 'cancelled');
    assert.equal((await waitFinal(one, first.id)).state, 'ready');
    await sleep(100);
    const s = await builds.get(one.id, second.id);
    assert.equal(s.state, 'cancelled');
    assert.equal(s.startedAt, undefined, 'it never started');
    await assert.rejects(builds.cancel(one.id, first.id), (e: SandboxdError) => e.kind === 'conflict');
    await builds.delete(one.id, first.id);
    await assert.rejects(builds.get(one.id, first.id), (e: SandboxdError) => e.kind === 'not_found');
    assert.deepEqual(await t.app.store.listBuildLogs(first.id, 0, 10), []);
    assert.equal((await builds.getTemplate(one.id, 'first', 'latest')).buildId, first.id);
    await builds.deleteTemplate(one.id, 'first');
    await assert.rejects(builds.getTemplate(one.id, 'first', 'latest'), (e: SandboxdError) => e.kind === 'not_found');
    await assert.rejects(builds.deleteTemplate(one.id, 'first'), (e: SandboxdError) => e.kind === 'not_found');
  });

  it('names, tags and allow lists are checked before anything is recorded; so is the count of pending builds', async () => {
    const a = await account();
    const small = await account('SMALL');
    const refused = async (p: Promise<unknown>, kind: string, message?: RegExp) =>
      assert.rejects(p, (e: SandboxdError) => e.kind === kind && (!message || message.test(e.message)));
    const p = plan(stage(BUSYBOX, [run('true')]));
    await refused(builds.start(a, p, { name: 'Bad', tag: 'latest', source: 'e2b' }), 'validation', /name "Bad"/);
    await refused(builds.start(a, p, { name: 'ok', tag: '-x', source: 'e2b' }), 'validation', /tag "-x"/);
    await refused(
      builds.start(a, p, { name: 'ok', tag: 'v', extraTags: ['fine', 'not fine'], source: 'e2b' }),
      'validation',
      /tag "not fine"/,
    );
    await refused(
      builds.start(a, p, { name: 'ok', tag: 'v', allowDomains: ['exa mple.com'], source: 'e2b' }),
      'validation',
    );
    await refused(
      builds.start(small, p, { name: 'ok', tag: 'v', allowDomains: ['*'], source: 'e2b' }),
      'validation',
      /allowDomains/,
    );
    await refused(
      builds.start(a, plan(stage('snapshots/none', [run('true')])), { name: 'ok', tag: 'v', source: 'e2b' }),
      'template_not_found',
    );
    await refused(
      builds.start(a, { stages: [], target: 0 }, { name: 'ok', tag: 'v', source: 'e2b' }),
      'validation',
      /no target/,
    );
    assert.deepEqual(await builds.list(a.id), []);
    // A plan of `allow` takes rules, not `internet`-wide egress; the rules are kept with the build.
    const allowed = await builds.start(small, p, {
      name: 'ok',
      tag: 'v',
      allowDomains: ['pypi.org', '*.npmjs.org'],
      source: 'e2b',
    });
    assert.deepEqual((await t.app.store.getBuild(allowed.id))?.allowDomains, ['pypi.org', '*.npmjs.org']);
    await waitFinal(small, allowed.id);
    // Pending builds of an account are bounded.
    const many = await account('ONE');
    const slow = plan(stage(BUSYBOX, [run('sleep 3')]));
    const started: BuildRecord[] = [];
    for (let i = 0; i < MAX_PENDING_BUILDS; i++) started.push(await start(many, slow, `m${i}`));
    await refused(start(many, slow, 'one-too-many'), 'quota', /Too many builds/);
    for (const b of started) await builds.cancel(many.id, b.id).catch(() => undefined);
  });

  it("E2B's two calls: a reservation waits for its plan, then runs; one never started ends error after an hour", async () => {
    const a = await account();
    const r = await builds.reserve(a, { name: 'tpl', tag: 'v1', extraTags: ['v1', 'latest'], source: 'e2b' });
    assert.equal(r.state, 'queued');
    assert.deepEqual(r.extraTags, ['latest']);
    await sleep(50);
    assert.equal((await builds.get(a.id, r.id)).state, 'queued', 'nothing runs without a plan');
    await builds.recover(); // a reservation of this server is not a lost build
    assert.equal((await builds.get(a.id, r.id)).state, 'queued');
    const s = await builds.startReserved(a, r.id, plan(stage(BUSYBOX, [run('echo hi')])));
    assert.equal(s.stepsTotal, 2);
    await assert.rejects(
      builds.startReserved(a, r.id, plan(stage(BUSYBOX, [run('true')]))),
      (e: SandboxdError) => e.kind === 'conflict',
    );
    const done = await waitFinal(a, r.id);
    assert.equal(done.state, 'ready', JSON.stringify(done.error));
    assert.deepEqual(
      (await builds.listTemplates(a.id)).map((x) => x.tag),
      ['latest', 'v1'],
    );
    const other = await account();
    await assert.rejects(
      builds.startReserved(other, r.id, plan(stage(BUSYBOX, [run('true')]))),
      (e: SandboxdError) => e.kind === 'not_found',
    );
    const late = await builds.reserve(a, { name: 'late', tag: 'latest', source: 'e2b' });
    t.clock.advance(RESERVATION_TTL_MS + 1);
    await builds.tick();
    const expired = await builds.get(a.id, late.id);
    assert.equal(expired.state, 'error');
    assert.match(expired.error?.message ?? '', /not started within an hour/);
  });

  it('uploads: kept whole under their hash for the account, or not at all past the plan', async () => {
    const a = await account();
    const small = await account('SMALL');
    assert.equal(await builds.hasUpload(a.id, HASH), false);
    const tar = tarOf([{ path: 'f.txt', body: 'x' }]);
    await builds.putUpload(a.id, HASH, Readable.from([tar]));
    assert.equal(await builds.hasUpload(a.id, HASH), true);
    assert.equal(await builds.hasUpload(small.id, HASH), false, "another account's upload is not there");
    await assert.rejects(
      builds.putUpload(small.id, HASH, Readable.from([tar])),
      (e: SandboxdError) => e.kind === 'payload_too_large',
    );
    assert.equal(await builds.hasUpload(small.id, HASH), false);
    assert.deepEqual(readdirSync(join(dataDir, 'builds', 'uploads', small.id)), [], 'nothing half written');
    await assert.rejects(
      builds.putUpload(a.id, '../../etc', Readable.from([tar])),
      (e: SandboxdError) => e.kind === 'validation',
    );
    // A plan copying from an upload that is not there is refused, naming the step.
    const missing = plan(stage(BUSYBOX, []));
    missing.stages[0].steps.push({
      kind: 'copy',
      line: 2,
      text: 'COPY f.txt /f.txt',
      from: { kind: 'upload', hash: 'b'.repeat(64) },
      sources: ['f.txt'],
      dest: '/f.txt',
    });
    await assert.rejects(
      builds.start(a, missing, { name: 'up', tag: 'latest', source: 'e2b' }),
      (e: SandboxdError) => e.kind === 'validation' && /Dockerfile line 2: COPY f.txt/.test(e.message),
    );
  });

  it('logs without follow: the lines so far; with follow: then an end line; a final build at once', async () => {
    const a = await account();
    const b = await start(a, plan(stage(BUSYBOX, [run('echo out; echo err >&2')])), 'logs');
    const events = [];
    for await (const e of builds.logs(a.id, b.id, { follow: true })) events.push(e);
    const end = events.at(-1);
    assert.deepEqual(end, { type: 'end', state: 'ready' });
    const texts = events.flatMap((e) => (e.type === 'log' ? [`${e.stream}:${e.text}`] : []));
    assert.ok(texts.includes('stdout:out') && texts.includes('stderr:err'), texts.join('\n'));
    const plain = [];
    for await (const e of builds.logs(a.id, b.id, { offset: 2 })) plain.push(e);
    assert.equal(plain[0]?.type === 'log' && plain[0].seq, 2);
    assert.ok(
      plain.every((e) => e.type === 'log'),
      'no end line without follow',
    );
    await assert.rejects(
      (async () => {
        for await (const _ of builds.logs('acc_other', b.id, {})) void _;
      })(),
      (e: SandboxdError) => e.kind === 'not_found',
    );
  });

  it('contexts still uploading count as pending builds: an account cannot spool without bound at once', async () => {
    const a = await account();
    const spoolDir = join(dataDir, 'builds', 'tmp');
    const spools = () =>
      existsSync(spoolDir) ? readdirSync(spoolDir).filter((f) => f.startsWith('context-')).length : 0;
    const before = spools();
    // Bodies that never end (a slow client): each holds a spool until it is cut.
    const bodies = Array.from({ length: MAX_PENDING_BUILDS }, () => new PassThrough());
    const pending = bodies.map((b) =>
      builds.createFromDockerfile(a, { name: 'slow', tag: 'latest' }, b).then(
        () => 'accepted',
        (e: SandboxdError) => e.kind ?? String(e),
      ),
    );
    for (const b of bodies) b.write(Buffer.alloc(512));
    for (let i = 0; i < 200 && spools() < before + MAX_PENDING_BUILDS; i++) await sleep(20);
    assert.equal(spools(), before + MAX_PENDING_BUILDS);
    // One more is refused before its body is read, though no build record exists yet.
    const extra = new PassThrough();
    let settled: string | undefined;
    const more = builds.createFromDockerfile(a, { name: 'slow', tag: 'latest' }, extra).then(
      () => 'accepted',
      (e: SandboxdError) => e.kind ?? String(e),
    );
    void more.then((k) => {
      settled = k;
    });
    extra.write(Buffer.alloc(512));
    for (let i = 0; i < 200 && settled === undefined && spools() <= before + MAX_PENDING_BUILDS; i++) await sleep(20);
    const spooled = spools();
    for (const b of [...bodies, extra]) b.destroy(); // the clients went
    assert.equal(await more, 'quota');
    assert.equal(spooled, before + MAX_PENDING_BUILDS, 'the refused upload spooled nothing');
    for (const k of await Promise.all(pending)) assert.notEqual(k, 'accepted');
    assert.equal(spools(), before, 'every spool went with its cut body');
    // Once they are gone, the account may upload again.
    const ok = await builds.createFromDockerfile(
      a,
      { name: 'slow', tag: 'latest' },
      Readable.from([tarOf([{ path: 'Dockerfile', body: `FROM ${BUSYBOX}\nRUN true\n` }])]),
    );
    await waitFinal(a, ok.id);
  });

  it('shutdown ends running and queued builds error and deletes their sandboxes; nothing new is accepted', async () => {
    const own = await makeTestApp({ dataDir, plans: { ONE: { ...DEFAULT_PLANS.FREE, maxBuilds: 1 } } });
    const s = own.app.services.builds as BuildService;
    const { id } = await own.newAccount({ plan: 'ONE' });
    const a = (await own.app.store.getAccount(id))!;
    const long = plan(stage(BUSYBOX, [run('sleep 1')]));
    const running = await s.start(a, long, { name: 'r', tag: 'latest', source: 'dockerfile' });
    const queued = await s.start(a, long, { name: 'q', tag: 'latest', source: 'dockerfile' });
    for (let i = 0; i < 100 && (await s.get(a.id, running.id)).state !== 'building'; i++) await sleep(20);
    await sleep(100);
    assert.equal((await own.app.services.sandboxes.list(a.id, { limit: 10 })).items.length, 1, 'one step runs');
    await s.close();
    const [r, q] = [await s.get(a.id, running.id), await s.get(a.id, queued.id)];
    assert.equal(r.state, 'error');
    assert.match(r.error?.message ?? '', /shut down during the build/);
    assert.equal(q.state, 'error');
    assert.match(q.error?.message ?? '', /before the build started/);
    assert.deepEqual(await own.driver.list(), [], 'no step sandbox left');
    assert.deepEqual((await own.app.services.sandboxes.list(a.id, { limit: 10 })).items, []);
    await assert.rejects(
      s.start(a, long, { name: 'x', tag: 'latest', source: 'dockerfile' }),
      (e: SandboxdError) => e.kind === 'unavailable',
    );
    await own.close();
  });
});
