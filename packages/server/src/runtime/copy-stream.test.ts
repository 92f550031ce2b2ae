import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import { type CopyEntry, copyPathProblem, decodeCopyStream, encodeCopyStream } from './copy-stream.js';

async function bytes(it: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const c of it) out.push(Buffer.from(c));
  return Buffer.concat(out);
}

/** `buf` as a body of chunks of `size` bytes (the decoder must not care where chunks end). */
async function* chunked(buf: Buffer, size: number): AsyncIterable<Uint8Array> {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
}

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

/** Decodes `stream`, reading each file's body (or not, for paths in `skip`). */
async function decodeAll(stream: AsyncIterable<Uint8Array>, skip: string[] = []) {
  const out: Array<Omit<CopyEntry, 'body'> & { data?: Buffer }> = [];
  for await (const e of decodeCopyStream(stream)) {
    const { body, ...rest } = e;
    out.push(e.type === 'file' && !skip.includes(e.path) ? { ...rest, data: await bytes(body!()) } : rest);
  }
  return out;
}

const isValidation = (re: RegExp) => (e: unknown) =>
  e instanceof SandboxdError && e.kind === 'validation' && re.test(e.message);

describe('copy streams', () => {
  it('encodes the documented header lines, each file followed by its bytes', async () => {
    const s = await bytes(
      encodeCopyStream([
        dir('', { mode: 0o755 }),
        file('a.txt', 'hi\n', { mode: 0o640, uid: 1000, gid: 1001 }),
        { path: 'l', type: 'symlink', mode: 0o777, uid: 0, gid: 0, size: 0, target: 'a.txt' },
      ]),
    );
    assert.equal(
      s.toString(),
      '{"p":"","t":"d","m":493,"u":0,"g":0,"s":0}\n' +
        '{"p":"a.txt","t":"f","m":416,"u":1000,"g":1001,"s":3}\nhi\n' +
        '{"p":"l","t":"l","m":511,"u":0,"g":0,"s":0,"l":"a.txt"}\n',
    );
  });

  it('round trips dirs, files (empty, binary, large, odd names) and symlinks, whatever the chunking', async () => {
    const big = randomBytes(3 * 1024 * 1024 + 7);
    const small = randomBytes(3000);
    const entries = [
      dir(''),
      dir('sub', { mode: 0o555, uid: 7, gid: 8 }),
      file('sub/empty', ''),
      file('sub/bin', Buffer.from([0, 10, 255, 10, 123])),
      file('big', big, { mode: 0o4755 }),
      file('naïve \n"quoted"\\ 名前', 'x'),
      { path: 'sub/link', type: 'symlink' as const, mode: 0o777, uid: 1, gid: 1, size: 0, target: '../big' },
    ];
    for (const [size, data] of [
      [1, small],
      [7, small],
      [4096, big],
      [Infinity, big],
    ] as const) {
      entries[4] = file('big', data, { mode: 0o4755 });
      const s = await bytes(encodeCopyStream(entries));
      const got = await decodeAll(chunked(s, Math.min(size, s.length)));
      assert.deepEqual(
        got.map((e) => [e.path, e.type, e.mode, e.uid, e.gid, e.size, e.target, e.data?.length]),
        entries.map((e) => [
          e.path,
          e.type,
          e.mode,
          e.uid,
          e.gid,
          e.size,
          e.target,
          e.type === 'file' ? e.size : undefined,
        ]),
      );
      assert.ok(got[4].data!.equals(data));
      assert.ok(got[3].data!.equals(Buffer.from([0, 10, 255, 10, 123])));
    }
  });

  it('skips the bodies a consumer does not read', async () => {
    const s = await bytes(encodeCopyStream([file('a', 'aaaa'), file('b', 'bb'), dir('c')]));
    const got = await decodeAll(chunked(s, 3), ['a']);
    assert.deepEqual(
      got.map((e) => [e.path, e.data?.toString()]),
      [
        ['a', undefined],
        ['b', 'bb'],
        ['c', undefined],
      ],
    );
  });

  it('an empty stream has no entries', async () => {
    assert.deepEqual(await decodeAll(chunked(Buffer.alloc(0), 1)), []);
  });

  for (const [name, path, type] of [
    ['absolute', '/etc/passwd', 'file'],
    ['dot-dot', 'a/../../x', 'file'],
    ['leading dot-dot', '../x', 'dir'],
    ['dot', './x', 'file'],
    ['empty segment', 'a//b', 'file'],
    ['trailing slash', 'a/', 'dir'],
    ['NUL', 'a\0b', 'file'],
    ['"" for a file', '', 'file'],
  ] as const) {
    it(`refuses a ${name} path, naming the entry, on both sides`, async () => {
      assert.ok(copyPathProblem(path, type));
      const e = type === 'file' ? file(path, 'x') : dir(path);
      await assert.rejects(bytes(encodeCopyStream([e])), isValidation(/Bad copy stream entry/));
      const line = `${JSON.stringify({ p: path, t: type === 'file' ? 'f' : 'd', m: 420, u: 0, g: 0, s: type === 'file' ? 1 : 0 })}\nx`;
      await assert.rejects(decodeAll(chunked(Buffer.from(line), 5)), isValidation(/Bad copy stream entry/));
    });
  }

  for (const [name, text, re] of [
    ['not JSON', '{"p":"a",\n', /#1: the header is not JSON/],
    ['an array', '[1]\n', /#1: .*object/],
    ['an unknown key', '{"p":"a","t":"d","m":1,"u":0,"g":0,"s":0,"x":1}\n', /entry a: unknown key "x"/],
    ['a missing key', '{"p":"a","t":"d","m":1,"u":0,"g":0}\n', /entry a: .*"s"/],
    ['a bad type', '{"p":"a","t":"x","m":1,"u":0,"g":0,"s":0}\n', /entry a: "t"/],
    ['a mode too big', '{"p":"a","t":"d","m":4096,"u":0,"g":0,"s":0}\n', /entry a: .*mode/],
    ['a negative uid', '{"p":"a","t":"d","m":1,"u":-1,"g":0,"s":0}\n', /entry a: uid/],
    ['a fractional size', '{"p":"a","t":"f","m":1,"u":0,"g":0,"s":1.5}\n', /entry a: .*size/],
    ['a dir with a size', '{"p":"a","t":"d","m":1,"u":0,"g":0,"s":2}\n', /entry a: only a file/],
    ['a symlink without target', '{"p":"a","t":"l","m":1,"u":0,"g":0,"s":0}\n', /entry a: a symlink needs/],
    ['a file with a target', '{"p":"a","t":"f","m":1,"u":0,"g":0,"s":0,"l":"b"}\n', /entry a: only a symlink/],
    ['a header cut by EOF', '{"p":"a","t":"d"', /#1: the stream ends inside a header/],
    ['a short body', '{"p":"a","t":"f","m":1,"u":0,"g":0,"s":10}\nabc', /entry a: the stream ends inside this file/],
    ['bytes that are not UTF-8', Buffer.from([0x7b, 0xff, 0x7d, 0x0a]), /#1: the header is not UTF-8/],
  ] as const) {
    it(`refuses ${name}`, async () => {
      const buf = Buffer.from(text as string | Buffer);
      await assert.rejects(decodeAll(chunked(buf, 2)), isValidation(re));
    });
  }

  it('names the entry by number when the path is not known, and counts from 1', async () => {
    const s = `${JSON.stringify({ p: 'a', t: 'd', m: 0, u: 0, g: 0, s: 0 })}\n{}\n`;
    await assert.rejects(decodeAll(chunked(Buffer.from(s), 64)), isValidation(/#2: the header has no "p"/));
  });

  it('refuses a header over the limit', async () => {
    const s = Buffer.alloc(200 * 1024, 'a');
    await assert.rejects(decodeAll(chunked(s, 65536)), isValidation(/#1: the header is over/));
  });

  it('refuses a body that is shorter or longer than its size when encoding', async () => {
    await assert.rejects(
      bytes(encodeCopyStream([file('a', 'abc', { size: 5 })])),
      isValidation(/entry a: the body gave 3 of its 5/),
    );
    await assert.rejects(
      bytes(encodeCopyStream([file('a', 'abcdef', { size: 2 })])),
      isValidation(/entry a: the body is longer/),
    );
    await assert.rejects(
      bytes(encodeCopyStream([file('a', '', { size: 2, body: undefined })])),
      isValidation(/needs a body/),
    );
  });
});
