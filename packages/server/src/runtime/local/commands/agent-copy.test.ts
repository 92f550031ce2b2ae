import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
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
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type CopyEntry, decodeCopyStream, encodeCopyStream } from '../../copy-stream.js';
import { nativeBin } from '../native.js';

// The agent's copy stream ops (`exec-agent file unpack|pack`, native/agent-files.h) run as a
// plain host process (as root, like the sandbox's root) on a temporary directory.

let bin: string;
let root: string;
const isRoot = process.getuid?.() === 0;

interface Result {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: string;
}

function run(args: string[], input: Buffer | AsyncIterable<Uint8Array> = Buffer.alloc(0)): Promise<Result> {
  const child = spawn(bin, ['file', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  const out: Buffer[] = [];
  let err = '';
  child.stdout.on('data', (d: Buffer) => out.push(d));
  child.stderr.on('data', (d: Buffer) => {
    err += d.toString();
  });
  child.stdin.on('error', () => {}); // the tool may exit before reading it all
  const done = new Promise<Result>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout: Buffer.concat(out), stderr: err }));
  });
  if (Buffer.isBuffer(input)) child.stdin.end(input);
  else
    void (async () => {
      try {
        for await (const c of input) if (!child.stdin.write(c)) await new Promise((r) => child.stdin.once('drain', r));
      } catch {
        /* the tool went away */
      }
      child.stdin.end();
    })();
  return done;
}

const errorOf = (r: Result) =>
  JSON.parse(r.stderr.trim().split('\n')[0]) as { code: string; path: string; message: string };

const file = (path: string, data: Buffer | string, o: Partial<CopyEntry> = {}): CopyEntry => {
  const b = Buffer.from(data);
  return {
    path,
    type: 'file',
    mode: 0o644,
    uid: 0,
    gid: 0,
    size: b.length,
    body: async function* () {
      yield b;
    },
    ...o,
  };
};
const dir = (path: string, o: Partial<CopyEntry> = {}): CopyEntry => ({
  path,
  type: 'dir',
  mode: 0o755,
  uid: 0,
  gid: 0,
  size: 0,
  ...o,
});
const link = (path: string, target: string, o: Partial<CopyEntry> = {}): CopyEntry => ({
  path,
  type: 'symlink',
  mode: 0o777,
  uid: 0,
  gid: 0,
  size: 0,
  target,
  ...o,
});

async function streamOf(entries: CopyEntry[]): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const c of encodeCopyStream(entries)) out.push(c);
  return Buffer.concat(out);
}

async function unpack(dest: string, entries: CopyEntry[] | Buffer): Promise<Result> {
  return run(['unpack', dest], Buffer.isBuffer(entries) ? entries : await streamOf(entries));
}

async function decode(buf: Buffer) {
  const out: Array<Omit<CopyEntry, 'body'> & { data?: Buffer }> = [];
  async function* one() {
    yield buf;
  }
  for await (const e of decodeCopyStream(one())) {
    const { body, ...rest } = e;
    if (body) {
      const parts: Buffer[] = [];
      for await (const c of body()) parts.push(Buffer.from(c));
      out.push({ ...rest, data: Buffer.concat(parts) });
    } else out.push(rest);
  }
  return out;
}

/** Names in `d` that look like the tool's temp files. */
function temps(d: string): string[] {
  return existsSync(d)
    ? readdirSync(d, { recursive: true })
        .map(String)
        .filter((n) => n.includes('.sandboxd-'))
    : [];
}

describe('agent file unpack / pack (copy streams)', { skip: !isRoot && 'needs root (chown)' }, () => {
  before(() => {
    bin = nativeBin('exec-agent');
    root = mkdtempSync(join(tmpdir(), 'sbxd-agent-copy-'));
  });
  after(() => rmSync(root, { recursive: true, force: true }));

  it('writes dirs, files and symlinks with their modes and owners; fills a 0555 dir; makes missing parents', async () => {
    const dest = join(root, 'one', 'deep', 'dest');
    const big = randomBytes(5 * 1024 * 1024 + 3);
    const r = await unpack(dest, [
      dir('', { mode: 0o750, uid: 1234, gid: 4321 }),
      dir('ro', { mode: 0o555, uid: 1000, gid: 1000 }),
      file('ro/inside.txt', 'in a read-only dir\n', { mode: 0o444, uid: 1000, gid: 1000 }),
      dir('tmp', { mode: 0o1777 }),
      file('suid', '#!/bin/sh\n', { mode: 0o4755, uid: 1000, gid: 1000 }),
      file('big.bin', big, { mode: 0o600 }),
      file('empty', ''),
      file('missing/parents/f.txt', 'made\n'),
      link('ln', 'ro/inside.txt', { uid: 1000, gid: 1001 }),
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout.toString()), { entries: 9, bytes: big.length + 19 + 10 + 5 });
    const mode = (p: string) => lstatSync(join(dest, p)).mode & 0o7777;
    const owner = (p: string) => {
      const st = lstatSync(join(dest, p));
      return `${st.uid}:${st.gid}`;
    };
    assert.equal(statSync(join(root, 'one')).mode & 0o7777, 0o755);
    assert.deepEqual([mode(''), owner('')], [0o750, '1234:4321']);
    assert.deepEqual([mode('ro'), owner('ro')], [0o555, '1000:1000']);
    assert.deepEqual([mode('ro/inside.txt'), owner('ro/inside.txt')], [0o444, '1000:1000']);
    assert.equal(readFileSync(join(dest, 'ro/inside.txt'), 'utf8'), 'in a read-only dir\n');
    assert.equal(mode('tmp'), 0o1777);
    assert.deepEqual([mode('suid'), owner('suid')], [0o4755, '1000:1000'], 'the owner set first keeps setuid');
    assert.ok(readFileSync(join(dest, 'big.bin')).equals(big));
    assert.equal(mode('big.bin'), 0o600);
    assert.equal(readFileSync(join(dest, 'empty')).length, 0);
    assert.equal(mode('missing'), 0o755);
    assert.equal(readFileSync(join(dest, 'missing/parents/f.txt'), 'utf8'), 'made\n');
    assert.ok(lstatSync(join(dest, 'ln')).isSymbolicLink());
    assert.equal(readlinkSync(join(dest, 'ln')), 'ro/inside.txt');
    assert.equal(owner('ln'), '1000:1001');
    assert.deepEqual(temps(dest), []);
  });

  it('merges into an existing dir and replaces files and symlinks (not following them)', async () => {
    const dest = join(root, 'merge');
    mkdirSync(join(dest, 'd'), { recursive: true });
    writeFileSync(join(dest, 'd', 'other'), 'kept');
    writeFileSync(join(dest, 'f'), 'old');
    writeFileSync(join(root, 'outside'), 'outside');
    symlinkSync(join(root, 'outside'), join(dest, 'was-link'));
    symlinkSync('f', join(dest, 'l'));
    const r = await unpack(dest, [
      dir('d', { mode: 0o700 }),
      file('d/new', 'new'),
      file('f', 'new f'),
      file('was-link', 'replaced'),
      link('l', 'd/new'),
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(readFileSync(join(dest, 'd', 'other'), 'utf8'), 'kept');
    assert.equal(statSync(join(dest, 'd')).mode & 0o7777, 0o700);
    assert.equal(readFileSync(join(dest, 'f'), 'utf8'), 'new f');
    assert.ok(lstatSync(join(dest, 'was-link')).isFile());
    assert.equal(readFileSync(join(dest, 'was-link'), 'utf8'), 'replaced');
    assert.equal(
      readFileSync(join(root, 'outside'), 'utf8'),
      'outside',
      'a symlink is replaced, never written through',
    );
    assert.equal(readlinkSync(join(dest, 'l')), 'd/new');
  });

  it('never follows a symlink above an entry (one in the stream, or one there before)', async () => {
    const dest = join(root, 'escape');
    const target = join(root, 'escape-target');
    mkdirSync(target);
    const r = await unpack(dest, [link('up', target), file('up/pwned', 'x')]);
    assert.equal(r.code, 1);
    assert.equal(errorOf(r).code, 'ENOTDIR');
    assert.equal(errorOf(r).path, join(dest, 'up/pwned'));
    assert.deepEqual(readdirSync(target), []);
    const r2 = await unpack(dest, [dir('up'), file('up/x', 'x')]);
    assert.equal(r2.code, 1, 'a dir entry over a symlink is refused, not made through it');
    assert.equal(errorOf(r2).code, 'ENOTDIR');
    assert.deepEqual(readdirSync(target), []);
  });

  it('refuses a file or symlink where a dir is, naming it', async () => {
    const dest = join(root, 'clash');
    mkdirSync(join(dest, 'd'), { recursive: true });
    for (const e of [file('d', 'x'), link('d', 'x')]) {
      const r = await unpack(dest, [e]);
      assert.equal(r.code, 1);
      assert.deepEqual([errorOf(r).code, errorOf(r).path], ['EISDIR', join(dest, 'd')]);
      assert.ok(statSync(join(dest, 'd')).isDirectory());
    }
    assert.deepEqual(temps(dest), []);
  });

  it('a stream that ends inside a file leaves nothing of that file (an existing one unchanged)', async () => {
    const dest = join(root, 'short');
    mkdirSync(dest);
    writeFileSync(join(dest, 'keep.txt'), 'old');
    for (const size of [10, 300_000]) {
      const whole = await streamOf([file('new.txt', 'n'), file('keep.txt', Buffer.alloc(size, 1))]);
      const r = await unpack(dest, whole.subarray(0, whole.length - 5));
      assert.equal(r.code, 1);
      assert.deepEqual([errorOf(r).code, errorOf(r).path], ['EPIPE', join(dest, 'keep.txt')]);
      assert.equal(readFileSync(join(dest, 'keep.txt'), 'utf8'), 'old');
      assert.deepEqual(temps(dest), []);
    }
  });

  it('a killed unpack removes its temp file', async () => {
    const dest = join(root, 'killed');
    const header = Buffer.from(`${JSON.stringify({ p: 'f', t: 'f', m: 420, u: 0, g: 0, s: 1 << 20 })}\n`);
    const child = spawn(bin, ['file', 'unpack', dest], { stdio: ['pipe', 'pipe', 'pipe'] });
    child.stdin.write(Buffer.concat([header, Buffer.alloc(1000)]));
    for (let i = 0; i < 500 && temps(dest).length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(temps(dest).length, 1);
    const closed = new Promise((r) => child.on('close', r));
    child.kill('SIGTERM');
    await closed;
    assert.deepEqual(temps(dest), []);
    assert.ok(!existsSync(join(dest, 'f')));
  });

  for (const [name, text, re] of [
    ['a dot-dot path', '{"p":"../x","t":"f","m":420,"u":0,"g":0,"s":1}\nx', /entry \.\.\/x: the path must be relative/],
    ['an absolute path', '{"p":"/etc/x","t":"d","m":420,"u":0,"g":0,"s":0}\n', /entry \/etc\/x: the path/],
    ['a header that is not JSON', 'hello\n', /entry #1: a header is one JSON object/],
    ['an unknown key', '{"p":"a","t":"d","m":1,"u":0,"g":0,"s":0,"z":1}\n', /entry a: unknown key "z"/],
    ['a missing key', '{"p":"a","t":"d","m":1,"u":0,"g":0}\n', /entry a: a header needs/],
    ['a duplicate key', '{"p":"a","p":"b","t":"d","m":1,"u":0,"g":0,"s":0}\n', /given twice/],
    ['a mode too big', '{"p":"a","t":"d","m":4096,"u":0,"g":0,"s":0}\n', /entry a: "m" must be/],
    ['a NUL escape', '{"p":"a\\u0000b","t":"d","m":1,"u":0,"g":0,"s":0}\n', /NUL in a string/],
    ['a lone surrogate', '{"p":"a\\ud800","t":"d","m":1,"u":0,"g":0,"s":0}\n', /lone surrogate/],
    ['a dir with a size', '{"p":"a","t":"d","m":1,"u":0,"g":0,"s":3}\nabc', /only a file has a size/],
    ['a cut header', '{"p":"a","t":"d"', /ends inside a header/],
    ['a symlink without a target', '{"p":"a","t":"l","m":1,"u":0,"g":0,"s":0}\n', /needs its target/],
  ] as const) {
    it(`refuses ${name} (EINVAL naming the entry), writing nothing of it`, async () => {
      const dest = join(root, `bad-${name.replace(/\W/g, '')}`);
      const r = await unpack(dest, Buffer.from(text));
      assert.equal(r.code, 1, r.stderr);
      const e = errorOf(r);
      assert.equal(e.code, 'EINVAL');
      assert.match(e.message, re);
      assert.deepEqual(readdirSync(dest), []);
    });
  }

  it('takes the escapes JSON allows (the names come back the same)', async () => {
    const dest = join(root, 'names');
    const names = ['naïve "q" \\ \n\t 名前 😀', 'a\u0001b'];
    const r = await unpack(
      dest,
      names.map((n) => file(n, n)),
    );
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(readdirSync(dest).sort(), [...names].sort());
    const back = await decode((await run(['pack', dest, '0'])).stdout);
    assert.deepEqual(
      back
        .filter((e) => e.path)
        .map((e) => [e.path, e.data?.toString()])
        .sort(),
      names.map((n) => [n, n]).sort(),
    );
  });

  it('packs a tree: the dir itself first, pre-order and sorted, symlinks as symlinks, FIFOs left out', async () => {
    const src = join(root, 'src');
    mkdirSync(join(src, 'b', 'c'), { recursive: true });
    chmodSync(join(src, 'b'), 0o750);
    writeFileSync(join(src, 'a.txt'), 'a');
    writeFileSync(join(src, 'b', 'c', 'deep'), 'deep');
    const big = randomBytes(200_000);
    writeFileSync(join(src, 'b', 'big'), big);
    symlinkSync('/etc/passwd', join(src, 'b', 'ln'));
    spawnSync('mkfifo', [join(src, 'fifo')]);
    const r = await run(['pack', src, '0']);
    assert.equal(r.code, 0, r.stderr);
    const got = await decode(r.stdout);
    assert.deepEqual(
      got.map((e) => [e.path, e.type, e.mode, e.target, e.data?.length]),
      [
        ['', 'dir', statSync(src).mode & 0o7777, undefined, undefined],
        ['a.txt', 'file', 0o644, undefined, 1],
        ['b', 'dir', 0o750, undefined, undefined],
        ['b/big', 'file', 0o644, undefined, big.length],
        ['b/c', 'dir', 0o755, undefined, undefined],
        ['b/c/deep', 'file', 0o644, undefined, 4],
        ['b/ln', 'symlink', 0o777, '/etc/passwd', undefined],
      ],
    );
    assert.ok(got[3].data!.equals(big));
    // Round trip: unpacked elsewhere, packed again, the same stream.
    const copy = join(root, 'copy');
    assert.equal((await unpack(copy, r.stdout)).code, 0);
    const again = await run(['pack', copy, '0']);
    assert.deepEqual(
      (await decode(again.stdout)).map((e) => [
        e.path,
        e.type,
        e.mode,
        e.uid,
        e.gid,
        e.target,
        e.data?.toString('hex'),
      ]),
      got.map((e) => [e.path, e.type, e.mode, e.uid, e.gid, e.target, e.data?.toString('hex')]),
    );
  });

  it('packs a file or a symlink as one entry of its own name; follows the symlink itself only when asked', async () => {
    const src = join(root, 'single');
    mkdirSync(src);
    writeFileSync(join(src, 'f.txt'), 'content');
    chmodSync(join(src, 'f.txt'), 0o600);
    symlinkSync('f.txt', join(src, 'ln'));
    symlinkSync('.', join(src, 'dirln'));
    const f = await decode((await run(['pack', join(src, 'f.txt'), '0'])).stdout);
    assert.deepEqual(
      f.map((e) => [e.path, e.type, e.mode, e.data?.toString()]),
      [['f.txt', 'file', 0o600, 'content']],
    );
    const l = await decode((await run(['pack', join(src, 'ln'), '0'])).stdout);
    assert.deepEqual(
      l.map((e) => [e.path, e.type, e.target]),
      [['ln', 'symlink', 'f.txt']],
    );
    const lf = await decode((await run(['pack', join(src, 'ln'), '1'])).stdout);
    assert.deepEqual(
      lf.map((e) => [e.path, e.type, e.data?.toString()]),
      [['ln', 'file', 'content']],
    );
    const df = await decode((await run(['pack', join(src, 'dirln'), '1'])).stdout);
    assert.deepEqual(
      df.map((e) => [e.path, e.type]),
      [
        ['', 'dir'],
        ['dirln', 'symlink'],
        ['f.txt', 'file'],
        ['ln', 'symlink'],
      ],
    );
  });

  it('pack: a missing path is ENOENT, a FIFO is refused, a name that is not UTF-8 is EILSEQ', async () => {
    const missing = await run(['pack', join(root, 'nope'), '0']);
    assert.deepEqual([missing.code, errorOf(missing).code], [1, 'ENOENT']);
    const fifo = join(root, 'a-fifo');
    spawnSync('mkfifo', [fifo]);
    const f = await run(['pack', fifo, '0']);
    assert.deepEqual([f.code, errorOf(f).code], [1, 'EINVAL']);
    const odd = join(root, 'odd');
    mkdirSync(odd);
    writeFileSync(Buffer.concat([Buffer.from(`${odd}/`), Buffer.from([0x66, 0xff])]), 'x');
    const o = await run(['pack', odd, '0']);
    assert.deepEqual([o.code, errorOf(o).code], [1, 'EILSEQ']);
    const usage = await run(['pack', odd, '2']);
    assert.equal(usage.code, 2);
  });
});
