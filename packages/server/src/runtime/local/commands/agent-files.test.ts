import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { nativeBin } from '../native.js';

// The agent's file tool (`exec-agent file <op> ...`, native/agent-files.h), run as a plain host
// process on a temporary directory: the server's side parses exactly these lines.

interface Entry {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: number;
  owner: string;
  group: string;
  modifiedAt: string;
  symlinkTarget?: string;
  metadata?: Record<string, string>;
}
interface Result {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

let bin: string;
let root: string;
const cleanup: string[] = [];

function start(args: string[]): ChildProcess {
  return spawn(bin, ['file', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
}

function finish(child: ChildProcess): Promise<Result> {
  const out: Buffer[] = [];
  let err = '';
  child.stdout!.on('data', (d: Buffer) => out.push(d));
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout: Buffer.concat(out), stderr: err }));
  });
}

/** Runs `file <args>` with `input` on stdin (nothing: stdin closed at once). */
function run(args: string[], input: Buffer | string = ''): Promise<Result> {
  const child = start(args);
  const done = finish(child);
  child.stdin!.on('error', () => {}); // the tool may exit before reading it all
  child.stdin!.end(input);
  return done;
}

const lines = (r: Result) => r.stdout.toString().split('\n').filter(Boolean);
async function ok(args: string[], input?: Buffer | string): Promise<Result> {
  const r = await run(args, input);
  assert.equal(r.code, 0, `file ${args.join(' ')}: ${r.stderr}`);
  assert.equal(r.stderr, '');
  return r;
}
async function entry(args: string[], input?: Buffer | string): Promise<Entry> {
  return JSON.parse((await ok(args, input)).stdout.toString());
}
/** The parsed error line of a run that must fail with `code` (1: error, 2: usage). */
async function fails(args: string[], code = 1, input?: Buffer | string) {
  const r = await run(args, input);
  assert.equal(r.code, code, `file ${args.join(' ')} answered ${r.code}: ${r.stdout} ${r.stderr}`);
  assert.equal(r.stdout.length, 0);
  const e = JSON.parse(r.stderr);
  assert.deepEqual(Object.keys(e), ['errno', 'code', 'op', 'path', 'message']);
  return e as { errno: number; code: string; op: string; path: string; message: string };
}

/** Every path under dir (relative, sorted), symlinks not followed. */
function tree(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const d of readdirSync(dir, { withFileTypes: true })) {
    out.push(prefix + d.name);
    if (d.isDirectory()) out.push(...tree(join(dir, d.name), `${prefix}${d.name}/`));
  }
  return out.sort();
}

/** The directories the tests made in root (and left there). */
const boxes = new Set<string>();
/** A fresh directory for one test. */
function box(name: string): string {
  const d = join(root, name);
  mkdirSync(d);
  boxes.add(name);
  return d;
}

const me = userInfo().username;
/** The name of this process's group in /etc/group, else its gid. */
const myGroup =
  readFileSync('/etc/group', 'utf8')
    .split('\n')
    .map((l) => l.split(':'))
    .find((f) => f.length >= 3 && f[2] === String(userInfo().gid))?.[0] ?? String(userInfo().gid);
const isoOf = (p: string) => new Date(Number(lstatSync(p, { bigint: true }).mtimeNs / 1_000_000n)).toISOString();

describe('agent file tool', () => {
  before(() => {
    bin = nativeBin('exec-agent');
    root = mkdtempSync(join(tmpdir(), 'agent-files-'));
  });
  after(() => {
    rmSync(root, { recursive: true, force: true });
    for (const p of cleanup) rmSync(p, { recursive: true, force: true });
  });

  it('stat describes files, directories and symlinks (not followed), with normalised paths', async () => {
    const d = box('stat');
    writeFileSync(join(d, 'f.txt'), 'hello');
    chmodSync(join(d, 'f.txt'), 0o640);
    mkdirSync(join(d, 'sub'));
    symlinkSync('sub', join(d, 'link'));
    assert.deepEqual(await entry(['stat', `${d}//f.txt`]), {
      name: 'f.txt',
      path: `${d}/f.txt`,
      type: 'file',
      size: 5,
      mode: 0o640,
      owner: me,
      group: myGroup,
      modifiedAt: isoOf(join(d, 'f.txt')),
    });
    const sub = await entry(['stat', `${d}/sub/`]);
    assert.deepEqual(
      [sub.name, sub.path, sub.type, sub.mode & 0o777],
      ['sub', `${d}/sub`, 'dir', statSync(join(d, 'sub')).mode & 0o777],
    );
    const link = await entry(['stat', `${d}/link/`]);
    assert.deepEqual([link.type, link.symlinkTarget, link.size], ['symlink', 'sub', 3]);
    const top = await entry(['stat', '/']);
    assert.deepEqual([top.name, top.path, top.type], ['/', '/', 'dir']);
    assert.deepEqual(await fails(['stat', `${d}/missing`]), {
      errno: 2,
      code: 'ENOENT',
      op: 'lstat',
      path: `${d}/missing`,
      message: 'No such file or directory',
    });
    assert.deepEqual(tree(d), ['f.txt', 'link', 'sub']);
  });

  it('lists depth levels in pre-order sorted by name, stops at max, odd names stay JSON', async () => {
    const d = box('list');
    mkdirSync(join(d, 'b/deeper/deepest'), { recursive: true });
    writeFileSync(join(d, 'b/x'), 'x');
    writeFileSync(join(d, 'a'), '');
    writeFileSync(join(d, 'c'), '');
    symlinkSync(root, join(d, 'b/up')); // never followed
    const paths = async (...args: string[]) =>
      lines(await ok(['list', d, ...args])).map((l) => JSON.parse(l).path ?? JSON.parse(l));
    assert.deepEqual(await paths('1'), [`${d}/a`, `${d}/b`, `${d}/c`]);
    assert.deepEqual(await paths('2'), [`${d}/a`, `${d}/b`, `${d}/b/deeper`, `${d}/b/up`, `${d}/b/x`, `${d}/c`]);
    assert.equal((await paths('10')).length, 7);
    assert.deepEqual(await paths('2', '3'), [`${d}/a`, `${d}/b`, `${d}/b/deeper`, { truncated: true }]);
    assert.deepEqual(await paths('1', '3'), [`${d}/a`, `${d}/b`, `${d}/c`], 'exactly max: not truncated');
    const up = lines(await ok(['list', join(d, 'b'), '1'])).map((l) => JSON.parse(l) as Entry)[1];
    assert.deepEqual([up.name, up.type, up.symlinkTarget], ['up', 'symlink', root]);

    const odd = box('odd');
    writeFileSync(join(odd, 'quote"back\\slash'), '');
    writeFileSync(join(odd, 'new\nline\ttab'), '');
    writeFileSync(Buffer.concat([Buffer.from(`${odd}/bad`), Buffer.from([0xff, 0xc3, 0x28]), Buffer.from('é')]), '');
    const names = lines(await ok(['list', odd, '1'])).map((l) => (JSON.parse(l) as Entry).name);
    assert.deepEqual(names, ['bad\ufffd\ufffd(é', 'new\nline\ttab', 'quote"back\\slash']);

    assert.equal((await fails(['list', join(d, 'a'), '1'])).code, 'ENOTDIR');
    assert.equal((await fails(['list', join(d, 'nope'), '1'])).code, 'ENOENT');
    for (const bad of [
      ['list', d],
      ['list', d, '0'],
      ['list', d, 'x'],
      ['list', d, '1', '-1'],
    ])
      assert.equal((await fails(bad, 2)).op, 'usage');
  });

  it('mkdir creates parents and refuses what exists', async () => {
    const d = box('mkdir');
    const e = await entry(['mkdir', `${d}/p/q/r/`]);
    assert.deepEqual([e.path, e.name, e.type, e.mode], [`${d}/p/q/r`, 'r', 'dir', 0o755]);
    assert.equal(statSync(join(d, 'p')).mode & 0o7777, 0o755);
    writeFileSync(join(d, 'file'), '');
    for (const p of [join(d, 'p/q'), join(d, 'file')]) {
      const err = await fails(['mkdir', p]);
      assert.deepEqual([err.code, err.errno, err.op, err.path], ['EEXIST', 17, 'mkdir', p]);
    }
    assert.equal((await fails(['mkdir', join(d, 'file/sub')])).code, 'ENOTDIR');
    assert.deepEqual(tree(d), ['file', 'p', 'p/q', 'p/q/r']);
  });

  it('mkdirs (as root) makes the missing directories for a user, only below directories it may search', async () => {
    const d = box('mkdirs');
    chmodSync(root, 0o755); // mkdtemp's 0700: the user could not search it
    const e = await entry(['mkdirs', `${d}/a/b/c`, '1234', '2345', '1']);
    assert.deepEqual([e.path, e.type, e.mode, e.owner], [`${d}/a/b/c`, 'dir', 0o755, '1234']);
    for (const p of ['a', 'a/b', 'a/b/c']) {
      const st = statSync(join(d, p));
      assert.deepEqual([st.uid, st.gid, st.mode & 0o7777], [1234, 2345, 0o755], p);
    }
    assert.equal(statSync(d).uid, userInfo().uid, 'an existing directory keeps its owner');
    // Without the last one (what a write needs): the file's directory is made, not the file.
    assert.deepEqual(
      JSON.parse((await ok(['mkdirs', `${d}/x/y/file.txt`, '1234', '2345', '0'])).stdout.toString()),
      {},
    );
    assert.equal(statSync(join(d, 'x/y')).uid, 1234);
    assert.equal(existsSync(join(d, 'x/y/file.txt')), false);
    const there = await fails(['mkdirs', `${d}/a/b`, '1234', '2345', '1']);
    assert.deepEqual([there.code, there.path], ['EEXIST', `${d}/a/b`]);
    writeFileSync(join(d, 'f'), '');
    assert.equal((await fails(['mkdirs', `${d}/f`, '1234', '2345', '1'])).code, 'EEXIST');
    assert.equal((await fails(['mkdirs', `${d}/f/under/x`, '1234', '2345', '0'])).code, 'ENOTDIR');
    // A directory the user cannot search: nothing is made below it.
    mkdirSync(join(d, 'closed'), { mode: 0o700 });
    const closed = await fails(['mkdirs', `${d}/closed/n/x`, '1234', '2345', '0']);
    assert.deepEqual([closed.code, closed.op], ['EACCES', 'mkdir']);
    assert.deepEqual(readdirSync(join(d, 'closed')), []);
    // ... unless it is the user's own, or its group's with the group's search bit.
    mkdirSync(join(d, 'group'), { mode: 0o710 });
    chownSync(join(d, 'group'), 0, 2345);
    await ok(['mkdirs', `${d}/group/n/x`, '1234', '2345', '0']);
    assert.equal(statSync(join(d, 'group/n')).uid, 1234);
    // Symlinked directories on the way are followed (merged /usr, /var/run ...).
    symlinkSync(join(d, 'a'), join(d, 'to-a'));
    await ok(['mkdirs', `${d}/to-a/l/x`, '1234', '2345', '0']);
    assert.equal(statSync(join(d, 'a/l')).uid, 1234);
    assert.equal((await fails(['mkdirs', 'relative/x', '1', '1', '0'])).code, 'EINVAL');
    assert.equal((await fails(['mkdirs', `${d}/q`, 'u', '1', '0'], 2)).op, 'usage');
    assert.equal((await fails(['mkdirs', `${d}/q`, '1', '1', '2'], 2)).op, 'usage');
  });

  it('write sets metadata (user.e2b.* xattrs); entries report them and nothing else', async () => {
    const d = box('meta');
    const w = await entry(['write', join(d, 'm.txt'), '-', '-', 'owner=agent 7', 'kind=a=b'], 'x');
    assert.deepEqual(w.metadata, { owner: 'agent 7', kind: 'a=b' });
    assert.deepEqual((await entry(['stat', join(d, 'm.txt')])).metadata, { owner: 'agent 7', kind: 'a=b' });
    const listed = lines(await ok(['list', d, '1'])).map((l) => JSON.parse(l) as Entry);
    assert.deepEqual(
      listed.map((e) => [e.name, e.metadata]),
      [['m.txt', { owner: 'agent 7', kind: 'a=b' }]],
    );
    // Overwriting replaces the whole set (a new file), as envd's upload does.
    const again = await entry(['write', join(d, 'm.txt'), '-', '-', 'kind=c'], 'y');
    assert.deepEqual(again.metadata, { kind: 'c' });
    assert.equal((await entry(['write', join(d, 'm.txt'), '-', '-'], 'z')).metadata, undefined);
    // Other user.* xattrs are not metadata.
    await ok(['write', join(d, 'other'), '-', '-', 'k=v'], '');
    const py = spawnSync('python3', [
      '-c',
      `import os; os.setxattr(${JSON.stringify(join(d, 'other'))}, 'user.other', b'1')`,
    ]);
    assert.equal(py.status, 0, String(py.stderr));
    assert.deepEqual((await entry(['stat', join(d, 'other')])).metadata, { k: 'v' });
    for (const bad of ['novalue', '=v'])
      assert.equal((await fails(['write', join(d, 'bad'), '-', '-', bad], 2)).op, 'usage');
    assert.deepEqual(tree(d), ['m.txt', 'other']);
  });

  it('move renames files and directories, never onto something that exists', async () => {
    const d = box('move');
    mkdirSync(join(d, 'dir/inner'), { recursive: true });
    writeFileSync(join(d, 'dir/inner/f'), 'data');
    writeFileSync(join(d, 'a'), 'A');
    writeFileSync(join(d, 'b'), 'B');
    assert.equal((await entry(['move', join(d, 'a'), join(d, 'a2')])).path, join(d, 'a2'));
    const moved = await entry(['move', join(d, 'dir'), join(d, 'dir2')]);
    assert.deepEqual([moved.type, moved.name], ['dir', 'dir2']);
    const exists = await fails(['move', join(d, 'a2'), join(d, 'b')]);
    assert.deepEqual([exists.code, exists.path], ['EEXIST', join(d, 'b')]);
    assert.equal(readFileSync(join(d, 'a2'), 'utf8'), 'A');
    assert.equal(readFileSync(join(d, 'b'), 'utf8'), 'B');
    assert.deepEqual(
      [
        (await fails(['move', join(d, 'nope'), join(d, 'x')])).path,
        (await fails(['move', join(d, 'b'), join(d, 'no/x')])).path,
      ],
      [join(d, 'nope'), join(d, 'no/x')],
    );
    assert.deepEqual(tree(d), ['a2', 'b', 'dir2', 'dir2/inner', 'dir2/inner/f']);
  });

  // Across mounts only when the machine has a /dev/shm on another filesystem than the temp dir.
  const otherFs = existsSync('/dev/shm') && statSync('/dev/shm').dev !== statSync(tmpdir()).dev;
  it('move across filesystems copies (modes, symlinks) and removes the source', { skip: !otherFs }, async () => {
    const d = box('xmove');
    mkdirSync(join(d, 't/sub'), { recursive: true });
    writeFileSync(join(d, 't/sub/run.sh'), 'echo hi');
    chmodSync(join(d, 't/sub/run.sh'), 0o751);
    symlinkSync('/nowhere', join(d, 't/dangling'));
    const big = randomBytes(3 << 20);
    writeFileSync(join(d, 't/big'), big);
    const to = mkdtempSync('/dev/shm/agent-files-');
    cleanup.push(to);
    assert.equal((await entry(['move', join(d, 't'), join(to, 't')])).type, 'dir');
    assert.deepEqual(tree(d), []);
    assert.deepEqual(tree(to), ['t', 't/big', 't/dangling', 't/sub', 't/sub/run.sh']);
    assert.equal(statSync(join(to, 't/sub/run.sh')).mode & 0o7777, 0o751);
    assert.ok(readFileSync(join(to, 't/big')).equals(big));
    assert.equal(lstatSync(join(to, 't/dangling')).isSymbolicLink(), true);
    assert.equal((await entry(['move', join(to, 't/big'), join(d, 'big')])).size, big.length);
    assert.deepEqual(tree(d), ['big']);
  });

  it('remove deletes files, symlinks and trees without following a symlink out of them', async () => {
    const d = box('remove');
    const outside = box('outside');
    writeFileSync(join(outside, 'keep'), 'precious');
    mkdirSync(join(d, 't/a/b'), { recursive: true });
    writeFileSync(join(d, 't/a/b/f'), '');
    symlinkSync(outside, join(d, 't/a/out'));
    symlinkSync(outside, join(d, 'toplink'));
    writeFileSync(join(d, 'file'), '');
    for (const p of ['t', 'toplink', 'file']) assert.equal((await ok(['remove', join(d, p)])).stdout.length, 0);
    assert.deepEqual(tree(d), []);
    assert.deepEqual(tree(outside), ['keep']);
    assert.equal(readFileSync(join(outside, 'keep'), 'utf8'), 'precious');
    const missing = await fails(['remove', join(d, 't')]);
    assert.deepEqual([missing.code, missing.path], ['ENOENT', join(d, 't')]);
  });

  it('read gives a header then exactly the bytes of the range', async () => {
    const d = box('read');
    writeFileSync(join(d, 'f'), '0123456789');
    writeFileSync(join(d, 'empty'), '');
    const read = async (p: string, range: string) => {
      const r = await ok(['read', join(d, p), range]);
      const nl = r.stdout.indexOf(10);
      return { head: JSON.parse(r.stdout.subarray(0, nl).toString()), body: r.stdout.subarray(nl + 1).toString() };
    };
    assert.deepEqual(await read('f', ''), { head: { size: 10, start: 0, end: 9 }, body: '0123456789' });
    assert.deepEqual(await read('f', '2-4'), { head: { size: 10, start: 2, end: 4 }, body: '234' });
    assert.deepEqual(await read('f', '7-'), { head: { size: 10, start: 7, end: 9 }, body: '789' });
    assert.deepEqual(await read('f', '-3'), { head: { size: 10, start: 7, end: 9 }, body: '789' });
    assert.deepEqual(await read('f', '-30'), { head: { size: 10, start: 0, end: 9 }, body: '0123456789' });
    assert.deepEqual(await read('f', '8-1000'), { head: { size: 10, start: 8, end: 9 }, body: '89' });
    assert.deepEqual(await read('f', '9-9'), { head: { size: 10, start: 9, end: 9 }, body: '9' });
    for (const r of ['10-', '10-12', '5-2', '-0', '99999999999999999999999-'])
      assert.deepEqual(await read('f', r), { head: { size: 10, unsatisfiable: true }, body: '' }, r);
    assert.deepEqual(await read('empty', ''), { head: { size: 0, start: 0, end: -1 }, body: '' });
    assert.deepEqual(await read('empty', '0-'), { head: { size: 0, unsatisfiable: true }, body: '' });
    const big = randomBytes((5 << 20) + 7);
    writeFileSync(join(d, 'big'), big);
    const whole = (await ok(['read', join(d, 'big'), ''])).stdout;
    assert.ok(whole.subarray(whole.indexOf(10) + 1).equals(big));
    symlinkSync('f', join(d, 'link'));
    assert.equal((await read('link', '0-0')).body, '0', 'a reader follows a symlink');
    assert.deepEqual(Object.values(await fails(['read', d, ''])).slice(1, 4), ['EISDIR', 'read', d]);
    assert.equal((await fails(['read', join(d, 'nope'), ''])).code, 'ENOENT');
    for (const r of ['x', '1-2-3', '-', 'a-b', '1', ' 1-2', '--1'])
      assert.equal((await fails(['read', join(d, 'f'), r], 2)).op, 'usage');
  });

  it('write replaces atomically: modes, parents, symlinks replaced, lengths checked, no temp left', async () => {
    const d = box('write');
    const outside = box('write-target');
    writeFileSync(join(outside, 'target'), 'original');
    const w = await entry(['write', `${d}/new/deep/f.txt`, '-', '5'], 'hello');
    assert.deepEqual([w.path, w.type, w.size, w.mode], [`${d}/new/deep/f.txt`, 'file', 5, 0o644]);
    assert.equal(statSync(join(d, 'new/deep')).mode & 0o7777, 0o755);
    assert.equal(readFileSync(join(d, 'new/deep/f.txt'), 'utf8'), 'hello');
    chmodSync(join(d, 'new/deep/f.txt'), 0o600);
    assert.equal((await entry(['write', join(d, 'new/deep/f.txt'), '-', '-'], 'bye')).mode, 0o600, 'keeps its mode');
    assert.equal(readFileSync(join(d, 'new/deep/f.txt'), 'utf8'), 'bye');
    assert.equal((await entry(['write', join(d, 'new/deep/f.txt'), '755', '-'], '#!')).mode, 0o755);
    assert.equal((await entry(['write', join(d, 'empty'), '0640', '0'])).size, 0);
    assert.equal(statSync(join(d, 'empty')).mode & 0o7777, 0o640);
    const big = randomBytes((4 << 20) + 3);
    assert.equal((await entry(['write', join(d, 'big'), '-', String(big.length)], big)).size, big.length);
    assert.ok(readFileSync(join(d, 'big')).equals(big));

    symlinkSync(join(outside, 'target'), join(d, 'link'));
    const replaced = await entry(['write', join(d, 'link'), '-', '-'], 'new');
    assert.equal(replaced.type, 'file');
    assert.equal(readFileSync(join(d, 'link'), 'utf8'), 'new');
    assert.equal(readFileSync(join(outside, 'target'), 'utf8'), 'original', "the symlink's target is untouched");

    const short = await fails(['write', join(d, 'short'), '-', '10'], 1, 'only5');
    assert.deepEqual([short.code, short.op, short.path], ['EPIPE', 'write', join(d, 'short')]);
    const long = await fails(['write', join(d, 'long'), '-', '3'], 1, 'toolong');
    assert.deepEqual([long.code, long.op], ['EFBIG', 'write']);
    assert.equal((await fails(['write', join(d, 'new'), '-', '-'], 1, 'x')).code, 'EISDIR');
    assert.equal((await fails(['write', join(d, 'big', 'under'), '-', '-'], 1, 'x')).code, 'ENOTDIR');
    for (const bad of [
      ['write', join(d, 'x'), '888', '-'],
      ['write', join(d, 'x'), '-', 'ten'],
      ['write', join(d, 'x'), '-'],
    ])
      assert.equal((await fails(bad, 2)).op, 'usage');
    assert.deepEqual(tree(d), ['big', 'empty', 'link', 'new', 'new/deep', 'new/deep/f.txt']);
    assert.deepEqual(tree(outside), ['target']);
  });

  it('write interrupted by SIGTERM leaves neither the file nor its temp', async () => {
    const d = box('write-term');
    const child = start(['write', join(d, 'f'), '-', '-']);
    const done = finish(child);
    child.stdin!.write(Buffer.alloc(100_000, 1));
    for (let i = 0; i < 200 && !readdirSync(d).some((n) => n.startsWith('.f.sandboxd-')); i++)
      await new Promise((r) => setTimeout(r, 10));
    assert.match(readdirSync(d).join(','), /^\.f\.sandboxd-\d+-[0-9a-f]+$/);
    child.kill('SIGTERM');
    assert.equal((await done).code, 143);
    assert.deepEqual(tree(d), []);
  });

  it('watch reports create, write, rename, chmod and remove, in new subdirectories too', async () => {
    const d = box('watch');
    mkdirSync(join(d, 'sub'));
    const child = start(['watch', d, '1']);
    const done = finish(child);
    const seen: any[] = [];
    let buf = '';
    child.stdout!.on('data', (c: Buffer) => {
      buf += c.toString();
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        seen.push(JSON.parse(buf.slice(0, nl)));
        buf = buf.slice(nl + 1);
      }
    });
    /** Waits for a line of `type` on `rel` (relative to d; undefined: no path) whose entry has
     * `size` when given (a write's O_TRUNC is an event too), drops it and those before it. */
    const next = async (type: string, rel?: string, size?: number) => {
      const path = rel === undefined ? undefined : rel ? join(d, rel) : d;
      for (let i = 0; i < 500; i++) {
        const at = seen.findIndex(
          (l) => l.type === type && l.path === path && (size === undefined || l.entry?.size === size),
        );
        if (at >= 0) return seen.splice(0, at + 1).pop();
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.fail(`no ${type} of ${path}; saw ${JSON.stringify(seen)}`);
    };
    try {
      await next('ready');
      writeFileSync(join(d, 'a'), 'one');
      assert.equal((await next('create', 'a')).entry.type, 'file');
      assert.equal((await next('write', 'a', 3)).entry.name, 'a');
      renameSync(join(d, 'a'), join(d, 'b'));
      assert.equal((await next('rename', 'a')).entry, undefined);
      assert.equal((await next('create', 'b')).entry.name, 'b');
      chmodSync(join(d, 'b'), 0o600);
      assert.equal((await next('chmod', 'b')).entry.mode, 0o600);
      rmSync(join(d, 'b'));
      assert.deepEqual(await next('remove', 'b'), { type: 'remove', path: join(d, 'b') });
      writeFileSync(join(d, 'sub/s'), 'x');
      assert.equal((await next('write', 'sub/s', 1)).entry.type, 'file');
      mkdirSync(join(d, 'sub/new/deeper'), { recursive: true });
      writeFileSync(join(d, 'sub/new/deeper/f'), '');
      assert.equal((await next('create', 'sub/new')).entry.type, 'dir');
      await next('create', 'sub/new/deeper/f');
      writeFileSync(join(d, 'sub/new/deeper/f'), 'later');
      await next('write', 'sub/new/deeper/f', 5); // the new directory is watched
      rmSync(d, { recursive: true });
      boxes.delete('watch');
      await next('remove', '');
      assert.equal((await done).code, 0, 'ends when its root goes');
    } finally {
      child.kill();
    }
    const missing = await fails(['watch', d, '0']);
    assert.deepEqual([missing.code, missing.path], ['ENOENT', d]);
    assert.equal((await fails(['watch', root, 'yes'], 2)).op, 'usage');
  });

  it('whoami names the caller with its home from /etc/passwd', async () => {
    const home =
      readFileSync('/etc/passwd', 'utf8')
        .split('\n')
        .map((l) => l.split(':'))
        .find((f) => f.length >= 7 && f[2] === String(userInfo().uid))?.[5] ?? '/';
    assert.deepEqual(JSON.parse((await ok(['whoami'])).stdout.toString()), {
      user: me,
      uid: userInfo().uid,
      gid: userInfo().gid,
      group: myGroup,
      home: home.startsWith('/') ? home : '/',
    });
  });

  it('answers usage errors for unknown ops and argument counts', async () => {
    for (const args of [
      [],
      ['frobnicate', '/'],
      ['stat'],
      ['stat', '/', '/'],
      ['move', '/x'],
      ['remove'],
      ['whoami', '/'],
    ]) {
      const e = await fails(args, 2);
      assert.deepEqual([e.errno, e.code, e.op, e.path], [22, 'EINVAL', 'usage', '']);
    }
  });

  it('leaves nothing behind in the temp dir beyond what the tests made', () => {
    assert.deepEqual(
      tree(root).filter((p) => p.includes('.sandboxd-')),
      [],
    );
    assert.deepEqual(readdirSync(root).sort(), [...boxes].sort());
  });
});
