import type { Readable } from 'node:stream';
import { SandboxdError } from '@sandboxd/protocol';
import busboy from 'busboy';

/** One `file` part of an upload: its file name as sent (path kept) and its bytes, streamed. */
export interface FilePart {
  filename: string;
  body: AsyncIterable<Uint8Array>;
}

/** Non-file fields (ignored) and parts one upload may have; the bytes of files are not capped here. */
const LIMITS = { fieldSize: 64 << 10, fields: 100, parts: 10_000, headerPairs: 100 } as const;

/**
 * Calls `onFile` for each part named `file` of a `multipart/form-data` body, one after the
 * other: the next part is read only once `onFile` is done with the previous one (its body
 * is read as it is written, never whole in memory). Other parts are read and dropped.
 * Resolves with the count of file parts once the body ended and every `onFile` resolved;
 * rejects with the first error of `onFile`, or `validation` for a malformed body (which
 * also comes out of a part's body while `onFile` reads it).
 */
export function forEachFilePart(
  source: Readable,
  contentType: string,
  onFile: (part: FilePart) => Promise<void>,
): Promise<number> {
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({
        headers: { 'content-type': contentType },
        preservePath: true,
        defParamCharset: 'utf8',
        limits: LIMITS,
      });
    } catch (e) {
      reject(malformed(e));
      return;
    }
    let chain: Promise<void> = Promise.resolve();
    let count = 0;
    let failed = false;
    const fail = (e: unknown) => {
      if (failed) return;
      failed = true;
      source.unpipe(bb);
      reject(e);
    };
    bb.on('file', (name, stream, info) => {
      // A part cut short errors its stream, maybe before anyone reads it: the error then
      // reaches the reader (an errored stream throws when iterated) and busboy's own 'error'.
      stream.on('error', () => {});
      if (failed || name !== 'file') {
        stream.resume();
        return;
      }
      count++;
      const part = { filename: info.filename ?? '', body: guarded(stream) };
      chain = chain.then(() => {
        if (!failed) return onFile(part);
        stream.resume();
      });
      chain.catch(fail);
    });
    bb.on('partsLimit', () => fail(malformed(new Error(`more than ${LIMITS.parts} parts`))));
    bb.on('fieldsLimit', () => fail(malformed(new Error(`more than ${LIMITS.fields} fields`))));
    bb.on('error', (e) => fail(malformed(e)));
    bb.on('close', () => chain.then(() => !failed && resolve(count), fail));
    source.on('error', (e) => fail(malformed(e)));
    source.pipe(bb);
  });
}

/** `src` with its errors as `validation` (a malformed or cut body is the client's). */
export async function* guarded(src: AsyncIterable<Uint8Array>, what = 'upload body'): AsyncGenerator<Uint8Array> {
  try {
    for await (const chunk of src) yield chunk;
  } catch (e) {
    throw e instanceof SandboxdError ? e : malformed(e, what);
  }
}

function malformed(e: unknown, what = 'multipart body'): SandboxdError {
  return new SandboxdError('validation', `Bad ${what}: ${e instanceof Error ? e.message : String(e)}`);
}
