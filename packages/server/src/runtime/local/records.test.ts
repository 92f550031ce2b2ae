import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { newRecord, RecordStore, recordFile } from './records.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-records-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const store = new RecordStore(dir);
const rec = (id: string, phase: 'creating' | 'ready') => ({
  ...newRecord(
    { id, image: 'local/busybox:latest', env: {}, volumes: [], limits: {} as never },
    { digest: 'sha256:x', workingDir: '/' },
    [],
    { slot: 1, uidBase: 100000 },
  ),
  phase,
});

it('each write is a new file and the older ones go; a read gets the newest', async () => {
  mkdirSync(store.dirOf('a'));
  await store.write(rec('a', 'creating'));
  await store.write(rec('a', 'ready'));
  assert.deepEqual(readdirSync(store.dirOf('a')), ['state.2.json']);
  assert.equal(recordFile(store.dirOf('a')), join(store.dirOf('a'), 'state.2.json'));
  assert.equal((await store.read('a'))?.phase, 'ready');
});

it('a write cut short by a crash leaves the one before it as the record, and the next write goes past both', async () => {
  mkdirSync(store.dirOf('b'));
  await store.write(rec('b', 'ready'));
  const cut = JSON.stringify(rec('b', 'creating'));
  writeFileSync(join(store.dirOf('b'), 'state.2.json'), cut.slice(0, cut.length >> 1));
  assert.equal((await store.read('b'))?.phase, 'ready');
  await store.write(rec('b', 'creating'));
  assert.deepEqual(readdirSync(store.dirOf('b')), ['state.3.json']);
  assert.equal((await store.read('b'))?.phase, 'creating');
});

it("an older version's state.json is read, then replaced", async () => {
  mkdirSync(store.dirOf('c'));
  writeFileSync(join(store.dirOf('c'), 'state.json'), JSON.stringify({ ...rec('c', 'ready'), cid: undefined }));
  const r = await store.read('c');
  assert.equal(r?.phase, 'ready');
  assert.equal(r?.cid, 'c', 'records of versions before warm pools get their cid');
  await store.write(rec('c', 'creating'));
  assert.deepEqual(readdirSync(store.dirOf('c')), ['state.1.json']);
});

it('no folder or no record: null', async () => {
  assert.equal(await store.read('nope'), null);
  mkdirSync(store.dirOf('d'));
  writeFileSync(join(store.dirOf('d'), 'state.json.tmp'), '{}');
  assert.equal(await store.read('d'), null);
  assert.equal(recordFile(store.dirOf('d')), null);
});

it('writes at the same time each get a file of their own; the newest of them is the record', async () => {
  mkdirSync(store.dirOf('e'));
  await Promise.all(Array.from({ length: 8 }, (_, i) => store.write({ ...rec('e', 'ready'), slot: i })));
  const r = await store.read('e');
  assert.ok(r && r.slot >= 0 && r.slot < 8, 'a whole record');
  await store.write(rec('e', 'creating'));
  assert.equal(readdirSync(store.dirOf('e')).length, 1);
  assert.equal((await store.read('e'))?.phase, 'creating');
});
