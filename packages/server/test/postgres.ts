/**
 * A real, throw-away PostgreSQL server for tests: Debian's binaries, a fresh cluster in a
 * temp dir (trust auth, its unix socket in that dir, TCP on 127.0.0.1 only at a free port),
 * started with `pg_ctl -w start` as the `postgres` user (or as the current user when not
 * root: the server refuses to run as root), stopped with `pg_ctl -m fast stop` and removed.
 * One per test file: start it in `before`, stop it in `after`; a process exit that skipped
 * `after` still stops it (synchronously, by its own pg_ctl and data dir).
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { appendFile, chown, mkdir, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, it } from 'node:test';
import pg from 'pg';
import { freePort } from './images.js';

const run = promisify(execFile);

/** The bin dir of the newest installed PostgreSQL (`SANDBOXD_TEST_PG_BIN` wins), or null when none is installed. */
export function pgBinDir(): string | null {
  const forced = process.env.SANDBOXD_TEST_PG_BIN;
  if (forced) return existsSync(join(forced, 'initdb')) ? forced : null;
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => /^\d+$/.test(v) && existsSync(join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length ? join(root, versions[0], 'bin') : null;
}

export interface TestPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres`. */
  url: string;
  port: number;
  /** Wall time of `pg_ctl -w start` (ms). */
  startMs: number;
  /** Creates an empty database (a fresh name unless given) and returns its URL. */
  createDatabase(name?: string): Promise<string>;
  /**
   * A fresh, empty schema in one shared database, and a URL whose connections use it
   * (`options=-c search_path=<schema>`): as good as a new database for the store, in ~1 ms
   * instead of the ~250 ms of CREATE DATABASE.
   */
  createSchema(): Promise<string>;
  /** `pg_ctl -m fast stop`, then removes the temp dir; idempotent. */
  stop(): Promise<void>;
  /** kill -9 of the postmaster (its pid from postmaster.pid), as a crash; returns that pid. */
  crash(): number;
  /** Starts it again on the same data dir and port after {@link crash} (a few tries while its backends exit). */
  restart(): Promise<void>;
}

const isRoot = process.getuid?.() === 0;

/** Runs a PostgreSQL tool as `postgres` when we are root, else as ourselves; bounded by `timeoutMs`. */
function asPg(bin: string, args: string[], timeoutMs: number) {
  const [cmd, argv] = isRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
  return run(cmd, argv, { timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 4 << 20 });
}

/**
 * `durable`: keep PostgreSQL's own fsync and synchronous commit (the chaos soak kills it with
 * -9: without them the last ~0.6 s of commits are lost, which a production server never does).
 */
export async function startPostgres(o: { durable?: boolean } = {}): Promise<TestPostgres> {
  const bin = pgBinDir();
  if (!bin) throw new Error('no PostgreSQL binaries under /usr/lib/postgresql (scripts/setup.sh --test installs them)');
  const dir = await mkdtemp(join(tmpdir(), 'sbx-pg-'));
  const data = join(dir, 'data');
  const sock = join(dir, 'sock');
  await mkdir(sock);
  if (isRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    await chown(dir, uid, gid);
    await chown(sock, uid, gid);
  }
  const ctl = join(bin, 'pg_ctl');
  let started = false;
  const stopSync = () => {
    if (!started) return;
    started = false;
    try {
      const args = ['-D', data, '-m', 'immediate', '-w', '-t', '10', 'stop'];
      if (isRoot) execFileSync('runuser', ['-u', 'postgres', '--', ctl, ...args], { stdio: 'ignore', timeout: 15_000 });
      else execFileSync(ctl, args, { stdio: 'ignore', timeout: 15_000 });
    } catch {
      /* already gone */
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const onExit = () => stopSync();
  try {
    await asPg(
      join(bin, 'initdb'),
      ['-D', data, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--locale=C', '--no-sync'],
      60_000,
    );
    let port = 0;
    let startMs = 0;
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      // A test server: durability off (fsync, full-page writes), loopback TCP, socket in the temp dir.
      await appendFile(
        join(data, 'postgresql.conf'),
        `\nlisten_addresses = '127.0.0.1'\nport = ${port}\nunix_socket_directories = '${sock}'\n` +
          (o.durable ? '' : 'fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n') +
          'max_connections = 200\n',
      );
      const t0 = performance.now();
      try {
        started = true;
        process.once('exit', onExit);
        await asPg(ctl, ['-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '30', 'start'], 40_000);
        startMs = performance.now() - t0;
        break;
      } catch (e) {
        started = false;
        process.removeListener('exit', onExit);
        // The port was taken between freePort and the start: try another, a few times.
        if (attempt >= 3) {
          const log = existsSync(join(dir, 'server.log')) ? readFileSync(join(dir, 'server.log'), 'utf8') : '';
          throw new Error(`pg_ctl start failed: ${(e as Error).message}\n${log.slice(-2000)}`);
        }
      }
    }
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    let n = 0;
    let stopped: Promise<void> | undefined;
    let shared: Promise<string> | undefined;
    const admin = async (url: string, text: string) => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      try {
        await c.query(text);
      } finally {
        await c.end();
      }
    };
    const createDatabase = async (name = `t${process.pid}_${++n}`) => {
      await admin(url, `CREATE DATABASE "${name.replace(/"/g, '')}"`);
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    };
    return {
      url,
      port,
      startMs,
      createDatabase,
      async createSchema() {
        shared ??= createDatabase('schemas');
        const base = await shared;
        const schema = `s${++n}`;
        await admin(base, `CREATE SCHEMA ${schema}`);
        return `${base}?options=${encodeURIComponent(`-c search_path=${schema}`)}`;
      },
      crash() {
        const pid = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
        if (!(pid > 1)) throw new Error('no postmaster pid in postmaster.pid');
        process.kill(pid, 'SIGKILL');
        return pid;
      },
      async restart() {
        for (let attempt = 1; ; attempt++) {
          try {
            await asPg(ctl, ['-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '30', 'start'], 40_000);
            return;
          } catch (e) {
            // The killed postmaster's backends notice its death and exit within moments.
            if (attempt >= 10) throw new Error(`pg_ctl start after a crash failed: ${(e as Error).message}`);
            await new Promise((r) => setTimeout(r, 500));
          }
        }
      },
      stop() {
        stopped ??= (async () => {
          if (!started) return;
          try {
            await asPg(ctl, ['-D', data, '-m', 'fast', '-w', '-t', '20', 'stop'], 30_000);
            started = false;
          } catch {
            stopSync(); // immediate mode, then the dir
          }
          process.removeListener('exit', onExit);
          rmSync(dir, { recursive: true, force: true });
        })();
        return stopped;
      },
    };
  } catch (e) {
    stopSync();
    process.removeListener('exit', onExit);
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

/**
 * One PostgreSQL server for the tests that `body` registers: started before them and
 * stopped after them. `body` gets it as a getter, because the server only exists once
 * `before` has run. Where PostgreSQL is not installed, one skipped test named `name` says why.
 */
export function withTestPostgres(name: string, body: (server: () => TestPostgres) => void): void {
  if (!pgBinDir()) {
    it(name, { skip: 'no PostgreSQL binaries under /usr/lib/postgresql: run scripts/setup.sh --test' });
    return;
  }
  let server: TestPostgres | undefined;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server?.stop();
  });
  body(() => {
    if (!server) throw new Error('PostgreSQL is not started yet (use it inside a test or hook)');
    return server;
  });
}
