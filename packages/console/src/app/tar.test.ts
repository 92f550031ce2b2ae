import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { tarBlob, tarPath } from './tar.js';

const dir = mkdtempSync(join(tmpdir(), 'console-tar-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Writes the archive, lists it with GNU tar and extracts it into a fresh folder. */
async function extract(blob: Blob, name: string): Promise<{ out: string; list: string[] }> {
  const file = join(dir, `${name}.tar`);
  writeFileSync(file, new Uint8Array(await blob.arrayBuffer()));
  const out = join(dir, name);
  mkdirSync(out);
  const list = execFileSync('tar', ['-tf', file], { encoding: 'utf8' }).split('\n').filter(Boolean);
  execFileSync('tar', ['-xf', file, '-C', out, '--no-same-owner']);
  return { out, list };
}

describe('tar writer of the build context', () => {
  it('a Dockerfile alone: one entry, its bytes, whole 512-byte blocks and the two zero blocks at the end', async () => {
    const text = 'FROM local/busybox:latest\nRUN echo hi\n';
    const blob = tarBlob([{ path: 'Dockerfile', data: new Blob([text]), mtimeMs: 1_700_000_000_000 }]);
    assert.equal(blob.size, 512 + 512 + 1024);
    assert.equal(blob.type, 'application/x-tar');
    const { out, list } = await extract(blob, 'one');
    assert.deepEqual(list, ['Dockerfile']);
    assert.equal(readFileSync(join(out, 'Dockerfile'), 'utf8'), text);
    assert.equal(statSync(join(out, 'Dockerfile')).mtimeMs, 1_700_000_000_000);
    const verbose = execFileSync('tar', ['-tvf', join(dir, 'one.tar')], { encoding: 'utf8' });
    assert.match(verbose, /^-rw-r--r-- root\/root\s+38 /);
  });

  it('folders before their files (once each), modes, an empty file, a file of exactly one block, UTF-8 names', async () => {
    const block = new Uint8Array(512).fill(0x61);
    const blob = tarBlob([
      { path: 'Dockerfile', data: new Blob(['FROM x\n']) },
      { path: 'src/app/main.py', data: new Blob(['print(1)\n']) },
      { path: 'src/app/run.sh', data: new Blob(['#!/bin/sh\n']), mode: 0o755 },
      { path: 'src/empty', data: new Blob([]) },
      { path: 'data/block.bin', data: new Blob([block]) },
      { path: 'données/été.txt', data: new Blob(['ü\n']) },
    ]);
    const { out, list } = await extract(blob, 'tree');
    assert.deepEqual(list, [
      'Dockerfile',
      'src/',
      'src/app/',
      'src/app/main.py',
      'src/app/run.sh',
      'src/empty',
      'data/',
      'data/block.bin',
      'données/',
      'données/été.txt',
    ]);
    assert.equal(readFileSync(join(out, 'src/app/main.py'), 'utf8'), 'print(1)\n');
    assert.equal(statSync(join(out, 'src/app/run.sh')).mode & 0o777, 0o755);
    assert.equal(statSync(join(out, 'src/app/main.py')).mode & 0o777, 0o644);
    assert.equal(statSync(join(out, 'src/empty')).size, 0);
    assert.deepEqual(new Uint8Array(readFileSync(join(out, 'data/block.bin'))), block);
    assert.equal(readFileSync(join(out, 'données/été.txt'), 'utf8'), 'ü\n');
  });

  it('long names: a ustar prefix when a / allows it, a pax header otherwise', async () => {
    const split = `${'d'.repeat(120)}/${'f'.repeat(90)}`; // 211 bytes: prefix + name
    const seg = 'x'.repeat(150); // no split possible: name part over 100
    const pax = `a/${seg}`;
    const deep = `${Array.from({ length: 40 }, (_, i) => `dir${i}`).join('/')}/file.txt`; // ~230 bytes of folders
    const blob = tarBlob([
      { path: split, data: new Blob(['split\n']) },
      { path: pax, data: new Blob(['pax\n']) },
      { path: deep, data: new Blob(['deep\n']) },
    ]);
    const { out, list } = await extract(blob, 'long');
    assert.ok(list.includes(split));
    assert.ok(list.includes(pax));
    assert.ok(list.includes(deep));
    assert.equal(readFileSync(join(out, split), 'utf8'), 'split\n');
    assert.equal(readFileSync(join(out, pax), 'utf8'), 'pax\n');
    assert.equal(readFileSync(join(out, deep), 'utf8'), 'deep\n');
  });

  it('paths: relative and plain only; a path twice or a file that is also a folder is refused', () => {
    assert.equal(tarPath('a/b'), 'a/b');
    assert.equal(tarPath('a\\b'), 'a/b');
    assert.equal(tarPath('a/b/'), 'a/b');
    for (const bad of ['', '/etc/passwd', '../x', 'a/../b', 'a//b', './a', 'a/./b', 'a\0b'])
      assert.equal(typeof tarPath(bad), 'object', bad);
    const f = (path: string) => ({ path, data: new Blob(['x']) });
    assert.throws(() => tarBlob([f('../etc/passwd')]), /not a plain relative path/);
    assert.throws(() => tarBlob([f('a'), f('a')]), /a: given twice/);
    assert.throws(() => tarBlob([f('a'), f('a/b')]), /a: both a file and a folder/);
    assert.throws(() => tarBlob([f('a/b'), f('a')]), /a: both a file and a folder/);
  });
});
