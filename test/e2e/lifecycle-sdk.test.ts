/**
 * The sandbox lifecycle through the SDK against the real server (fake runtime by default;
 * SANDBOXD_E2E_RUNTIME=local for crun): pause, resume, stop and start, each once, with the
 * 409 of a wrong state; a file kept across stop/start; a snapshot made, listed, used as an
 * image and deleted; create with metadata and onTimeout, and the list's metadata filter.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { ConflictError, NotFoundError, Sandbox, SandboxdClient } from '@sandboxd/sdk';
import { IMAGE, newAccount, startServer, type Server } from './harness.js';

/**
 * A file in the root layer (not /tmp, which may be a tmpfs): what stop keeps and a snapshot
 * copies. Written and read by exec (`echo > file`, `cat`), which the fake runtime's shell
 * understands too (it has no file API).
 */
const MARK = '/lifecycle-mark.txt';
const cat = async (sb: Sandbox) => (await sb.exec(`cat ${MARK}`)).stdout;
const mark = async (sb: Sandbox, text: string) => assert.equal((await sb.exec(`echo ${text} > ${MARK}`)).exitCode, 0);

describe('sandbox lifecycle through the SDK', { timeout: 300_000 }, () => {
  let s: Server;
  let client: SandboxdClient;
  const made: Sandbox[] = [];
  const snapshots: string[] = [];
  const tag = `t${randomBytes(4).toString('hex')}`;

  const create = async (params: Omit<Parameters<typeof Sandbox.create>[0], 'image'> & { image?: string } = {}) => {
    const sb = await client.sandboxes.create({ image: IMAGE, timeoutMs: 300_000, ...params });
    made.push(sb);
    return sb;
  };
  /** Asserts a ConflictError (409) whose `details.state` names `state`. */
  const conflict = (state: string) => (e: unknown) => {
    assert.ok(e instanceof ConflictError, String(e));
    assert.equal(e.status, 409);
    assert.equal((e.details as { state?: string } | undefined)?.state, state, JSON.stringify(e.details));
    return true;
  };

  before(async () => {
    s = await startServer();
    const key = (await newAccount(s, { tokens: 100_000 })).key;
    client = new SandboxdClient({ apiKey: key, apiUrl: s.baseUrl });
  });
  after(async () => {
    // Paused and stopped sandboxes too (the harness's cleanup deletes started ones).
    for (const sb of made) await sb.delete().catch(() => {});
    for (const name of snapshots) await client?.snapshots.delete(name).catch(() => {});
    await s?.stop();
  });

  it('pause, resume, stop, start: each answered with the new state; a wrong state is a 409 naming the state', async () => {
    const sb = await create();
    await mark(sb, 'kept');
    assert.equal((await sb.exec('echo up')).stdout, 'up\n');

    assert.equal(await sb.pause(), sb);
    assert.equal(sb.state, 'paused');
    assert.ok(sb.expiresAt instanceof Date && sb.expiresAt.getTime() > Date.now(), String(sb.info.expiresAt));
    assert.deepEqual((await Sandbox.get(sb.id, client)).info, sb.info);
    assert.ok((await client.sandboxes.list({ state: 'paused' })).some((x) => x.id === sb.id));
    assert.ok(!(await client.sandboxes.list({ state: 'started' })).some((x) => x.id === sb.id));
    // A second handle, so nothing of the first's state is involved: the server says no.
    await assert.rejects((await Sandbox.get(sb.id, client)).pause(), conflict('paused'));
    await assert.rejects((await Sandbox.get(sb.id, client)).start(), conflict('paused'));

    const t0 = Date.now();
    await sb.resume({ timeoutMs: 200_000 });
    const t1 = Date.now();
    assert.equal(sb.state, 'started');
    assert.ok(sb.stopAt.getTime() >= t0 + 200_000 - 1000 && sb.stopAt.getTime() <= t1 + 200_000 + 1000, sb.info.stopAt);
    assert.equal((await sb.exec('echo resumed')).stdout, 'resumed\n');
    await assert.rejects((await Sandbox.get(sb.id, client)).resume(), conflict('started'));

    await sb.stop();
    assert.equal(sb.state, 'stopped');
    assert.ok(sb.expiresAt instanceof Date, 'a stopped sandbox says when its kept layer goes');
    assert.ok((await client.sandboxes.list({ state: 'stopped' })).some((x) => x.id === sb.id));
    await assert.rejects((await Sandbox.get(sb.id, client)).pause(), conflict('stopped'));
    await assert.rejects((await Sandbox.get(sb.id, client)).resume(), conflict('stopped'));

    await sb.start();
    assert.equal(sb.state, 'started');
    assert.ok(sb.stopAt.getTime() > Date.now());
    assert.equal(await cat(sb), 'kept\n', 'the root layer survives stop/start');
    assert.equal((await sb.exec('echo again')).stdout, 'again\n');
    await assert.rejects((await Sandbox.get(sb.id, client)).start(), conflict('started'));
    assert.deepEqual(await sb.refresh(), sb.info);
    await sb.delete();
  });

  it('snapshot: made from a sandbox, listed newest first, got by name, used as an image, deleted', async () => {
    const sb = await create();
    await mark(sb, 'snapshotted');
    const first = `${tag}-a`;
    const second = `${tag}-b`;
    const a = await sb.snapshot(first);
    snapshots.push(first);
    assert.equal(a.name, first);
    assert.equal(a.image, `snapshots/${first}`);
    assert.equal(a.baseImage, IMAGE);
    assert.equal(a.sandboxId, sb.id);
    assert.ok(Number.isInteger(a.sizeBytes) && a.sizeBytes >= 0);
    assert.equal(sb.state, 'started', 'a snapshot leaves the sandbox as it was');
    assert.equal((await sb.refresh()).state, 'started');

    await sb.stop();
    const b = await client.snapshots.create(sb.id, second); // a stopped sandbox can be snapshotted too
    snapshots.push(second);
    const names = (await client.snapshots.list()).map((x) => x.name);
    assert.deepEqual(
      names.filter((n) => n.startsWith(tag)),
      [second, first],
    );
    assert.deepEqual(await client.snapshots.get(first), a);
    assert.deepEqual(await client.snapshots.get(second), b);

    const from = await create({ image: a.image });
    assert.equal(from.image, a.image);
    assert.equal(await cat(from), 'snapshotted\n');

    await client.snapshots.delete(first);
    await client.snapshots.delete(second);
    await assert.rejects(client.snapshots.get(first), NotFoundError);
    await assert.rejects(client.snapshots.delete(first), NotFoundError);
    assert.ok(!(await client.snapshots.list()).some((x) => x.name.startsWith(tag)));
    assert.equal(await cat(from), 'snapshotted\n', 'a sandbox made from a deleted snapshot keeps its files');
    await from.delete();
    await sb.delete();
  });

  it('create with metadata and onTimeout; the list filters on metadata pairs (all must match), with state', async () => {
    const odd = 'a b&c=d/é';
    const web = await create({ metadata: { suite: tag, role: 'web', 'team name': odd }, onTimeout: 'pause' });
    const db = await create({ metadata: { suite: tag, role: 'db' } });
    assert.deepEqual(web.metadata, { suite: tag, role: 'web', 'team name': odd });
    assert.equal(web.onTimeout, 'pause');
    assert.equal(db.onTimeout, 'stop');
    assert.deepEqual((await Sandbox.get(web.id, client)).metadata, web.metadata);

    const ids = async (q: Parameters<typeof Sandbox.list>[0]) =>
      (await client.sandboxes.list(q)).map((x) => x.id).sort();
    assert.deepEqual(await ids({ metadata: { suite: tag } }), [web.id, db.id].sort());
    assert.deepEqual(await ids({ metadata: { suite: tag, role: 'web' } }), [web.id]);
    assert.deepEqual(await ids({ metadata: { 'team name': odd } }), [web.id]);
    assert.deepEqual(await ids({ metadata: { suite: tag, role: 'nope' } }), []);
    const page = await client.sandboxes.listPage({ metadata: { suite: tag }, limit: 1 });
    assert.equal(page.sandboxes.length, 1);
    assert.equal(page.sandboxes[0].id, db.id, 'newest first');

    await db.pause();
    assert.deepEqual(await ids({ state: 'paused', metadata: { suite: tag } }), [db.id]);
    assert.deepEqual(await ids({ state: 'started', metadata: { suite: tag } }), [web.id]);
  });
});
