/**
 * Request bodies of uploads: what `files.write` and `sendStdin` accept, turned into
 * something fetch sends without reading it into memory first.
 */

/**
 * Data to upload: text (sent as UTF-8), bytes, a Blob (in Node, `await fs.openAsBlob(path)`
 * streams a file), a web ReadableStream, or any async iterable of bytes, such as a Node
 * Readable (`fs.createReadStream(path)`).
 */
export type UploadData =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>;

/** A body for fetch, and its size in bytes when known before sending. */
export interface UploadBody {
  body: string | Uint8Array | Blob | ReadableStream<Uint8Array>;
  size?: number;
}

const encoder = new TextEncoder();

function isReadableStream(x: unknown): x is ReadableStream<Uint8Array> {
  return typeof ReadableStream !== 'undefined' && x instanceof ReadableStream;
}

function isAsyncIterable(x: unknown): x is AsyncIterable<Uint8Array | string> {
  return (
    typeof x === 'object' && x !== null && typeof (x as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function'
  );
}

/**
 * A web stream that pulls one chunk from `source` each time the consumer (fetch, which
 * pulls as the socket drains) wants one: a 2 GiB Node stream goes out chunk by chunk and
 * is never held in memory. Cancelling the stream ends the iterator (closing a file stream).
 */
export function iterableToStream(source: AsyncIterable<Uint8Array | string>): ReadableStream<Uint8Array> {
  const it = source[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          const { value, done } = await it.next();
          if (done) return controller.close();
          const bytes = typeof value === 'string' ? encoder.encode(value) : value;
          if (bytes.byteLength === 0) continue;
          controller.enqueue(bytes);
          return;
        }
      },
      async cancel(reason) {
        await it.return?.(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

/**
 * The fetch body of `data`. Strings, bytes and Blobs have a known size (fetch sends their
 * Content-Length itself); streams are sent chunked unless `size` says how long they are.
 */
export function uploadBody(data: UploadData, size?: number): UploadBody {
  if (typeof data === 'string') return { body: data, size: encoder.encode(data).byteLength };
  if (data instanceof Uint8Array) return { body: data, size: data.byteLength };
  if (data instanceof ArrayBuffer) return { body: new Uint8Array(data), size: data.byteLength };
  if (typeof Blob !== 'undefined' && data instanceof Blob) return { body: data, size: data.size };
  if (isReadableStream(data)) return { body: data, size };
  if (isAsyncIterable(data)) return { body: iterableToStream(data), size };
  throw new TypeError('data must be a string, Uint8Array, ArrayBuffer, Blob, ReadableStream or async iterable');
}
