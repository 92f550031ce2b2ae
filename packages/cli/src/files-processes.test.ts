/**
 * `sbx cp`, `sbx ls ID:/path` and the streamed `sbx exec`, run as the real binary against a
 * stand-in server whose one "sandbox" is this machine (test/local-sandboxd.ts), in
 * temporary folders.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
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
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { KEY, localSandboxd, SANDBOX_ID, type LocalSandboxd } from '../test/local-sandboxd.js';
import { parseRemote } from './remote.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../bin/sbx.js');
const ID = SANDBOX_ID;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** path -> [mode, sha256 or link target] of a tree, '' for folders. */
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
      } else out[r] = [st.mode & 0o777, createHash('sha256').update(readFileSync(p)).digest('hex')];
    }
  };
  walk(root, '');
  return out;
}

describe('sbx cp, ls and exec against a stand-in server', { timeout: 120_000 }, () => {
  let server: LocalSandboxd;
  let dir: string;
  let home: string;
  before(async () => {
    server = await localSandboxd();
    dir = mkdtempSync(join(tmpdir(), 'sbx-cli-unit-'));
    home = mkdtempSync(join(tmpdir(), 'sbx-cli-home-'));
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
    rmSync(home, { recursive: true, force: true });
  });

  const sbx = (
    args: string[],
    o: {
      input?: string;
      onStdout?: (text: string, kill: (sig: NodeJS.Signals) => void) => void;
      /** Close our end of its stdout after the first output, as `| head -1` would. */
      hangUp?: boolean;
    } = {},
  ): Promise<Run> =>
    new Promise((res, rej) => {
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('SANDBOX_')) env[k] = v;
      Object.assign(env, { HOME: home, SANDBOX_API_URL: server.url, SANDBOX_API_KEY: KEY, NO_COLOR: '1' });
      delete env.XDG_CONFIG_HOME;
      const p = spawn(process.execPath, [SBX, ...args], { env, stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b) => {
        stdout += b;
        o.onStdout?.(stdout, (sig) => p.kill(sig));
        if (o.hangUp) p.stdout.destroy();
      });
      p.stderr.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
      if (o.input === undefined) p.stdin.end();
      else p.stdin.end(o.input);
    });
  const ok = (r: Run) => assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  const leftovers = () => readdirSync('/tmp').filter((n) => n.startsWith('.sbx-cp-'));

  it('parses ID:/path and leaves local paths alone', () => {
    assert.deepEqual(parseRemote('sbx_abc:/work/a b'), { id: 'sbx_abc', path: '/work/a b' });
    assert.equal(parseRemote('./sbx_abc:/x'), undefined);
    assert.equal(parseRemote('/abs/path'), undefined);
    assert.throws(() => parseRemote('sbx_abc:work'), /absolute/);
  });

  it('cp: a file up into a directory and down again, streamed, with its mode', async () => {
    const local = join(dir, 'up');
    const remote = join(dir, 'remote');
    mkdirSync(local);
    mkdirSync(remote);
    const data = randomBytes(3 << 20);
    writeFileSync(join(local, 'data.bin'), data);
    chmodSync(join(local, 'data.bin'), 0o750);
    ok(await sbx(['cp', join(local, 'data.bin'), `${ID}:${remote}/`]));
    assert.deepEqual(readFileSync(join(remote, 'data.bin')), data);
    assert.equal(lstatSync(join(remote, 'data.bin')).mode & 0o777, 0o750);
    assert.equal(server.uploads.at(-1)!['content-length'], String(data.length), 'a file goes up with its length');

    ok(await sbx(['cp', `${ID}:${remote}/data.bin`, join(local, 'back.bin')]));
    assert.deepEqual(readFileSync(join(local, 'back.bin')), data);
    assert.equal(lstatSync(join(local, 'back.bin')).mode & 0o777, 0o750);
    ok(await sbx(['cp', '-q', `${ID}:${remote}/data.bin`, local]));
    assert.deepEqual(readFileSync(join(local, 'data.bin')), data);

    const missing = await sbx(['cp', join(local, 'data.bin'), `${ID}:${remote}/nope/`]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^error: .*no such directory/);
    const both = await sbx(['cp', `${ID}:/a`, `${ID}:/b`]);
    assert.match(both.stderr, /exactly one of/);
  });

  it('cp: a directory up and down as a tar, renamed or into an existing one, trees equal', async () => {
    const src = join(dir, 'tree');
    mkdirSync(join(src, 'sub', 'deeper'), { recursive: true });
    mkdirSync(join(src, 'empty'));
    writeFileSync(join(src, 'a.txt'), 'hello\n');
    writeFileSync(join(src, 'sub', 'b.bin'), randomBytes(200_000));
    writeFileSync(join(src, 'sub', 'deeper', 'run.sh'), '#!/bin/sh\necho hi\n');
    chmodSync(join(src, 'sub', 'deeper', 'run.sh'), 0o755);
    symlinkSync('a.txt', join(src, 'link'));
    const before = leftovers();
    const remote = join(dir, 'rdir');
    mkdirSync(remote);

    ok(await sbx(['cp', src, `${ID}:${remote}/copy`])); // absent: created under the new name
    assert.deepEqual(tree(join(remote, 'copy')), tree(src));
    ok(await sbx(['cp', src, `${ID}:${remote}/copy`])); // present: goes inside
    assert.deepEqual(tree(join(remote, 'copy', 'tree')), tree(src));
    assert.equal(server.uploads.at(-1)!['transfer-encoding'], 'chunked', 'the archive is streamed as it is packed');

    const down = join(dir, 'down');
    ok(await sbx(['cp', `${ID}:${remote}/copy/tree`, down]));
    assert.deepEqual(tree(down), tree(src));
    ok(await sbx(['cp', `${ID}:${remote}/copy/tree`, down]));
    assert.deepEqual(tree(join(down, 'tree')), tree(src));
    assert.deepEqual(leftovers(), before, 'no archive is left in /tmp');
  });

  it('ls ID:/path: names, -l, --depth, a file, errors', async () => {
    const root = join(dir, 'ls');
    mkdirSync(join(root, 'd', 'e'), { recursive: true });
    writeFileSync(join(root, 'f.txt'), 'abc');
    chmodSync(join(root, 'f.txt'), 0o640);
    symlinkSync('f.txt', join(root, 'l'));
    let r = await sbx(['ls', `${ID}:${root}`]);
    ok(r);
    assert.equal(r.stdout, 'd/\nf.txt\nl\n');
    r = await sbx(['ls', '--depth', '2', `${ID}:${root}`]);
    assert.equal(r.stdout, 'd/\nd/e/\nf.txt\nl\n');
    r = await sbx(['ls', '-l', `${ID}:${root}`]);
    ok(r);
    assert.match(r.stdout, /^MODE\s+OWNER\s+SIZE\s+MODIFIED\s+NAME\n/);
    assert.match(r.stdout, /\n-rw-r-----\s+\d+\s+3\s+\d{4}-\d\d-\d\d \d\d:\d\d\s+f\.txt\n/);
    assert.match(r.stdout, /\nlrwx\S+\s.*l -> f\.txt\n/);
    assert.match(r.stdout, /\nd\S+\s.*d\/\n/);
    r = await sbx(['ls', '-l', `${ID}:${root}/f.txt`]);
    assert.match(r.stdout, /f\.txt\n$/);
    assert.deepEqual(
      JSON.parse((await sbx(['ls', '--json', `${ID}:${root}`])).stdout).map((e: { name: string }) => e.name),
      ['d', 'f.txt', 'l'],
    );
    r = await sbx(['ls', `${ID}:${root}/nope`]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^error: No such file/);
    assert.match((await sbx(['ls', 'not-remote'])).stderr, /expected ID:\/path/);
  });

  it('exec streams stdout and stderr, exits with the code; -i forwards stdin; --no-stream is one-shot', async () => {
    let r = await sbx(['exec', ID, '--', 'echo out; echo err >&2; exit 3']);
    assert.deepEqual([r.code, r.stdout, r.stderr], [3, 'out\n', 'err\n']);
    r = await sbx(['exec', '-i', ID, '--', 'cat'], { input: 'a\nb\n' });
    assert.deepEqual([r.code, r.stdout], [0, 'a\nb\n']);
    r = await sbx(['exec', '--stdin', ID, '--', 'read x; echo got $x'], { input: 'hello\n' });
    assert.deepEqual([r.code, r.stdout], [0, 'got hello\n']);
    r = await sbx(['exec', ID, '--', 'cat']);
    assert.deepEqual([r.code, r.stdout], [0, ''], 'without -i the command reads no stdin');
    r = await sbx(['exec', '--no-stream', '--env', 'N=7', ID, '--', 'echo $N; exit 2']);
    assert.deepEqual([r.code, r.stdout], [2, '7\n']);
    r = await sbx(['exec', '-b', ID, '--', 'sleep 0.1']);
    assert.match(r.stdout, /^started pid \d+\n$/);
  });

  it('exec: Ctrl-C sends SIGINT to the command, and its exit code comes back', async () => {
    let sent = false;
    // A trap, not a bare `sleep 30`: a SIGINT that lands while the shell forks a child is
    // only acted on by the shell once the child ends.
    const r = await sbx(
      ['exec', ID, '--', "trap 'echo got-int; exit 5' INT; echo ready; while :; do sleep 0.1; done"],
      {
        onStdout: (text, kill) => {
          if (!sent && text.includes('ready')) {
            sent = true;
            kill('SIGINT');
          }
        },
      },
    );
    assert.equal(r.code, 5, r.stderr);
    assert.equal(r.stdout, 'ready\ngot-int\n');
  });

  it('exec: when our reader goes away (| head), the command is stopped and sbx exits with 141', async () => {
    const r = await sbx(['exec', ID, '--', 'while :; do echo y; done'], { hangUp: true });
    assert.equal(r.code, 141, r.stderr);
  });
});
