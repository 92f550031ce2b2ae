import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { gzipSync } from 'node:zlib';
import { SandboxdError } from '@sandboxd/protocol';
import fc from 'fast-check';
import { Header } from 'tar';
import { BuildContext, type Selection } from './context.js';
import type { CopyEntry } from './plan.js';

// ---------------------------------------------------------------------------------------
// A small tar writer: ustar headers by node-tar's Header, GNU long names and pax by hand,
// and whatever a hostile archive needs (bad checksums, truncation, odd types).
// ---------------------------------------------------------------------------------------

interface TarSpec {
  path: string;
  /** ustar type code: 0 file, 1 hard link, 2 symlink, 3 char, 5 dir, 6 fifo, L, K, x, g, S... */
  type?: string;
  data?: string | Buffer;
  mode?: number;
  uid?: number;
  gid?: number;
  linkpath?: string;
  /** Claimed size, when it must differ from the data's. */
  size?: number;
  /** Break the checksum. */
  badChecksum?: boolean;
}

function header(s: TarSpec, size: number): Buffer {
  const b = Buffer.alloc(512);
  const h = new Header({
    path: s.path,
    mode: s.mode ?? (s.type === '5' ? 0o755 : 0o644),
    uid: s.uid ?? 1234,
    gid: s.gid ?? 5678,
    size,
    mtime: new Date(0),
    linkpath: s.linkpath ?? '',
    uname: '',
    gname: '',
  });
  h.encode(b, 0);
  // Set the type byte directly (any code, also the ones node-tar does not write) and re-sum.
  b[156] = (s.type ?? '0').charCodeAt(0);
  b.fill(0x20, 148, 156);
  let sum = 0;
  for (const x of b) sum += x;
  if (s.badChecksum) sum += 1;
  b.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'ascii');
  return b;
}

const pad = (n: number) => Buffer.alloc((512 - (n % 512)) % 512);

function tar(specs: TarSpec[], o: { end?: boolean } = {}): Buffer {
  const parts: Buffer[] = [];
  for (const s of specs) {
    const data = typeof s.data === 'string' ? Buffer.from(s.data) : (s.data ?? Buffer.alloc(0));
    parts.push(header(s, s.size ?? data.length), data, pad(data.length));
  }
  if (o.end !== false) parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

/** A GNU long-name record followed by its entry. */
const longName = (s: TarSpec): TarSpec[] => [
  { path: '././@LongLink', type: 'L', data: `${s.path}\0` },
  { ...s, path: s.path.slice(0, 99) },
];
/** A pax record (`x`) with `fields`, then the entry. */
function pax(fields: Record<string, string>, s: TarSpec): TarSpec[] {
  let body = '';
  for (const [k, v] of Object.entries(fields)) {
    const rec = ` ${k}=${v}\n`;
    const rest = Buffer.byteLength(rec);
    let len = rest + 1;
    for (let i = 0; i < 3 && String(len).length + rest !== len; i++) len = String(len).length + rest;
    body += `${len}${rec}`;
  }
  return [{ path: 'PaxHeader', type: 'x', data: body }, s];
}

async function* chunks(b: Buffer, size = 700): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
}

let dir: string;
let spoolDir: string;
const open = (b: Buffer, o: { maxBytes?: number; maxEntries?: number; dockerignore?: boolean } = {}) =>
  BuildContext.open(chunks(b), { spoolDir, maxBytes: o.maxBytes ?? 1 << 24, maxEntries: o.maxEntries ?? 1000, ...o });

/** The entries in a compact form: `type path mode uid:gid [size|-> target]`. */
const list = (s: Selection) =>
  s.entries.map(
    (e) =>
      `${e.type} ${e.path} ${e.mode.toString(8)} ${e.uid}:${e.gid}${e.type === 'file' ? ` ${e.size}` : ''}${
        e.target !== undefined ? ` -> ${e.target}` : ''
      }`,
  );
async function content(e: CopyEntry): Promise<string> {
  const parts: Uint8Array[] = [];
  for await (const c of e.body!()) parts.push(c);
  return Buffer.concat(parts).toString();
}
async function refusal(p: Promise<unknown>, pattern: RegExp, kind = 'validation'): Promise<SandboxdError> {
  const err = await p.then(
    () => assert.fail('must be refused'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof SandboxdError, String(err));
  assert.equal(err.kind, kind);
  assert.match(err.message, pattern);
  return err;
}
const spoolEmpty = async () => assert.deepEqual(await readdir(spoolDir), []);

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbx-context-test-'));
  spoolDir = join(dir, 'spool');
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A context as a real `tar` makes it from a folder (GNU, pax or gzip). */
async function hostTar(format: 'gnu' | 'pax' | 'gzip'): Promise<Buffer> {
  const src = join(dir, `src-${format}`);
  await rm(src, { recursive: true, force: true });
  const long = `${'l'.repeat(120)}/${'m'.repeat(120)}`;
  await mkdir(join(src, long), { recursive: true });
  await mkdir(join(src, 'app/lib'), { recursive: true });
  await writeFile(join(src, long, 'f.txt'), 'long');
  await writeFile(join(src, 'app/main.py'), 'print(1)\n');
  await writeFile(join(src, 'app/lib/util.py'), 'x = 1\n');
  await writeFile(join(src, 'Dockerfile'), 'FROM a\n');
  await symlink('app/main.py', join(src, 'main'));
  const out = join(dir, `ctx-${format}.tar`);
  const args = format === 'pax' ? ['--format=pax'] : format === 'gzip' ? ['-z'] : ['--format=gnu'];
  execFileSync('tar', [...args, '--owner=0', '--group=0', '-cf', out, '-C', src, '.']);
  return readFile(out);
}

describe('BuildContext: reading archives', () => {
  it('reads GNU (long names), pax and gzip archives made by tar to the same index and hashes', async () => {
    const hashes = new Set<string>();
    for (const format of ['gnu', 'pax', 'gzip'] as const) {
      const ctx = await open(await hostTar(format));
      try {
        const all = await ctx.select(['.'], '/ctx/');
        assert.deepEqual(list(all), [
          'file Dockerfile 644 0:0 7',
          'dir app 755 0:0',
          'dir app/lib 755 0:0',
          'file app/lib/util.py 644 0:0 6',
          'file app/main.py 644 0:0 9',
          `dir ${'l'.repeat(120)} 755 0:0`,
          `dir ${'l'.repeat(120)}/${'m'.repeat(120)} 755 0:0`,
          `file ${'l'.repeat(120)}/${'m'.repeat(120)}/f.txt 644 0:0 4`,
          'symlink main 777 0:0 -> app/main.py',
        ]);
        const long = all.entries.find((e) => e.path.endsWith('f.txt'))!;
        assert.equal(await content(long), 'long');
        assert.equal((await ctx.readFile('Dockerfile', 100)).toString(), 'FROM a\n');
        hashes.add(all.hash);
      } finally {
        await ctx.close();
      }
    }
    assert.equal(hashes.size, 1, 'the same files hash the same whatever the archive format');
    await spoolEmpty();
  });

  it('reads hand-made GNU long names and links, pax path/linkpath/size/uid, and a global pax record', async () => {
    const longDir = `${'d'.repeat(150)}`;
    const ctx = await open(
      tar([
        { path: 'g', type: 'g', data: '' },
        ...longName({ path: `${longDir}/file-with-a-long-name.txt`, data: 'gnu' }),
        { path: '././@LongLink', type: 'K', data: `${longDir}/target\0` },
        { path: 'short-link', type: '2', linkpath: 'ignored' },
        ...pax({ path: 'päx/ünïcode.txt', uid: '7' }, { path: 'ignored', data: 'pax' }),
        ...pax({ linkpath: 'päx/ünïcode.txt' }, { path: 'plink', type: '2' }),
      ]),
      { dockerignore: false },
    );
    try {
      const s = await ctx.select(['.'], '/');
      assert.deepEqual(list(s), [
        `dir ${longDir} 755 0:0`,
        `file ${longDir}/file-with-a-long-name.txt 644 0:0 3`,
        'symlink plink 777 0:0 -> päx/ünïcode.txt',
        'dir päx 755 0:0',
        'file päx/ünïcode.txt 644 0:0 3',
        `symlink short-link 777 0:0 -> ${longDir}/target`,
      ]);
      assert.equal(await content(s.entries[4]), 'pax');
    } finally {
      await ctx.close();
    }
  });

  it('an empty stream and an archive of only the end blocks are empty contexts', async () => {
    for (const b of [Buffer.alloc(0), Buffer.alloc(1024), gzipSync(Buffer.alloc(1024))]) {
      const ctx = await open(b);
      assert.deepEqual(ctx.stats.entries, 0);
      assert.deepEqual((await ctx.select(['.'], '/x/')).entries, []);
      await refusal(ctx.select(['a'], '/x/'), /file not found in build context/);
      await ctx.close();
    }
    await spoolEmpty();
  });

  it('hard links become copies of their target; devices and FIFOs are skipped; ./ prefixes and the root dir are fine', async () => {
    const ctx = await open(
      tar([
        { path: './', type: '5' },
        { path: './a.txt', data: 'A', mode: 0o600 },
        { path: './hard', type: '1', linkpath: './a.txt' },
        { path: './null', type: '3' },
        { path: './pipe', type: '6' },
      ]),
    );
    try {
      const s = await ctx.select(['.'], '/x/');
      assert.deepEqual(list(s), ['file a.txt 600 0:0 1', 'file hard 600 0:0 1']);
      assert.equal(await content(s.entries[1]), 'A');
      assert.equal(ctx.stats.entries, 5);
    } finally {
      await ctx.close();
    }
  });
});

describe('BuildContext: hostile and malformed archives are refused, naming the entry, leaving nothing', () => {
  const cases: [string, () => Buffer, RegExp, string?][] = [
    ['../ escapes', () => tar([{ path: '../evil', data: 'x' }]), /entry "\.\.\/evil" leaves the context/],
    [
      '.. in the middle',
      () => tar([{ path: 'a/../../evil', data: 'x' }]),
      /entry "a\/\.\.\/\.\.\/evil" leaves the context/,
    ],
    ['absolute paths', () => tar([{ path: '/etc/passwd', data: 'x' }]), /entry "\/etc\/passwd" is an absolute path/],
    [
      'an entry through a symlink',
      () =>
        tar([
          { path: 'link', type: '2', linkpath: '/etc' },
          { path: 'link/passwd', data: 'x' },
        ]),
      /entry "link\/passwd" is under link, which is a symlink/,
    ],
    [
      'an entry under a file',
      () =>
        tar([
          { path: 'f', data: 'x' },
          { path: 'f/g', data: 'y' },
        ]),
      /entry "f\/g" is under f, which is a file/,
    ],
    [
      'a hard link to a missing file',
      () => tar([{ path: 'h', type: '1', linkpath: '/etc/shadow' }]),
      /entry "h" is a hard link to "\/etc\/shadow", which is not a file before it/,
    ],
    [
      'a hard link forward',
      () =>
        tar([
          { path: 'h', type: '1', linkpath: 'later' },
          { path: 'later', data: 'x' },
        ]),
      /hard link to "later"/,
    ],
    [
      'a hard link to a directory',
      () =>
        tar([
          { path: 'd', type: '5' },
          { path: 'h', type: '1', linkpath: 'd' },
        ]),
      /hard link to "d"/,
    ],
    [
      'a bad checksum',
      () => tar([{ path: 'a', data: 'x', badChecksum: true }]),
      /not a tar archive \(bad header checksum\)/,
    ],
    [
      'a bad checksum later',
      () =>
        tar([
          { path: 'a', data: 'x' },
          { path: 'b', data: 'y', badChecksum: true },
        ]),
      /corrupt tar header at byte 1024/,
    ],
    ['garbage', () => Buffer.from('this is not a tar archive at all'.repeat(20)), /not a tar archive/],
    [
      'truncated data',
      () => tar([{ path: 'a', data: 'x', size: 4096 }], { end: false }).subarray(0, 1024),
      /truncated/,
    ],
    [
      'a truncated header',
      () => tar([{ path: 'a', data: 'x' }, { path: 'b' }], { end: false }).subarray(0, 1300),
      /truncated/,
    ],
    [
      'a huge pax header',
      () => tar([{ path: 'p', type: 'x', data: Buffer.alloc(2 * 1024 * 1024, 0x61) }]),
      /extended header at byte 0 is 2097152 bytes/,
    ],
    [
      'a huge long name',
      () => tar([{ path: '././@LongLink', type: 'L', data: Buffer.alloc(100 * 1024, 0x61) }]),
      /extended header at byte 0 is 102400 bytes/,
    ],
    ['a long path', () => tar(longName({ path: `${'a/'.repeat(2100)}f`, data: 'x' })), /is longer than 4095 bytes/],
    ['a long name', () => tar(longName({ path: 'n'.repeat(300), data: 'x' })), /has a name longer than 255 bytes/],
    [
      'a malformed pax record',
      () => tar([{ path: 'p', type: 'x', data: '99 path=x\n' }, { path: 'a' }]),
      /corrupt pax header/,
    ],
    [
      'sparse files',
      () => tar([...pax({ 'GNU.sparse.major': '1' }, { path: 'a', data: 'x' })]),
      /sparse files .* not supported/,
    ],
    ['a GNU sparse entry', () => tar([{ path: 'sp', type: 'S', data: 'x' }]), /entry "sp" is a sparse file/],
    ['an unknown type', () => tar([{ path: 'q', type: 'Q' }]), /entry "q" is a type "Q"/],
    ['the root as a file', () => tar([{ path: '.', data: 'x' }]), /is the root but not a directory/],
    ['invalid gzip', () => Buffer.concat([Buffer.from([0x1f, 0x8b, 8, 0]), Buffer.alloc(40, 7)]), /not valid gzip/],
  ];
  for (const [name, make, pattern] of cases) {
    it(name, async () => {
      const err = await refusal(open(make()), pattern);
      assert.match(err.message, /build context/);
      await spoolEmpty();
    });
  }

  it('too many entries, too many bytes, and a gzip bomb', async () => {
    const many = tar(Array.from({ length: 11 }, (_, i) => ({ path: `f${i}`, data: '' })));
    await refusal(open(many, { maxEntries: 10 }), /more than 10 entries/);
    const big = tar([{ path: 'big', data: Buffer.alloc(100_000) }]);
    const e = await refusal(open(big, { maxBytes: 50_000 }), /over 50000 bytes/, 'payload_too_large');
    assert.deepEqual(e.details, { limit: 50_000 });
    const bomb = gzipSync(tar([{ path: 'zeros', data: Buffer.alloc(20 * 1024 * 1024) }]));
    assert.ok(bomb.length < 100_000);
    await refusal(open(bomb, { maxBytes: 1024 * 1024 }), /over 1048576 bytes/, 'payload_too_large');
    await spoolEmpty();
  });

  it('directories implied by deep paths count as entries (a few entries cannot fill the heap)', async () => {
    // Each entry names a path 200 directories deep that no entry declares: before, the index
    // made 200 nodes per entry uncounted, so ~8000 such entries (40 MB of tar, far less
    // gzipped) took the server's whole heap.
    const deep = Array.from({ length: 3 }, (_, i) => longName({ path: `${i}/${'a/'.repeat(200)}f`, data: '' })).flat();
    await refusal(open(tar(deep), { maxEntries: 100 }), /more than 100 entries/);
    await spoolEmpty();
    // Declared directories are counted once, not again as implied ones.
    const declared = tar([
      { path: 'd', type: '5' },
      { path: 'd/e', type: '5' },
      { path: 'd/e/f', data: 'x' },
    ]);
    const ctx = await open(declared, { maxEntries: 3 });
    await ctx.close();
    await refusal(open(tar([{ path: 'd/e/f', data: 'x' }]), { maxEntries: 2 }), /more than 2 entries/);
    await spoolEmpty();
  });

  it('a body that fails mid-stream leaves nothing', async () => {
    async function* failing() {
      yield tar([{ path: 'a', data: 'x' }], { end: false });
      throw new Error('connection reset');
    }
    await assert.rejects(
      BuildContext.open(failing(), { spoolDir, maxBytes: 1 << 20, maxEntries: 10 }),
      /connection reset/,
    );
    await spoolEmpty();
  });
});

describe('BuildContext: COPY semantics', () => {
  /** A context like a small app's, with the tar's own owners (which COPY does not keep). */
  const app = () =>
    tar([
      { path: 'Dockerfile', data: 'FROM a\n' },
      { path: 'a.txt', data: 'A', mode: 0o640 },
      { path: 'b.txt', data: 'BB' },
      { path: 'c.md', data: 'C' },
      { path: 'run.sh', data: '#!/bin/sh\n', mode: 0o755 },
      { path: 'src', type: '5', mode: 0o750 },
      { path: 'src/x.py', data: 'x' },
      { path: 'src/pkg', type: '5' },
      { path: 'src/pkg/y.py', data: 'y' },
      { path: 'src/link-to-x', type: '2', linkpath: 'x.py' },
      { path: 'src/up', type: '2', linkpath: '../a.txt' },
      { path: 'lnk-src', type: '2', linkpath: 'src' },
      { path: 'lnk-file', type: '2', linkpath: 'src/pkg/y.py' },
      { path: 'escape', type: '2', linkpath: '../../../etc/passwd' },
      { path: 'abs', type: '2', linkpath: '/src/x.py' },
      { path: 'dangling', type: '2', linkpath: 'nothing' },
      { path: 'loop1', type: '2', linkpath: 'loop2' },
      { path: 'loop2', type: '2', linkpath: 'loop1' },
      { path: 'arr[0].txt', data: '0' },
      { path: 'docs', type: '5' },
      { path: 'docs/a.md', data: 'a' },
      { path: 'docs/b.txt', data: 'b' },
      { path: 'dlink', type: '2', linkpath: 'docs' },
    ]);
  let ctx: BuildContext;
  before(async () => {
    ctx = await open(app());
  });
  after(async () => {
    await ctx.close();
    await spoolEmpty();
  });

  it('a directory copies its contents (symlinks inside stay symlinks), owner root by default', async () => {
    const s = await ctx.select(['src'], '/app');
    assert.equal(s.dest, '/app');
    assert.deepEqual(list(s), [
      'symlink link-to-x 777 0:0 -> x.py',
      'dir pkg 755 0:0',
      'file pkg/y.py 644 0:0 1',
      'symlink up 777 0:0 -> ../a.txt',
      'file x.py 644 0:0 1',
    ]);
    assert.deepEqual(s.destDir, { mode: 0o755, uid: 0, gid: 0 });
  });

  it('a file to a path without / is written as that file; with / (or several sources) it goes into the dir', async () => {
    const f = await ctx.select(['a.txt'], '/etc/app.conf');
    assert.equal(f.dest, '/etc');
    assert.deepEqual(list(f), ['file app.conf 640 0:0 1']);
    assert.equal(await content(f.entries[0]), 'A');
    const d = await ctx.select(['a.txt'], '/etc/app/');
    assert.equal(d.dest, '/etc/app');
    assert.deepEqual(list(d), ['file a.txt 640 0:0 1']);
    const m = await ctx.select(['a.txt', 'src/pkg'], '/m');
    assert.equal(m.dest, '/m');
    assert.deepEqual(list(m), ['file a.txt 640 0:0 1', 'file y.py 644 0:0 1']);
    const root = await ctx.select(['a.txt'], '/');
    assert.deepEqual([root.dest, list(root)], ['/', ['file a.txt 640 0:0 1']]);
  });

  it('sources are relative to the context: a leading / and .. never leave it; a trailing / is ignored', async () => {
    for (const src of ['/a.txt', '../../a.txt', 'src/../a.txt', './a.txt']) {
      assert.deepEqual(list(await ctx.select([src], '/x/')), ['file a.txt 640 0:0 1'], src);
    }
    assert.equal((await ctx.select(['src/'], '/x/')).entries.length, 5);
  });

  it('globs match per segment (Go filepath.Match), sorted; one match to a file path is a file', async () => {
    assert.deepEqual(list(await ctx.select(['*.txt'], '/g/')), [
      'file a.txt 640 0:0 1',
      'file arr[0].txt 644 0:0 1',
      'file b.txt 644 0:0 2',
    ]);
    assert.deepEqual(list(await ctx.select(['?.md'], '/g')), ['file g 644 0:0 1']);
    assert.deepEqual(list(await ctx.select(['[ab].txt'], '/g/')), ['file a.txt 640 0:0 1', 'file b.txt 644 0:0 2']);
    assert.deepEqual(list(await ctx.select(['[^ab].*'], '/g/')), ['file c.md 644 0:0 1']);
    assert.deepEqual(list(await ctx.select(['arr[[]0].txt'], '/g/')), ['file arr[0].txt 644 0:0 1']);
    assert.deepEqual(list(await ctx.select(['src/*/*.py'], '/g/')), ['file y.py 644 0:0 1']);
    // A matched directory copies its contents; the wildcard part does not enter symlinked dirs, the literal part does.
    assert.deepEqual(list(await ctx.select(['do*'], '/g/')), ['file a.md 644 0:0 1', 'file b.txt 644 0:0 1']);
    assert.deepEqual(list(await ctx.select(['lnk-src/x.py'], '/g/')), ['file x.py 644 0:0 1']);
    await refusal(ctx.select(['l*/x.py'], '/g/'), /no source files were specified/);
  });

  it('a glob that matches nothing is fine beside a source that matches; alone it is refused', async () => {
    assert.deepEqual(list(await ctx.select(['a.txt', 'yarn.lock*'], '/g/')), ['file a.txt 640 0:0 1']);
    await refusal(
      ctx.select(['*.lock'], '/g/'),
      /no source files were specified \(nothing in the build context matches \*\.lock\)/,
    );
    await refusal(ctx.select(['[z-'], '/g/'), /syntax error in pattern/);
  });

  it('a missing source is refused by name', async () => {
    const e = await refusal(
      ctx.select(['a.txt', 'missing.txt'], '/x/'),
      /file not found in build context or excluded by \.dockerignore: missing\.txt/,
    );
    assert.deepEqual(e.details, { source: 'missing.txt' });
  });

  it('a source that is or passes through a symlink is resolved inside the context, clamped to its root', async () => {
    assert.deepEqual(list(await ctx.select(['lnk-file'], '/x/')), ['file lnk-file 644 0:0 1']);
    assert.deepEqual(list(await ctx.select(['lnk-src/pkg'], '/x/')), ['file y.py 644 0:0 1']);
    assert.equal((await ctx.select(['lnk-src'], '/x/')).entries.length, 5);
    assert.deepEqual(
      list(await ctx.select(['abs'], '/x/')),
      ['file abs 644 0:0 1'],
      'an absolute target is the context root',
    );
    assert.deepEqual(list(await ctx.select(['src/up'], '/x/')), ['file up 640 0:0 1']);
    // ../../../etc/passwd from the context is etc/passwd of the context: missing, never the host's.
    await refusal(ctx.select(['escape'], '/x/'), /file not found in build context .*: escape/);
    await refusal(ctx.select(['dangling'], '/x/'), /not found.*: dangling/);
    await refusal(ctx.select(['loop1'], '/x/'), /too many levels of symbolic links/);
    await refusal(ctx.select(['l*'], '/x/'), /matches the symlink loop1, which leads to nothing/);
    assert.deepEqual(list(await ctx.select(['dli*'], '/x/')), ['file a.md 644 0:0 1', 'file b.txt 644 0:0 1']);
  });

  it('--chown and --chmod apply to every entry and to the dest dir Docker would create', async () => {
    const s = await ctx.select(['src/pkg', 'run.sh'], '/opt/', { owner: { uid: 1000, gid: 100 }, chmod: 0o700 });
    assert.deepEqual(list(s), ['file y.py 700 1000:100 1', 'file run.sh 700 1000:100 10']);
    assert.deepEqual(s.destDir, { mode: 0o700, uid: 1000, gid: 100 });
  });

  it('the hash keys on content, mode, owner and dest, and is stable', async () => {
    const h = async (src: string[], dest: string, o = {}) => (await ctx.select(src, dest, o)).hash;
    const base = await h(['src'], '/app');
    assert.match(base, /^[0-9a-f]{64}$/);
    assert.equal(await h(['src'], '/app'), base);
    assert.equal(await h(['src/'], '/app/'), base, 'the same entries at the same dest');
    const others = [
      await h(['src'], '/app2'),
      await h(['src'], '/app', { chmod: 0o755 }),
      await h(['src'], '/app', { owner: { uid: 1, gid: 1 } }),
      await h(['src/pkg'], '/app'),
    ];
    assert.equal(new Set([base, ...others]).size, 5);
    // Same names, other content: another context.
    const other = await open(tar([{ path: 'src/x.py', data: 'X' }, ...[{ path: 'src/pkg/y.py', data: 'y' }]]));
    try {
      assert.notEqual((await other.select(['src/x.py'], '/a/')).hash, (await ctx.select(['src/x.py'], '/a/')).hash);
    } finally {
      await other.close();
    }
  });

  it('refuses a relative dest and no sources; a file and a directory at one path conflict', async () => {
    await refusal(ctx.select(['a.txt'], 'rel/'), /destination "rel\/" is not absolute/);
    await refusal(ctx.select([], '/x/'), /no source files/);
    const c = await open(
      tar([
        { path: 'one/pkg', data: 'file' },
        { path: 'two/pkg', type: '5' },
        { path: 'two/pkg/f', data: 'x' },
      ]),
    );
    try {
      await refusal(c.select(['one', 'two'], '/x/'), /pkg would be both a directory and a file/);
      // A later file replaces an earlier one of the same name.
      const d = await open(
        tar([
          { path: 'one/f', data: '1' },
          { path: 'two/f', data: '22' },
        ]),
      );
      const s = await d.select(['one', 'two'], '/x/');
      assert.deepEqual(list(s), ['file f 644 0:0 2']);
      assert.equal(await content(s.entries[0]), '22');
      await d.close();
    } finally {
      await c.close();
    }
  });
});

describe('BuildContext: .dockerignore', () => {
  const withIgnore = (ignore: string) =>
    tar([
      { path: '.dockerignore', data: ignore },
      { path: 'Dockerfile', data: 'FROM a\n' },
      { path: 'app.py', data: 'a' },
      { path: 'debug.log', data: 'l' },
      { path: 'sub/debug.log', data: 'l' },
      { path: 'node_modules/m/index.js', data: 'm' },
      { path: 'docs/a.md', data: 'a' },
      { path: 'docs/keep/README.md', data: 'r' },
      { path: 'deep/x/y/z.tmp', data: 't' },
      { path: 'secret.env', data: 's' },
    ]);

  it("applies Docker's rules: comments, ** , a leading / or ./, ! exceptions (a re-included file brings its dirs)", async () => {
    const ctx = await open(
      withIgnore(
        [
          '# build junk',
          'node_modules',
          '*.log',
          '**/*.tmp',
          '/docs',
          '!docs/keep/README.md',
          './secret.env',
          '.dockerignore',
          'Dockerfile',
        ].join('\n'),
      ),
    );
    try {
      assert.deepEqual(list(await ctx.select(['.'], '/x/')), [
        'file app.py 644 0:0 1',
        'dir deep 755 0:0',
        'dir deep/x 755 0:0',
        'dir deep/x/y 755 0:0',
        'dir docs 755 0:0',
        'dir docs/keep 755 0:0',
        'file docs/keep/README.md 644 0:0 1',
        'dir sub 755 0:0',
        'file sub/debug.log 644 0:0 1',
      ]);
      await refusal(ctx.select(['node_modules'], '/x/'), /excluded by \.dockerignore: node_modules/);
      await refusal(ctx.select(['Dockerfile'], '/x/'), /excluded by \.dockerignore: Dockerfile/);
      // The builder still reads the Dockerfile and the ignore file.
      assert.equal((await ctx.readFile('Dockerfile', 100)).toString(), 'FROM a\n');
      assert.ok(ctx.has('.dockerignore') && ctx.has('node_modules/m'));
      assert.deepEqual(list(await ctx.select(['*.py', '*.log'], '/x/')), ['file app.py 644 0:0 1']);
    } finally {
      await ctx.close();
    }
  });

  it('is not applied when the caller says so; a bad pattern is refused naming its line', async () => {
    const ctx = await open(withIgnore('*'), { dockerignore: false });
    assert.equal((await ctx.select(['.'], '/x/')).entries.filter((e) => e.type === 'file').length, 10);
    await ctx.close();
    await refusal(open(withIgnore('ok\n[unclosed')), /\.dockerignore line 2: syntax error in pattern "\[unclosed"/);
    await spoolEmpty();
  });
});

describe('BuildContext: reads, ADD archives, lifecycle', () => {
  it('readFile follows symlinks inside the context and refuses missing, directories and over-size files', async () => {
    const ctx = await open(
      tar([
        { path: 'build/Dockerfile.prod', data: 'FROM b\n' },
        { path: 'Dockerfile', type: '2', linkpath: 'build/Dockerfile.prod' },
        { path: 'out', type: '2', linkpath: '/../../etc/hostname' },
      ]),
    );
    try {
      assert.equal((await ctx.readFile('Dockerfile', 100)).toString(), 'FROM b\n');
      assert.equal((await ctx.readFile('./build/../Dockerfile', 100)).toString(), 'FROM b\n');
      await refusal(ctx.readFile('nope', 100), /the build context has no file nope/);
      await refusal(ctx.readFile('out', 100), /has no file out/);
      await refusal(ctx.readFile('build', 100), /build in the build context is not a file/);
      await refusal(ctx.readFile('Dockerfile', 3), /Dockerfile is over 3 bytes/);
      assert.equal(ctx.has('Dockerfile'), true);
      assert.equal(ctx.has('out'), false);
    } finally {
      await ctx.close();
    }
  });

  it('ADD extracts a local tar or gzip tar (keeping its owners unless --chown); other files are copied as they are', async () => {
    const inner = tar([
      { path: 'pkg/bin/tool', data: 'tool', mode: 0o755, uid: 10, gid: 20 },
      { path: 'pkg/', type: '5', uid: 10, gid: 20 },
      { path: 'pkg/link', type: '2', linkpath: 'bin/tool' },
      { path: 'pkg/hard', type: '1', linkpath: 'pkg/bin/tool' },
    ]);
    const notes = gzipSync(Buffer.from('just text'));
    const ctx = await open(
      tar([
        { path: 'pkg.tar', data: inner },
        { path: 'pkg.tar.gz', data: gzipSync(inner) },
        { path: 'notes.gz', data: notes },
        { path: 'plain.tar', data: 'not really a tar' },
      ]),
    );
    try {
      const want = [
        'dir pkg 755 10:20',
        'dir pkg/bin 755 0:0',
        'file pkg/bin/tool 755 10:20 4',
        'symlink pkg/link 777 1234:5678 -> bin/tool',
        'file pkg/hard 755 10:20 4',
      ];
      for (const src of ['pkg.tar', 'pkg.tar.gz']) {
        const s = await ctx.select([src], '/opt', { add: true });
        assert.equal(s.dest, '/opt');
        assert.deepEqual(list(s), want, src);
        assert.equal(await content(s.entries[2]), 'tool');
        assert.equal(await content(s.entries[4]), 'tool');
      }
      const owned = await ctx.select(['pkg.tar'], '/opt/', { add: true, owner: { uid: 1, gid: 2 } });
      assert.ok(owned.entries.every((e) => e.uid === 1 && e.gid === 2));
      assert.deepEqual(list(await ctx.select(['notes.gz', 'plain.tar'], '/d/', { add: true })), [
        `file notes.gz 644 0:0 ${notes.length}`,
        'file plain.tar 644 0:0 16',
      ]);
      // COPY (no add) of an archive copies the file.
      assert.deepEqual(list(await ctx.select(['pkg.tar'], '/d/')), [`file pkg.tar 644 0:0 ${inner.length}`]);
      assert.notEqual(
        (await ctx.select(['pkg.tar'], '/opt')).hash,
        (await ctx.select(['pkg.tar'], '/opt', { add: true })).hash,
      );
    } finally {
      await ctx.close();
    }
    await spoolEmpty();
  });

  it('ADD refuses a hostile archive by entry', async () => {
    const ctx = await open(
      tar([
        { path: 'evil.tar', data: tar([{ path: '../../etc/cron.d/x', data: 'x' }]) },
        { path: 'evil.tgz', data: gzipSync(tar([{ path: '/abs', data: 'x' }])) },
        { path: 'bomb.tgz', data: gzipSync(tar([{ path: 'z', data: Buffer.alloc(4 * 1024 * 1024) }])) },
      ]),
      { maxBytes: 1024 * 1024 },
    );
    try {
      await refusal(
        ctx.select(['evil.tar'], '/x/', { add: true }),
        /ADD evil\.tar: the archive entry "\.\.\/\.\.\/etc\/cron\.d\/x" leaves the context/,
      );
      await refusal(
        ctx.select(['evil.tgz'], '/x/', { add: true }),
        /ADD evil\.tgz: the archive entry "\/abs" is an absolute path/,
      );
      await refusal(
        ctx.select(['bomb.tgz'], '/x/', { add: true }),
        /ADD bomb\.tgz: the archive is over 1048576 bytes/,
        'payload_too_large',
      );
    } finally {
      await ctx.close();
    }
    await spoolEmpty();
  });

  it('ADD: the directories an archive implies count towards maxEntries (a 3 MB gzip took 3.4 GB of heap)', async () => {
    // Each archive entry is 200 directories deep, none declared: a copy of 3 entries is 603.
    const deep = Array.from({ length: 3 }, (_, i) => longName({ path: `${i}/${'a/'.repeat(200)}f`, data: '' })).flat();
    const ctx = await open(tar([{ path: 'deep.tgz', data: gzipSync(tar(deep)) }]), { maxEntries: 100 });
    try {
      await refusal(ctx.select(['deep.tgz'], '/x/', { add: true }), /more than 100 entries/);
    } finally {
      await ctx.close();
    }
    await spoolEmpty();
  });

  it('bodies are read lazily from the spool; close removes it and later reads fail', async () => {
    const data = Buffer.alloc(300_000);
    for (let i = 0; i < data.length; i++) data[i] = i % 251;
    const ctx = await open(tar([{ path: 'big.bin', data }]));
    const [e] = (await ctx.select(['big.bin'], '/b')).entries;
    const got: Uint8Array[] = [];
    for await (const c of e.body!()) got.push(c);
    assert.equal(
      createHash('sha256').update(Buffer.concat(got)).digest('hex'),
      createHash('sha256').update(data).digest('hex'),
    );
    assert.equal((await readdir(spoolDir)).length, 1);
    await ctx.close();
    await ctx.close();
    await spoolEmpty();
    await assert.rejects(async () => {
      for await (const _ of e.body!()) {
        // never reached
      }
    }, /closed/);
  });

  it('an empty context has nothing to copy or read', async () => {
    const ctx = BuildContext.empty();
    await refusal(ctx.select(['a'], '/x/'), /file not found in build context/);
    await refusal(ctx.readFile('Dockerfile', 10), /has no file Dockerfile/);
    assert.equal(ctx.has('x'), false);
    assert.deepEqual(ctx.stats, { entries: 0, bytes: 0 });
    await ctx.close();
  });
});

describe('BuildContext: any bytes', () => {
  it('a mutated or cut archive opens or is refused (validation, payload_too_large), and leaves nothing', async () => {
    const good = tar([
      { path: 'd', type: '5' },
      ...longName({ path: `d/${'n'.repeat(120)}`, data: 'long' }),
      ...pax({ path: 'p/x.txt' }, { path: 'x', data: 'xx' }),
      { path: 'd/l', type: '2', linkpath: '../p/x.txt' },
      { path: 'h', type: '1', linkpath: 'p/x.txt' },
      { path: 'f', data: Buffer.alloc(1500, 1) },
    ]);
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.nat(good.length - 1), fc.integer({ min: 0, max: 255 })), { maxLength: 6 }),
        fc.nat(good.length),
        fc.boolean(),
        async (flips, cut, gz) => {
          const b = Buffer.from(good.subarray(0, cut));
          for (const [at, v] of flips) if (at < b.length) b[at] = v;
          try {
            const ctx = await open(gz ? gzipSync(b) : b, { maxBytes: 64 * 1024, maxEntries: 50 });
            try {
              if (ctx.has('.'))
                await ctx.select(['.'], '/x/').catch((e: unknown) => assert.ok(e instanceof SandboxdError));
            } finally {
              await ctx.close();
            }
          } catch (e) {
            assert.ok(e instanceof SandboxdError, String(e));
            assert.ok(['validation', 'payload_too_large'].includes(e.kind), e.message);
          }
          assert.deepEqual(await readdir(spoolDir), []);
        },
      ),
      { numRuns: 400 },
    );
  });
});
