import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import type { CodeEvent, CodeResult } from '@sandboxd/protocol';

/** Bytes of NDJSON held before the sandbox's answer is paused. */
const HIGH_WATER = 64 * 1024;
/**
 * The longest line accepted from the sandbox by default (a large image result is a few MiB
 * of base64). What one run may hold here; runs per sandbox are bounded by the caller.
 */
export const MAX_LINE_BYTES = 16 * 1024 * 1024;

/**
 * The run's events as sandboxd's NDJSON (one {@link CodeEvent} a line), translated from
 * the in-sandbox server's E2B shapes as they arrive. Backpressure reaches the sandbox: while
 * the client does not read, the answer is not read either. Destroying the stream (the
 * client went, or `signal` aborted) closes the connection to the sandbox, whose server then
 * interrupts the run. After `timeoutMs` the same happens and the stream ends with an error
 * event named `TimeoutError`. An answer that ends without its end event, or a line longer
 * than `maxLineBytes` (default {@link MAX_LINE_BYTES}), ends with an error event named
 * `UnexpectedEndOfExecution` (the connection closed). Each byte is looked at once: a line
 * is searched for its end only in the data that came since the last search.
 */
export function codeEventStream(
  res: IncomingMessage,
  o: { timeoutMs: number; signal?: AbortSignal; maxLineBytes?: number },
): Readable {
  const maxLine = o.maxLineBytes ?? MAX_LINE_BYTES;
  /** The current line's pieces so far (none holds a newline) and their total length. */
  let pieces: Buffer[] = [];
  let held = 0;
  let finished = false;
  const finish = (last?: CodeEvent) => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    o.signal?.removeEventListener('abort', onAbort);
    if (last) out.push(line(last));
    out.push(null);
    res.destroy();
  };
  const out = new Readable({
    highWaterMark: HIGH_WATER,
    read: () => {
      res.resume();
    },
    destroy: (err, cb) => {
      finished = true;
      clearTimeout(timer);
      o.signal?.removeEventListener('abort', onAbort);
      res.destroy();
      cb(err);
    },
  });
  const timer = setTimeout(
    () =>
      finish({
        type: 'error',
        name: 'TimeoutError',
        value: `The run took longer than its timeout of ${o.timeoutMs} ms and was interrupted`,
        traceback: '',
      }),
    o.timeoutMs,
  );
  const onAbort = () => out.destroy();
  if (o.signal?.aborted) queueMicrotask(onAbort);
  else o.signal?.addEventListener('abort', onAbort, { once: true });
  const emit = (text: string): boolean => {
    const t = text.trim();
    if (t === '') return false;
    for (const ev of translate(t)) {
      if (ev.type === 'end') {
        finish(ev);
        return true;
      }
      if (!out.push(line(ev))) res.pause();
    }
    return false;
  };
  res.on('data', (chunk: Buffer) => {
    if (finished) return;
    let from = 0;
    let nl = chunk.indexOf(10);
    while (nl >= 0 && !finished) {
      pieces.push(chunk.subarray(from, nl));
      const text = Buffer.concat(pieces).toString('utf8');
      pieces = [];
      held = 0;
      if (emit(text)) return;
      from = nl + 1;
      nl = chunk.indexOf(10, from);
    }
    if (finished || from >= chunk.length) return;
    pieces.push(chunk.subarray(from));
    held += chunk.length - from;
    if (held > maxLine) {
      pieces = [];
      finish(unexpected(`The code interpreter sent a line over ${maxLine} bytes`));
    }
  });
  const cut = () => {
    const rest = Buffer.concat(pieces).toString('utf8');
    pieces = [];
    if (!finished && emit(rest)) return;
    finish(unexpected('The code interpreter ended the run before its end'));
  };
  res.on('end', cut);
  res.on('error', cut);
  res.on('close', cut);
  return out;
}

function line(ev: CodeEvent): string {
  return `${JSON.stringify(ev)}\n`;
}

function unexpected(value: string): CodeEvent {
  return { type: 'error', name: 'UnexpectedEndOfExecution', value, traceback: '' };
}

/** Fields of E2B's result with a field of their own in {@link CodeResult}; the rest goes to `extra`. */
const RESULT_FIELDS = [
  'text',
  'html',
  'markdown',
  'svg',
  'png',
  'jpeg',
  'pdf',
  'latex',
  'json',
  'javascript',
  'data',
  'chart',
] as const;

/**
 * sandboxd's events of one line of E2B's stream (`stdout`, `stderr`, `result`, `error`,
 * `number_of_executions`, `end_of_execution`, `unexpected_end_of_execution`). A line that is
 * not JSON or of a type not known here is skipped: a newer server may say more.
 */
export function translate(text: string): CodeEvent[] {
  let m: Record<string, unknown>;
  try {
    m = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return [];
  }
  if (!m || typeof m !== 'object') return [];
  switch (m.type) {
    case 'stdout':
    case 'stderr':
      return [{ type: m.type, text: str(m.text), timestamp: timestamp(m.timestamp) }];
    case 'result':
      return [{ type: 'result', result: toResult(m) }];
    case 'error':
      return [
        {
          type: 'error',
          name: str(m.name),
          value: str(m.value),
          traceback: Array.isArray(m.traceback) ? m.traceback.map(String).join('\n') : str(m.traceback),
        },
      ];
    case 'number_of_executions':
      return typeof m.execution_count === 'number' ? [{ type: 'executionCount', count: m.execution_count }] : [];
    case 'end_of_execution':
      return [{ type: 'end' }];
    case 'unexpected_end_of_execution':
      return [unexpected('The kernel ended the run unexpectedly (it died or was restarted)'), { type: 'end' }];
    default:
      return [];
  }
}

/** E2B's result line as a {@link CodeResult}: null fields dropped, unknown ones in `extra`. */
function toResult(m: Record<string, unknown>): CodeResult {
  const r: CodeResult = { isMainResult: m.is_main_result === true };
  const extra: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(m)) {
    if (v === null || v === undefined || k === 'type' || k === 'is_main_result') continue;
    if ((RESULT_FIELDS as readonly string[]).includes(k)) (r as Record<string, unknown>)[k] = v;
    else if (k === 'extra' && typeof v === 'object' && !Array.isArray(v)) Object.assign(extra, v);
    else extra[k] = v;
  }
  if (Object.keys(extra).length) r.extra = extra;
  return r;
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : v === undefined || v === null ? '' : String(v);
}

/** An ISO 8601 time: E2B's (Jupyter's message date) when it parses, else now. */
function timestamp(v: unknown): string {
  if (typeof v === 'string' || typeof v === 'number') {
    const d = new Date(typeof v === 'number' && v > 1e14 ? v / 1e6 : v);
    if (!Number.isNaN(d.getTime())) return d.toISOString();
  }
  return new Date().toISOString();
}
