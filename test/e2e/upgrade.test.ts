/**
 * Upgrades with sandboxes running (real runtime): the previous landed release
 * (deploy/releases.json), built from git history (previous-release.ts, cached under
 * .sandboxd-test/releases/), serves: an account with two keys and tokens spent, sandboxes
 * running (one with a volume holding known bytes), a paused one, a stopped one and a snapshot.
 * It stops with SIGTERM (sandboxes keep running); this release starts on the same data: the
 * same sandboxes, by id, are adopted (not started again: their init's start time is the
 * same), exec works in them, the volume's bytes, the ledger's rows, the account and the keys
 * are the same, new creates work (one from the snapshot). Then the previous release, started
 * again on the upgraded data, is refused and changes nothing.
 *
 * Twice: one server (role `all`) on SQLite in its data dir; and a runner with an api on
 * PostgreSQL, upgraded in the documented order (the runner first, which the previous api
 * uses for a while, then the api). And this release's own refusal of data a newer release
 * served (any runtime).
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { MIGRATIONS } from '../../packages/server/src/store/migrations/index.js';
import { PG_MIGRATIONS } from '../../packages/server/src/store/postgres/migrations.js';
import { openDatabase } from '../../packages/server/src/store/sqlite/open.js';
import { pgBinDir, startPostgres, type TestPostgres } from '../../packages/server/test/postgres.js';
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
import { runnerReady } from './replicas-support.js';

const ROOT = resolve(import.meta.dirname, '../..');
const local = RUNTIME === 'local';
const BYTES = 3 * 1024 * 1024;

/**
 * `answer` without what this release adds to the previous one's answers (0.3.0: a plan's
 * isolation tiers in an account's limits): the rest must be the same.
 */
function withoutAdded(answer: unknown): unknown {
  const ADDED = new Set(['isolations', 'defaultIsolation']);
  if (Array.isArray(answer)) return answer.map(withoutAdded);
  if (answer && typeof answer === 'object')
    return Object.fromEntries(
      Object.entries(answer as Record<string, unknown>)
        .filter(([k]) => !ADDED.has(k))
        .map(([k, v]) => [k, withoutAdded(v)]),
    );
  return answer;
}

/** Whether `file` backs a loop device (a volume mounted in a running sandbox). */
function looped(file: string): boolean {
  return execFileSync('losetup', ['-j', file], { encoding: 'utf8' }).trim() !== '';
}

/**
 * Every file under `dir` (the harness's own stderr logs left out): a hash of its bytes, or of
 * its size and modification time for one past 16 MiB (a volume's sparse image). The image of
 * a volume mounted in a running sandbox is the kernel's to write (ext4's lazy init, the
 * sandbox's own writes), whatever any server does: only its size counts.
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
          st.size <= 16 << 20
            ? createHash('sha256').update(readFileSync(p)).digest('hex')
            : looped(p)
              ? `size ${st.size}, mounted`
              : `size ${st.size} mtime ${st.mtimeMs}`,
        );
      } else out.set(rel, e.isSymbolicLink() ? 'symlink' : 'other');
    }
  };
  walk(dir);
  return out;
}

/** Checks that every file of `dir` is as in `before`; returns the files added. */
function unchanged(dir: string, before: Map<string, string>): string[] {
  const now = tree(dir);
  for (const [path, sum] of before) assert.equal(now.get(path), sum, `${path} changed`);
  return [...now.keys()].filter((p) => !before.has(p));
}

/**
 * Starts the previous release's server (as the harness would) to its end: it must not come
 * up. Returns its exit code and stderr.
 */
async function refusedStart(
  prev: PreviousRelease,
  dataDir: string,
  env: Record<string, string> = {},
): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'packages/server/src/main.ts'], {
    cwd: prev.root,
    env: {
      ...process.env,
      SANDBOXD_RUNTIME: RUNTIME,
      SANDBOXD_DATA_DIR: dataDir,
      SANDBOXD_HOST: '127.0.0.1',
      SANDBOXD_PORT: String(await freePort()),
      SANDBOXD_BOOTSTRAP_API_KEY: ADMIN_KEY,
      SANDBOXD_LOG_LEVEL: 'warn',
      ...localEnv(dataDir),
      SANDBOXD_WARM_POOL: 'off',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (b) => (stderr += b));
  child.stdout.resume();
  const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
  const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  clearTimeout(timer);
  return { code, stderr };
}

/** What the previous release made, and the checks that this release kept it. */
class Fixture {
  key = '';
  key2 = '';
  readonly ids = { vol: '', plain: '', paused: '', stopped: '' };
  readonly snapshot = `upgrade-${randomBytes(4).toString('hex')}`;
  blobSum = '';
  readonly initStart: Record<string, string> = {};
  ledger?: Awaited<ReturnType<typeof ledgerOf>>;
  listed: Array<{ id: string; state: string }> = [];
  account: unknown;
  adminList: unknown;

  async sh(s: Server, id: string, command: string): Promise<string> {
    const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key: this.key, body: { command } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.exitCode, 0, `${command}: ${r.body.stderr}`);
    return r.body.stdout as string;
  }

  async create(s: Server, body: Record<string, unknown> = {}): Promise<string> {
    const r = await s.api('POST', '/api/v1/sandboxes', {
      key: this.key,
      body: { image: IMAGE, timeoutMs: 1_200_000, ...body },
    });
    assert.equal(r.status, 201, r.text);
    return r.body.sandbox.id as string;
  }

  async list(s: Server): Promise<Array<{ id: string; state: string }>> {
    const r = await s.api('GET', '/api/v1/sandboxes?limit=1000', { key: this.key });
    return (r.body.sandboxes as Array<{ id: string; state: string }>)
      .map((x) => ({ id: x.id, state: x.state }))
      .sort((a, b) => a.id.localeCompare(b.id));
  }

  /** The start time (clock ticks since boot) of the sandbox's init: the same after an adoption, not after a restart. */
  async initStarted(s: Server, id: string): Promise<string> {
    return (await this.sh(s, id, "cut -d' ' -f22 /proc/1/stat")).trim();
  }

  /** Through the previous release: the account, keys, sandboxes in each state, a volume's bytes, a snapshot. */
  async make(s: Server): Promise<void> {
    const a = await newAccount(s, { tokens: 50_000, plan: 'PRO' });
    this.key = a.key;
    const k2 = await s.api('POST', '/api/v1/keys', { key: this.key, body: { name: 'second' } });
    assert.equal(k2.status, 201, k2.text);
    this.key2 = k2.body.key;
    const ids = this.ids;
    ids.vol = await this.create(s, { volumes: { '/data': { name: 'kept', sizeGb: 1 } } });
    const sum = await this.sh(s, ids.vol, `head -c ${BYTES} /dev/urandom > /data/blob && sync && sha256sum /data/blob`);
    this.blobSum = sum.split(' ')[0];
    assert.match(this.blobSum, /^[0-9a-f]{64}$/);
    ids.plain = await this.create(s);
    await this.sh(s, ids.plain, 'echo before > /root/mark');
    const snap = await s.api('POST', `/api/v1/sandboxes/${ids.plain}/snapshot`, {
      key: this.key,
      body: { name: this.snapshot },
    });
    assert.equal(snap.status, 201, snap.text);
    ids.paused = await this.create(s);
    await this.sh(s, ids.paused, 'echo paused > /root/mark');
    ids.stopped = await this.create(s);
    await this.sh(s, ids.stopped, 'echo stopped > /root/mark');
    for (const id of [ids.vol, ids.plain, ids.paused]) this.initStart[id] = await this.initStarted(s, id);
    assert.equal((await s.api('POST', `/api/v1/sandboxes/${ids.paused}/pause`, { key: this.key })).status, 200);
    assert.equal((await s.api('POST', `/api/v1/sandboxes/${ids.stopped}/stop`, { key: this.key })).status, 200);
    this.listed = await this.list(s);
    assert.deepEqual(this.listed.map((x) => x.state).sort(), ['paused', 'started', 'started', 'stopped']);
    this.ledger = await ledgerOf(s, this.key);
    assert.ok(
      this.ledger.entries.some((e) => e.reason === 'sandbox.create'),
      'tokens were spent',
    );
    this.account = (await s.api('GET', '/api/v1/account', { key: this.key })).body;
    this.adminList = (await s.api('GET', '/api/v1/admin/accounts')).body;
  }

  /** Through this release, before anything changes: the same records, the same running sandboxes. */
  async checkKept(s: Server): Promise<void> {
    assert.ok(this.ledger, 'the previous release made the fixture');
    const ids = this.ids;
    assert.deepEqual(await this.list(s), this.listed);
    assert.deepEqual(await ledgerOf(s, this.key), this.ledger);
    for (const k of [this.key, this.key2])
      assert.deepEqual(withoutAdded((await s.api('GET', '/api/v1/account', { key: k })).body), this.account);
    assert.deepEqual(withoutAdded((await s.api('GET', '/api/v1/admin/accounts')).body), this.adminList);
    // Adopted, not started again: the same init, still running; exec works.
    assert.equal(await this.initStarted(s, ids.vol), this.initStart[ids.vol]);
    assert.equal(await this.initStarted(s, ids.plain), this.initStart[ids.plain]);
    assert.equal((await this.sh(s, ids.vol, 'sha256sum /data/blob')).split(' ')[0], this.blobSum);
    assert.equal(await this.sh(s, ids.plain, 'cat /root/mark'), 'before\n');
  }

  /** Through this release: every kind of sandbox goes on; new ones start, one from the old snapshot. */
  async checkWorks(s: Server): Promise<void> {
    const ids = this.ids;
    const key = this.key;
    assert.equal((await s.api('POST', `/api/v1/sandboxes/${ids.paused}/resume`, { key })).status, 200);
    assert.equal(await this.initStarted(s, ids.paused), this.initStart[ids.paused]);
    assert.equal(await this.sh(s, ids.paused, 'cat /root/mark'), 'paused\n');
    const started = await s.api('POST', `/api/v1/sandboxes/${ids.stopped}/start`, { key, body: {} });
    assert.equal(started.status, 200, started.text);
    assert.equal(await this.sh(s, ids.stopped, 'cat /root/mark'), 'stopped\n');
    const vols = await s.api('GET', '/api/v1/volumes', { key });
    assert.deepEqual(
      vols.body.volumes.map((v: { name: string; mountedBy: string[] }) => [v.name, v.mountedBy]),
      [['kept', [ids.vol]]],
    );
    const snaps = await s.api('GET', '/api/v1/snapshots', { key });
    assert.deepEqual(
      snaps.body.snapshots.map((x: { name: string }) => x.name),
      [this.snapshot],
    );
    const fresh = await this.create(s);
    assert.equal(await this.sh(s, fresh, 'echo new'), 'new\n');
    const child = await this.create(s, { image: `snapshots/${this.snapshot}` });
    assert.equal(await this.sh(s, child, 'cat /root/mark'), 'before\n');
    // Newest first: the rows the previous release wrote are the ones up to its last id, unchanged.
    const old = this.ledger?.entries ?? [];
    const last = Math.max(...old.map((e) => e.id));
    assert.deepEqual(
      (await ledgerOf(s, key)).entries.filter((e) => e.id <= last),
      old,
      'no ledger row lost or changed',
    );
  }
}

/**
 * The previous release's refusal of data this release has served, word for word: its release
 * marker check (store/release-marker.ts, since 0.2.0) finds this release in the marker (and,
 * when this release added migrations, a newer schema), and it exits 1 before it writes
 * anything. `where` is the data as it names it; `latest` the data's schema, `own` its own.
 */
function assertRefused(
  r: { code: number | null; stderr: string },
  prev: PreviousRelease,
  where: string,
  latest: number,
  own: number,
) {
  assert.equal(r.code, 1, r.stderr);
  const schema = latest > own ? ` (database schema version ${latest} is newer than this server (${own}))` : '';
  assert.equal(
    r.stderr,
    `sandboxd: ${where} was last served by sandboxd ${thisRelease()}; this is sandboxd ${prev.version}, an older release${schema}. ` +
      `Downgrades are not supported: run sandboxd ${thisRelease()} or newer on it, or restore the backup taken before the upgrade ` +
      '(sandboxd restore; docs/upgrades.md). Nothing was changed.\n',
  );
}

describe('upgrade from the previous release', { timeout: 1_200_000 }, () => {
  let prev: PreviousRelease | undefined;
  const previous = (): PreviousRelease => {
    prev ??= buildPreviousRelease();
    return prev;
  };

  it('the previous release is recorded and its commit is in this repository (a shallow clone fails here)', () => {
    const p = previousEntry();
    requireCommit(p.commit, p.version);
    assert.notEqual(p.version, thisRelease());
  });

  it('this release refuses a data dir a newer release served: exit 1, what to do, no byte changed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandboxd-upgrade-newer-'));
    try {
      openDatabase(join(dir, 'sandboxd.db'), { release: '99.0.0' }).close();
      const before = tree(dir);
      const child = spawn(process.execPath, ['packages/server/bin/sandboxd.js', 'serve'], {
        cwd: ROOT,
        env: {
          ...process.env,
          SANDBOXD_RUNTIME: 'fake',
          SANDBOXD_DATA_DIR: dir,
          SANDBOXD_PORT: '0',
          SANDBOXD_LOG_LEVEL: 'warn',
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
      clearTimeout(timer);
      assert.equal(code, 1, stderr);
      assert.equal(
        stderr,
        `sandboxd: the database ${join(dir, 'sandboxd.db')} was last served by sandboxd 99.0.0; this is sandboxd ${thisRelease()}, an older release. Downgrades are not supported: run sandboxd 99.0.0 or newer on it, or restore the backup taken before the upgrade (sandboxd restore; docs/upgrades.md). Nothing was changed.\n`,
      );
      assert.deepEqual(unchanged(dir, before), []);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('builds the previous release from git history (cached under .sandboxd-test/releases)', {
    skip: !local && 'needs SANDBOXD_E2E_RUNTIME=local (root, crun)',
  }, (t) => {
    const t0 = Date.now();
    const p = previous();
    t.diagnostic(
      `release ${p.version} (${describeCommit(p.commit)}): ${p.built ? 'built' : 'cached'} in ${Date.now() - t0} ms; npm dependencies ${p.deps}`,
    );
  });

  describe('one server on SQLite, with sandboxes running', {
    skip: !local && 'needs SANDBOXD_E2E_RUNTIME=local (root, crun)',
  }, () => {
    const fx = new Fixture();
    let dataDir = '';
    let server: Server | undefined;

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

    it('the previous release serves a data dir: keys, tokens spent, sandboxes running, paused, stopped, a volume, a snapshot', async () => {
      dataDir = freshDataDir();
      server = await startServer({ dataDir, cwd: previous().root });
      await fx.make(server);
      // SIGTERM: the server goes, its sandboxes keep running.
      assert.equal(await server.kill('SIGTERM'), 0);
    });

    it('this release starts on that data dir and adopts everything: same ids, exec, volume bytes, ledger rows, keys', async () => {
      server = await startServer({ dataDir });
      await fx.checkKept(server);
      await fx.checkWorks(server);
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
      assert.equal(await server.kill('SIGTERM'), 0);
    });

    it('the previous release, started again on the upgraded dir, is refused and changes nothing', async (t) => {
      assert.ok(server && server.proc.exitCode === 0, 'this release served the dir and stopped');
      const before = tree(dataDir);
      const r = await refusedStart(previous(), dataDir);
      t.diagnostic(`release ${previous().version} said: ${r.stderr.split('\n')[0]}`);
      assertRefused(
        r,
        previous(),
        `the database ${join(dataDir, 'sandboxd.db')}`,
        MIGRATIONS.at(-1)?.version ?? 0,
        previous().schema.sqlite,
      );
      // Nothing changed: every file as it was, and none added (it closes the database it
      // refused, so SQLite's -wal and -shm beside it go with its connection).
      const added = unchanged(dataDir, before);
      t.diagnostic(`files the refused start added: ${added.join(', ') || 'none'}`);
      assert.deepEqual(added, [], `new files: ${added.join(', ')}`);
      // And this release serves it again (the test's cleanup deletes what it made).
      server = await startServer({ dataDir });
      const got = await server.api('GET', `/api/v1/sandboxes/${fx.ids.vol}`, { key: fx.key });
      assert.equal(got.body.sandbox.state, 'started');
    });
  });

  describe('a runner and an api on PostgreSQL, runner first, with sandboxes running', {
    skip: !local
      ? 'needs SANDBOXD_E2E_RUNTIME=local (root, crun)'
      : pgBinDir() === null && 'needs PostgreSQL (scripts/setup.sh --test)',
  }, () => {
    const fx = new Fixture();
    const token = `e2e-upgrade-${randomBytes(8).toString('hex')}`;
    let pgServer: TestPostgres | undefined;
    let dbUrl = '';
    let runner: Server | undefined;
    let api: Server | undefined;
    const runnerEnv = { SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: token, SANDBOXD_NODE_NAME: 'upgrade-node' };
    // A runner away longer than this has its sandboxes turned `error` by the api: an upgrade
    // raises it above the time a runner takes to come back (docs/upgrades.md).
    const apiEnv = (): Record<string, string> => ({
      SANDBOXD_ROLE: 'api',
      SANDBOXD_RUNNER_DOWN_MS: '300000',
      SANDBOXD_RUNNERS: runner?.baseUrl ?? '',
      SANDBOXD_RUNNER_TOKEN: token,
      SANDBOXD_DATABASE_URL: dbUrl,
    });
    const running = (s?: Server) => s && s.proc.exitCode === null && s.proc.signalCode === null;

    /** Every table of the database: its rows, hashed. */
    async function tables(): Promise<Map<string, string>> {
      const c = new pg.Client({ connectionString: dbUrl });
      await c.connect();
      try {
        const names = await c.query<{ t: string }>(
          'SELECT table_name AS t FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1',
        );
        const out = new Map<string, string>();
        for (const { t } of names.rows) {
          const r = await c.query<{ h: string | null; n: string }>(
            `SELECT md5(string_agg(x::text, ',' ORDER BY x::text)) AS h, count(*) AS n FROM "${t}" x`,
          );
          out.set(t, `${r.rows[0].n} ${r.rows[0].h}`);
        }
        return out;
      } finally {
        await c.end();
      }
    }

    after(async () => {
      // This release's api deletes what the test made; then the runner and PostgreSQL go.
      try {
        if (!running(runner) && runner)
          runner = await startServer({ dataDir: runner.dataDir, env: runnerEnv, ready: runnerReady(token) });
        if (!running(api) && api && runner) api = await startServer({ dataDir: api.dataDir, env: apiEnv() });
      } catch (e) {
        console.log(`# upgrade test cleanup: ${(e as Error).message}`);
      }
      await api?.stop().catch((e) => console.log(`# upgrade test cleanup: ${e}`));
      await runner?.stop().catch((e) => console.log(`# upgrade test cleanup: ${e}`));
      await pgServer?.stop();
    });

    it('the previous release (runner + api) serves: keys, tokens spent, sandboxes in every state, a volume, a snapshot', async () => {
      pgServer = await startPostgres();
      dbUrl = await pgServer.createDatabase();
      runner = await startServer({
        dataDir: freshDataDir(),
        env: runnerEnv,
        ready: runnerReady(token),
        cwd: previous().root,
      });
      api = await startServer({ env: apiEnv(), cwd: previous().root });
      await fx.make(api);
    });

    it("this release's runner replaces the previous one (SIGTERM) and serves the previous api: the same sandboxes", async () => {
      assert.ok(runner && api);
      assert.equal(await runner.kill('SIGTERM'), 0);
      runner = await startServer({
        dataDir: runner.dataDir,
        env: runnerEnv,
        ready: runnerReady(token),
        port: runner.port,
      });
      await fx.checkKept(api);
    });

    it("this release's api replaces the previous one: the database migrated and marked, everything kept and working", async () => {
      assert.ok(runner && api);
      assert.equal(await api.kill('SIGTERM'), 0);
      api = await startServer({ dataDir: api.dataDir, env: apiEnv() });
      await fx.checkKept(api);
      await fx.checkWorks(api);
      const c = new pg.Client({ connectionString: dbUrl });
      await c.connect();
      try {
        const v = await c.query<{ v: number }>('SELECT max(version) AS v FROM schema_version');
        assert.equal(v.rows[0].v, PG_MIGRATIONS.at(-1)?.version);
        const m = await c.query<{ value: string }>("SELECT value FROM instance_meta WHERE key = 'release'");
        assert.deepEqual(m.rows, [{ value: thisRelease() }]);
      } finally {
        await c.end();
      }
    });

    it('the previous api, started again on the upgraded database, is refused and changes nothing', async (t) => {
      assert.ok(api);
      assert.equal(await api.kill('SIGTERM'), 0);
      const before = await tables();
      const r = await refusedStart(previous(), api.dataDir, apiEnv());
      t.diagnostic(`release ${previous().version} said: ${r.stderr.split('\n')[0]}`);
      // It names the database by host and name (no credentials).
      const u = new URL(dbUrl);
      assertRefused(
        r,
        previous(),
        `the PostgreSQL database ${u.host}${u.pathname}`,
        PG_MIGRATIONS.at(-1)?.version ?? 0,
        previous().schema.postgres,
      );
      assert.deepEqual(await tables(), before);
    });
  });
});
