import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create } from 'tar';
import { type TarEntry, TarError, TarParser } from './tar.js';

/** An archive made by node-tar (ustar with pax for long names) from an in-memory file list. */
async function archive(): Promise<Buffer> {
  const { mkdtemp, writeFile, mkdir, rm, symlink } = await import('node:fs/promises');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = await mkdtemp(join(tmpdir(), 'sbx-tar-test-'));
  try {
    const long = 'x'.repeat(180);
    await mkdir(join(dir, 'a/b'), { recursive: true });
    await writeFile(join(dir, 'a/b/one.txt'), 'one');
    await writeFile(join(dir, 'a/empty'), '');
    await writeFile(join(dir, long), Buffer.alloc(1025, 7));
    await symlink('a/b/one.txt', join(dir, 'ln'));
    const chunks: Buffer[] = [];
    const stream = create({ cwd: dir, portable: true }, ['a', long, 'ln']);
    for await (const c of stream) chunks.push(Buffer.from(c as Buffer));
    return Buffer.concat(chunks);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function parse(b: Buffer, chunk: number): { entries: TarEntry[]; data: Map<string, Buffer> } {
  const entries: TarEntry[] = [];
  const data = new Map<string, Buffer>();
  let cur: Buffer[] = [];
  const p = new TarParser({
    onEntry: (e) => {
      entries.push(e);
      cur = [];
    },
    onData: (c) => cur.push(Buffer.from(c)),
    onDataEnd: () => data.set(entries.at(-1)!.path, Buffer.concat(cur)),
  });
  for (let i = 0; i < b.length; i += chunk) p.write(b.subarray(i, i + chunk));
  p.end();
  return { entries, data };
}

describe('TarParser', () => {
  it('finds the same entries, data and offsets whatever the chunk boundaries', async () => {
    const b = await archive();
    const whole = parse(b, b.length);
    assert.deepEqual(
      whole.entries
        .map((e) => [e.path, e.type, e.size, e.linkpath])
        .sort((x, y) => String(x[0]).localeCompare(String(y[0]))),
      [
        ['a/', 'dir', 0, ''],
        ['a/b/', 'dir', 0, ''],
        ['a/b/one.txt', 'file', 3, ''],
        ['a/empty', 'file', 0, ''],
        ['ln', 'symlink', 0, 'a/b/one.txt'],
        ['x'.repeat(180), 'file', 1025, ''],
      ],
    );
    for (const e of whole.entries.filter((x) => x.type === 'file')) {
      assert.deepEqual(b.subarray(e.dataOffset, e.dataOffset + e.size), whole.data.get(e.path), e.path);
    }
    for (const size of [1, 3, 511, 512, 513, 4096]) assert.deepEqual(parse(b, size), whole, `chunks of ${size}`);
  });

  it('stops at the end block and ignores what follows; refuses a truncated stream', async () => {
    const b = await archive();
    const withJunk = Buffer.concat([b, Buffer.from('trailing junk that is not a header')]);
    assert.equal(parse(withJunk, 100).entries.length, 6);
    assert.throws(() => parse(b.subarray(0, 700), 64), TarError);
  });
});
