import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { cStrings, encodeFrame, type Frame, FrameError, FrameReader, u32 } from './frames.js';

/** Every frame `reader` has after `chunks`, with payloads copied. */
function readAll(reader: FrameReader, ...chunks: Buffer[]): Frame[] {
  const out: Frame[] = [];
  for (const c of chunks) {
    reader.push(c);
    for (let f = reader.next(); f; f = reader.next()) out.push({ ...f, payload: Buffer.from(f.payload) });
  }
  return out;
}

test('encodeFrame writes u32le length | u8 type | u32le id | u32le fields | tail', () => {
  const f = encodeFrame(7, 0x01020304, [1, 0xffffffff], Buffer.from('ab'), Buffer.from('c'));
  assert.deepEqual([...f], [16, 0, 0, 0, 7, 4, 3, 2, 1, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x61, 0x62, 0x63]);
  assert.deepEqual([...encodeFrame(0, 0, [])], [5, 0, 0, 0, 0, 0, 0, 0, 0], 'no fields, no payload');
  assert.throws(() => encodeFrame(1, 1, [2 ** 32]), RangeError);
  assert.deepEqual([u32(-5), u32(2 ** 40), u32(7)], [0, 0xffffffff, 7]);
  assert.deepEqual(cStrings(['sh', '', 'é']), Buffer.from('sh\0\0é\0'));
});

test('a frame split anywhere, down to single bytes, comes out whole and once', () => {
  const frame = encodeFrame(3, 42, [9], Buffer.from('hello'));
  for (let cut = 1; cut < frame.length; cut++) {
    const frames = readAll(new FrameReader(1024), frame.subarray(0, cut), frame.subarray(cut));
    assert.equal(frames.length, 1, `cut at ${cut}`);
    assert.deepEqual(frames[0].payload, Buffer.from([9, 0, 0, 0, ...Buffer.from('hello')]));
  }
  const bytes = [...frame].map((b) => Buffer.from([b]));
  assert.deepEqual(
    readAll(new FrameReader(1024), ...bytes).map((f) => [f.type, f.id]),
    [[3, 42]],
  );
});

test('many frames in one chunk come out in order; a trailing partial frame waits', () => {
  const frames = Array.from({ length: 50 }, (_, i) => encodeFrame(i % 6, i, [], randomBytes(i)));
  const all = Buffer.concat(frames);
  const reader = new FrameReader(1024);
  const got = readAll(reader, all.subarray(0, all.length - 3));
  assert.equal(got.length, 49);
  assert.deepEqual(
    got.map((f) => [f.type, f.id, f.payload.length]),
    frames.slice(0, 49).map((_, i) => [i % 6, i, i]),
  );
  assert.deepEqual(readAll(reader, all.subarray(all.length - 3))[0].payload, frames[49].subarray(9));
});

test('the bound: a length of exactly maxLength is read; one more is refused before its bytes arrive', () => {
  const max = 5 + 100;
  assert.equal(readAll(new FrameReader(max), encodeFrame(1, 1, [], Buffer.alloc(100)))[0].payload.length, 100);
  const reader = new FrameReader(max);
  reader.push(encodeFrame(1, 1, [], Buffer.alloc(101)).subarray(0, 4));
  assert.throws(
    () => reader.next(),
    (e) => e instanceof FrameError && e.reason === 'oversize' && e.length === 106,
  );
  assert.throws(() => reader.next(), FrameError, 'and stays refused');
});

test('garbage is refused: lengths below a header, huge lengths, random bytes', () => {
  for (let len = 0; len < 5; len++) {
    const reader = new FrameReader(1 << 20);
    reader.push(Buffer.from([len, 0, 0, 0, 1, 2, 3, 4, 5, 6]));
    assert.throws(
      () => reader.next(),
      (e) => e instanceof FrameError && e.reason === 'short' && e.length === len,
    );
  }
  const huge = new FrameReader(1 << 20);
  huge.push(Buffer.from('GET / HTTP/1.1\r\n'));
  assert.throws(() => huge.next(), FrameError);
  // Random input never yields a frame past the bound, and either waits for more or is refused.
  for (let i = 0; i < 200; i++) {
    const reader = new FrameReader(64);
    reader.push(randomBytes(1 + (i % 40)));
    try {
      for (let f = reader.next(); f; f = reader.next()) assert.ok(f.payload.length <= 64 - 5);
    } catch (e) {
      assert.ok(e instanceof FrameError);
    }
  }
});

test('read hands over frames until stop says so, and reports a bad stream after the good frames', () => {
  const reader = new FrameReader(64);
  const seen: number[] = [];
  const chunk = Buffer.concat([encodeFrame(1, 1, []), encodeFrame(1, 2, []), encodeFrame(1, 3, [])]);
  assert.equal(
    reader.read(
      chunk,
      (f) => seen.push(f.id),
      () => seen.length === 2,
    ),
    true,
  );
  assert.deepEqual(seen, [1, 2]);
  const bad = Buffer.from([0xff, 0xff, 0, 0]);
  assert.equal(
    reader.read(bad, (f) => seen.push(f.id)),
    false,
  );
  assert.deepEqual(seen, [1, 2, 3], 'the frame before the bad length still came out');
  assert.throws(
    () =>
      new FrameReader(64).read(encodeFrame(1, 1, []), () => {
        throw new TypeError('from the handler');
      }),
    TypeError,
  );
});
