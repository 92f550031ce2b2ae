import type { OutputChunk } from './types.js';

/**
 * The last `capacity` bytes of a process's output, stdout and stderr interleaved in the
 * order they came; older bytes are dropped. `dropped` counts, per stream, the bytes that
 * came before what is held (a client that reconnects skips what it already has with it).
 */
export class OutputRing {
  private chunks: OutputChunk[] = [];
  private size = 0;
  readonly dropped = { stdout: 0, stderr: 0 };

  constructor(readonly capacity: number) {}

  push(c: OutputChunk): void {
    let chunk = c.chunk;
    if (chunk.length > this.capacity) {
      this.dropped[c.stream] += chunk.length - this.capacity;
      chunk = chunk.subarray(chunk.length - this.capacity);
    }
    this.chunks.push({ stream: c.stream, chunk });
    this.size += chunk.length;
    while (this.size > this.capacity) {
      const first = this.chunks[0];
      const over = this.size - this.capacity;
      if (first.chunk.length <= over) {
        this.chunks.shift();
        this.size -= first.chunk.length;
        this.dropped[first.stream] += first.chunk.length;
      } else {
        first.chunk = first.chunk.subarray(over);
        this.size -= over;
        this.dropped[first.stream] += over;
      }
    }
  }

  /** What is held, oldest first (the array is a copy; the buffers are shared, never changed). */
  snapshot(): OutputChunk[] {
    return this.chunks.slice();
  }

  get length(): number {
    return this.size;
  }
}
