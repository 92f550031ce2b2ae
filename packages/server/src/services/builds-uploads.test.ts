/**
 * E2B uploads on the builds service (fake driver): at most MAX_UPLOADS_IN_FLIGHT received
 * at once per account, the account's uploads fit its plan's buildCacheBytes (the oldest no
 * build needs go first), and the periodic tick removes old ones, forgotten rows and stray files.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { SandboxdError } from '@sandboxd/protocol';
import { makeTestApp, type TestApp } from '../../test/app.js';
import { copy, plan, stage } from '../../test/builds.js';
import { DEFAULT_PLANS } from '../config.js';
import type { AccountRecord } from '../store/store.js';
import { type BuildService, MAX_UPLOADS_IN_FLIGHT } from './builds.js';

const BUSYBOX = 'local/busybox:latest';
const TTL = 3_600_000;
const h = (c: string) => c.repeat(64);

/** A body that reports when it is first read and sends its bytes only once `release`d. */
function heldBody(bytes: Buffer) {
  let read = false;
  let release = () => {};
  const released = new Promise<void>((r) => {
    release = r;
  });
  let sent = false;
  const body = new Readable({
    read() {
      read = true;
      if (sent) return;
      sent = true;
      void released.then(() => {
        this.push(bytes);
        this.push(null);
      });
    },
  });
  return { body, release, wasRead: () => read };
}

describe('builds service: E2B uploads are bounded and collected (fake driver)', () => {
  let t: TestApp;
  let builds: BuildService;
  let dataDir: string;
  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'sbx-uploads-'));
    t = await makeTestApp({
      dataDir,
      buildUploadTtlMs: TTL,
      plans: { UP30: { ...DEFAULT_PLANS.FREE, buildCacheBytes: 30 } },
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
  const put = (a: AccountRecord, hash: string, bytes: number) =>
    builds.putUpload(a.id, hash, Readable.from([Buffer.alloc(bytes, 1)]));
  const hashes = async (a: AccountRecord) => (await t.app.store.listUploads(a.id)).map((u) => u.hash);
  const files = (a: AccountRecord) => readdirSync(join(dataDir, 'builds', 'uploads', a.id)).sort();
  /** A queued build of `a` (held by this server, so nothing ends it) whose plan copies from upload `hash`. */
  const queuedBuildNeeding = async (a: AccountRecord, hash: string) => {
    const r = await builds.reserve(a, { name: 'needs', tag: 'latest', source: 'e2b' });
    const row = (await t.app.store.getBuild(r.id))!;
    const p = plan(stage(BUSYBOX, [copy(['f.txt'], '/f.txt', { from: { kind: 'upload', hash } })]));
    await t.app.store.createBuild({ ...row, id: `${row.id}n`, plan: p });
  };

  it(`receives at most ${MAX_UPLOADS_IN_FLIGHT} uploads of an account at once: the next is refused (quota uploads) before its body is read`, async () => {
    const a = await account();
    const other = await account();
    const held = Array.from({ length: MAX_UPLOADS_IN_FLIGHT }, () => heldBody(Buffer.from('x')));
    const puts = held.map((b, i) => builds.putUpload(a.id, h(String(i)), b.body));
    for (let i = 0; i < 500 && !held.every((b) => b.wasRead()); i++) await sleep(10);
    assert.ok(
      held.every((b) => b.wasRead()),
      'the first ones are being received',
    );
    let fifthRead = false;
    const fifth = new Readable({
      read() {
        fifthRead = true;
        this.push(Buffer.from('y'));
        this.push(null);
      },
    });
    await assert.rejects(builds.putUpload(a.id, h('9'), fifth), (e: SandboxdError) => {
      assert.equal(e.kind, 'quota');
      assert.deepEqual(e.details, { quota: 'uploads', limit: MAX_UPLOADS_IN_FLIGHT });
      return true;
    });
    assert.equal(fifthRead, false, 'the refused body was not read');
    // Another account is not held back by this one.
    await put(other, h('9'), 3);
    for (const b of held) b.release();
    await Promise.all(puts);
    assert.deepEqual(await hashes(a), ['0', '1', '2', '3'].map(h).sort());
    // Once those are in, one more is received.
    await put(a, h('9'), 1);
    assert.equal(await builds.hasUpload(a.id, h('9')), true);
  });

  it("an account's uploads fit its plan's buildCacheBytes: the oldest no queued build needs go first; when that is not enough, quota and nothing changes", async () => {
    const a = await account('UP30');
    await put(a, h('1'), 10);
    t.clock.advance(1);
    await put(a, h('2'), 10);
    t.clock.advance(1);
    await put(a, h('3'), 10);
    t.clock.advance(1);
    await queuedBuildNeeding(a, h('1'));
    // 40 bytes would pass 30: upload 1 is the oldest but a queued build copies from it, so 2 goes.
    await put(a, h('4'), 10);
    assert.deepEqual(await hashes(a), [h('1'), h('3'), h('4')]);
    assert.deepEqual(files(a), [h('1'), h('3'), h('4')]);
    assert.equal(await builds.hasUpload(a.id, h('2')), false);
    // 25 bytes do not fit beside upload 1 (needed) even with 3 and 4 gone: refused, all kept.
    await assert.rejects(put(a, h('5'), 25), (e: SandboxdError) => {
      assert.equal(e.kind, 'quota');
      assert.equal((e.details as { quota?: string }).quota, 'buildCacheBytes');
      assert.equal((e.details as { limit?: number }).limit, 30);
      return true;
    });
    assert.deepEqual(await hashes(a), [h('1'), h('3'), h('4')]);
    assert.deepEqual(files(a), [h('1'), h('3'), h('4')], 'no temp file is left');
    // Larger than the whole quota: refused.
    await assert.rejects(put(a, h('6'), 31), (e: SandboxdError) => e.kind === 'quota');
    // Replacing an upload counts only the new bytes: 1 + 3 + 4(12) = 32 would pass, so 3 goes.
    t.clock.advance(1);
    await put(a, h('4'), 12);
    assert.deepEqual(await hashes(a), [h('1'), h('4')]);
    assert.equal((await t.app.store.getUpload(a.id, h('4')))?.sizeBytes, 12);
  });

  it('the tick removes uploads older than SANDBOXD_BUILD_UPLOAD_TTL_MS (unless a queued build needs them), rows without a file, and old stray files', async () => {
    const a = await account();
    const b = await account();
    await put(a, h('a'), 4);
    await put(a, h('b'), 4);
    await put(b, h('c'), 4);
    await queuedBuildNeeding(b, h('c'));
    t.clock.advance(TTL / 2);
    await put(a, h('d'), 4);
    await put(a, h('e'), 4);
    const dirA = join(dataDir, 'builds', 'uploads', a.id);
    // A row whose file is gone, a stray file an hour and more old, a fresh one.
    rmSync(join(dirA, h('e')));
    writeFileSync(join(dirA, '.tmp-old'), 'x');
    const old = new Date(Date.now() - 2 * 3_600_000);
    utimesSync(join(dirA, '.tmp-old'), old, old);
    writeFileSync(join(dirA, '.tmp-new'), 'x');
    await builds.tick();
    assert.deepEqual(await hashes(a), [h('a'), h('b'), h('d')], 'a row without its file is forgotten');
    assert.deepEqual(files(a), ['.tmp-new', h('a'), h('b'), h('d')]);
    t.clock.advance(TTL / 2);
    await builds.tick();
    assert.deepEqual(await hashes(a), [h('d')], 'uploads a day old are gone, file and row');
    assert.deepEqual(files(a), ['.tmp-new', h('d')]);
    assert.equal(await builds.hasUpload(a.id, h('a')), false);
    assert.deepEqual(await hashes(b), [h('c')], 'kept while a queued build copies from it');
    assert.ok(existsSync(join(dataDir, 'builds', 'uploads', b.id, h('c'))));
    t.clock.advance(TTL);
    await builds.tick();
    assert.deepEqual(await hashes(a), []);
    assert.deepEqual(files(a), ['.tmp-new']);
    // At start-up, temp files of uploads an earlier run was receiving go at once.
    await builds.recover({ startup: true });
    assert.deepEqual(files(a), []);
  });
});
