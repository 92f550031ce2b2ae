/**
 * Upgrades with sandboxes running (real runtime): the previous landed release
 * (deploy/releases.json), built from git history (previous-release.ts, cached under
 * .sandboxd-test/releases/), serves a data dir: an account with two keys and tokens spent,
 * sandboxes running (one with a volume holding known bytes), a paused one, a stopped one and
 * a snapshot. It stops with SIGTERM (sandboxes keep running); this release starts on the same
 * data dir and host slot: the same sandboxes, by id, are adopted (not started again: their
 * init's start time is the same), exec works in them, the volume's bytes, the ledger's rows
 * and the balance are the same, the keys work, new creates work (one from the snapshot). Then
 * the previous release, started again on the upgraded dir, is refused and changes nothing.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { after, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { MIGRATIONS } from '../../packages/server/src/store/migrations/index.js';
import { freshDataDir, ledgerOf } from '../security/faults-support.js';
import { ADMIN_KEY, freePort, IMAGE, newAccount, RUNTIME, type Server, startServer } from './harness.js';
import { localEnv, teardownLocal } from './local-runtime.js';
import {
  buildPreviousRelease,
  describeCommit,
  type PreviousRelease,
  previousEntry,
  requireCommit,
  thisRelease,
} from './previous-release.js';

const local = RUNTIME === 'local';
const BYTES = 3 * 1024 * 1024;

/**
 * Every file under `dir` (the harness's own stderr logs left out): a hash of its bytes, or of
 * its size and modification time for one past 16 MiB (a volume's sparse image).
 */
function tree(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      const rel = relative(dir, p);
      if (/^server-\d+\.stderr\.log$/.test(rel)) continue;
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) {
        const st = lstatSync(p);
        out.set(
          rel,
          st.size > 16 << 20
            ? `size ${st.size} mtime ${st.mtimeMs}`
            : createHash('sha256').update(readFileSync(p)).digest('hex'),
        );
      } else out.set(rel, e.isSymbolicLink() ? 'symlink' : 'other');
    }
  };
  walk(dir);
  return out;
}

describe('upgrade from the previous release', { timeout: 1_200_000 }, () => {
  it('the previous release is recorded and its commit is in this repository (a shallow clone fails here)', () => {
    const prev = previousEntry();
    requireCommit(prev.commit, prev.version);
    assert.notEqual(prev.version, thisRelease());
  });

  describe('with sandboxes running (real runtime)', {
    skip: !local && 'needs SANDBOXD_E2E_RUNTIME=local (root, crun)',
  }, () => {
    let prev: PreviousRelease;
    let dataDir = '';
    let server: Server | undefined;
    let key = '';
    let key2 = '';
    const ids: Record<'vol' | 'plain' | 'paused' | 'stopped', string> = { vol: '', plain: '', paused: '', stopped: '' };
    const snapshot = `upgrade-${process.pid}`;
    let blobSum = '';
    const initStart: Record<string, string> = {};
    let ledger: Awaited<ReturnType<typeof ledgerOf>>;
    let listed: Array<{ id: string; state: string }> = [];
    let account: unknown;
    let adminList: unknown;

    const sh = async (s: Server, id: string, command: string) => {
      const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key, body: { command } });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.exitCode, 0, `${command}: ${r.body.stderr}`);
      return r.body.stdout as string;
    };
    const create = async (s: Server, body: Record<string, unknown> = {}) => {
      const r = await s.api('POST', '/api/v1/sandboxes', {
        key,
        body: { image: IMAGE, timeoutMs: 1_200_000, ...body },
      });
      assert.equal(r.status, 201, r.text);
      return r.body.sandbox.id as string;
    };
    const list = async (s: Server) =>
      (
        (await s.api('GET', '/api/v1/sandboxes?limit=1000', { key })).body.sandboxes as Array<{
          id: string;
          state: string;
        }>
      )
        .map((x) => ({ id: x.id, state: x.state }))
        .sort((a, b) => a.id.localeCompare(b.id));
    /** The start time (clock ticks since boot) of the sandbox's init: the same after an adoption, not after a restart. */
    const initStarted = async (s: Server, id: string) => (await sh(s, id, "cut -d' ' -f22 /proc/1/stat")).trim();

    after(async () => {
      // Whatever a failed step left: this release deletes what the test made, then the slot goes.
      if (server && server.proc.exitCode === null && server.proc.signalCode === null) await server.stop();
      else if (dataDir && existsSync(dataDir)) {
        try {
          server = await startServer({ dataDir });
          await server.stop();
        } catch (e) {
          console.log(`# upgrade test cleanup: ${(e as Error).message}`);
          await teardownLocal(dataDir);
        }
      }
    });

    it('builds the previous release from git history (cached under .sandboxd-test/releases)', (t) => {
      const t0 = Date.now();
      prev = buildPreviousRelease();
      t.diagnostic(
        `release ${prev.version} (${describeCommit(prev.commit)}): ${prev.built ? 'built' : 'cached'} in ${Date.now() - t0} ms; npm dependencies ${prev.deps}`,
      );
    });

    it('the previous release serves a data dir: keys, tokens spent, sandboxes running, paused, stopped, a volume, a snapshot', async () => {
      assert.ok(prev, 'the previous release was built');
      dataDir = freshDataDir();
      server = await startServer({ dataDir, cwd: prev.root });
      const s = server;
      const a = await newAccount(s, { tokens: 50_000, plan: 'PRO' });
      key = a.key;
      assert.ok(a.id);
      const k2 = await s.api('POST', '/api/v1/keys', { key, body: { name: 'second' } });
      assert.equal(k2.status, 201, k2.text);
      key2 = k2.body.key;

      ids.vol = await create(s, { volumes: { '/data': { name: 'kept', sizeGb: 1 } } });
      blobSum = (
        await sh(s, ids.vol, `head -c ${BYTES} /dev/urandom > /data/blob && sync && sha256sum /data/blob`)
      ).split(' ')[0];
      assert.match(blobSum, /^[0-9a-f]{64}$/);
      ids.plain = await create(s);
      await sh(s, ids.plain, 'echo before > /root/mark');
      const snap = await s.api('POST', `/api/v1/sandboxes/${ids.plain}/snapshot`, { key, body: { name: snapshot } });
      assert.equal(snap.status, 201, snap.text);
      ids.paused = await create(s);
      await sh(s, ids.paused, 'echo paused > /root/mark');
      ids.stopped = await create(s);
      await sh(s, ids.stopped, 'echo stopped > /root/mark');
      for (const id of [ids.vol, ids.plain, ids.paused]) initStart[id] = await initStarted(s, id);
      assert.equal((await s.api('POST', `/api/v1/sandboxes/${ids.paused}/pause`, { key })).status, 200);
      assert.equal((await s.api('POST', `/api/v1/sandboxes/${ids.stopped}/stop`, { key })).status, 200);

      listed = await list(s);
      assert.deepEqual(listed.map((x) => x.state).sort(), ['paused', 'started', 'started', 'stopped']);
      ledger = await ledgerOf(s, key);
      account = (await s.api('GET', '/api/v1/account', { key })).body;
      adminList = (await s.api('GET', '/api/v1/admin/accounts')).body;
      assert.ok(
        ledger.entries.some((e) => e.reason === 'sandbox.create'),
        'tokens were spent',
      );
      assert.ok(ledger.balance < 50_000);
      // SIGTERM: the server goes, its sandboxes keep running.
      assert.equal(await s.kill('SIGTERM'), 0);
    });

    it('this release starts on that data dir and adopts everything: same ids, exec, volume bytes, ledger rows, keys', async () => {
      assert.ok(ledger, 'the previous release served the dir');
      server = await startServer({ dataDir });
      const s = server;
      // Records: the same sandboxes in the same states; the ledger row for row, the balance.
      assert.deepEqual(await list(s), listed);
      assert.deepEqual(await ledgerOf(s, key), ledger);
      // Accounts and keys: the account as either key sees it, the admin's list.
      for (const k of [key, key2]) assert.deepEqual((await s.api('GET', '/api/v1/account', { key: k })).body, account);
      assert.deepEqual((await s.api('GET', '/api/v1/admin/accounts')).body, adminList);
      // Adopted, not started again: the same init, still running; exec works.
      assert.equal(await initStarted(s, ids.vol), initStart[ids.vol]);
      assert.equal(await initStarted(s, ids.plain), initStart[ids.plain]);
      assert.equal((await sh(s, ids.vol, 'sha256sum /data/blob')).split(' ')[0], blobSum);
      assert.equal(await sh(s, ids.plain, 'cat /root/mark'), 'before\n');
      // The paused one resumes where it was; the stopped one starts with its files.
      assert.equal((await s.api('POST', `/api/v1/sandboxes/${ids.paused}/resume`, { key })).status, 200);
      assert.equal(await initStarted(s, ids.paused), initStart[ids.paused]);
      assert.equal(await sh(s, ids.paused, 'cat /root/mark'), 'paused\n');
      const started = await s.api('POST', `/api/v1/sandboxes/${ids.stopped}/start`, { key, body: {} });
      assert.equal(started.status, 200, started.text);
      assert.equal(await sh(s, ids.stopped, 'cat /root/mark'), 'stopped\n');
      // The volume and the snapshot are listed.
      const vols = await s.api('GET', '/api/v1/volumes', { key });
      assert.deepEqual(
        vols.body.volumes.map((v: { name: string; mountedBy: string[] }) => [v.name, v.mountedBy]),
        [['kept', [ids.vol]]],
      );
      const snaps = await s.api('GET', '/api/v1/snapshots', { key });
      assert.deepEqual(
        snaps.body.snapshots.map((x: { name: string }) => x.name),
        [snapshot],
      );
      // New creates: a plain one and one from the previous release's snapshot.
      const fresh = await create(s);
      assert.equal(await sh(s, fresh, 'echo new'), 'new\n');
      const child = await create(s, { image: `snapshots/${snapshot}` });
      assert.equal(await sh(s, child, 'cat /root/mark'), 'before\n');
      const after = await ledgerOf(s, key);
      // Newest first: the rows the previous release wrote are the ones up to its last id, unchanged.
      const last = Math.max(...ledger.entries.map((e) => e.id));
      assert.deepEqual(
        after.entries.filter((e) => e.id <= last),
        ledger.entries,
        'no ledger row lost or changed',
      );
      // The marker: this release served the dir, at the latest schema.
      const db = new Database(join(dataDir, 'sandboxd.db'), { readonly: true });
      try {
        assert.equal(db.pragma('user_version', { simple: true }), MIGRATIONS.at(-1)?.version);
        assert.deepEqual(db.prepare("SELECT value FROM instance_meta WHERE key = 'release'").get(), {
          value: thisRelease(),
        });
      } finally {
        db.close();
      }
      assert.equal(await s.kill('SIGTERM'), 0);
    });

    it('the previous release, started again on the upgraded dir, is refused and changes nothing', async (t) => {
      assert.ok(server && server.proc.exitCode === 0, 'this release served the dir and stopped');
      const before = tree(dataDir);
      const port = await freePort();
      // As the harness starts it, but to its end: it must not come up.
      const env = {
        ...process.env,
        SANDBOXD_RUNTIME: RUNTIME,
        SANDBOXD_DATA_DIR: dataDir,
        SANDBOXD_HOST: '127.0.0.1',
        SANDBOXD_PORT: String(port),
        SANDBOXD_BOOTSTRAP_API_KEY: ADMIN_KEY,
        SANDBOXD_LOG_LEVEL: 'warn',
        ...localEnv(dataDir),
        SANDBOXD_WARM_POOL: 'off',
      };
      const child = spawn(process.execPath, ['--import', 'tsx', 'packages/server/src/main.ts'], {
        cwd: prev.root,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (b) => (stderr += b));
      child.stdout.resume();
      const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
      const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
      clearTimeout(timer);
      t.diagnostic(`release ${prev.version} said: ${stderr.split('\n')[0]}`);
      assert.equal(code, 1, stderr);
      // 0.1.0's own check: the schema this release left is newer than its own.
      assert.match(
        stderr,
        new RegExp(
          `database schema version ${MIGRATIONS.at(-1)?.version} is newer than this server \\(${prev.schema.sqlite}\\)`,
        ),
      );
      // Nothing changed: every file as it was. A reader of a WAL database leaves SQLite's
      // -wal (empty: no frame written) and -shm index behind when it exits without closing.
      const after = tree(dataDir);
      for (const [path, sum] of before) assert.equal(after.get(path), sum, `${path} changed`);
      const added = [...after.keys()].filter((p) => !before.has(p));
      t.diagnostic(`files the refused start added: ${added.join(', ') || 'none'}`);
      assert.ok(
        added.every((p) => p === 'sandboxd.db-shm' || p === 'sandboxd.db-wal'),
        `new files: ${added.join(', ')}`,
      );
      if (added.includes('sandboxd.db-wal')) assert.equal(lstatSync(join(dataDir, 'sandboxd.db-wal')).size, 0);
      // And this release serves it again (the test's cleanup deletes what it made).
      server = await startServer({ dataDir });
      assert.equal((await server.api('GET', `/api/v1/sandboxes/${ids.vol}`, { key })).body.sandbox.state, 'started');
    });
  });
});
