/**
 * docs/production.md followed as written, on a clean directory tree: the commands of its
 * marked install block run with `--root <tmp>` (so the guide cannot drift from what is
 * tested), the tree they write is checked (modes, owners, the config by loadConfig, the unit
 * by systemd-analyze), the guide's config block is merged in, and the server is started from
 * that config on a test slot and reached with the admin key the installer printed. Then the
 * trusted-proxy setting of the guide: forwarding headers from the proxy's address set the
 * client address and scheme; the same headers from another peer change nothing.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { INSTALL_PATHS } from '../../packages/server/src/commands/install.js';
import { loadConfig } from '../../packages/server/src/config.js';
import { systemdAnalyzeMissing, verifyUnit } from '../../packages/server/test/systemd.js';
import { IMAGE, RUNTIME, type Server, startServer, until } from './harness.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const GUIDE = join(ROOT, 'docs/production.md');

/** The fenced block right after the marker comment `<!-- production-guide: <name> ... -->`. */
export function guideBlock(doc: string, name: string): string {
  const re = new RegExp(`<!-- production-guide: ${name}\\b[^>]*-->\\s*\\n\`\`\`[a-z]*\\n([\\s\\S]*?)\\n\`\`\``);
  const m = re.exec(doc);
  if (!m) throw new Error(`docs/production.md has no "production-guide: ${name}" block`);
  return m[1];
}

/** The install block's commands: each must be `[sudo] bash scripts/sandboxd.sh install ...`. */
export function installCommands(block: string): string[] {
  const lines = block
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  for (const l of lines)
    if (!/^(sudo )?bash scripts\/sandboxd\.sh install( |$)/.test(l))
      throw new Error(
        `the guide's install block may hold only "sandboxd.sh install" commands (run here with --root): ${l}`,
      );
  return lines.map((l) => l.replace(/^sudo /, ''));
}

/** A request over plain HTTP from `localAddress` (a loopback address of our choice). */
function call(
  port: number,
  o: { path: string; method?: string; headers?: Record<string, string>; body?: unknown; localAddress: string },
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }> {
  return new Promise((res, rej) => {
    const body = o.body === undefined ? undefined : JSON.stringify(o.body);
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: o.path,
        method: o.method ?? 'GET',
        localAddress: o.localAddress,
        headers: { ...(body ? { 'content-type': 'application/json' } : {}), ...o.headers },
        timeout: 30_000,
      },
      (r) => {
        let text = '';
        r.setEncoding('utf8');
        r.on('data', (c) => (text += c));
        r.on('end', () => res({ status: r.statusCode ?? 0, headers: r.headers, text }));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${o.path}: no answer in 30 s`)));
    req.on('error', rej);
    req.end(body);
  });
}

describe('docs/production.md, followed as written on a clean tree', () => {
  const doc = readFileSync(GUIDE, 'utf8');
  const root = mkdtempSync(join(tmpdir(), 'sandboxd-guide-'));
  // Sandboxes run as unprivileged uids and must traverse every directory above the data dir.
  chmodSync(root, 0o711);
  const at = (p: string) => join(root, p);
  let printed = '';
  let apiKey = '';
  let server: Server | undefined;
  after(async () => {
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it("runs the guide's install commands with --root and prints the admin key once", () => {
    const cmds = installCommands(guideBlock(doc, 'install'));
    assert.ok(cmds.length >= 1);
    for (const cmd of cmds) {
      const p = spawnSync('bash', ['-c', `${cmd} --root "$1"`, 'guide', root], { cwd: ROOT, encoding: 'utf8' });
      assert.equal(p.status, 0, `${cmd}\n${p.stdout}\n${p.stderr}`);
      printed += p.stdout;
    }
    const keys = [...printed.matchAll(/export SANDBOX_API_KEY=(sk_[A-Za-z0-9]+)/g)].map((m) => m[1]);
    assert.equal(keys.length, 1, printed);
    apiKey = keys[0];
    assert.match(printed, /host checks:\n/);
    assert.match(printed, /systemctl daemon-reload && systemctl enable --now sandboxd/);
  });

  it('the tree: modes and owners, the config loadConfig takes, the launcher', () => {
    const uid = process.getuid?.() ?? 0;
    const want: [string, number][] = [
      [INSTALL_PATHS.dataDir, 0o711],
      [INSTALL_PATHS.configDir, 0o700],
      [INSTALL_PATHS.config, 0o600],
      [INSTALL_PATHS.unit, 0o644],
      [INSTALL_PATHS.launcher, 0o755],
    ];
    for (const [p, mode] of want) {
      const st = statSync(at(p));
      assert.equal((st.mode & 0o777).toString(8), mode.toString(8), p);
      assert.equal(st.uid, uid, `${p} owner`);
    }
    const cfg = loadConfig({ SANDBOXD_CONFIG: at(INSTALL_PATHS.config) });
    assert.equal(cfg.bootstrap.apiKey, apiKey, 'the printed key is the one in the config');
    assert.equal(cfg.bootstrap.adminEmail, 'ops@example.com');
    assert.equal(cfg.publicHost, 'sbx.example.com');
    assert.equal(cfg.dataDir, INSTALL_PATHS.dataDir);
    const v = spawnSync(at(INSTALL_PATHS.launcher), ['version'], { encoding: 'utf8' });
    const pkg = JSON.parse(readFileSync(join(ROOT, 'packages/server/package.json'), 'utf8')) as { version: string };
    assert.equal(v.stdout.trim(), pkg.version, v.stderr);
  });

  it('the installed unit passes systemd-analyze verify with no warning', {
    skip: systemdAnalyzeMissing() ?? false,
  }, () => {
    const r = verifyUnit(readFileSync(at(INSTALL_PATHS.unit), 'utf8'), at(INSTALL_PATHS.launcher), root);
    assert.equal(r.output, '');
    assert.equal(r.status, 0);
  });

  it("the guide's config block, merged in, is valid and keeps the keys", () => {
    const path = at(INSTALL_PATHS.config);
    const merged = { ...JSON.parse(readFileSync(path, 'utf8')), ...JSON.parse(guideBlock(doc, 'config')) };
    writeFileSync(path, `${JSON.stringify(merged, null, 2)}\n`, { mode: 0o600 });
    const cfg = loadConfig({ SANDBOXD_CONFIG: path });
    assert.equal(cfg.bootstrap.apiKey, apiKey);
    assert.deepEqual(cfg.trustedProxies, ['127.0.0.1', '::1']);
    assert.equal(cfg.signupEnabled, false);
  });

  describe('the server started from the installed config', () => {
    /** What the unit gives the server (SANDBOXD_CONFIG), on a test slot in the temp tree. */
    const serverEnv = () => ({
      SANDBOXD_CONFIG: at(INSTALL_PATHS.config),
      // The harness's own admin key off: the admin is the config's.
      SANDBOXD_BOOTSTRAP_API_KEY: '',
      SANDBOXD_LOG_LEVEL: 'info',
      ...(RUNTIME === 'local' ? {} : { SANDBOXD_RUN_DIR: at(INSTALL_PATHS.runDir) }),
    });
    before(async () => {
      server = await startServer({ dataDir: at(INSTALL_PATHS.dataDir), env: serverEnv() });
    });

    it('answers the printed admin key (and not the test harness key)', async () => {
      const me = await server!.api('GET', '/api/v1/account', { key: apiKey });
      assert.equal(me.status, 200, me.text);
      assert.equal(me.body.email, 'ops@example.com');
      assert.equal((await server!.api('GET', '/api/v1/account')).status, 401);
    });

    it('creates a sandbox and runs a command in it (local runtime), or creates one (fake)', async () => {
      const made = await server!.api('POST', '/api/v1/sandboxes', { key: apiKey, body: { image: IMAGE } });
      assert.equal(made.status, 201, made.text);
      const id = made.body.sandbox.id as string;
      assert.match(made.body.sandbox.publicAccessUrlTemplate, /^\{\{PORT\}\}-sbx_[a-z0-9]+\.sbx\.example\.com$/);
      try {
        if (RUNTIME === 'local') {
          const r = await server!.api('POST', `/api/v1/sandboxes/${id}/exec`, {
            key: apiKey,
            body: { command: 'echo from-the-guide' },
          });
          assert.equal(r.status, 200, r.text);
          assert.equal(r.body.stdout, 'from-the-guide\n');
        }
      } finally {
        assert.equal((await server!.api('DELETE', `/api/v1/sandboxes/${id}`, { key: apiKey })).status, 204);
      }
    });

    it('a stop as the unit makes it (SIGTERM to sandboxd alone, KillMode=process) leaves the sandboxes running; the next start adopts them', {
      skip:
        RUNTIME === 'local'
          ? false
          : 'needs the local runtime (SANDBOXD_E2E_RUNTIME=local): fake sandboxes live in the server',
    }, async () => {
      const env = serverEnv();
      const made = await server!.api('POST', '/api/v1/sandboxes', { key: apiKey, body: { image: IMAGE } });
      assert.equal(made.status, 201, made.text);
      const id = made.body.sandbox.id as string;
      const sh = (s: Server, command: string) =>
        s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key: apiKey, body: { command } });
      // PID 1's start time tells the same container from a new one.
      const before = await sh(server!, "echo kept > /tmp/mark; cut -d' ' -f22 /proc/1/stat");
      assert.equal(before.status, 200, before.text);
      assert.equal(await server!.kill('SIGTERM'), 0, 'a graceful exit');
      server = await startServer({ dataDir: at(INSTALL_PATHS.dataDir), env });
      try {
        const after = await sh(server, "cat /tmp/mark; cut -d' ' -f22 /proc/1/stat");
        assert.equal(after.status, 200, after.text);
        assert.equal(after.body.stdout, `kept\n${before.body.stdout}`);
        const sb = await server.api('GET', `/api/v1/sandboxes/${id}`, { key: apiKey });
        assert.equal(sb.body.sandbox.state, 'started', sb.text);
      } finally {
        await server.api('DELETE', `/api/v1/sandboxes/${id}`, { key: apiKey });
      }
    });

    it('forwarding headers: believed from the trusted proxy (127.0.0.1), ignored from another peer', async () => {
      const s = server!;
      const made = await s.api('POST', '/api/v1/admin/accounts', {
        key: apiKey,
        body: { email: 'dev@example.com', password: 'a-long-password' },
      });
      assert.equal(made.status, 201, made.text);
      const headers = { 'x-forwarded-for': '198.51.100.23', 'x-forwarded-proto': 'https' };
      const login = { email: 'dev@example.com', password: 'a-long-password' };
      const path = '/api/v1/auth/login';
      const viaProxy = await call(s.port, { path, method: 'POST', body: login, headers, localAddress: '127.0.0.1' });
      assert.equal(viaProxy.status, 200, viaProxy.text);
      assert.match(String(viaProxy.headers['set-cookie']), /^__Host-sandboxd_session=.*; Secure/);
      const spoofed = await call(s.port, { path, method: 'POST', body: login, headers, localAddress: '127.0.0.2' });
      assert.equal(spoofed.status, 200, spoofed.text);
      assert.match(String(spoofed.headers['set-cookie']), /^sandboxd_session=/);
      assert.doesNotMatch(String(spoofed.headers['set-cookie']), /Secure/);

      await call(s.port, { path: '/healthz?probe=trusted', headers, localAddress: '127.0.0.1' });
      await call(s.port, { path: '/healthz?probe=untrusted', headers, localAddress: '127.0.0.2' });
      // The access line is written when the response has finished: wait for it (bounded).
      const addressOf = (probe: string) =>
        until(
          `the access log line of ${probe}`,
          async () => {
            for (const l of readFileSync(join(s.dataDir, `server-${s.proc.pid}.stderr.log`), 'utf8').split('\n')) {
              if (!l.startsWith('{')) continue;
              const e = JSON.parse(l) as { msg?: string; req?: { url?: string; remoteAddress?: string } };
              if (e.msg === 'request completed' && e.req?.url === `/healthz?probe=${probe}`) return e.req.remoteAddress;
            }
            return undefined;
          },
          10_000,
        );
      assert.equal(await addressOf('trusted'), '198.51.100.23', 'the access log has the client behind the proxy');
      assert.equal(await addressOf('untrusted'), '127.0.0.2', 'a spoofed X-Forwarded-For is not believed');
    });
  });
});
