/**
 * Starts the real server process for black-box tests and talks to it over HTTP.
 * Env: SANDBOXD_E2E_RUNTIME (`fake` default, `local` for the crun driver),
 * SANDBOXD_E2E_IMAGE (default `local/busybox:latest`), SANDBOXD_TEST_ISOLATION (unset: the
 * server's own default, containers; `gvisor`: the servers started here make every sandbox a
 * gVisor one, through SANDBOXD_ISOLATION: `npm run test:gvisor-security`).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import './error-kinds.js';
import { localEnv, teardownLocal } from './local-runtime.js';

export const RUNTIME = process.env.SANDBOXD_E2E_RUNTIME ?? 'fake';
export const IMAGE = process.env.SANDBOXD_E2E_IMAGE ?? 'local/busybox:latest';
/**
 * The tier the servers started here give sandboxes that name none (`SANDBOXD_TEST_ISOLATION`):
 * `container` (the default, the server's own) or `gvisor`. A test's own `env` still wins.
 */
export const TEST_ISOLATION: 'container' | 'gvisor' = (() => {
  const v = process.env.SANDBOXD_TEST_ISOLATION;
  if (v === undefined || v === '' || v === 'container') return 'container';
  if (v === 'gvisor') return 'gvisor';
  throw new Error(`SANDBOXD_TEST_ISOLATION is ${v}: container or gvisor`);
})();
/** Whether this run's sandboxes are gVisor ones (SANDBOXD_TEST_ISOLATION=gvisor). */
export const GVISOR = TEST_ISOLATION === 'gvisor';
const ROOT = resolve(fileURLToPath(import.meta.url), '../../..');
export const ADMIN_KEY = `sk_${'e2eAdminKey0'.repeat(4).slice(0, 40)}`;

/** API keys of accounts made per data dir, so stop() can delete what they left running. */
const keysByDir = new Map<string, Set<string>>();

/** Whether TCP port `port` of `host` can be listened on now. */
function portFree(port: number, host: string): Promise<boolean> {
  return new Promise((res) => {
    const s = createServer();
    s.unref();
    s.once('error', () => res(false));
    s.listen(port, host, () => s.close(() => res(true)));
  });
}

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

export interface Server {
  baseUrl: string;
  port: number;
  dataDir: string;
  proc: ChildProcess;
  stdout: () => string;
  /** Sends a signal to the server process (by its pid) and waits for it to exit (bounded). */
  kill(signal?: NodeJS.Signals, waitMs?: number): Promise<number | null>;
  /** Deletes every sandbox, volume and snapshot of the accounts the tests made (SIGTERM leaves sandboxes running). */
  cleanup(): Promise<void>;
  /** Cleans up, SIGTERM, then removes the data dir unless `keepData`. */
  stop(opts?: { keepData?: boolean }): Promise<void>;
  /** fetch with the admin key (or `key`, or none with key: null). */
  api(
    method: string,
    path: string,
    o?: { body?: unknown; raw?: string; key?: string | null; headers?: Record<string, string> },
  ): Promise<{ status: number; body: any; headers: Headers; text: string }>;
}

/** Starts `node --import tsx packages/server/src/main.ts` (of `o.cwd`, default this checkout) and waits for /healthz (bounded). */
export async function startServer(
  o: {
    dataDir?: string;
    env?: Record<string, string>;
    port?: number;
    https?: boolean;
    /** Where readiness is polled (default `/healthz`): a runner answers only with its token. */
    ready?: { path: string; headers?: Record<string, string> };
    /**
     * Runs the server on a fake host (`fake-host.ts`): its argv prefix and address, which the
     * server listens on. Its teardown then runs there too.
     */
    on?: { wrap: string[]; address: string };
    /** The checkout whose server runs (default this one): the upgrade test's previous release. */
    cwd?: string;
  } = {},
): Promise<Server> {
  const dataDir = o.dataDir ?? mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
  // A given port (a restart) must be free: else the readiness poll below would be answered by
  // whatever still listens there (a server a failed test left running) and this one, unable
  // to bind, would exit unseen.
  if (o.port !== undefined && !o.on && !(await portFree(o.port, '127.0.0.1')))
    throw new Error(`port ${o.port} is still in use (a server not stopped?): not starting another on it`);
  const port = o.port ?? (await freePort());
  const env = {
    ...process.env,
    SANDBOXD_RUNTIME: RUNTIME,
    SANDBOXD_DATA_DIR: dataDir,
    SANDBOXD_HOST: o.on?.address ?? '127.0.0.1',
    SANDBOXD_PORT: String(port),
    SANDBOXD_BOOTSTRAP_API_KEY: ADMIN_KEY,
    // A test that reads its servers' logs asks for more (the chaos soak: info).
    SANDBOXD_LOG_LEVEL: process.env.SANDBOXD_E2E_LOG_LEVEL ?? 'warn',
    ...(RUNTIME === 'local' ? localEnv(dataDir) : {}),
    // No warm pool unless a test asks for one: each server would start sandboxes it never uses.
    SANDBOXD_WARM_POOL: 'off',
    ...(GVISOR ? { SANDBOXD_ISOLATION: 'gvisor' } : {}),
    ...o.env,
  };
  if (!keysByDir.has(dataDir)) keysByDir.set(dataDir, new Set([ADMIN_KEY]));
  const argv = [...(o.on?.wrap ?? []), process.execPath, '--import', 'tsx', 'packages/server/src/main.ts'];
  const proc = spawn(argv[0], argv.slice(1), {
    cwd: o.cwd ?? ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout!.on('data', (b) => (out += b));
  proc.stderr!.pipe(createWriteStream(join(dataDir, `server-${proc.pid}.stderr.log`)));
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  // `https`: the server is on TLS (SANDBOXD_TLS_*); the caller makes its certificate trusted.
  const baseUrl = `${o.https ? 'https' : 'http'}://${o.on?.address ?? '127.0.0.1'}:${port}`;
  const deadline = Date.now() + (RUNTIME === 'local' ? 60_000 : 20_000);
  // A server that fails to start may have set up part of the host (bridge, nft table, cgroups)
  // for a data dir nobody will stop: undo it, unless the caller owns the dir (a restart).
  const teardown = (): Promise<void> =>
    o.on
      ? runWrapped([...o.on.wrap, process.execPath, '--import', 'tsx', 'test/e2e/teardown-local-cli.ts', dataDir])
      : teardownLocal(dataDir);
  const failed = async (message: string): Promise<never> => {
    if (RUNTIME === 'local' && !o.dataDir) await exited.then(teardown).catch(() => {});
    throw new Error(message);
  };
  for (;;) {
    if (proc.exitCode !== null) await failed(`server exited with ${proc.exitCode}; see ${dataDir}`);
    try {
      if ((await fetch(`${baseUrl}${o.ready?.path ?? '/healthz'}`, { headers: o.ready?.headers })).status === 200)
        break;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      await failed('server did not become healthy in time');
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  if (proc.exitCode !== null) await failed(`server exited with ${proc.exitCode}; see ${dataDir}`);
  const server: Server = {
    baseUrl,
    port,
    dataDir,
    proc,
    stdout: () => out,
    async kill(signal = 'SIGTERM', waitMs = 15_000) {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
      process.kill(proc.pid!, signal);
      const t = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), waitMs).unref());
      const r = await Promise.race([exited, t]);
      if (r === 'timeout') {
        process.kill(proc.pid!, 'SIGKILL');
        return exited;
      }
      return r;
    },
    async stop(opts = {}) {
      if (proc.exitCode === null && proc.signalCode === null) await server.cleanup().catch(() => {});
      await server.kill('SIGTERM');
      if (RUNTIME === 'local' && !opts.keepData) await teardown();
      if (!opts.keepData && !process.env.SANDBOXD_E2E_KEEP) rmSync(dataDir, { recursive: true, force: true });
    },
    async cleanup() {
      for (const key of keysByDir.get(dataDir) ?? []) {
        // Every state: a paused sandbox keeps its processes, a stopped one its root layer.
        const list = await server.api('GET', '/api/v1/sandboxes?limit=1000', { key });
        for (const sb of list.body?.sandboxes ?? []) await server.api('DELETE', `/api/v1/sandboxes/${sb.id}`, { key });
        // Snapshots live in the image store, which test servers share.
        const snaps = await server.api('GET', '/api/v1/snapshots', { key });
        for (const x of snaps.body?.snapshots ?? []) await server.api('DELETE', `/api/v1/snapshots/${x.name}`, { key });
        const vols = await server.api('GET', '/api/v1/volumes', { key });
        for (const v of vols.body?.volumes ?? []) await server.api('DELETE', `/api/v1/volumes/${v.name}`, { key });
      }
    },
    async api(method, path, a = {}) {
      const headers: Record<string, string> = { ...(a.headers ?? {}) };
      const key = a.key === undefined ? ADMIN_KEY : a.key;
      if (key !== null) headers.authorization = `Bearer ${key}`;
      let body: string | undefined = a.raw;
      if (a.body !== undefined) body = JSON.stringify(a.body);
      if (body !== undefined && !headers['content-type']) headers['content-type'] = 'application/json';
      const res = await fetch(`${baseUrl}${path}`, {
        method,
        headers,
        body,
        redirect: 'manual',
        signal: AbortSignal.timeout(120_000),
      });
      const text = await res.text();
      let parsed: unknown;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        parsed = undefined;
      }
      return { status: res.status, body: parsed, headers: res.headers, text };
    },
  };
  return server;
}

/** Runs argv (from the checkout) to its end; rejects with its stderr when it fails. */
async function runWrapped(argv: string[]): Promise<void> {
  await promisify(execFile)(argv[0], argv.slice(1), { cwd: ROOT });
}

/** Creates an account through the admin API; returns its id and a fresh API key. */
export async function newAccount(
  s: Server,
  o: { tokens?: number; plan?: string } = {},
): Promise<{ id: string; key: string }> {
  const email = `e2e-${Date.now()}-${Math.random().toString(36).slice(2)}@example.com`;
  const a = await s.api('POST', '/api/v1/admin/accounts', { body: { email, password: 'password123', ...o } });
  if (a.status !== 201) throw new Error(`create account: ${a.status} ${a.text}`);
  const login = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email, password: 'password123' } });
  const cookie = String(login.headers.get('set-cookie')).split(';')[0];
  const k = await s.api('POST', '/api/v1/keys', {
    key: null,
    body: { name: 'e2e' },
    headers: { cookie, origin: s.baseUrl },
  });
  if (k.status !== 201) throw new Error(`create key: ${k.status} ${k.text}`);
  keysByDir.get(s.dataDir)?.add(k.body.key);
  return { id: a.body.account.id, key: k.body.key };
}

/** Polls `fn` every 200 ms until it returns a value that is not undefined (at most `ms`). */
export async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
