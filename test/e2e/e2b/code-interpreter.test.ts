/**
 * E2B's unchanged `@e2b/code-interpreter` (2.8.0, over `e2b` 2.51.0) against the real
 * server and runtime, both ways E2B's SDK reaches a sandbox: `E2B_SANDBOX_URL` (every
 * request to the server's origin, the port in `E2b-Sandbox-Port`) and `E2B_DOMAIN`
 * (`49999-<id>.<domain>`, the server on TLS: see domain.test.ts for the certificate and
 * the `*.localhost` resolver). Its default template `code-interpreter-v1` is the image
 * `local/code-interpreter`, whose code server the runtime starts (an image-declared
 * service) before the create answers; one sandbox of it is kept in the warm pool.
 *
 * The first suite checks the routing and E2B's token rule for the code port with a stand-in
 * code server on the `base` template (no code-interpreter image needed); the second drives
 * the SDK against the image.
 */
import './localhost-dns.mjs';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, type Dirent } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getCACertificates, setDefaultCACertificates } from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { type OutputMessage, type Result, Sandbox } from '@e2b/code-interpreter';
import { selfSignedCert } from '../../../packages/server/test/tls.js';
import { freePort, newAccount, RUNTIME, type Server, startServer } from '../harness.js';

const CI_IMAGE = 'local/code-interpreter:latest';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A code server that answers like E2B's for what the routing test needs: /health, /contexts, /execute. */
const STAND_IN = `
import json, http.server
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def send(self, code, body, ctype='application/json'):
        b = body.encode()
        self.send_response(code); self.send_header('content-type', ctype)
        self.send_header('content-length', str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        if self.path.startswith('/health'): return self.send(200, '"OK"')
        if self.path.startswith('/contexts'): return self.send(200, json.dumps([{"id": "py", "language": "python", "cwd": "/home/user"}]))
        self.send(404, '{}')
    def do_POST(self):
        n = int(self.headers.get('content-length') or 0)
        req = json.loads(self.rfile.read(n) or b'{}')
        if self.path.startswith('/execute'):
            lines = [{"type": "stdout", "text": "ran " + req.get("code", "") + "\\n", "timestamp": 0},
                     {"type": "result", "text": "token=" + str(self.headers.get('x-access-token') is not None), "is_main_result": True},
                     {"type": "end_of_execution"}]
            return self.send(200, "".join(json.dumps(l) + "\\n" for l in lines), 'application/x-ndjson')
        self.send(404, '{}')
http.server.ThreadingHTTPServer(('0.0.0.0', 49999), H).serve_forever()
`;

describe('E2B code interpreter', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 600_000,
}, () => {
  let s: Server;
  let dir: string;
  let port: number;
  let key: string;

  /** E2B's SDK pointed at the server's origin (`E2B_SANDBOX_URL`). */
  const viaSandboxUrl = () => {
    process.env.E2B_API_URL = `https://127.0.0.1:${port}/e2b`;
    process.env.E2B_SANDBOX_URL = `https://127.0.0.1:${port}`;
    process.env.E2B_API_KEY = key;
    delete process.env.E2B_DOMAIN;
  };
  /** E2B's SDK with `E2B_DOMAIN` alone. */
  const viaDomain = () => {
    process.env.E2B_DOMAIN = `sandbox.localhost:${port}`;
    process.env.E2B_API_KEY = key;
    delete process.env.E2B_API_URL;
    delete process.env.E2B_SANDBOX_URL;
  };
  /** A raw request for the code port by header, as the SDK makes them. */
  const byHeader = (id: string, path: string, init: { method?: string; body?: string; token?: string } = {}) =>
    fetch(`https://127.0.0.1:${port}${path}`, {
      method: init.method ?? 'GET',
      body: init.body,
      headers: {
        'content-type': 'application/json',
        'E2b-Sandbox-Id': id,
        'E2b-Sandbox-Port': '49999',
        ...(init.token !== undefined ? { 'X-Access-Token': init.token } : {}),
      },
    });
  const byHost = (id: string, path: string, init: { method?: string; body?: string; token?: string } = {}) =>
    fetch(`https://49999-${id}.sandbox.localhost:${port}${path}`, {
      method: init.method ?? 'GET',
      body: init.body,
      headers: {
        'content-type': 'application/json',
        ...(init.token !== undefined ? { 'X-Access-Token': init.token } : {}),
      },
    });

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sandboxd-ci-'));
    selfSignedCert(dir, {
      cn: 'sandbox.localhost',
      san: ['DNS:sandbox.localhost', 'DNS:*.sandbox.localhost', 'IP:127.0.0.1'],
    });
    setDefaultCACertificates([...getCACertificates('default'), readFileSync(join(dir, 'cert.pem'), 'utf8')]);
    port = await freePort();
    s = await startServer({
      port,
      https: true,
      env: {
        SANDBOXD_TLS_CERT: join(dir, 'cert.pem'),
        SANDBOXD_TLS_KEY: join(dir, 'key.pem'),
        SANDBOXD_WARM_POOL: `${CI_IMAGE}=1`,
      },
    });
    key = (await newAccount(s, { tokens: 1_000_000 })).key;
  });
  after(async () => {
    await s?.stop();
    rmSync(dir, { recursive: true, force: true });
    for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_DOMAIN', 'E2B_API_KEY']) delete process.env[v];
  });

  describe('routing of the code port (stand-in code server on the base template)', () => {
    let sbx: Sandbox;
    before(async () => {
      viaSandboxUrl();
      sbx = await Sandbox.create({ template: 'base' });
      await sbx.files.write('/tmp/stand-in.py', STAND_IN);
      await sbx.commands.run('exec python3 /tmp/stand-in.py >/tmp/stand-in.log 2>&1', {
        background: true,
        timeoutMs: 0,
      });
      let up = false;
      for (let i = 0; i < 100 && !up; i++) {
        up = (await byHeader(sbx.sandboxId, '/health').catch(() => null))?.status === 200;
        if (!up) await sleep(100);
      }
      assert.ok(up, 'the stand-in code server answers through E2b-Sandbox-Port');
    });
    after(async () => {
      await sbx?.kill();
    });

    it('E2B_SANDBOX_URL: runCode and listCodeContexts reach port 49999; runCode carries the access token', async () => {
      viaSandboxUrl();
      const out: string[] = [];
      const e = await sbx.runCode('1+1', { onStdout: (m: OutputMessage) => void out.push(m.line) });
      assert.deepEqual(e.logs.stdout, ['ran 1+1\n']);
      assert.deepEqual(out, ['ran 1+1\n']);
      assert.equal(e.text, 'token=True');
      assert.deepEqual(
        (await sbx.listCodeContexts()).map((c) => c.id),
        ['py'],
      );
    });

    it('E2B_DOMAIN: the same through 49999-<id>.<domain>', async () => {
      viaDomain();
      const again = await Sandbox.connect(sbx.sandboxId);
      assert.equal(again.getHost(49999), `49999-${sbx.sandboxId}.sandbox.localhost:${port}`);
      const e = await again.runCode('2+2');
      assert.deepEqual(e.logs.stdout, ['ran 2+2\n']);
      assert.equal(e.text, 'token=True');
      viaSandboxUrl();
    });

    it("running code needs the sandbox's access token, by header and by host; a wrong token is refused on any path", async () => {
      const id = sbx.sandboxId;
      const token = (sbx as unknown as { envdAccessToken?: string }).envdAccessToken;
      assert.ok(token, 'an E2B sandbox has an access token');
      const body = JSON.stringify({ code: 'x' });
      for (const call of [byHeader, byHost]) {
        const none = await call(id, '/execute', { method: 'POST', body });
        assert.equal(none.status, 401, await none.text());
        // Spellings the code server routes as /execute (it drops empty path segments), and upgrades.
        for (const path of ['//execute', '/execute/']) {
          const spelled = await call(id, path, { method: 'POST', body });
          assert.equal(spelled.status, 401, `${path}: ${await spelled.text()}`);
        }
        const wrong = await call(id, '/execute', { method: 'POST', body, token: `${token}x` });
        assert.equal(wrong.status, 401, await wrong.text());
        const wrongList = await call(id, '/contexts', { token: 'ea_nope' });
        assert.equal(wrongList.status, 401, await wrongList.text());
        const ok = await call(id, '/execute', { method: 'POST', body, token });
        assert.equal(ok.status, 200, await ok.text());
        // What the SDK sends without a token (its context calls) goes on.
        assert.equal((await call(id, '/contexts')).status, 200);
      }
      // Another sandbox's id with this sandbox's token: refused too.
      const other = await Sandbox.create({ template: 'base' });
      try {
        const r = await byHeader(other.sandboxId, '/execute', { method: 'POST', body, token });
        assert.equal(r.status, 401, await r.text());
      } finally {
        await other.kill();
      }
    });

    it('allowPublicTraffic false: the code port takes the traffic access token the SDK sends; without it 401', async () => {
      viaSandboxUrl();
      const priv = await Sandbox.create({ template: 'base', network: { allowPublicTraffic: false } });
      try {
        const traffic = (priv as unknown as { trafficAccessToken?: string }).trafficAccessToken;
        assert.match(traffic ?? '', /^ta_/);
        await priv.files.write('/tmp/stand-in.py', STAND_IN);
        await priv.commands.run('exec python3 /tmp/stand-in.py >/tmp/stand-in.log 2>&1', {
          background: true,
          timeoutMs: 0,
        });
        const withTraffic = (path: string) =>
          fetch(`https://127.0.0.1:${port}${path}`, {
            headers: {
              'E2b-Sandbox-Id': priv.sandboxId,
              'E2b-Sandbox-Port': '49999',
              'E2B-Traffic-Access-Token': traffic!,
            },
          });
        let up = false;
        for (let i = 0; i < 100 && !up; i++) {
          up = (await withTraffic('/health').catch(() => null))?.status === 200;
          if (!up) await sleep(100);
        }
        assert.ok(up, 'the private port answers with the traffic token');
        // The SDK sends it with every code-port call.
        assert.equal((await priv.runCode('3+3')).text, 'token=True');
        assert.deepEqual(
          (await priv.listCodeContexts()).map((c) => c.id),
          ['py'],
        );
        for (const call of [byHeader, byHost]) {
          const none = await call(priv.sandboxId, '/health');
          assert.equal(none.status, 401, await none.text());
        }
        const wrong = await fetch(`https://49999-${priv.sandboxId}.sandbox.localhost:${port}/health`, {
          headers: { 'E2B-Traffic-Access-Token': `${traffic}x` },
        });
        assert.equal(wrong.status, 401, await wrong.text());
        // Another sandbox's traffic token does not open this one's port.
        const other = await Sandbox.create({ template: 'base', network: { allowPublicTraffic: false } });
        try {
          const t2 = (other as unknown as { trafficAccessToken?: string }).trafficAccessToken!;
          const cross = await fetch(`https://49999-${priv.sandboxId}.sandbox.localhost:${port}/health`, {
            headers: { 'E2B-Traffic-Access-Token': t2 },
          });
          assert.equal(cross.status, 401, await cross.text());
        } finally {
          await other.kill();
        }
      } finally {
        await priv.kill();
      }
    });

    it('an unknown sandbox by header is 404; a malformed port 400', async () => {
      const r = await byHeader('nosuchsandbox1', '/contexts');
      assert.equal(r.status, 404, await r.text());
      const bad = await fetch(`https://127.0.0.1:${port}/contexts`, {
        headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '99999' },
      });
      assert.equal(bad.status, 400, await bad.text());
    });
  });

  describe('the code-interpreter image through the SDK', () => {
    let sbx: Sandbox;

    /** Ready sandboxes of the image's warm pool, from /metrics. */
    const ready = async () => {
      const text = await (await fetch(`${s.baseUrl}/metrics`)).text();
      const m = /sandboxd_warm_pool_ready\{image="local\/code-interpreter:latest"\} (\d+)/.exec(text);
      return Number(m?.[1] ?? 0);
    };
    /** Container ids in the server's crun root. */
    const containers = (): string[] => {
      const walk = (d: string, depth: number): string[] => {
        let entries: Dirent[] = [];
        try {
          entries = readdirSync(d, { withFileTypes: true });
        } catch {
          return [];
        }
        if (d.endsWith('/crun')) return entries.filter((e) => e.isDirectory()).map((e) => e.name);
        return depth > 0 ? entries.filter((e) => e.isDirectory()).flatMap((e) => walk(join(d, e.name), depth - 1)) : [];
      };
      return walk(join(s.dataDir, 'run'), 3);
    };

    before(async () => {
      viaSandboxUrl();
      // The pool's sandbox of the image: started, its code server healthy (the image is built by set-up).
      for (let i = 0; i < 1800 && (await ready()) < 1; i++) await sleep(100);
      assert.equal(await ready(), 1, 'the warm pool holds a code-interpreter sandbox');
      sbx = await Sandbox.create({ envs: { FROM_CREATE: 'create-env' } });
    });
    after(async () => {
      await sbx?.kill();
    });

    it('Sandbox.create() (code-interpreter-v1) claims the warm sandbox; its envs are seen by runCode at once', async () => {
      assert.ok(!containers().includes(sbx.sandboxId), 'claimed from the pool, not started under its own id');
      const e = await sbx.runCode('import os; os.environ.get("FROM_CREATE") == "create-env"');
      assert.equal(e.error, undefined, JSON.stringify(e.error));
      assert.equal(e.text, 'True');
    });

    it('runCode: state kept, last expression, callbacks for stdout, stderr, result and error', async () => {
      const out: string[] = [];
      const err: string[] = [];
      const results: Result[] = [];
      const errors: string[] = [];
      await sbx.runCode('x = 41');
      const e = await sbx.runCode('import sys\nprint("to out")\nprint("to err", file=sys.stderr)\nx + 1', {
        onStdout: (m: OutputMessage) => void out.push(m.line),
        onStderr: (m: OutputMessage) => void err.push(m.line),
        onResult: (r: Result) => void results.push(r),
      });
      assert.equal(e.text, '42');
      assert.deepEqual(out, ['to out\n']);
      assert.deepEqual(err, ['to err\n']);
      assert.deepEqual(
        results.map((r) => r.text),
        ['42'],
      );
      const bad = await sbx.runCode('1/0', { onError: (x) => void errors.push(x.name) });
      assert.equal(bad.error?.name, 'ZeroDivisionError');
      assert.deepEqual(errors, ['ZeroDivisionError']);
    });

    it('runCode envs apply to that run only', async () => {
      const a = await sbx.runCode('import os; os.environ.get("PER_RUN") == "yes"', { envs: { PER_RUN: 'yes' } });
      assert.equal(a.text, 'True');
      const b = await sbx.runCode('import os; "PER_RUN" in os.environ');
      assert.equal(b.text, 'False');
    });

    it('runCode timeoutMs ends a long run; the next run is not stuck behind it', async () => {
      await assert.rejects(sbx.runCode('import time; time.sleep(60)', { timeoutMs: 1500 }), /timeout|timed out|abort/i);
      const e = await sbx.runCode('40 + 2', { timeoutMs: 30_000 });
      assert.equal(e.text, '42');
    });

    it('language: javascript and bash run in their own default contexts', async () => {
      const js = await sbx.runCode('const y = 20; y + 22', { language: 'javascript' });
      assert.equal(js.error, undefined, JSON.stringify(js.error));
      assert.equal(js.text, '42');
      const sh = await sbx.runCode('echo "in bash $((6*7))"', { language: 'bash' });
      assert.deepEqual(sh.logs.stdout, ['in bash 42\n']);
    });

    it('contexts: create (cwd), list, run in one, restart (state gone), remove', async () => {
      const ctx = await sbx.createCodeContext({ cwd: '/tmp' });
      assert.equal(ctx.cwd, '/tmp');
      const cwd = await sbx.runCode('import os; print(os.getcwd())', { context: ctx });
      assert.deepEqual(cwd.logs.stdout, ['/tmp\n']);
      await sbx.runCode('z = 7', { context: ctx });
      const isolated = await sbx.runCode('z', {});
      assert.equal(isolated.error?.name, 'NameError', 'contexts are independent');
      assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
      await sbx.restartCodeContext(ctx);
      const gone = await sbx.runCode('z', { context: ctx });
      assert.equal(gone.error?.name, 'NameError');
      await sbx.removeCodeContext(ctx.id);
      assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
    });

    it('the base SDK on the same sandbox: commands as user, files write and read', async () => {
      const r = await sbx.commands.run('whoami; echo "$FROM_CREATE"');
      assert.equal(r.stdout, 'user\ncreate-env\n');
      await sbx.files.write('/home/user/data.csv', 'a,b\n1,2\n');
      assert.equal(await sbx.files.read('/home/user/data.csv'), 'a,b\n1,2\n');
      const e = await sbx.runCode('print(open("/home/user/data.csv").read(), end="")');
      assert.deepEqual(e.logs.stdout, ['a,b\n1,2\n']);
    });

    it('E2B_DOMAIN: runCode through 49999-<id>.<domain>; a request without the access token is refused', async () => {
      viaDomain();
      try {
        const again = await Sandbox.connect(sbx.sandboxId);
        const e = await again.runCode('x * 2');
        assert.equal(e.text, '82');
        const r = await byHost(sbx.sandboxId, '/execute', { method: 'POST', body: JSON.stringify({ code: 'x' }) });
        assert.equal(r.status, 401, await r.text());
      } finally {
        viaSandboxUrl();
      }
    });

    it('a second create (pooled again, or cold) answers only once the code server is ready', async () => {
      const cold = await Sandbox.create({ envs: { COLD: 'c' } });
      try {
        const e = await cold.runCode('import os; os.environ["COLD"] == "c"');
        assert.equal(e.text, 'True');
      } finally {
        await cold.kill();
      }
    });
  });
});
