/** The store conformance suite's part on image builds: builds, their logs, cache layers, templates, uploads. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import type { BuildPlan } from '../../builds/plan.js';
import type { StoredBuild, TemplateRecord } from '../store.js';
import { outcomes, pairRunner, type StoreTarget, storeRunner } from './support.js';

const PLAN: BuildPlan = {
  stages: [
    {
      line: 1,
      base: { kind: 'image', ref: 'local/busybox:latest' },
      steps: [{ kind: 'run', line: 2, text: 'RUN echo hi', argv: ['/bin/sh', '-c', 'echo hi'], args: { A: '1' } }],
    },
  ],
  target: 0,
};

/** A queued build `id` of acc_a made at `createdAt`. */
export const buildRecord = (id: string, createdAt = 1, over: Partial<StoredBuild> = {}): StoredBuild => ({
  id,
  accountId: 'acc_a',
  name: 'web',
  tag: 'latest',
  extraTags: [],
  state: 'queued',
  source: 'dockerfile',
  createdAt,
  stepsTotal: 2,
  stepsDone: 0,
  stepsCached: 0,
  plan: PLAN,
  allowDomains: null,
  noCache: false,
  holder: 'srv-1',
  ...over,
});

const tpl = (name: string, tag: string, driverRef: string, buildId = 'b1'): TemplateRecord => ({
  accountId: 'acc_a',
  name,
  tag,
  driverRef,
  digest: `sha256:${name}${tag}`,
  sizeBytes: 10,
  buildId,
  createdAt: 5,
});

const CAP = { maxLines: 100_000, maxBytes: 16 * 2 ** 20, cutText: 'log cut' };

/** Registers what every Store must do with builds, logs, layers, templates and uploads. */
export function runBuildConformance(target: StoreTarget): void {
  const withStore = storeRunner(target);
  const withPair = pairRunner(target);

  describe(`Store conformance, builds: ${target.name}`, () => {
    it('builds: create, get, list newest first (by name), by state, count', () =>
      withStore(async (s) => {
        await s.createBuild(buildRecord('b1', 1));
        await s.createBuild(
          buildRecord('b2', 2, {
            name: 'api',
            extraTags: ['v1', 'v2'],
            source: 'e2b',
            plan: null,
            allowDomains: ['pypi.org', '*.npmjs.org'],
            noCache: true,
          }),
        );
        await s.createBuild(buildRecord('b3', 3, { state: 'building', startedAt: 3 }));
        assert.deepEqual(await s.getBuild('b1'), buildRecord('b1', 1));
        const b2 = await s.getBuild('b2');
        assert.deepEqual(b2?.extraTags, ['v1', 'v2']);
        assert.deepEqual(b2?.allowDomains, ['pypi.org', '*.npmjs.org']);
        assert.equal(b2?.plan, null);
        assert.equal(b2?.noCache, true);
        assert.equal(b2?.source, 'e2b');
        assert.equal(await s.getBuild('nope'), null);
        assert.deepEqual(
          (await s.listBuilds('acc_a', { limit: 10 })).map((b) => b.id),
          ['b3', 'b2', 'b1'],
        );
        assert.deepEqual(
          (await s.listBuilds('acc_a', { limit: 2 })).map((b) => b.id),
          ['b3', 'b2'],
        );
        assert.deepEqual(
          (await s.listBuilds('acc_a', { name: 'web', limit: 10 })).map((b) => b.id),
          ['b3', 'b1'],
        );
        assert.deepEqual(await s.listBuilds('acc_other', { limit: 10 }), []);
        assert.deepEqual(
          (await s.listBuildsByState(['queued', 'building'])).map((b) => b.id),
          ['b1', 'b2', 'b3'],
        );
        assert.deepEqual(
          (await s.listBuildsByState(['building'])).map((b) => b.id),
          ['b3'],
        );
        assert.equal(await s.countBuilds('acc_a', ['building']), 1);
        assert.equal(await s.countBuilds('acc_a', ['queued', 'building']), 3);
        assert.equal(await s.countBuilds('acc_a', []), 0);
      }));

    it('updateBuild: fields, expected states (conflict changes nothing), templates in the same transaction', () =>
      withStore(async (s) => {
        await s.createBuild(buildRecord('b1'));
        const started = await s.updateBuild('b1', {
          state: 'building',
          startedAt: 7,
          stepsTotal: 3,
          expectStates: ['queued'],
        });
        assert.equal(started.state, 'building');
        assert.equal(started.startedAt, 7);
        assert.equal(started.stepsTotal, 3);
        await s.updateBuild('b1', { stepsDone: 2, stepsCached: 1 });
        await assert.rejects(
          s.updateBuild('b1', { state: 'ready', expectStates: ['queued'], templates: [tpl('web', 'latest', 'r1')] }),
          (e: SandboxdError) => e.kind === 'conflict',
        );
        assert.deepEqual(await s.listTemplates('acc_a'), [], 'a refused update writes no template');
        const ready = await s.updateBuild('b1', {
          state: 'ready',
          finishedAt: 9,
          digest: 'sha256:x',
          sizeBytes: 123,
          plan: null,
          holder: null,
          expectStates: ['building'],
          templates: [tpl('web', 'latest', 'r1'), tpl('web', 'v1', 'r1')],
        });
        assert.equal(ready.state, 'ready');
        assert.equal(ready.digest, 'sha256:x');
        assert.equal(ready.sizeBytes, 123);
        assert.equal(ready.plan, null);
        assert.equal(ready.holder, null);
        assert.equal(ready.stepsDone, 2);
        assert.equal(ready.stepsCached, 1);
        assert.deepEqual(
          (await s.listTemplates('acc_a')).map((t) => `${t.name}:${t.tag}=${t.driverRef}`),
          ['web:latest=r1', 'web:v1=r1'],
        );
        const failure = {
          code: 400,
          kind: 'validation' as const,
          message: 'RUN failed',
          details: { step: 2, line: 3, exitCode: 1, output: 'boom' },
        };
        await s.createBuild(buildRecord('b2'));
        const failed = await s.updateBuild('b2', { state: 'error', error: failure, finishedAt: 4 });
        assert.deepEqual(failed.error, failure);
        await assert.rejects(s.updateBuild('nope', { state: 'error' }), (e: SandboxdError) => e.kind === 'not_found');
      }));

    it('a cancel and the last write of the runner: exactly one wins', () =>
      withStore(async (s) => {
        for (let i = 0; i < 5; i++) {
          const id = `race${i}`;
          await s.createBuild(buildRecord(id, i, { state: 'building' }));
          const rs = await Promise.allSettled([
            s.updateBuild(id, { state: 'cancelled', expectStates: ['queued', 'building'] }),
            s.updateBuild(id, {
              state: 'ready',
              expectStates: ['building'],
              templates: [tpl('web', `t${i}`, `r${i}`, id)],
            }),
          ]);
          assert.deepEqual(outcomes(rs), { ok: 1, conflict: 1 });
          const b = await s.getBuild(id);
          const t = await s.getTemplate('acc_a', 'web', `t${i}`);
          assert.equal(t !== null, b?.state === 'ready', 'a template exactly when the build is ready');
        }
      }));

    it('logs: numbered from 0 without gaps, read from an offset, removed with the build', () =>
      withStore(async (s) => {
        await s.createBuild(buildRecord('b1'));
        assert.equal(
          await s.appendBuildLogs(
            'b1',
            [
              { time: 1, step: 1, stream: 'system', text: 'Step 1/2 : FROM x' },
              { time: 2, step: 2, stream: 'stdout', text: 'hello' },
            ],
            CAP,
          ),
          2,
        );
        await s.appendBuildLogs('b1', [{ time: 3, stream: 'stderr', text: 'ünïcode ✓' }], CAP);
        assert.deepEqual(await s.listBuildLogs('b1', 0, 100), [
          { seq: 0, time: 1, step: 1, stream: 'system', text: 'Step 1/2 : FROM x' },
          { seq: 1, time: 2, step: 2, stream: 'stdout', text: 'hello' },
          { seq: 2, time: 3, stream: 'stderr', text: 'ünïcode ✓' },
        ]);
        assert.deepEqual(
          (await s.listBuildLogs('b1', 1, 1)).map((l) => l.seq),
          [1],
        );
        assert.deepEqual(await s.listBuildLogs('b1', 3, 10), []);
        await assert.rejects(
          s.appendBuildLogs('nope', [{ time: 1, stream: 'stdout', text: 'x' }], CAP),
          (e: SandboxdError) => e.kind === 'not_found',
        );
        assert.equal(await s.deleteBuild('b1'), true);
        assert.equal(await s.deleteBuild('b1'), false);
        assert.deepEqual(await s.listBuildLogs('b1', 0, 10), []);
        // A new build of the same id starts its numbering again.
        await s.createBuild(buildRecord('b1'));
        await s.appendBuildLogs('b1', [{ time: 4, stream: 'stdout', text: 'again' }], CAP);
        assert.deepEqual(
          (await s.listBuildLogs('b1', 0, 10)).map((l) => [l.seq, l.text]),
          [[0, 'again']],
        );
      }));

    it('logs: past the line or byte cap one line says the rest was cut, and later lines are dropped', () =>
      withStore(async (s) => {
        const line = (text: string) => ({ time: 1, stream: 'stdout' as const, text });
        await s.createBuild(buildRecord('lines'));
        const capLines = { maxLines: 5, maxBytes: 1000, cutText: 'log cut: 5 lines' };
        assert.equal(await s.appendBuildLogs('lines', [line('a'), line('b'), line('c')], capLines), 3);
        assert.equal(await s.appendBuildLogs('lines', [line('d'), line('e'), line('f')], capLines), 2);
        assert.equal(await s.appendBuildLogs('lines', [line('g')], capLines), 0);
        assert.deepEqual(
          (await s.listBuildLogs('lines', 0, 100)).map((l) => [l.seq, l.stream, l.text]),
          [
            [0, 'stdout', 'a'],
            [1, 'stdout', 'b'],
            [2, 'stdout', 'c'],
            [3, 'stdout', 'd'],
            [4, 'system', 'log cut: 5 lines'],
          ],
        );
        await s.createBuild(buildRecord('bytes'));
        const capBytes = { maxLines: 1000, maxBytes: 10, cutText: 'cut' };
        assert.equal(await s.appendBuildLogs('bytes', [line('12345'), line('12345'), line('1')], capBytes), 3);
        assert.deepEqual(
          (await s.listBuildLogs('bytes', 0, 100)).map((l) => l.text),
          ['12345', '12345', 'cut'],
        );
      }));

    it('layers: put (replacing), touch, LRU order, bytes, accounts, delete', () =>
      withStore(async (s) => {
        const layer = (key: string, lastUsedAt: number, sizeBytes = 100) => ({
          accountId: 'acc_a',
          key,
          driverRef: `snapshot/acc_a/_l.${key}`,
          parentKey: null,
          sizeBytes,
          createdAt: 1,
          lastUsedAt,
        });
        assert.equal(await s.getLayer('acc_a', 'k1'), null);
        await s.putLayer(layer('k1', 5));
        await s.putLayer({ ...layer('k2', 3, 50), parentKey: 'k1' });
        await s.putLayer(layer('k3', 4, 7));
        assert.deepEqual(await s.getLayer('acc_a', 'k2'), { ...layer('k2', 3, 50), parentKey: 'k1' });
        assert.deepEqual(
          (await s.listLayers('acc_a')).map((l) => l.key),
          ['k2', 'k3', 'k1'],
        );
        assert.equal(await s.layerBytes('acc_a'), 157);
        assert.equal(await s.layerBytes('acc_other'), 0);
        await s.touchLayer('acc_a', 'k2', 9);
        await s.touchLayer('acc_a', 'k3', 1); // never back in time
        assert.deepEqual(
          (await s.listLayers('acc_a')).map((l) => [l.key, l.lastUsedAt]),
          [
            ['k3', 4],
            ['k1', 5],
            ['k2', 9],
          ],
        );
        await s.putLayer({ ...layer('k1', 6, 10), driverRef: 'snapshot/acc_a/_l.other' });
        assert.equal((await s.getLayer('acc_a', 'k1'))?.driverRef, 'snapshot/acc_a/_l.other');
        assert.equal(await s.layerBytes('acc_a'), 67);
        assert.deepEqual(await s.listLayerAccounts(), ['acc_a']);
        assert.equal(await s.deleteLayer('acc_a', 'k1'), true);
        assert.equal(await s.deleteLayer('acc_a', 'k1'), false);
        assert.equal(await s.layerBytes('acc_a'), 57);
      }));

    it('templates: one row per account, name and tag; a new build replaces it; delete by tag or every tag', () =>
      withStore(async (s) => {
        await s.createAccount(
          { id: 'acc_b', email: 'b@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
          { tokens: 0, reason: 'signup' },
        );
        await s.createBuild(buildRecord('b1', 1, { state: 'building' }));
        await s.createBuild(buildRecord('b2', 2, { state: 'building' }));
        await s.createBuild(buildRecord('b3', 3, { state: 'building', accountId: 'acc_b' }));
        await s.updateBuild('b1', { state: 'ready', templates: [tpl('web', 'latest', 'r1'), tpl('web', 'v1', 'r1')] });
        await s.updateBuild('b2', {
          state: 'ready',
          templates: [tpl('web', 'latest', 'r2', 'b2'), tpl('api', 'x', 'r2')],
        });
        await s.updateBuild('b3', {
          state: 'ready',
          templates: [{ ...tpl('web', 'latest', 'rb', 'b3'), accountId: 'acc_b' }],
        });
        assert.deepEqual(await s.getTemplate('acc_a', 'web', 'latest'), tpl('web', 'latest', 'r2', 'b2'));
        assert.equal(await s.getTemplate('acc_a', 'web', 'nope'), null);
        assert.equal((await s.getTemplate('acc_b', 'web', 'latest'))?.driverRef, 'rb');
        assert.deepEqual(
          (await s.listTemplates('acc_a')).map((t) => `${t.name}:${t.tag}`),
          ['api:x', 'web:latest', 'web:v1'],
        );
        assert.deepEqual(
          (await s.listTemplates('acc_a', { name: 'web' })).map((t) => t.tag),
          ['latest', 'v1'],
        );
        assert.equal(await s.deleteTemplates('acc_a', 'web', 'v1'), 1);
        assert.equal(await s.deleteTemplates('acc_a', 'web', 'v1'), 0);
        assert.equal(await s.deleteTemplates('acc_a', 'api'), 1);
        assert.equal(await s.deleteTemplates('acc_a', 'web'), 1);
        assert.deepEqual(await s.listTemplates('acc_a'), []);
        assert.equal((await s.listTemplates('acc_b')).length, 1, "another account's rows stay");
      }));

    it('uploads: put (replacing), get, delete', () =>
      withStore(async (s) => {
        const u = { accountId: 'acc_a', hash: 'h1', path: '/d/h1', sizeBytes: 3, createdAt: 1 };
        assert.equal(await s.getUpload('acc_a', 'h1'), null);
        await s.putUpload(u);
        assert.deepEqual(await s.getUpload('acc_a', 'h1'), u);
        await s.putUpload({ ...u, sizeBytes: 4, createdAt: 2 });
        assert.deepEqual(await s.getUpload('acc_a', 'h1'), { ...u, sizeBytes: 4, createdAt: 2 });
        assert.equal(await s.getUpload('acc_b', 'h1'), null);
        assert.equal(await s.deleteUpload('acc_a', 'h1'), true);
        assert.equal(await s.deleteUpload('acc_a', 'h1'), false);
      }));

    it('uploads: listed per account, oldest first (by createdAt, then hash)', () =>
      withStore(async (s) => {
        const u = (accountId: string, hash: string, createdAt: number) => ({
          accountId,
          hash,
          path: `/d/${accountId}/${hash}`,
          sizeBytes: 2 ** 33 + createdAt,
          createdAt,
        });
        assert.deepEqual(await s.listUploads('acc_a'), []);
        await s.createAccount(
          { id: 'acc_b', email: 'b@x', passwordHash: null, plan: 'FREE', admin: false, createdAt: 1 },
          { tokens: 0, reason: 'signup' },
        );
        await s.putUpload(u('acc_a', 'h3', 30));
        await s.putUpload(u('acc_a', 'h2', 10));
        await s.putUpload(u('acc_a', 'h1', 10));
        await s.putUpload(u('acc_b', 'h0', 5));
        assert.deepEqual(await s.listUploads('acc_a'), [
          u('acc_a', 'h1', 10),
          u('acc_a', 'h2', 10),
          u('acc_a', 'h3', 30),
        ]);
        // Replacing one moves it by its new time.
        await s.putUpload(u('acc_a', 'h1', 40));
        assert.deepEqual(
          (await s.listUploads('acc_a')).map((x) => x.hash),
          ['h2', 'h3', 'h1'],
        );
        await s.deleteUpload('acc_a', 'h3');
        assert.deepEqual(
          (await s.listUploads('acc_a')).map((x) => x.hash),
          ['h2', 'h1'],
        );
        assert.deepEqual(await s.listUploads('acc_b'), [u('acc_b', 'h0', 5)]);
        assert.deepEqual(await s.listUploads('acc_c'), []);
      }));

    it('two replicas appending to one log at once: one numbering, no gap, no line lost', () =>
      withPair(0, async (a, b) => {
        await a.createBuild(buildRecord('b1'));
        const batches = Array.from({ length: 20 }, (_, i) =>
          Array.from({ length: 5 }, (_, j) => ({ time: i, stream: 'stdout' as const, text: `${i}.${j}` })),
        );
        await Promise.all(batches.map((lines, i) => (i % 2 ? a : b).appendBuildLogs('b1', lines, CAP)));
        const got = await b.listBuildLogs('b1', 0, 1000);
        assert.deepEqual(
          got.map((l) => l.seq),
          Array.from({ length: 100 }, (_, i) => i),
        );
        assert.deepEqual(
          got.map((l) => l.text).sort(),
          batches
            .flat()
            .map((l) => l.text)
            .sort(),
        );
        // Each batch stays in one piece.
        for (let i = 0; i < got.length; i += 5)
          assert.equal(new Set(got.slice(i, i + 5).map((l) => l.text.split('.')[0])).size, 1);
      }));
  });
}
