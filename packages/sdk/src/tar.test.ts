/**
 * The tar writer and the directory walk, checked by GNU tar (the host's `tar`) reading what
 * they write: names of every length (pax past 100 bytes, UTF-8), modes, symlinks kept as
 * symlinks (pointing anywhere, never followed), empty files and directories, bodies read
 * lazily, sizes that change while packing.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { checkContextDir, directoryEntries } from './context-dir.js';
import { tarBytes, tarChunks, type TarEntry } from './tar.js';

/** `tar -tv` lines and an extraction of `tar` into a new temp dir. */
function gnuTar(tar: Uint8Array, dir: string): string[] {
  mkdirSync(dir, { recursive: true });
  execFileSync('tar', ['-x', '-C', dir, '--no-same-owner'], { input: tar });
  return execFileSync('tar', ['-t'], { input: tar }).toString().trimEnd().split('\n');
}

async function* lazy(chunks: string[]): AsyncGenerator<Uint8Array> {
  for (const c of chunks) yield new TextEncoder().encode(c);
}

describe('tar writer', () => {
  let tmp = '';
  before(() => {
    tmp = mkdtempSync(join(tmpdir(), 'sdk-tar-'));
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('writes what GNU tar reads back: files, dirs, symlinks, modes, long and UTF-8 names', async () => {
    const long = `${'d'.repeat(60)}/${'e'.repeat(70)}/${'f'.repeat(120)}.txt`;
    const entries: TarEntry[] = [
      { path: 'Dockerfile', type: 'file', body: new TextEncoder().encode('FROM local/busybox:latest\n') },
      { path: 'bin', type: 'dir', mode: 0o750 },
      { path: 'bin/run.sh', type: 'file', mode: 0o755, size: 11, body: () => lazy(['#!/bin/sh', '\n:']) },
      { path: 'empty', type: 'file' },
      { path: 'link', type: 'symlink', target: '../../etc/passwd' },
      { path: 'abs', type: 'symlink', target: '/etc/shadow' },
      { path: 'd'.repeat(60), type: 'dir' },
      { path: `${'d'.repeat(60)}/${'e'.repeat(70)}`, type: 'dir' },
      { path: long, type: 'file', body: new Uint8Array(513).fill(65) },
      { path: 'ünïcödé ✓.txt', type: 'file', body: new TextEncoder().encode('utf8') },
      { path: 'longlink', type: 'symlink', target: `/${'t'.repeat(150)}` },
      { path: './dot/', type: 'dir' },
    ];
    const tar = await tarBytes(entries);
    assert.equal(tar.byteLength % 512, 0);
    assert.deepEqual([...tar.subarray(tar.byteLength - 1024)], new Array(1024).fill(0), 'ends with two zero blocks');
    const out = join(tmp, 'x1');
    const names = gnuTar(tar, out);
    assert.deepEqual(names, [
      'Dockerfile',
      'bin/',
      'bin/run.sh',
      'empty',
      'link',
      'abs',
      `${'d'.repeat(60)}/`,
      `${'d'.repeat(60)}/${'e'.repeat(70)}/`,
      long,
      'ünïcödé ✓.txt',
      'longlink',
      'dot/',
    ]);
    assert.equal(readFileSync(join(out, 'Dockerfile'), 'utf8'), 'FROM local/busybox:latest\n');
    assert.equal(readFileSync(join(out, 'bin/run.sh'), 'utf8'), '#!/bin/sh\n:');
    assert.equal(lstatSync(join(out, 'bin/run.sh')).mode & 0o777, 0o755);
    assert.equal(lstatSync(join(out, 'bin')).mode & 0o777, 0o750);
    assert.equal(lstatSync(join(out, 'Dockerfile')).mode & 0o777, 0o644);
    assert.equal(readFileSync(join(out, 'empty')).length, 0);
    assert.equal(readlinkSync(join(out, 'link')), '../../etc/passwd');
    assert.equal(readlinkSync(join(out, 'abs')), '/etc/shadow');
    assert.equal(readlinkSync(join(out, 'longlink')), `/${'t'.repeat(150)}`);
    assert.equal(readFileSync(join(out, long)).toString(), 'A'.repeat(513));
    assert.equal(readFileSync(join(out, 'ünïcödé ✓.txt'), 'utf8'), 'utf8');
    const verbose = execFileSync('tar', ['-tv', '--numeric-owner'], { input: tar }).toString();
    assert.match(verbose, /^-rw-r--r-- 0\/0 +26 1970-01-01 00:00 Dockerfile$/m, 'owner root, mtime 0');
  });

  it('refuses absolute paths, .. and empty segments, files without a size, and bodies of another size', async () => {
    for (const path of ['/etc/passwd', '../x', 'a/../b', 'a//b', '', '.'])
      await assert.rejects(tarBytes([{ path, type: 'file' }]), /must be relative/, path);
    await assert.rejects(tarBytes([{ path: 'a', type: 'file', body: () => lazy(['x']) }]), /needs its size/);
    await assert.rejects(
      tarBytes([{ path: 'a', type: 'file', size: 1, body: () => lazy(['xy']) }]),
      /a grew while it was being packed/,
    );
    await assert.rejects(
      tarBytes([{ path: 'a', type: 'file', size: 3, body: () => lazy(['xy']) }]),
      /a shrank while it was being packed \(3 bytes expected, 2 read\)/,
    );
  });

  it('reads bodies only as the consumer pulls', async () => {
    let opened = 0;
    const body = () => {
      opened++;
      return lazy(['abc']);
    };
    const it = tarChunks([
      { path: 'one', type: 'file', size: 3, body },
      { path: 'two', type: 'file', size: 3, body },
    ]);
    await it.next(); // header of one
    assert.equal(opened, 0);
    await it.next(); // body of one
    assert.equal(opened, 1);
    await it.return(undefined);
    assert.equal(opened, 1);
  });

  it('packs a directory: dirs before contents, symlinks as symlinks (never followed), modes kept, specials left out', async () => {
    const src = join(tmp, 'ctx');
    mkdirSync(join(src, 'app/sub'), { recursive: true });
    writeFileSync(join(src, 'Dockerfile'), 'FROM local/busybox:latest\nCOPY . /app\n');
    writeFileSync(join(src, 'app/main.sh'), 'echo hi\n');
    chmodSync(join(src, 'app/main.sh'), 0o700);
    writeFileSync(join(src, 'app/sub/big.bin'), Buffer.alloc(600_000, 1));
    symlinkSync('/etc/passwd', join(src, 'passwd'));
    symlinkSync('../../../etc', join(src, 'app/up'));
    symlinkSync('app', join(src, 'dirlink'));
    execFileSync('mkfifo', [join(src, 'fifo')]);
    await checkContextDir(src);
    const entries: TarEntry[] = [];
    for await (const e of directoryEntries(`${src}/`)) entries.push(e);
    assert.deepEqual(
      entries.map((e) => `${e.type} ${e.path}`),
      [
        'file Dockerfile',
        'dir app',
        'file app/main.sh',
        'dir app/sub',
        'file app/sub/big.bin',
        'symlink app/up',
        'symlink dirlink',
        'symlink passwd',
      ],
    );
    const out = join(tmp, 'x2');
    gnuTar(await tarBytes(entries), out);
    assert.equal(readlinkSync(join(out, 'passwd')), '/etc/passwd');
    assert.equal(readlinkSync(join(out, 'app/up')), '../../../etc');
    assert.equal(readlinkSync(join(out, 'dirlink')), 'app');
    assert.equal(lstatSync(join(out, 'app/main.sh')).mode & 0o777, 0o700);
    assert.ok(readFileSync(join(out, 'app/sub/big.bin')).equals(Buffer.alloc(600_000, 1)));

    await assert.rejects(checkContextDir(join(tmp, 'missing')), /Cannot read the build context .*missing: ENOENT/);
    await assert.rejects(checkContextDir(join(src, 'Dockerfile')), /is not a directory/);
  });

  it('names the file it cannot read (here: removed after the walk saw it)', async () => {
    const src = join(tmp, 'vanishing');
    mkdirSync(src);
    writeFileSync(join(src, 'gone'), 'x');
    const it = tarChunks(directoryEntries(src));
    await it.next(); // the header: the file was seen
    rmSync(join(src, 'gone'));
    await assert.rejects(it.next(), /Cannot pack .*vanishing\/gone: ENOENT/);
  });
});
