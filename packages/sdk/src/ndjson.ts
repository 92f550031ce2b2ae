/**
 * Reading NDJSON (one JSON object per line) from a response body as it arrives, and the
 * output lines of processes (`stdout`/`stderr` with `data` or `dataBase64`).
 */
import { ServerError } from './errors.js';

/**
 * Yields each line of `body` parsed as JSON, as soon as its newline arrives. A last line
 * without its newline is yielded when it parses and dropped when it does not (the
 * connection was cut inside it). A complete line that is not JSON throws ServerError.
 * Errors of the body itself (a connection lost) are thrown as they are.
 */
export async function* ndjsonLines(body: ReadableStream<Uint8Array>): AsyncGenerator<unknown, void, undefined> {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buf += done ? dec.decode() : dec.decode(value, { stream: true });
      let start = 0;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n', start)) {
        const line = buf.slice(start, nl).trim();
        start = nl + 1;
        if (line === '') continue;
        let parsed: unknown;
        try {
          parsed = JSON.parse(line);
        } catch {
          throw new ServerError(`The server sent a line that is not JSON: ${line.slice(0, 80)}`, {
            status: 200,
            kind: 'internal',
          });
        }
        yield parsed;
      }
      buf = buf.slice(start);
      if (done) break;
    }
    const rest = buf.trim();
    if (rest !== '') {
      let parsed: unknown;
      try {
        parsed = JSON.parse(rest);
      } catch {
        return; // cut inside the line
      }
      yield parsed;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/** A line of a process's output stream, as sent (fields checked where used). */
export type OutputLine = {
  type?: unknown;
  pid?: unknown;
  data?: unknown;
  dataBase64?: unknown;
  exitCode?: unknown;
  signal?: unknown;
};

const encoder = new TextEncoder();

function base64Bytes(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The bytes of a `stdout`/`stderr` line: `data` is UTF-8 text, `dataBase64` carries chunks that are not. */
export function lineBytes(l: OutputLine): Uint8Array {
  if (typeof l.data === 'string') return encoder.encode(l.data);
  if (typeof l.dataBase64 === 'string') return base64Bytes(l.dataBase64);
  return new Uint8Array(0);
}
