/**
 * `sbx build`, `sbx builds` and `sbx templates`, run as the real binary against a stub
 * server on 127.0.0.1 that records each request and plays the builder as the contract says
 * (packages/protocol/src/builds.ts): the arguments each verb turns into a request, the
 * context's tar (read back by GNU tar), what goes to stdout and stderr, exit codes, and on
 * a real PTY (python3's pty module) the progress line and Ctrl-C cancelling the build.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, beforeEach, describe, it } from 'node:test';
import { parseBuildArgs, parseTemplateRef } from './commands/build.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../bin/sbx.js');
const KEY = 'sk_cli_build_unit';
const ID = 'bld_aaaaaaaaaaaaaaaaaaaa';
const ESC = String.fromCharCode(27);

const build = (over: Record<string, unknown> = {}) => ({
  id: ID,
  name: 'web',
  tag: 'v1',
  image: 'templates/web:v1',
  state: 'queued',
  createdAt: new Date().toISOString(),
  steps: { total: 3, done: 0, cached: 0 },
  ...over,
});
const line = (seq: number, text: string, stream = 'stdout', step = 1) => ({
  type: 'log',
  seq,
  time: new Date().toISOString(),
  step,
  stream,
  text,
});
const LOG = [
  line(0, 'Step 1/3 : FROM local/busybox:latest', 'system', 1),
  line(1, 'Step 2/3 : COPY . /app', 'system', 2),
  line(2, 'CACHED', 'system', 2),
  line(3, 'Step 3/3 : RUN make', 'system', 3),
  line(4, 'compiling', 'stdout', 3),
  line(5, 'a warning', 'stderr', 3),
];
const FAILURE = {
  code: 400,
  kind: 'validation',
  message: 'Step 3/3 (line 3) RUN make: exit code 2',
  details: { step: 3, line: 3, instruction: 'RUN make', exitCode: 2, output: 'make: *** no rule\n' },
};

/** Runs argv on a PTY: waits for `expect` (20 s bound), then sends `send`; prints {exit, output}. */
const PTY_DRIVER = `
import json, os, re, select, subprocess, sys, time, fcntl, termios, struct
steps, env, argv = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:]
master, slave = os.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack('HHHH', 30, 100, 0, 0))
def ctty():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=ctty, close_fds=True)
os.close(slave)
out, err = b'', None
def pump(t):
    global out
    r, _, _ = select.select([master], [], [], t)
    if r:
        try:
            out += os.read(master, 65536)
        except OSError:
            return False
    return True
for st in steps:
    rx, deadline = re.compile(st['expect'].encode()), time.time() + 20
    while not rx.search(out):
        if time.time() > deadline or (not pump(0.2) and p.poll() is not None):
            err = 'timed out waiting for ' + st['expect']
            break
    if err: break
    if 'send' in st: os.write(master, st['send'].encode())
deadline = time.time() + 20
while p.poll() is None and time.time() < deadline:
    pump(0.2)
while pump(0.05) and select.select([master], [], [], 0)[0]:
    pass
if p.poll() is None:
    p.kill()
    err = err or 'did not exit'
print(json.dumps({'exit': p.wait(), 'output': out.decode('utf-8', 'replace'), 'error': err}))
`;

interface Seen {
  method: string;
  url: string;
  query: Record<string, string>;
  contentType?: string;
  body: Buffer;
}
interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}
type Handler = (req: IncomingMessage, res: ServerResponse, s: Seen) => void;

describe('sbx build, builds and templates against a stub server', { timeout: 180_000 }, () => {
  const seen: Seen[] = [];
  const routes = new Map<string, Handler>();
  let url = '';
  let home = '';
  let tmp = '';
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const u = new URL(req.url ?? '/', 'http://x');
      const s: Seen = {
        method: req.method ?? '',
        url: req.url ?? '',
        query: Object.fromEntries(u.searchParams),
        contentType: req.headers['content-type'],
        body: Buffer.concat(chunks),
      };
      seen.push(s);
      const h = routes.get(`${req.method} ${u.pathname}`);
      if (h) return h(req, res, s);
      json(res, 404, { code: 404, kind: 'not_found', message: `Build ${u.pathname.split('/')[5]} not found` });
    });
  });
  const json = (res: ServerResponse, status: number, body?: unknown) => {
    if (body === undefined) {
      res.writeHead(status);
      return res.end();
    }
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const ndjson = (res: ServerResponse, events: unknown[], end = true) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.flushHeaders();
    for (const e of events) res.write(`${JSON.stringify(e)}\n`);
    if (end) res.end();
  };
  /** The builder: accepts, logs LOG and ends `state` (with FAILURE on error). */
  const builder = (state: 'ready' | 'error', over: Record<string, unknown> = {}) => {
    routes.set('POST /api/v1/images/builds', (_q, res) => json(res, 202, { build: build(over) }));
    const final =
      state === 'ready'
        ? build({ ...over, state, steps: { total: 3, done: 3, cached: 1 }, sizeBytes: 2048, digest: 'sha256:ab' })
        : build({ ...over, state, error: FAILURE });
    routes.set(`GET /api/v1/images/builds/${ID}/logs`, (_q, res) =>
      ndjson(res, [...LOG, state === 'ready' ? { type: 'end', state } : { type: 'end', state, error: FAILURE }]),
    );
    routes.set(`GET /api/v1/images/builds/${ID}`, (_q, res) => json(res, 200, { build: final }));
  };
  const posts = () => seen.filter((s) => s.method === 'POST' && s.url.startsWith('/api/v1/images/builds?'));
  const tarList = (b: Buffer) => execFileSync('tar', ['-t'], { input: b }).toString().trimEnd().split('\n');
  const tarCat = (b: Buffer, name: string) => execFileSync('tar', ['-xO', name], { input: b }).toString();

  const env = (extra: Record<string, string> = {}) => {
    const e: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('SANDBOX_')) e[k] = v;
    Object.assign(e, { HOME: home, SANDBOX_API_URL: url, SANDBOX_API_KEY: KEY, NO_COLOR: '1' }, extra);
    delete e.XDG_CONFIG_HOME;
    return e;
  };
  const sbx = (args: string[], o: { input?: string; env?: Record<string, string>; cwd?: string } = {}): Promise<Run> =>
    new Promise((res, rej) => {
      const p = spawn(process.execPath, [SBX, ...args], {
        env: env(o.env),
        cwd: o.cwd,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b) => (stdout += b));
      p.stderr.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
      p.stdin.end(o.input ?? '');
    });
  const onPty = (args: string[], steps: { expect: string; send?: string }[]) =>
    new Promise<{ exit: number; output: string; error: string | null }>((res, rej) => {
      const p = spawn(
        'python3',
        [
          '-c',
          PTY_DRIVER,
          JSON.stringify(steps),
          JSON.stringify(env({ TERM: 'xterm' })),
          process.execPath,
          SBX,
          ...args,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      let err = '';
      p.stdout.on('data', (b) => (out += b));
      p.stderr.on('data', (b) => (err += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 120_000);
      p.on('error', rej);
      p.on('close', () => {
        clearTimeout(timer);
        try {
          res(JSON.parse(out));
        } catch {
          rej(new Error(`pty driver failed: ${err || out}`));
        }
      });
    });
  const ok = (r: Run) => assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);

  before(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    home = mkdtempSync(join(tmpdir(), 'sbx-build-home-'));
    tmp = mkdtempSync(join(tmpdir(), 'sbx-build-'));
    mkdirSync(join(tmp, 'ctx/sub'), { recursive: true });
    writeFileSync(join(tmp, 'ctx/Dockerfile'), 'FROM local/busybox:latest\nCOPY . /app\nRUN make\n');
    writeFileSync(join(tmp, 'ctx/sub/Dockerfile.dev'), 'FROM local/busybox:latest\n');
    writeFileSync(join(tmp, 'ctx/main.c'), 'int main(){}\n');
    writeFileSync(join(tmp, 'Dockerfile.outside'), 'FROM local/busybox:latest\nRUN echo outside\n');
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    rmSync(home, { recursive: true, force: true });
    rmSync(tmp, { recursive: true, force: true });
  });
  beforeEach(() => {
    seen.length = 0;
    routes.clear();
  });

  it('parses -t and --build-arg as docker does', () => {
    assert.deepEqual(parseTemplateRef('web'), { name: 'web', tag: undefined });
    assert.deepEqual(parseTemplateRef('web:v1.2'), { name: 'web', tag: 'v1.2' });
    assert.deepEqual(parseTemplateRef('templates/web:v1'), { name: 'web', tag: 'v1' });
    for (const bad of ['', ':v1', 'web:', 'a:b:c'])
      assert.throws(() => parseTemplateRef(bad), /-t must be NAME or NAME:TAG/);
    process.env.SBX_TEST_ARG = 'from env';
    delete process.env.SBX_TEST_UNSET;
    assert.deepEqual(parseBuildArgs(['A=1', 'B=x=y', 'SBX_TEST_ARG', 'SBX_TEST_UNSET', 'C=']), {
      A: '1',
      B: 'x=y',
      SBX_TEST_ARG: 'from env',
      C: '',
    });
    assert.equal(parseBuildArgs([]), undefined);
    assert.throws(() => parseBuildArgs(['=x']), /--build-arg must be NAME=VALUE or NAME/);
  });

  it('build: sends the query and the packed directory, prints the log on stderr and the image on stdout', async () => {
    builder('ready');
    const r = await sbx(
      [
        'build',
        '-t',
        'web:v1',
        '--build-arg',
        'A=1',
        '--build-arg',
        'FROM_ENV',
        '--allow-domain',
        'pypi.org',
        '--allow-domain',
        '*.npmjs.org,files.pythonhosted.org',
        '--no-cache',
        join(tmp, 'ctx'),
      ],
      { env: { FROM_ENV: 'yes' } },
    );
    ok(r);
    assert.equal(r.stdout, 'templates/web:v1\n', 'stdout is the image alone');
    const err = r.stderr.split('\n');
    for (const l of ['Step 1/3 : FROM local/busybox:latest', 'CACHED', 'compiling', 'a warning'])
      assert.ok(err.includes(l), `${l} in\n${r.stderr}`);
    assert.match(r.stderr, new RegExp(`build ${ID} of templates/web:v1, 3 steps`));
    assert.match(r.stderr, /✔ built templates\/web:v1 in \d+s \(3 steps, 1 cached, 2\.0 KiB\)/);
    assert.ok(!r.stderr.includes(ESC), 'no escape sequences without a TTY');
    const [p] = posts();
    assert.deepEqual(p.query, {
      name: 'web',
      tag: 'v1',
      buildArgs: '{"A":"1","FROM_ENV":"yes"}',
      allowDomains: 'pypi.org,*.npmjs.org,files.pythonhosted.org',
      noCache: 'true',
    });
    assert.equal(p.contentType, 'application/x-tar');
    assert.deepEqual(tarList(p.body), ['Dockerfile', 'main.c', 'sub/', 'sub/Dockerfile.dev']);

    const q = await sbx(['build', '-q', '-t', 'web', join(tmp, 'ctx')]);
    ok(q);
    assert.equal(q.stdout, 'templates/web:v1\n');
    assert.doesNotMatch(q.stderr, /compiling|Step 1/, 'quiet: no log lines');
    const j = await sbx(['build', '--json', '-t', 'web', join(tmp, 'ctx')]);
    ok(j);
    assert.equal(JSON.parse(j.stdout).state, 'ready');
    assert.equal(posts()[1].query.tag, undefined, 'no tag: the server takes latest');
  });

  it('build -f: inside the context by its path there; outside or from stdin as text; a tar file is sent as it is', async () => {
    builder('ready');
    ok(await sbx(['build', '-t', 'web', '-f', 'ctx/sub/Dockerfile.dev', 'ctx'], { cwd: tmp }));
    ok(await sbx(['build', '-t', 'web', '-f', join(tmp, 'Dockerfile.outside'), join(tmp, 'ctx')]));
    ok(
      await sbx(['build', '-t', 'web', '-f', '-', join(tmp, 'ctx')], {
        input: 'FROM local/busybox:latest\nRUN echo stdin\n',
      }),
    );
    const tgz = join(tmp, 'ctx.tar.gz');
    execFileSync('tar', ['-czf', tgz, '-C', join(tmp, 'ctx'), '.']);
    ok(await sbx(['build', '-t', 'web', tgz]));
    const [inside, outside, stdin, tar] = posts();
    assert.equal(inside.query.dockerfile, 'sub/Dockerfile.dev');
    assert.ok(!tarList(inside.body).some((n) => n.startsWith('.dockerfile.')));
    assert.match(outside.query.dockerfile, /^\.dockerfile\.[0-9a-f]{20}$/);
    assert.equal(tarCat(outside.body, outside.query.dockerfile), 'FROM local/busybox:latest\nRUN echo outside\n');
    assert.equal(tarCat(stdin.body, stdin.query.dockerfile), 'FROM local/busybox:latest\nRUN echo stdin\n');
    assert.equal(tar.contentType, 'application/gzip');
    assert.equal(tar.query.dockerfile, undefined);

    const bad = await sbx(['build', '-t', 'web', '-f', join(tmp, 'Dockerfile.outside'), tgz]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /with a tar context, -f must name the Dockerfile inside the tar/);
  });

  it('build: a failed step exits 1 naming step, line, instruction and exit code (and the output with -q)', async () => {
    builder('error');
    const r = await sbx(['build', '-t', 'web:v1', join(tmp, 'ctx')]);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, '');
    assert.match(
      r.stderr,
      new RegExp(`✖ build ${ID} failed\\n  step 3, Dockerfile line 3: RUN make\\n  exit code 2\\n`),
    );
    assert.match(r.stderr, /\nerror: Step 3\/3 \(line 3\) RUN make: exit code 2\n$/);
    const q = await sbx(['build', '-q', '-t', 'web:v1', join(tmp, 'ctx')]);
    assert.equal(q.code, 1);
    assert.match(q.stderr, /output \(its end\):\n {4}make: \*\*\* no rule\n/);
  });

  it('build: refusals (the server, bad arguments) are one error line; bad arguments send nothing', async () => {
    routes.set('POST /api/v1/images/builds', (_q, res) =>
      json(res, 400, { code: 400, kind: 'validation', message: 'Dockerfile line 2: ONBUILD is not supported' }),
    );
    const r = await sbx(['build', '-t', 'web', join(tmp, 'ctx')]);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trimEnd().split('\n').at(-1), 'error: Dockerfile line 2: ONBUILD is not supported');
    const n = seen.length;
    for (const [args, msg] of [
      [['build', '-t', 'a:b:c', join(tmp, 'ctx')], /-t must be NAME or NAME:TAG/],
      [['build', '-t', 'web', '--build-arg', '=x', join(tmp, 'ctx')], /--build-arg must be NAME=VALUE/],
      [['build', '-t', 'web', join(tmp, 'nothing')], /cannot read the context .*nothing/],
      [['build', join(tmp, 'ctx')], /required option '-t, --tag <name\[:tag\]>' not specified/],
      [['build', '-t', 'web', '-f', '-', '-'], /the context and -f cannot both be stdin/],
    ] as const) {
      const b = await sbx([...args]);
      assert.equal(b.code, 1, b.stderr);
      assert.match(b.stderr, msg);
    }
    assert.equal(seen.length, n, 'nothing sent');
  });

  it('builds ls, logs (-f: exit 1 unless ready), cancel, rm; templates ls, rm NAME[:TAG]', async () => {
    routes.set('GET /api/v1/images/builds', (_q, res) =>
      json(res, 200, {
        count: 2,
        builds: [
          build({ state: 'building', startedAt: new Date().toISOString(), steps: { total: 3, done: 1, cached: 1 } }),
          build({ id: 'bld_bbbbbbbbbbbbbbbbbbbb', state: 'error', error: FAILURE }),
        ],
      }),
    );
    const ls = await sbx(['builds']);
    ok(ls);
    assert.match(ls.stdout, /^ID +IMAGE +STATE +STEPS +CREATED +TOOK\n/);
    assert.match(ls.stdout, new RegExp(`${ID} +templates/web:v1 +building +1/3 \\(1 cached\\)`));
    assert.match(ls.stdout, /bld_bbbbbbbbbbbbbbbbbbbb +templates\/web:v1 +error +0\/3/);
    ok(await sbx(['builds', 'ls', '--name', 'web', '--json']));
    assert.equal(seen.at(-1)?.url, '/api/v1/images/builds?name=web');

    routes.set(`GET /api/v1/images/builds/${ID}/logs`, (_q, res, s) =>
      ndjson(
        res,
        s.query.follow === 'true' ? [...LOG, { type: 'end', state: 'error', error: FAILURE }] : LOG.slice(0, 2),
      ),
    );
    const logs = await sbx(['builds', 'logs', ID]);
    ok(logs);
    assert.equal(logs.stdout, 'Step 1/3 : FROM local/busybox:latest\nStep 2/3 : COPY . /app\n');
    const f = await sbx(['builds', 'logs', ID, '-f']);
    assert.equal(f.code, 1, 'the build ended in error');
    assert.equal(f.stdout.split('\n').length, LOG.length + 1);
    assert.match(f.stderr, new RegExp(`✖ build ${ID} error\\n  Step 3/3`));
    const missing = await sbx(['builds', 'logs', 'bld_nope']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^error: Build bld_nope not found\n$/);

    routes.set(`POST /api/v1/images/builds/${ID}/cancel`, (_q, res) =>
      json(res, 200, { build: build({ state: 'cancelled' }) }),
    );
    routes.set(`DELETE /api/v1/images/builds/${ID}`, (_q, res) => json(res, 204));
    const c = await sbx(['builds', 'cancel', ID, 'bld_nope']);
    assert.equal(c.code, 1);
    assert.equal(c.stdout, `Cancelled build ${ID} (templates/web:v1)\n`);
    assert.match(c.stderr, /error: bld_nope: Build bld_nope not found\nerror: 1 of 2 build\(s\) not cancelled/);
    const rm = await sbx(['builds', 'rm', ID]);
    ok(rm);
    assert.equal(rm.stdout, `Deleted build ${ID}\n`);

    routes.set('GET /api/v1/templates', (_q, res) =>
      json(res, 200, {
        count: 1,
        templates: [
          {
            name: 'web',
            tag: 'v1',
            image: 'templates/web:v1',
            digest: 'sha256:ab',
            sizeBytes: 1536,
            buildId: ID,
            createdAt: new Date().toISOString(),
          },
        ],
      }),
    );
    routes.set('DELETE /api/v1/templates/web', (_q, res) => json(res, 204));
    const t = await sbx(['templates']);
    ok(t);
    assert.match(t.stdout, new RegExp(`^IMAGE +SIZE +BUILD +CREATED\\ntemplates/web:v1 +1\\.5 KiB +${ID} +`));
    const trm = await sbx(['templates', 'rm', 'web:v1', 'templates/web']);
    ok(trm);
    assert.equal(trm.stdout, 'Deleted template web:v1\nDeleted template web (every tag)\n');
    assert.deepEqual(
      seen.filter((s) => s.method === 'DELETE' && s.url.startsWith('/api/v1/templates')).map((s) => s.url),
      ['/api/v1/templates/web?tag=v1', '/api/v1/templates/web'],
    );
    const bad = await sbx(['templates', 'rm', 'a:b:c']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /a template must be NAME or NAME:TAG/);
  });

  it('on a TTY: a progress line under the log; Ctrl-C cancels the build on the server and exits 130', async () => {
    builder('ready');
    const tty = await onPty(['build', '-t', 'web:v1', join(tmp, 'ctx')], [{ expect: 'built templates' }]);
    assert.equal(tty.error, null, tty.output);
    assert.equal(tty.exit, 0, tty.output);
    // The status line: erased and redrawn in place, with the step the builder is at.
    const status = (text: string) => new RegExp(`\r${ESC}\\[2K\\S+ ${text}`);
    assert.match(tty.output, status('\\[2/3\\] COPY \\. /app'));
    assert.match(tty.output, status('\\[3/3\\] RUN make'));

    // A build that runs on: one line, then nothing until it is cancelled.
    let cancels = 0;
    routes.set(`GET /api/v1/images/builds/${ID}/logs`, (_q, res) => ndjson(res, [LOG[3]], false));
    routes.set(`POST /api/v1/images/builds/${ID}/cancel`, (_q, res) => {
      cancels++;
      json(res, 200, { build: build({ state: 'cancelled' }) });
    });
    const c = await onPty(['build', '-t', 'web:v1', join(tmp, 'ctx')], [{ expect: 'RUN make', send: '\x03' }]);
    assert.equal(c.error, null, c.output);
    assert.equal(c.exit, 130, c.output);
    assert.equal(cancels, 1, 'the build was cancelled on the server');
    assert.match(c.output, new RegExp(`error: build ${ID} cancelled`));
  });
});
