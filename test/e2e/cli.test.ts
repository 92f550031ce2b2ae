/**
 * The real `sbx` binary (packages/cli/bin/sbx.js, run as a child process) against the real
 * server. `sbx shell` and colour run on a real PTY driven by python3's pty module.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { ADMIN_KEY, IMAGE, newAccount, RUNTIME, startServer, type Server } from './harness.js';
import { userNode } from './user-node.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../../packages/cli/bin/sbx.js');
// biome-ignore lint/suspicious/noControlCharactersInRegex: ESC starts an ANSI sequence
const ANSI = /\x1b\[/;

/**
 * Drives argv on a PTY: steps are {expect: regex} (20 s bound), {send: text},
 * {resize: [cols, rows]}, and {send, until: regex}, which sends again each second until the
 * regex shows (20 s bound): a SIGWINCH and the next keystroke race, by nature.
 */
const PTY_DRIVER = `
import fcntl, json, os, re, select, struct, subprocess, sys, termios, time
steps, env, argv = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:]
master, slave = os.openpty()
def size(fd, cols, rows): fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', rows, cols, 0, 0))
size(slave, 100, 30)
def ctty():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=ctty, close_fds=True)
os.close(slave)
out, pos, err = b'', 0, None
def pump(timeout):
    global out
    r, _, _ = select.select([master], [], [], timeout)
    if r:
        try:
            out += os.read(master, 65536)
        except OSError:
            return False
    return True
for st in steps:
    if 'until' in st:
        rx, deadline, again = re.compile(st['until'].encode()), time.time() + 20, 0
        while not rx.search(out, pos):
            if time.time() > deadline or p.poll() is not None:
                err = 'timed out waiting for ' + st['until']
                break
            if time.time() >= again:
                os.write(master, st['send'].encode())
                again = time.time() + 1
            pump(0.2)
        if err: break
        pos = rx.search(out, pos).end()
    elif 'send' in st:
        os.write(master, st['send'].encode())
    elif 'resize' in st:
        size(master, *st['resize'])
    elif 'expect' in st:
        rx, deadline = re.compile(st['expect'].encode()), time.time() + 20
        while not rx.search(out, pos):
            if time.time() > deadline or not pump(0.2) and p.poll() is not None:
                err = 'timed out waiting for ' + st['expect']
                break
        if err: break
        pos = rx.search(out, pos).end()
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

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** path -> [permission bits, sha256 or link target] of a tree ('' for folders). */
function tree(root: string): Record<string, [number, string]> {
  const out: Record<string, [number, string]> = {};
  const walk = (dir: string, rel: string) => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(p);
      if (st.isSymbolicLink()) out[r] = [0, `-> ${readlinkSync(p)}`];
      else if (st.isDirectory()) {
        out[r] = [st.mode & 0o777, ''];
        walk(p, r);
      } else out[r] = [st.mode & 0o777, sha256(readFileSync(p))];
    }
  };
  walk(root, '');
  return out;
}

describe('sbx against the real server', { timeout: 300_000 }, () => {
  let s: Server;
  let key: string;
  let home: string;
  const made: string[] = [];

  const env = (extra: Record<string, string | undefined> = {}) => {
    const e: Record<string, string> = {};
    for (const [k, v] of Object.entries({
      ...process.env,
      HOME: home,
      XDG_CONFIG_HOME: '',
      SANDBOX_API_KEY: undefined,
      SANDBOX_API_URL: undefined,
      NO_COLOR: undefined,
      FORCE_COLOR: undefined,
      ...extra,
    })) {
      if (v !== undefined && v !== '') e[k] = v;
    }
    return e;
  };

  /** Runs sbx to completion (bounded) with `input` on stdin; `node` runs it (default: its shebang's, the first on PATH). */
  const sbx = (
    args: string[],
    o: {
      env?: Record<string, string | undefined>;
      input?: string;
      node?: string;
      /** Called with each piece of stdout as it arrives. */
      onStdout?: (chunk: string) => void;
    } = {},
  ): Promise<Run> =>
    new Promise((res, rej) => {
      const p = spawn(o.node ?? SBX, o.node ? [SBX, ...args] : args, {
        env: env({ SANDBOX_API_URL: s.baseUrl, SANDBOX_API_KEY: key, ...o.env }),
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b) => {
        stdout += b;
        o.onStdout?.(String(b));
      });
      p.stderr.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 120_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
      p.stdin.end(o.input ?? '');
    });

  /** Runs sbx on a PTY through the python driver. */
  const onPty = (
    args: string[],
    steps: unknown[],
    extraEnv: Record<string, string | undefined> = {},
  ): Promise<{ exit: number; output: string; error: string | null }> =>
    new Promise((res, rej) => {
      const e = env({ SANDBOX_API_URL: s.baseUrl, SANDBOX_API_KEY: key, TERM: 'xterm', ...extraEnv });
      const p = spawn('python3', ['-c', PTY_DRIVER, JSON.stringify(steps), JSON.stringify(e), SBX, ...args], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
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

  const oneErrorLine = (r: Run, re: RegExp) => {
    assert.notEqual(r.code, 0);
    const lines = r.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0], /^error: /);
    assert.match(lines[0], re);
  };

  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { tokens: 100_000 })).key;
    home = mkdtempSync(join(tmpdir(), 'sbx-home-'));
  });
  after(async () => {
    for (const id of made) await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key });
    await s?.stop();
    rmSync(home, { recursive: true, force: true });
  });

  it('login stores key and URL with mode 600, checks the key, and later verbs use it', async () => {
    oneErrorLine(
      await sbx(['login', '--key', 'sk_wrong'], { env: { SANDBOX_API_KEY: undefined } }),
      /rejected this API key/,
    );
    oneErrorLine(await sbx(['ls'], { env: { SANDBOX_API_KEY: undefined } }), /not logged in/);

    const r = await sbx(['--api-url', s.baseUrl, 'login'], {
      env: { SANDBOX_API_KEY: undefined, SANDBOX_API_URL: undefined },
      input: `${key}\n`,
    });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Logged in to .* as e2e-/);
    const file = join(home, '.config', 'sandboxd', 'config.json');
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.deepEqual(JSON.parse(readFileSync(file, 'utf8')), { apiUrl: s.baseUrl, apiKey: key });
    const ls = await sbx(['ls'], { env: { SANDBOX_API_KEY: undefined, SANDBOX_API_URL: undefined } });
    assert.equal(ls.code, 0, ls.stderr);
  });

  it('create prints the id and URL template; ls shows it as a table and JSON', async () => {
    const r = await sbx([
      'create',
      '--image',
      IMAGE,
      '--env',
      'GREETING=hi',
      '--volume',
      'cli_vol:/data',
      '--timeout',
      '5m',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const id = /Created sandbox (sbx_[a-z2-7]{20})/.exec(r.stdout)?.[1];
    assert.ok(id, r.stdout);
    made.push(id);
    assert.ok(r.stdout.includes(`http://{{PORT}}-${id}.sandbox.localhost:${s.port}`), r.stdout);
    assert.doesNotMatch(r.stdout, ANSI, 'no colour when stdout is not a TTY');

    const ls = await sbx(['ls']);
    assert.match(ls.stdout, /^ID\s+NAME\s+STATE\s+IMAGE/);
    assert.match(ls.stdout, new RegExp(`${id}\\s+\\S+\\s+started\\s+${IMAGE.replace(/[/.]/g, '\\$&')}`));
    const json = JSON.parse((await sbx(['ls', '--json'])).stdout);
    assert.ok(json.some((x: { id: string; state: string }) => x.id === id && x.state === 'started'));

    const vols = await sbx(['volumes', 'ls']);
    assert.match(vols.stdout, new RegExp(`cli_vol\\s+1 GiB\\s+${id}`));
    oneErrorLine(await sbx(['volumes', 'rm', 'cli_vol']), /mounted/);
  });

  it("exec prints output and exits with the command's code; timeout; rm", async () => {
    const id = (await sbx(['create', '-q', '--image', IMAGE])).stdout.trim();
    assert.match(id, /^sbx_[a-z2-7]{20}$/);
    made.push(id);
    const hello = await sbx(['exec', id, '--', 'echo', 'hello world']);
    assert.deepEqual([hello.code, hello.stdout, hello.stderr], [0, 'hello world\n', '']);
    const env = await sbx(['exec', '--env', 'NAME=x1', '--cwd', '/tmp', id, '--', 'echo $NAME; pwd']);
    assert.equal(env.stdout, 'x1\n/tmp\n');
    assert.equal((await sbx(['exec', id, '--', 'exit 7'])).code, 7);
    const missing = await sbx(['exec', id, '--', 'no-such-command-here']);
    assert.equal(missing.code, 127);
    assert.match(missing.stderr, /not found/);

    const t = await sbx(['timeout', id, '120000']);
    assert.equal(t.code, 0, t.stderr);
    assert.match(t.stdout, new RegExp(`${id} stops at \\d{4}-`));
    oneErrorLine(await sbx(['timeout', id, 'soon']), /milliseconds/);

    const rm = await sbx(['rm', id]);
    assert.equal(rm.stdout, `Deleted ${id}\n`);
    const again = await sbx(['rm', id]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /Sandbox not found/);
  });

  it('cp a file both ways (sha256), ls ID:/path', async () => {
    const id = (await sbx(['create', '-q', '--image', IMAGE])).stdout.trim();
    made.push(id);
    const dir = mkdtempSync(join(tmpdir(), 'sbx-cp-'));
    try {
      const data = randomBytes(5 << 20);
      writeFileSync(join(dir, 'data.bin'), data);
      chmodSync(join(dir, 'data.bin'), 0o640);
      let r = await sbx(['cp', join(dir, 'data.bin'), `${id}:/tmp/cp/`]);
      assert.match(r.stderr, /no such directory/, 'a missing folder named with a trailing slash');
      r = await sbx(['cp', join(dir, 'data.bin'), `${id}:/tmp/cp-data.bin`]);
      assert.equal(r.code, 0, r.stderr);
      r = await sbx(['cp', join(dir, 'data.bin'), `${id}:/tmp`]); // into the folder
      assert.equal(r.code, 0, r.stderr);
      r = await sbx(['cp', `${id}:/tmp/data.bin`, join(dir, 'back.bin')]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(sha256(readFileSync(join(dir, 'back.bin'))), sha256(data));
      assert.equal(statSync(join(dir, 'back.bin')).mode & 0o777, 0o640);

      const ls = await sbx(['ls', `${id}:/tmp`]);
      assert.equal(ls.code, 0, ls.stderr);
      assert.deepEqual(
        ls.stdout
          .split('\n')
          .filter((l) => l.endsWith('data.bin'))
          .sort(),
        ['cp-data.bin', 'data.bin'],
      );
      const long = await sbx(['ls', '-l', `${id}:/tmp`]);
      assert.match(long.stdout, /^MODE\s+OWNER\s+SIZE\s+MODIFIED\s+NAME\n/);
      assert.match(
        long.stdout,
        new RegExp(`\\n-rw-r-----\\s+\\S+\\s+${data.length}\\s+\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d\\s+data\\.bin\\n`),
      );
      oneErrorLine(await sbx(['ls', `${id}:/no/such/dir`]), /./);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('cp a directory both ways as a tar (trees equal); ls --depth', {
    skip: RUNTIME === 'fake' && 'needs tar in the sandbox',
  }, async () => {
    const id = (await sbx(['create', '-q', '--image', IMAGE])).stdout.trim();
    made.push(id);
    const dir = mkdtempSync(join(tmpdir(), 'sbx-cpdir-'));
    try {
      const src = join(dir, 'project');
      mkdirSync(join(src, 'src', 'deep'), { recursive: true });
      mkdirSync(join(src, 'empty'));
      writeFileSync(join(src, 'README'), 'readme\n');
      writeFileSync(join(src, 'src', 'blob.bin'), randomBytes(300_000));
      writeFileSync(join(src, 'src', 'deep', 'run.sh'), '#!/bin/sh\necho ran\n');
      chmodSync(join(src, 'src', 'deep', 'run.sh'), 0o755);
      symlinkSync('README', join(src, 'link'));

      let r = await sbx(['cp', src, `${id}:/tmp/work`]); // absent: created as /tmp/work
      assert.equal(r.code, 0, r.stderr);
      const run = await sbx(['exec', id, '--', '/tmp/work/src/deep/run.sh']);
      assert.equal(run.stdout, 'ran\n');
      r = await sbx(['cp', src, `${id}:/tmp/work`]); // present: lands inside, /tmp/work/project
      assert.equal(r.code, 0, r.stderr);
      const depth = await sbx(['ls', '--depth', '2', `${id}:/tmp/work`]);
      assert.deepEqual(depth.stdout.trim().split('\n').sort(), [
        'README',
        'empty/',
        'link',
        'project/',
        'project/README',
        'project/empty/',
        'project/link',
        'project/src/',
        'src/',
        'src/blob.bin',
        'src/deep/',
      ]);

      r = await sbx(['cp', `${id}:/tmp/work/project`, join(dir, 'back')]);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(tree(join(dir, 'back')), tree(src));
      r = await sbx(['cp', `${id}:/tmp/work`, join(dir, 'back')]); // into the existing folder
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(tree(join(dir, 'back', 'work', 'project')), tree(src));
      const left = await sbx(['exec', id, '--', 'ls -a /tmp']);
      assert.doesNotMatch(left.stdout, /\.sbx-cp-/, 'no archive is left behind');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('exec streams output as it is written, keeps stdout and stderr apart, forwards stdin with -i', {
    skip: RUNTIME === 'fake' && 'needs a real shell',
  }, async () => {
    const id = (await sbx(['create', '-q', '--image', IMAGE])).stdout.trim();
    made.push(id);
    let firstAt = 0;
    const r = await sbx(['exec', id, '--', 'echo first; echo oops >&2; sleep 2; echo second; exit 4'], {
      onStdout: () => {
        firstAt ||= Date.now();
      },
    });
    const end = Date.now();
    assert.deepEqual([r.code, r.stdout, r.stderr], [4, 'first\nsecond\n', 'oops\n']);
    assert.ok(end - firstAt >= 1500, `the first line came ${end - firstAt} ms before the end: not streamed`);
    const cat = await sbx(['exec', '-i', id, '--', 'cat'], { input: 'piped\nlines\n' });
    assert.deepEqual([cat.code, cat.stdout], [0, 'piped\nlines\n']);
    const read = await sbx(['exec', '-i', id, '--', 'read x; echo got $x'], { input: 'abc\n' });
    assert.equal(read.stdout, 'got abc\n');
    const once = await sbx(['exec', '--no-stream', id, '--', 'echo one-shot; exit 2']);
    assert.deepEqual([once.code, once.stdout], [2, 'one-shot\n']);
  });

  it("works on the machine's own Node (the server's is 24; users may have 20 or newer)", async (t) => {
    const node = userNode();
    const version = execFileSync(node, ['--version']).toString().trim();
    t.diagnostic(`sbx on ${node} (${version})`);
    assert.ok(Number(/^v(\d+)/.exec(version)![1]) >= 20, version);
    const id = (await sbx(['create', '-q', '--image', IMAGE], { node })).stdout.trim();
    assert.match(id, /^sbx_[a-z2-7]{20}$/);
    made.push(id);
    const hello = await sbx(['exec', id, '--', 'echo', 'hello from', version], { node });
    assert.deepEqual([hello.code, hello.stdout, hello.stderr], [0, `hello from ${version}\n`, '']);
    assert.equal((await sbx(['rm', id], { node })).code, 0);
  });

  it('errors are one readable line with a non-zero exit code', async () => {
    oneErrorLine(
      await sbx(['create', '--image', 'local/no-such-image:1']),
      /^error: Template not found: local\/no-such-image:1$/,
    );
    oneErrorLine(await sbx(['exec', 'sbx_aaaaaaaaaaaaaaaaaaaa', '--', 'true']), /Sandbox not found/);
    oneErrorLine(
      await sbx(['ls'], { env: { SANDBOX_API_URL: 'http://127.0.0.1:1' } }),
      /Cannot reach the sandboxd API at http:\/\/127\.0\.0\.1:1/,
    );
    oneErrorLine(await sbx(['create', '--env', 'NOEQUALS']), /KEY=VALUE/);
    oneErrorLine(await sbx(['frobnicate']), /unknown command/);
  });

  it('every verb has --help with an example', async () => {
    const verbs = [
      ['login'],
      ['create'],
      ['ls'],
      ['exec'],
      ['cp'],
      ['shell'],
      ['timeout'],
      ['rm'],
      ['images', 'pull'],
      ['images', 'ls'],
      ['images', 'import'],
      ['images', 'build'],
      ['volumes', 'ls'],
      ['volumes', 'rm'],
      ['keys', 'create'],
      ['keys', 'ls'],
      ['keys', 'revoke'],
    ];
    for (const v of verbs) {
      const r = await sbx([...v, '--help']);
      assert.equal(r.code, 0, v.join(' '));
      assert.match(r.stdout, /Example/, v.join(' '));
      assert.ok(r.stdout.includes(`$ sbx ${v.join(' ')}`), `${v.join(' ')}: ${r.stdout}`);
    }
  });

  it('keys create, ls, revoke', async () => {
    const c = await sbx(['keys', 'create', 'cli-key', '--json']);
    const k = JSON.parse(c.stdout);
    assert.match(k.key, /^sk_/);
    assert.match((await sbx(['keys', 'ls'])).stdout, new RegExp(`${k.id}\\s+cli-key`));
    assert.equal((await sbx(['ls'], { env: { SANDBOX_API_KEY: k.key } })).code, 0);
    assert.equal((await sbx(['keys', 'revoke', k.id])).stdout, `Revoked key ${k.id}\n`);
    oneErrorLine(await sbx(['ls'], { env: { SANDBOX_API_KEY: k.key } }), /./);
  });

  it('images: admin only; pull and build show progress; import uploads a tar', async () => {
    oneErrorLine(await sbx(['images', 'ls']), /admin/);
    const admin = { SANDBOX_API_KEY: ADMIN_KEY };
    assert.match((await sbx(['images', 'ls'], { env: admin })).stdout, new RegExp(IMAGE.replace(/[/.]/g, '\\$&')));
    const build = await sbx(['images', 'build', 'local/busybox:latest'], { env: admin });
    assert.equal(build.code, 0, build.stderr);
    assert.match(build.stderr, /build local\/busybox:latest: \w+/);
    assert.match(build.stderr, /built local\/busybox:latest [0-9a-f]{12}/);
    if (RUNTIME !== 'fake') return; // pull needs a registry, import an OCI archive
    const pull = await sbx(['images', 'pull', 'docker.io/library/alpine:3.20'], { env: admin });
    assert.equal(pull.code, 0, pull.stderr);
    assert.match(pull.stderr, /pulling 0 B \/ 1\.0 KiB/);
    assert.match(pull.stderr, /pulled docker\.io\/library\/alpine:3\.20/);
    const dir = mkdtempSync(join(tmpdir(), 'sbx-tar-'));
    try {
      const tar = Buffer.alloc(2048);
      tar.write('file.txt', 0);
      tar.write('ustar', 257);
      writeFileSync(join(dir, 'img.tar'), tar);
      const imp = await sbx(['images', 'import', join(dir, 'img.tar'), '--ref', 'cli/imported:1'], { env: admin });
      assert.equal(imp.code, 0, imp.stderr);
      assert.match(imp.stderr, /imported cli\/imported:1/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('on a TTY: colour unless NO_COLOR, and login prompts for the key without echo', async () => {
    const login = await onPty(['login'], [{ expect: 'API key for ' }, { send: `${key}\r` }, { expect: 'Logged in' }], {
      SANDBOX_API_KEY: undefined,
    });
    assert.equal(login.exit, 0, login.output);
    assert.ok(!login.output.includes(key), 'the key is not echoed');
    const tty = await onPty(['keys', 'ls'], []);
    assert.equal(tty.exit, 0, tty.output);
    assert.match(tty.output, ANSI);
    const plain = await onPty(['keys', 'ls'], [], { NO_COLOR: '1' });
    assert.equal(plain.exit, 0, plain.output);
    assert.doesNotMatch(plain.output, ANSI);
  });

  it('shell: raw terminal on a PTY; type, see output, resize, exit code passes through', async () => {
    const id = (await sbx(['create', '-q', '--image', IMAGE])).stdout.trim();
    made.push(id);
    await s.api('PATCH', `/api/v1/sandboxes/${id}/timeout`, { key, body: { timeoutMs: 300_000 } });
    const r = await onPty(
      ['shell', id],
      [
        { expect: '[$#] ' },
        { send: 'echo cli-shell-$((6*7))\r' },
        { expect: RUNTIME === 'fake' ? 'cli-shell-' : 'cli-shell-42' },
        { send: 'stty size\r' },
        { expect: '30 100' },
        { resize: [120, 40] },
        { send: 'stty size\r', until: '40 120' },
        { send: 'exit 5\r' },
      ],
    );
    assert.equal(r.error, null, r.output);
    assert.equal(r.exit, 5, r.output);
    const left = await s.api('GET', `/api/v1/sandboxes/${id}/terminals`, { key });
    assert.deepEqual(
      left.body.terminals.filter((t: { status: string }) => t.status === 'active'),
      [],
    );
  });
});
