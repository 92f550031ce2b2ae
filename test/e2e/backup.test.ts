/**
 * Black-box, real runtime: `sandboxd backup` of a serving instance (an account with keys and
 * ledger rows, a template, a sandbox writing to a volume all along, a snapshot), then `sandboxd restore`
 * into the fresh data dir (and image dir) of another slot and a server started there: the key
 * works, the ledger's rows are the same, the secrets' key file came back (the restored server
 * decrypts its secrets), the volume holds the file written before the backup,
 * a sandbox is made from the snapshot and execs. A damaged backup (one flipped byte) is
 * refused and writes nothing; bad arguments get clear errors.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
  writeSync,
  closeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { pgBinDir, startPostgres, type TestPostgres } from '../../packages/server/test/postgres.js';
import { Builds, withDockerfile } from './builds-support.js';
import { IMAGE, newAccount, RUNTIME, type Server, startServer, until } from './harness.js';
import { TEST_IMAGE_DIR, teardownLocal } from './local-runtime.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../..');
const ROOTLESS = process.getuid?.() !== 0;

/** Runs `sandboxd <args>` from the checkout with `env` (over a clean SANDBOXD_* set). */
function sandboxd(args: string[], env: Record<string, string>): Promise<{ code: number; out: string; err: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SANDBOXD_')));
  return new Promise((res, rej) => {
    const p = spawn(process.execPath, ['packages/server/bin/sandboxd.js', ...args], {
      cwd: ROOT,
      env: { ...base, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (err += b));
    p.on('error', rej);
    p.on('close', (code) => res({ code: code ?? -1, out, err }));
  });
}

/** Runs every step of a clean-up, even after one fails; then throws the first failure. */
async function allOf(...steps: Array<() => unknown>): Promise<void> {
  const failed: unknown[] = [];
  for (const step of steps)
    try {
      await step();
    } catch (e) {
      failed.push(e);
    }
  if (failed.length) throw failed[0];
}

/** Flips one byte of `file` at `at` (again to undo). */
function flip(file: string, at: number): void {
  const fd = openSync(file, 'r+');
  try {
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, at);
    b[0] ^= 0xff;
    writeSync(fd, b, 0, 1, at);
  } finally {
    closeSync(fd);
  }
}

const ledgerOf = async (s: Server, key: string) =>
  (await s.api('GET', '/api/v1/account/ledger?limit=1000', { key })).body.entries as Array<{
    reason: string;
    sandboxId: string | null;
  }>;

describe('backup and restore (real runtime)', {
  skip: (RUNTIME !== 'local' && 'needs the real runtime') || (ROOTLESS && 'needs root'),
  timeout: 600_000,
}, () => {
  let s1: Server;
  let s2: Server | undefined;
  let key: string;
  let work = '';
  let backupDir = '';
  let d2 = '';
  const srcEnv = () => ({ SANDBOXD_DATA_DIR: s1.dataDir, SANDBOXD_IMAGE_DIR: TEST_IMAGE_DIR });
  let dstEnv: Record<string, string> = {};

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'sandboxd-backup-e2e-'));
    chmodSync(work, 0o711); // the restored data dir lies below: sandboxes' uids traverse it
    backupDir = join(work, 'backup');
    d2 = join(work, 'restored');
    dstEnv = { SANDBOXD_DATA_DIR: d2, SANDBOXD_IMAGE_DIR: join(d2, 'images') };
    s1 = await startServer();
    key = (await newAccount(s1, { tokens: 100_000, plan: 'PRO' })).key;
  });
  after(() =>
    allOf(
      async () => {
        if (s2) {
          for (const sb of (await s2.api('GET', '/api/v1/sandboxes?limit=1000', { key })).body?.sandboxes ?? [])
            await s2.api('DELETE', `/api/v1/sandboxes/${sb.id}`, { key });
          await s2.stop();
        } else if (d2 && existsSync(d2)) await teardownLocal(d2); // a server that failed to start there
      },
      () => s1?.stop(),
      () => work && rmSync(work, { recursive: true, force: true }),
    ),
  );

  const sh = async (s: Server, id: string, command: string) => {
    const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key, body: { command } });
    assert.equal(r.status, 200, r.text);
    return r.body as { stdout: string; stderr: string; exitCode: number };
  };
  const create = async (s: Server, body: object) => {
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, timeoutMs: 600_000, ...body } });
    assert.equal(c.status, 201, c.text);
    return c.body.sandbox.id as string;
  };

  it('backs up while serving, refuses a damaged copy, restores onto a fresh data dir that serves it all', async () => {
    // What the instance holds: a template, a volume with a file, written on and on; a snapshot.
    const builds = new Builds(s1, key);
    const built = await builds.run(
      { name: 'tpl' },
      withDockerfile(`FROM ${IMAGE}\nRUN echo from-template > /tplfile\n`),
    );
    assert.equal(built.state, 'ready', JSON.stringify(built.error));
    const writer = await create(s1, { volumes: { '/data': { name: 'data', sizeGb: 1 } } });
    const made = await sh(
      s1,
      writer,
      'head -c 1048576 /dev/urandom > /data/before.bin && sync && sha256sum /data/before.bin',
    );
    assert.equal(made.exitCode, 0, made.stderr);
    const beforeSum = made.stdout.split(' ')[0];
    const bg = await s1.api('POST', `/api/v1/sandboxes/${writer}/exec`, {
      key,
      body: {
        command: 'i=0; while :; do i=$((i+1)); echo "line $i" >> /data/log; done',
        options: { background: true },
      },
    });
    assert.ok(bg.status === 200 || bg.status === 201, bg.text);
    const other = await create(s1, {});
    assert.equal((await sh(s1, other, 'echo from-snapshot > /etc/marker')).exitCode, 0);
    const snap = await s1.api('POST', `/api/v1/sandboxes/${other}/snapshot`, { key, body: { name: 'snap1' } });
    assert.equal(snap.status, 201, snap.text);
    await until('the writer to have written', async () =>
      (await sh(s1, writer, 'test -s /data/log && echo yes')).stdout === 'yes\n' ? true : undefined,
    );
    const ledger = await ledgerOf(s1, key);
    // A console session of another account, signed in before the backup.
    const email = `backup-${Date.now()}@example.com`;
    const acct2 = await s1.api('POST', '/api/v1/admin/accounts', { body: { email, password: 'password123' } });
    assert.equal(acct2.status, 201, acct2.text);
    const login = await s1.api('POST', '/api/v1/auth/login', { key: null, body: { email, password: 'password123' } });
    assert.equal(login.status, 200, login.text);
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    assert.ok(
      ledger.some((e) => e.reason === 'sandbox.create'),
      'tokens were spent',
    );
    // A secret: its key file (made 0600 at the first start) goes into the backup and comes back.
    const secret = await s1.api('POST', '/api/v1/secrets', {
      key,
      body: { name: 'BACKED_UP', value: 'backed-up-value' },
    });
    assert.equal(secret.status, 201, secret.text);
    const keyFile = readFileSync(join(s1.dataDir, 'secrets.key'));
    assert.equal(statSync(join(s1.dataDir, 'secrets.key')).mode & 0o777, 0o600);

    // Bad arguments: clear errors, exit 2, nothing made.
    const none = await sandboxd(['backup'], srcEnv());
    assert.equal(none.code, 2);
    assert.match(none.err, /names no directory/);
    assert.match((await sandboxd(['backup', '--fast', backupDir], srcEnv())).err, /unknown option "--fast"/);
    const exists = await sandboxd(['backup', work], srcEnv());
    assert.equal(exists.code, 2);
    assert.match(exists.err, /exists: a backup goes into a new directory/);
    const noData = await sandboxd(['backup', backupDir], { SANDBOXD_DATA_DIR: join(work, 'nothing-here') });
    assert.equal(noData.code, 1);
    assert.match(noData.err, /no data dir at/);
    assert.equal((await sandboxd(['restore'], dstEnv)).code, 2);
    assert.match((await sandboxd(['restore', join(work, 'missing')], dstEnv)).err, /does not exist/);
    assert.deepEqual(readdirSync(work), [], 'nothing written by refused commands');

    // The backup, while the writer writes.
    const b = await sandboxd(['backup', backupDir], srcEnv());
    assert.equal(b.code, 0, b.err);
    assert.match(
      b.out,
      /1 volumes \(1 frozen for their copy\), [2-9] snapshot images/,
      'the snapshot and the template',
    );
    assert.equal(statSync(backupDir).mode & 0o777, 0o700);
    assert.deepEqual(
      readFileSync(join(backupDir, 'files', 'secrets.key')),
      keyFile,
      'the secrets key is in the backup',
    );
    for (const f of readdirSync(backupDir, { recursive: true }) as string[]) {
      const st = statSync(join(backupDir, f));
      assert.equal(st.mode & 0o777, st.isDirectory() ? 0o700 : 0o600, f);
    }
    assert.deepEqual(await ledgerOf(s1, key), ledger, 'the backup changed nothing');
    assert.equal((await sh(s1, writer, 'echo alive')).stdout, 'alive\n', 'the writer ran through the backup');

    // A damaged backup is refused whole, before anything is written.
    const db = join(backupDir, 'sandboxd.db');
    const middle = Math.floor(statSync(db).size / 2);
    flip(db, middle);
    const bad = await sandboxd(['restore', backupDir], dstEnv);
    flip(db, middle);
    assert.equal(bad.code, 1);
    assert.match(bad.err, /sandboxd\.db does not match its sha256 in the manifest: damaged/);
    flip(join(backupDir, 'manifest.json'), 20);
    const badManifest = await sandboxd(['restore', backupDir], dstEnv);
    flip(join(backupDir, 'manifest.json'), 20);
    assert.match(badManifest.err, /the manifest is damaged/);
    assert.deepEqual(readdirSync(work).sort(), ['backup'], 'a refused restore made nothing');

    // A non-empty data dir is refused without --force.
    mkdirSync(d2);
    const full = join(work, 'full');
    mkdirSync(full);
    mkdirSync(join(full, 'something'));
    const refused = await sandboxd(['restore', backupDir], { ...dstEnv, SANDBOXD_DATA_DIR: full });
    assert.equal(refused.code, 1);
    assert.match(refused.err, /is not empty \(something\)/);
    rmSync(full, { recursive: true });

    // The restore, then a server on the restored data dir (another slot, its own image dir).
    const r = await sandboxd(['restore', backupDir], dstEnv);
    assert.equal(r.code, 0, r.err);
    try {
      s2 = await startServer({ dataDir: d2, env: { SANDBOXD_IMAGE_DIR: join(d2, 'images') } });
    } catch (e) {
      const logs = readdirSync(d2).filter((f) => f.endsWith('.stderr.log'));
      throw new Error(`${(e as Error).message}\n${logs.map((f) => readFileSync(join(d2, f), 'utf8')).join('\n')}`);
    }
    const account = await s2.api('GET', '/api/v1/account', { key });
    const session = await s2.api('GET', '/api/v1/account', { key: null, headers: { cookie } });
    assert.equal(session.status, 200, 'the console session is still signed in');
    assert.equal(session.body.email, email);
    assert.equal(account.status, 200, 'the API key works on the restored server');
    assert.deepEqual(readFileSync(join(d2, 'secrets.key')), keyFile, 'the secrets key came back');
    assert.equal(statSync(join(d2, 'secrets.key')).mode & 0o777, 0o600);
    assert.deepEqual(
      (await s2.api('GET', '/api/v1/secrets', { key })).body.secrets.map((x: { name: string }) => x.name),
      ['BACKED_UP'],
    );
    // Writable only when the server's keys decrypt the database's secrets (else 503).
    const put = await s2.api('PUT', '/api/v1/secrets/BACKED_UP', { key, body: { value: 'changed-after-restore' } });
    assert.equal(put.status, 200, put.text);
    // The sandboxes that ran are not running here: each is marked lost, its unused minutes refunded.
    for (const id of [writer, other])
      await until(`${id} marked lost`, async () => {
        const g = await s2!.api('GET', `/api/v1/sandboxes/${id}`, { key });
        return g.body?.sandbox?.state === 'error' ? g.body.sandbox : undefined;
      });
    const restored = await ledgerOf(s2, key);
    const refunds = restored.filter((e) => e.reason === 'sandbox.refund' && [writer, other].includes(e.sandboxId!));
    assert.deepEqual(restored.slice(refunds.length), ledger, 'every ledger row of the backup, in order');
    assert.ok(restored.slice(0, refunds.length).every((e) => e.reason === 'sandbox.refund'));
    const vols = (await s2.api('GET', '/api/v1/volumes', { key })).body.volumes.map((v: { name: string }) => v.name);
    assert.deepEqual(vols, ['data']);
    assert.deepEqual(
      (await new Builds(s2, key).templates()).map((t) => t.name),
      ['tpl'],
    );
    const snaps = (await s2.api('GET', '/api/v1/snapshots', { key })).body.snapshots.map(
      (x: { name: string }) => x.name,
    );
    assert.deepEqual(snaps, ['snap1']);

    const child = await create(s2, { image: 'snapshots/snap1', volumes: { '/data': 'data' } });
    const out = await sh(
      s2,
      child,
      'cat /etc/marker; sha256sum /data/before.bin; tail -n 1 /data/log | grep -c "^line [0-9]*$"',
    );
    assert.equal(out.exitCode, 0, out.stderr);
    const [marker, sum, lastLine] = out.stdout.trim().split('\n');
    assert.equal(marker, 'from-snapshot');
    assert.equal(sum.split(' ')[0], beforeSum, "the volume's file written before the backup");
    assert.equal(lastLine, '1', 'the log ends on a whole line (the volume was frozen for its copy)');
    const fromTemplate = await create(s2, { image: 'templates/tpl' });
    assert.equal((await sh(s2, fromTemplate, 'cat /tplfile')).stdout, 'from-template\n');
  });
});

describe('backup and restore on PostgreSQL (real runtime)', {
  skip:
    (RUNTIME !== 'local' && 'needs the real runtime') ||
    (ROOTLESS && 'needs root') ||
    (pgBinDir() === null && 'no PostgreSQL installed (scripts/setup.sh --test)'),
  timeout: 600_000,
}, () => {
  let pgs: TestPostgres;
  let a: Server;
  let b: Server | undefined;
  let work = '';
  let d3 = '';

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'sandboxd-backup-pg-e2e-'));
    chmodSync(work, 0o711);
    d3 = join(work, 'restored');
    pgs = await startPostgres();
  });
  after(() =>
    allOf(
      async () => {
        if (b) await b.stop();
        else if (d3 && existsSync(d3)) await teardownLocal(d3);
      },
      () => a?.stop(),
      () => pgs?.stop(),
      () => work && rmSync(work, { recursive: true, force: true }),
    ),
  );

  it('backs up the files and pg_dumps the database; pg_restore, then restore, then a server has it all', async () => {
    const url1 = await pgs.createDatabase();
    a = await startServer({ env: { SANDBOXD_DATABASE_URL: url1 } });
    const { key } = await newAccount(a, { tokens: 10_000 });
    const c = await a.api('POST', '/api/v1/sandboxes', {
      key,
      body: { image: IMAGE, timeoutMs: 600_000, volumes: { '/data': { name: 'pgdata', sizeGb: 1 } } },
    });
    assert.equal(c.status, 201, c.text);
    const w = await a.api('POST', `/api/v1/sandboxes/${c.body.sandbox.id}/exec`, {
      key,
      body: { command: 'head -c 65536 /dev/urandom > /data/f && sync && sha256sum /data/f' },
    });
    assert.equal(w.body.exitCode, 0, w.text);
    // Deleted: the volume is copied idle (no freeze), and no sandbox is lost on the new host.
    assert.equal((await a.api('DELETE', `/api/v1/sandboxes/${c.body.sandbox.id}`, { key })).status, 204);
    const ledger = await ledgerOf(a, key);

    const dir = join(work, 'backup');
    const env = { SANDBOXD_DATA_DIR: a.dataDir, SANDBOXD_IMAGE_DIR: TEST_IMAGE_DIR, SANDBOXD_DATABASE_URL: url1 };
    const r = await sandboxd(['backup', dir], env);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /database \(pg_dump\), 1 volumes \(0 frozen for their copy\)/);

    const url2 = await pgs.createDatabase();
    await new Promise<void>((res, rej) =>
      execFile('pg_restore', ['--no-owner', `--dbname=${url2}`, join(dir, 'database.pgdump')], (e) =>
        e ? rej(e) : res(),
      ),
    );
    const target = { SANDBOXD_DATA_DIR: d3, SANDBOXD_IMAGE_DIR: join(d3, 'images') };
    const noUrl = await sandboxd(['restore', dir], target);
    assert.equal(noUrl.code, 1);
    assert.match(noUrl.err, /a PostgreSQL deployment: set SANDBOXD_DATABASE_URL/);
    const restored = await sandboxd(['restore', dir], { ...target, SANDBOXD_DATABASE_URL: url2 });
    assert.equal(restored.code, 0, restored.err);
    assert.match(restored.out, /restore .*database\.pgdump with pg_restore/);

    b = await startServer({
      dataDir: d3,
      env: { SANDBOXD_IMAGE_DIR: join(d3, 'images'), SANDBOXD_DATABASE_URL: url2 },
    });
    assert.deepEqual(await ledgerOf(b, key), ledger, 'the key works, the ledger is whole');
    const c2 = await b.api('POST', '/api/v1/sandboxes', {
      key,
      body: { image: IMAGE, timeoutMs: 60_000, volumes: { '/data': 'pgdata' } },
    });
    assert.equal(c2.status, 201, c2.text);
    const got = await b.api('POST', `/api/v1/sandboxes/${c2.body.sandbox.id}/exec`, {
      key,
      body: { command: 'sha256sum /data/f' },
    });
    assert.equal(got.body.stdout, w.body.stdout, "the volume's bytes");
    assert.equal((await b.api('DELETE', `/api/v1/sandboxes/${c2.body.sandbox.id}`, { key })).status, 204);
  });
});
