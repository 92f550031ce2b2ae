/**
 * The last `capacity` bytes written, in order; older bytes are overwritten. Holds the
 * output a `?replay=1` client (or the first client of a terminal) receives first.
 * Memory is fixed at `capacity` bytes, allocated on the first write.
 */
export class RingBuffer {
  private buf: Buffer | null = null;
  /** Next write position. */
  private head = 0;
  /** Bytes held, at most `capacity`. */
  private size = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('capacity must be a positive integer');
  }

  /** Appends `chunk`; when it is larger than the capacity only its tail is kept. */
  write(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.buf ??= Buffer.allocUnsafe(this.capacity);
    const buf = this.buf;
    const src = chunk.length > this.capacity ? chunk.subarray(chunk.length - this.capacity) : chunk;
    const first = Math.min(src.length, this.capacity - this.head);
    buf.set(src.subarray(0, first), this.head);
    if (first < src.length) buf.set(src.subarray(first), 0);
    this.head = (this.head + src.length) % this.capacity;
    this.size = Math.min(this.capacity, this.size + src.length);
  }

  /** A copy of the bytes held, oldest first. */
  snapshot(): Buffer {
    if (!this.buf || this.size === 0) return Buffer.alloc(0);
    const start = (this.head - this.size + this.capacity) % this.capacity;
    if (start + this.size <= this.capacity) return Buffer.from(this.buf.subarray(start, start + this.size));
    return Buffer.concat([this.buf.subarray(start), this.buf.subarray(0, this.head)]);
  }

  get length(): number {
    return this.size;
  }
}
