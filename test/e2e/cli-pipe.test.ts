/**
 * `sbx` at the closed end of a pipe (`sbx ls | head -1`), the real binary against the real
 * server: it ends quietly, as `ls` does there — nothing on stderr, exit status 0 when all
 * its output was written before the reader left, 141 (128 + SIGPIPE) when it was not.
 * The shell's own `| head -1` is used as written; where the outcome must not depend on how
 * much a pipe holds, a python driver makes the pipe one page (4 KiB) and reads the first
 * line, or closes the reading end before `sbx` writes anything.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { ADMIN_KEY, IMAGE, newAccount, RUNTIME, startServer, type Server } from './harness.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../../packages/cli/bin/sbx.js');

/**
 * Runs argv with stdout (or, with `stream: 'stderr'`, stderr) into a pipe of one page.
 * `head`: reads the first line, then closes the pipe (as `head -1`): output longer than a page
 * and that line is certain to meet the closed end; `gone`: the reading end is closed before
 * argv starts (as `| true`), so its first write does. Prints {first, code, signal, stderr}.
 */
const PIPE_DRIVER = `
import fcntl, json, os, signal, subprocess, sys
mode, stream, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
r, w = os.pipe()
fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: one page
if mode == 'gone':
    os.close(r)
out = {'stdout': w, 'stderr': subprocess.PIPE} if stream == 'stdout' else {'stdout': subprocess.DEVNULL, 'stderr': w}
p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, **out)
os.close(w)
first = ''
if mode == 'head':
    # Byte by byte: what follows the first line stays in the pipe, so output longer than the
    # pipe holds is certain to meet the closed end (head -1 reads ahead, which only widens the race).
    b = b''
    while not b.endswith(b'\\n'):
        c = os.read(r, 1)
        if not c:
            break
        b += c
    os.close(r)
    first = b.decode('utf-8', 'replace')
try:
    err = p.communicate(timeout=60)[1] or b''
except subprocess.TimeoutExpired:
    p.kill()
    err = b'(timed out)' + (p.communicate()[1] or b'')
code = p.returncode
print(json.dumps({'first': first, 'code': code if code >= 0 else None, 'signal': signal.Signals(-code).name if code < 0 else None, 'stderr': err.decode('utf-8', 'replace')}))
`;

interface Piped {
  first: string;
  code: number | null;
  signal: string | null;
  stderr: string;
}

describe('sbx at the closed end of a pipe', { timeout: 300_000 }, () => {
  let s: Server;
  let key: string;
  let home: string;
  const made: string[] = [];

  const env = (extra: Record<string, string> = {}) => {
    const e: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env))
      if (v !== undefined && !k.startsWith('SANDBOX_') && k !== 'FORCE_COLOR') e[k] = v;
    return { ...e, HOME: home, NO_COLOR: '1', SANDBOX_API_URL: s.baseUrl, SANDBOX_API_KEY: key, ...extra };
  };

  /** Runs `program` with `args` to completion (bounded): stdout, stderr and the exit status. */
  const run = (
    program: string,
    args: string[],
    extra: Record<string, string> = {},
  ): Promise<{ code: number | null; stdout: string; stderr: string }> =>
    new Promise((res, rej) => {
      const p = spawn(program, args, { env: env(extra), stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b) => (stdout += b));
      p.stderr.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 120_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
    });

  /** `sbx ARGS | head -1` in bash, pipefail off; `code` is sbx's own exit status (PIPESTATUS). */
  const headOne = (args: string[], extra: Record<string, string> = {}) =>
    // biome-ignore lint/suspicious/noTemplateCurlyInString: bash's ${PIPESTATUS[0]}
    run('bash', ['-c', 'set +o pipefail; "$@" | head -1; exit "${PIPESTATUS[0]}"', 'bash', SBX, ...args], extra);

  /** sbx through the python driver (see PIPE_DRIVER). */
  const piped = async (
    mode: 'head' | 'gone',
    args: string[],
    o: { stream?: 'stdout' | 'stderr'; env?: Record<string, string> } = {},
  ): Promise<Piped> => {
    const r = await run('python3', ['-c', PIPE_DRIVER, mode, o.stream ?? 'stdout', SBX, ...args], o.env);
    assert.equal(r.code, 0, `pipe driver failed: ${r.stderr}`);
    return JSON.parse(r.stdout) as Piped;
  };

  /** Ended by the closed pipe, the way ls is: exit status 141, not a signal, not a word on stderr. */
  const quiet141 = (r: Piped) => {
    assert.equal(r.stderr, '', 'nothing on stderr');
    assert.deepEqual([r.code, r.signal], [141, null], r.stderr);
  };

  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { plan: 'PRO', tokens: 100_000 })).key;
    home = mkdtempSync(join(tmpdir(), 'sbx-pipe-home-'));
  });
  after(async () => {
    for (const id of made) await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key });
    await s?.stop();
    rmSync(home, { recursive: true, force: true });
  });

  it('sbx --help | head -1: the first line, nothing on stderr, 0 or 141', async () => {
    const r = await headOne(['--help']);
    assert.equal(r.stdout, 'Usage: sbx [options] [command]\n');
    assert.equal(r.stderr, '');
    assert.ok(r.code === 0 || r.code === 141, `exit status ${r.code}`);
    // The help is about a page: whether it all fits before the reader leaves is not ours to say.
    const p = await piped('head', ['--help']);
    assert.equal(p.first, 'Usage: sbx [options] [command]\n');
    assert.equal(p.stderr, '');
    assert.ok(p.code === 0 || p.code === 141, `exit status ${p.code}`);
    quiet141(await piped('gone', ['--help']));
    quiet141(await piped('gone', ['--version']));
  });

  it('sbx ls with many sandboxes: | head -1 prints the header and ends quietly', async () => {
    // 12 sandboxes with 1000 bytes of metadata each: a table of about 13 KiB, more than the
    // one-page pipe and what its reader takes before it leaves.
    const note = 'n'.repeat(1000);
    for (let i = 0; i < 12; i++) {
      const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, metadata: { note } } });
      assert.equal(c.status, 201, c.text);
      made.push(c.body.sandbox.id);
    }
    const all = await run(process.execPath, [SBX, 'ls']);
    assert.equal(all.code, 0, all.stderr);
    assert.ok(all.stdout.length > 12_000, `the table is ${all.stdout.length} bytes`);

    const r = await headOne(['ls']);
    assert.match(r.stdout, /^ID\s+NAME\s+STATE\s+IMAGE\s+ISOLATION\s+CREATED\s+STOPS\s+EXPIRES\s+METADATA\n$/);
    assert.equal(r.stderr, '');
    assert.ok(r.code === 0 || r.code === 141, `exit status ${r.code}`);

    const p = await piped('head', ['ls']);
    assert.match(p.first, /^ID\s+NAME/);
    quiet141(p);
    const json = await piped('head', ['ls', '--json']);
    assert.equal(json.first, '[\n');
    quiet141(json);
    quiet141(await piped('gone', ['ls']));
  });

  it('sbx snapshots and sbx images: listings end quietly when the reader is gone', async () => {
    quiet141(await piped('gone', ['snapshots', 'ls']));
    quiet141(await piped('gone', ['snapshots']));
    quiet141(await piped('gone', ['images', 'ls'], { env: { SANDBOX_API_KEY: ADMIN_KEY } }));
    quiet141(await piped('gone', ['keys', 'ls']));
    // And the listings still print in full when nobody leaves.
    const images = await run(process.execPath, [SBX, 'images', 'ls'], { SANDBOX_API_KEY: ADMIN_KEY });
    assert.equal(images.code, 0, images.stderr);
    assert.ok(images.stdout.includes(IMAGE), images.stdout);
  });

  it('an error line into a closed stderr ends quietly too', async () => {
    const r = await piped('gone', ['ls', '--state', 'bogus'], { stream: 'stderr' });
    assert.deepEqual([r.code, r.signal], [141, null]);
    // With stderr open the same mistake is the usual one line and exit status 1.
    const open = await run(process.execPath, [SBX, 'ls', '--state', 'bogus']);
    assert.deepEqual([open.code, open.stderr], [1, 'error: --state must be one of started, paused, stopped, error\n']);
  });

  it('sbx exec ID -- seq 1 100000 | head -1: 1, quietly, 141; an endless command is stopped', {
    skip: RUNTIME === 'fake' && 'needs a real shell',
  }, async () => {
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE } });
    assert.equal(c.status, 201, c.text);
    const id: string = c.body.sandbox.id;
    made.push(id);
    // 588,895 bytes: more than any pipe holds, so sbx meets the closed pipe, as seq would.
    const r = await headOne(['exec', id, '--', 'seq', '1', '100000']);
    assert.deepEqual([r.code, r.stdout, r.stderr], [141, '1\n', '']);

    const y = await headOne(['exec', id, '--', 'yes']);
    assert.deepEqual([y.code, y.stdout, y.stderr], [141, 'y\n', '']);
    // sbx had `yes` sent SIGTERM before it left; the server records the exit (bounded wait).
    let text = '';
    for (let i = 0; i < 100; i++) {
      const list = await s.api('GET', `/api/v1/sandboxes/${id}/processes`, { key });
      assert.equal(list.status, 200, list.text);
      text = list.text;
      const yes = list.body.processes.filter((p: { command: string }) => p.command === 'yes');
      assert.equal(yes.length, 1, list.text);
      if (yes[0].status !== 'running') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.doesNotMatch(text, /"command":"yes"[^}]*"status":"running"/, text);
  });
});
