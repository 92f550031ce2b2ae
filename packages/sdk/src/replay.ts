/**
 * Resuming a process's output after a dropped connection without losing or repeating bytes.
 *
 * `GET .../processes/{pid}/output?follow=true` answers with the last 1 MiB (at most) of the
 * process's output, stdout and stderr interleaved in the order they were written, then live
 * output. Its answer carries no offsets, so where the replay begins relative to what a handle
 * has already delivered is found by comparing bytes, each tagged with its stream:
 *
 * 1. A handle keeps a record of what it delivered: the total, and the last 1 MiB (tagged).
 * 2. If it delivered at most 1 MiB in all, it first assumes the server still holds the whole
 *    output (the replay starts at the process's first byte): the replay's bytes are checked
 *    one by one against the record, which then is complete, and the first `delivered` of
 *    them are dropped; every byte after them is new. This is exact whenever the process had
 *    written at most 1 MiB when the handle reconnected, which is the per-stream rule "drop
 *    the first N bytes of each stream that were already seen".
 * 3. Otherwise (it delivered more, or a replayed byte differs from the record: the server
 *    has dropped the start), the replay is held until it is as long as the record, or the
 *    process exits, or no output came for a moment; then the longest end of the record that
 *    is also the start of the held replay counts as already delivered (found with KMP), and
 *    the rest is new. When nothing overlaps, more than the server keeps was written while
 *    disconnected: that output is lost, and `lost` says so.
 *
 * Limit: output that repeats exactly (the same bytes over and over) can be matched at the
 * wrong place in step 3, or (rarely) pass the check of step 2, and lose or repeat a period.
 */
import type { OutputStream } from './types.js';

/** What the server replays at most, and what a handle keeps to align with. */
export const REPLAY_WINDOW = 1 << 20;

/** A piece of output of one stream. */
export interface OutputChunk {
  stream: OutputStream;
  bytes: Uint8Array;
}

const TAG: Record<OutputStream, number> = { stdout: 0, stderr: 1 };
const STREAM: OutputStream[] = ['stdout', 'stderr'];

/** What a handle has delivered: the byte count, and the last `window` bytes with their streams. */
export class OutputRecord {
  /** Bytes delivered in all, both streams. */
  delivered = 0;
  private chunks: OutputChunk[] = [];
  private kept = 0;

  constructor(readonly window = REPLAY_WINDOW) {}

  add(c: OutputChunk): void {
    const n = c.bytes.byteLength;
    if (n === 0) return;
    this.delivered += n;
    this.chunks.push(c);
    this.kept += n;
    while (this.kept > this.window) {
      const first = this.chunks[0];
      const excess = this.kept - this.window;
      if (first.bytes.byteLength <= excess) {
        this.chunks.shift();
        this.kept -= first.bytes.byteLength;
      } else {
        this.chunks[0] = { stream: first.stream, bytes: first.bytes.subarray(excess) };
        this.kept -= excess;
      }
    }
  }

  /** True while the record holds everything delivered. */
  get complete(): boolean {
    return this.kept === this.delivered;
  }

  /** The kept bytes as codes: stream tag << 8 | byte. */
  codes(): Uint16Array {
    const out = new Uint16Array(this.kept);
    let i = 0;
    for (const c of this.chunks) {
      const tag = TAG[c.stream] << 8;
      for (const b of c.bytes) out[i++] = tag | b;
    }
    return out;
  }
}

/** Longest `k` with text's last k codes equal to pattern's first k; `inside`: the whole pattern also occurs earlier. */
export function overlap(text: Uint16Array, pattern: Uint16Array): { k: number; inside: boolean } {
  const m = pattern.length;
  if (m === 0) return { k: 0, inside: false };
  const fail = new Int32Array(m);
  for (let i = 1, q = 0; i < m; i++) {
    while (q > 0 && pattern[i] !== pattern[q]) q = fail[q - 1];
    if (pattern[i] === pattern[q]) q++;
    fail[i] = q;
  }
  let q = 0;
  let inside = false;
  for (let i = 0; i < text.length; i++) {
    if (q === m) q = fail[m - 1];
    while (q > 0 && text[i] !== pattern[q]) q = fail[q - 1];
    if (text[i] === pattern[q]) q++;
    if (q === m && i < text.length - 1) inside = true;
  }
  return { k: q, inside };
}

/** Chunks of the codes from index `from` on, split where the stream changes. */
function chunksOf(codes: Uint16Array, from: number): OutputChunk[] {
  const out: OutputChunk[] = [];
  let i = from;
  while (i < codes.length) {
    const tag = codes[i] >> 8;
    let j = i;
    while (j < codes.length && codes[j] >> 8 === tag) j++;
    const bytes = new Uint8Array(j - i);
    for (let x = i; x < j; x++) bytes[x - i] = codes[x] & 0xff;
    out.push({ stream: STREAM[tag], bytes });
    i = j;
  }
  return out;
}

/** Aligns one reconnection's output with a record (see the module comment for the rule). */
export class ReplayAligner {
  /** True when the rule found no overlap: output written while disconnected was lost. */
  lost = false;
  private phase: 'prefix' | 'overlap' | 'live';
  private readonly tail: Uint16Array;
  private held = new Uint16Array(0);
  private heldLength = 0;
  private matched = 0;

  constructor(record: OutputRecord) {
    this.tail = record.delivered === 0 ? new Uint16Array(0) : record.codes();
    this.phase = record.delivered === 0 ? 'live' : record.complete ? 'prefix' : 'overlap';
  }

  /** True once everything that arrives is passed on as new. */
  get aligned(): boolean {
    return this.phase === 'live';
  }

  /** Takes the next chunk of the answer; returns what is new of it (and of what was held), maybe nothing yet. */
  push(c: OutputChunk): OutputChunk[] {
    if (this.phase === 'live') return [c];
    this.hold(c);
    if (this.phase === 'prefix') {
      const held = this.held;
      while (this.matched < this.tail.length && this.matched < this.heldLength) {
        if (held[this.matched] !== this.tail[this.matched]) {
          this.phase = 'overlap';
          break;
        }
        this.matched++;
      }
      if (this.phase === 'prefix') {
        if (this.matched < this.tail.length) return [];
        this.phase = 'live';
        return this.release(this.matched);
      }
    }
    return this.heldLength >= this.tail.length ? this.decide() : [];
  }

  /**
   * Decides with what is held. `final` (the process exited): decide now. Otherwise (no
   * output came for a moment) return null to keep waiting when more of the replay must be
   * on its way: in step 2, or when the held bytes occur whole inside the record.
   */
  settle(final: boolean): OutputChunk[] | null {
    if (this.phase === 'live') return [];
    if (!final && this.phase === 'prefix') return null;
    const pattern = this.held.subarray(0, this.heldLength);
    const { k, inside } = overlap(this.tail, pattern);
    if (!final && inside && k < pattern.length) return null;
    return this.finish(k);
  }

  private decide(): OutputChunk[] {
    return this.finish(overlap(this.tail, this.held.subarray(0, this.heldLength)).k);
  }

  private finish(k: number): OutputChunk[] {
    if (k === 0 && this.heldLength > 0) this.lost = true;
    this.phase = 'live';
    return this.release(k);
  }

  private release(from: number): OutputChunk[] {
    const out = chunksOf(this.held.subarray(0, this.heldLength), from);
    this.held = new Uint16Array(0);
    this.heldLength = 0;
    return out;
  }

  private hold(c: OutputChunk): void {
    const need = this.heldLength + c.bytes.byteLength;
    if (need > this.held.length) {
      const grown = new Uint16Array(Math.max(need, this.held.length * 2, 4096));
      grown.set(this.held.subarray(0, this.heldLength));
      this.held = grown;
    }
    const tag = TAG[c.stream] << 8;
    for (const b of c.bytes) this.held[this.heldLength++] = tag | b;
  }
}
