/**
 * The framing of the native helpers' channels (exec agent, spawner; the C side is
 * native/frames.h). Both directions carry frames of
 *   u32le length (bytes after this field) | u8 type | u32le id | payload
 * The far end may be untrusted (a sandbox's root can replace its agent): a reader bounds
 * the length it accepts, so garbage costs at most that much memory before it is refused.
 */

/** Bytes before a frame's payload: length, type and id. */
export const FRAME_HEADER_BYTES = 9;
/** Smallest valid length field: a type and an id, no payload. */
const MIN_LENGTH = FRAME_HEADER_BYTES - 4;

/** One frame read from a channel. */
export interface Frame {
  type: number;
  id: number;
  /** A view of the reader's buffer: valid after later reads, but copy what is kept long (it pins the chunk). */
  payload: Buffer;
}

/** A length field out of bounds: the bytes are not frames of ours, and the channel is unusable. */
export class FrameError extends Error {
  constructor(
    /** 'short': below a type and an id; 'oversize': above the reader's bound. */
    readonly reason: 'short' | 'oversize',
    /** The length field read. */
    readonly length: number,
  ) {
    super(`bad frame on a helper channel: length ${length} is ${reason === 'short' ? 'too short' : 'too large'}`);
  }
}

/** `n` clamped to what a u32 field holds (negative -> 0). */
export function u32(n: number): number {
  return Math.max(0, Math.min(n, 0xffffffff));
}

/** `strings` as the helpers read them: UTF-8, each ending in a NUL byte. */
export function cStrings(strings: readonly string[]): Buffer {
  return Buffer.from(strings.map((s) => `${s}\0`).join(''), 'utf8');
}

/**
 * One frame: the header, then `fields` as u32le each, then `tail` as is. Throws a
 * RangeError when a field or the length does not fit a u32 (clamp with {@link u32}).
 */
export function encodeFrame(type: number, id: number, fields: readonly number[], ...tail: Buffer[]): Buffer {
  const head = Buffer.alloc(FRAME_HEADER_BYTES + 4 * fields.length);
  head.writeUInt32LE(head.length - 4 + tail.reduce((n, b) => n + b.length, 0), 0);
  head.writeUInt8(type, 4);
  head.writeUInt32LE(id, 5);
  fields.forEach((v, i) => {
    head.writeUInt32LE(v, FRAME_HEADER_BYTES + 4 * i);
  });
  return tail.length > 0 ? Buffer.concat([head, ...tail]) : head;
}

/**
 * Cuts a byte stream into frames, whatever the chunking: {@link push} each chunk as it
 * arrives, then take frames with {@link next} until it returns null. Holds at most one
 * incomplete frame (up to the bound) between chunks. Not for concurrent use.
 */
export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);

  /** `maxLength`: the largest length field accepted (type, id and payload together). */
  constructor(readonly maxLength: number) {}

  /** Appends a chunk of the stream. */
  push(chunk: Buffer): void {
    this.buf = this.buf.length > 0 ? Buffer.concat([this.buf, chunk]) : chunk;
  }

  /**
   * The next complete frame, or null until more bytes arrive. Throws {@link FrameError} as
   * soon as a length field is out of bounds, before the frame's bytes arrive, and again on
   * every later call: the stream cannot be resynchronised.
   */
  next(): Frame | null {
    if (this.buf.length < 4) return null;
    const length = this.buf.readUInt32LE(0);
    if (length < MIN_LENGTH) throw new FrameError('short', length);
    if (length > this.maxLength) throw new FrameError('oversize', length);
    if (this.buf.length < 4 + length) return null;
    const frame = {
      type: this.buf.readUInt8(4),
      id: this.buf.readUInt32LE(5),
      payload: this.buf.subarray(FRAME_HEADER_BYTES, 4 + length),
    };
    this.buf = this.buf.subarray(4 + length);
    return frame;
  }

  /**
   * {@link push}es `chunk`, then hands `onFrame` each complete frame in order, asking `stop`
   * before each. Returns false when a length field is out of bounds (the frames before it
   * were handed over), else true. What `onFrame` throws propagates.
   */
  read(chunk: Buffer, onFrame: (f: Frame) => void, stop: () => boolean = () => false): boolean {
    this.push(chunk);
    while (!stop()) {
      let f: Frame | null;
      try {
        f = this.next();
      } catch (e) {
        if (e instanceof FrameError) return false;
        throw e;
      }
      if (!f) break;
      onFrame(f);
    }
    return true;
  }
}
