/** The rule that resumes a process's output after a reconnection (replay.ts), on random output. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OutputRecord, overlap, ReplayAligner, type OutputChunk } from './replay.js';
import type { OutputStream } from './types.js';

/** A small seeded PRNG (mulberry32), so a failure can be replayed. */
function rng(seed: number) {
  let a = seed >>> 0;
  return (n: number) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

type Tagged = { stream: OutputStream; byte: number }[];

function randomOutput(r: (n: number) => number, length: number): Tagged {
  const out: Tagged = [];
  while (out.length < length) {
    const stream: OutputStream = r(3) === 0 ? 'stderr' : 'stdout';
    for (let n = 1 + r(12); n > 0 && out.length < length; n--) out.push({ stream, byte: r(256) });
  }
  return out;
}

/** Cuts tagged bytes into chunks of random length, never across a change of stream. */
function chunk(r: (n: number) => number, t: Tagged): OutputChunk[] {
  const out: OutputChunk[] = [];
  let i = 0;
  while (i < t.length) {
    let j = i + 1;
    const max = i + 1 + r(30);
    while (j < t.length && j < max && t[j].stream === t[i].stream) j++;
    out.push({ stream: t[i].stream, bytes: Uint8Array.from(t.slice(i, j), (x) => x.byte) });
    i = j;
  }
  return out;
}

function flat(chunks: OutputChunk[]): Tagged {
  return chunks.flatMap((c) => [...c.bytes].map((byte) => ({ stream: c.stream, byte })));
}

describe('replay alignment', () => {
  const W = 256;

  it('delivers every byte once across a reconnection, whatever the server still kept', () => {
    const cases = { whole: 0, startDropped: 0, beyondRecord: 0 };
    for (let seed = 1; seed <= 600; seed++) {
      const r = rng(seed);
      const total = 20 + r(4 * W);
      const full = randomOutput(r, total);
      const delivered = 1 + r(total - 1); // bytes seen before the drop
      const atReconnect = delivered + r(total - delivered + 1); // bytes the process had written by then
      const serverKeeps = W - r(40); // the server's window: at most W
      const replayStart = Math.max(0, atReconnect - serverKeeps);
      if (replayStart > delivered) continue; // a gap: tested below
      // Within an overlap the rule takes the longest match: keep it long enough to be unique.
      if (replayStart > 0 && delivered - replayStart < 8) continue;

      const record = new OutputRecord(W);
      for (const c of chunk(r, full.slice(0, delivered))) record.add(c);
      if (!record.complete) cases.beyondRecord++;
      else if (replayStart > 0) cases.startDropped++;
      else cases.whole++;
      const aligner = new ReplayAligner(record);
      const got: OutputChunk[] = [];
      for (const c of chunk(r, full.slice(replayStart))) got.push(...aligner.push(c));
      got.push(...(aligner.settle(true) ?? []));
      assert.deepEqual(flat(got), full.slice(delivered), `seed ${seed}`);
      assert.equal(aligner.lost, false, `seed ${seed}`);
    }
    // Each path of the rule ran: the server kept everything, it dropped the start, the handle delivered more than it records.
    for (const [k, n] of Object.entries(cases)) assert.ok(n >= 20, `${k}: ${n} cases`);
  });

  it('says output was lost when more than the server keeps was written while disconnected', () => {
    const r = rng(7);
    const full = randomOutput(r, 2000);
    const record = new OutputRecord(W);
    for (const c of chunk(r, full.slice(0, 500))) record.add(c);
    const aligner = new ReplayAligner(record);
    const got: OutputChunk[] = [];
    for (const c of chunk(r, full.slice(1000))) got.push(...aligner.push(c));
    got.push(...(aligner.settle(true) ?? []));
    assert.deepEqual(flat(got), full.slice(1000));
    assert.equal(aligner.lost, true);
  });

  it('waits for more replay instead of guessing: during the prefix check, and while the held bytes sit inside the record', () => {
    const r = rng(3);
    const full = randomOutput(r, 200);
    const record = new OutputRecord(W);
    for (const c of chunk(r, full)) record.add(c);
    const prefix = new ReplayAligner(record);
    assert.deepEqual(prefix.push(chunk(r, full.slice(0, 50))[0]), []);
    assert.equal(prefix.settle(false), null, 'the whole output is being replayed: more is coming');

    const big = randomOutput(r, 3 * W);
    const rec = new OutputRecord(W);
    for (const c of chunk(r, big)) rec.add(c);
    assert.equal(rec.complete, false);
    const a = new ReplayAligner(rec);
    // The replay starts W - 100 bytes back: its first 20 bytes lie inside the record.
    const replay = big.slice(3 * W - (W - 100));
    const first = chunk(r, replay.slice(0, 20));
    for (const c of first) assert.deepEqual(a.push(c), []);
    assert.equal(a.settle(false), null);
    const rest = chunk(r, [...replay.slice(20), { stream: 'stdout', byte: 1 }, { stream: 'stdout', byte: 2 }]);
    const got: OutputChunk[] = [];
    for (const c of rest) got.push(...a.push(c));
    got.push(...(a.settle(false) ?? []));
    assert.deepEqual(flat(got), [
      { stream: 'stdout', byte: 1 },
      { stream: 'stdout', byte: 2 },
    ]);
  });

  it('a handle that delivered nothing passes everything on; the record keeps only its window', () => {
    const rec = new OutputRecord(10);
    const a = new ReplayAligner(rec);
    assert.equal(a.aligned, true);
    const c: OutputChunk = { stream: 'stderr', bytes: new Uint8Array([1, 2, 3]) };
    assert.deepEqual(a.push(c), [c]);
    rec.add({ stream: 'stdout', bytes: new Uint8Array(8) });
    rec.add({ stream: 'stderr', bytes: new Uint8Array([7, 8, 9, 10]) });
    assert.equal(rec.delivered, 12);
    assert.equal(rec.complete, false);
    assert.deepEqual([...rec.codes()], [0, 0, 0, 0, 0, 0, 0x107, 0x108, 0x109, 0x10a]);
  });

  it('overlap finds the longest end of the text that starts the pattern', () => {
    const u = (...n: number[]) => Uint16Array.from(n);
    assert.deepEqual(overlap(u(1, 2, 3, 4), u(3, 4, 5)), { k: 2, inside: false });
    assert.deepEqual(overlap(u(1, 2, 1, 2), u(1, 2, 1, 2, 9)), { k: 4, inside: false });
    assert.deepEqual(overlap(u(1, 2, 3), u(9)), { k: 0, inside: false });
    assert.deepEqual(overlap(u(1, 2, 3, 4), u(2, 3)), { k: 0, inside: true });
    assert.deepEqual(overlap(u(5, 5, 5), u(5)), { k: 1, inside: true });
  });
});
