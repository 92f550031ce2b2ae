/**
 * Following a build's log (`GET /api/v1/images/builds/{id}/logs?follow=true`, NDJSON of
 * BuildLogEvent) through dropped connections: each reconnect asks for `offset` = the seq
 * after the last line shown, so no line is lost or shown twice, until the one `end` line.
 * Free of the DOM so that it is unit-tested in Node.
 */
import { type BuildLogEvent, type BuildState, ndjsonLines } from '@sandboxd/sdk';

export type LogLine = Extract<BuildLogEvent, { type: 'log' }>;
export type LogEnd = Extract<BuildLogEvent, { type: 'end' }>;

/**
 * Parses each line of an NDJSON body as it arrives (the SDK's reader): a cut last line (no
 * newline, not JSON) is dropped; a whole line that is not JSON throws the SDK's ServerError.
 */
export const ndjson = ndjsonLines;

/** What the page is told about the connection. */
export type FollowStatus =
  | { state: 'connected'; offset: number }
  | { state: 'reconnecting'; offset: number; attempt: number; waitMs: number; error: unknown }
  | { state: 'failed'; error: unknown };

export interface FollowOptions {
  /** Opens the stream from `offset`: resolves with its events (parsed lines) once the answer's headers are in. */
  open(offset: number, signal: AbortSignal): Promise<AsyncIterable<unknown>>;
  onLine(line: LogLine): void;
  onStatus?(s: FollowStatus): void;
  signal: AbortSignal;
  /** First seq wanted; default 0. */
  offset?: number;
  /** Errors after which reconnecting is pointless (the build is gone, the session ended). */
  fatal?(e: unknown): boolean;
  /** Failed attempts in a row before giving up; default 12 (about a minute and a half of backoff). */
  maxAttempts?: number;
  /** Backoff of attempt n (from 1): default 0.5 s doubling, at most 10 s. */
  backoffMs?(attempt: number): number;
  sleep?(ms: number, signal: AbortSignal): Promise<void>;
}

/** The result: the `end` line, or null when `signal` aborted first or the follow gave up (`failed` was reported). */
export type FollowResult = LogEnd | null;

const defaultBackoff = (n: number) => Math.min(500 * 2 ** (n - 1), 10_000);

function sleepFor(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

function isLine(e: unknown): e is LogLine {
  const l = e as Partial<LogLine> | null;
  return !!l && l.type === 'log' && Number.isInteger(l.seq) && typeof l.text === 'string';
}

function isEnd(e: unknown): e is LogEnd {
  const l = e as Partial<LogEnd> | null;
  return !!l && l.type === 'end' && typeof l.state === 'string';
}

/**
 * Follows the log to its `end` line. A stream that ends or fails before it is reopened from
 * the next seq (lines below it, if a server resends them, are skipped). Any line received
 * resets the count of failed attempts.
 */
export async function followBuildLog(o: FollowOptions): Promise<FollowResult> {
  const max = o.maxAttempts ?? 12;
  const backoff = o.backoffMs ?? defaultBackoff;
  const sleep = o.sleep ?? sleepFor;
  let next = o.offset ?? 0;
  let failures = 0;
  while (!o.signal.aborted) {
    let error: unknown = new Error('the log stream ended before the build did');
    try {
      const events = await o.open(next, o.signal);
      o.onStatus?.({ state: 'connected', offset: next });
      for await (const e of events) {
        if (o.signal.aborted) return null;
        if (isEnd(e)) return e;
        if (!isLine(e) || e.seq < next) continue;
        next = e.seq + 1;
        failures = 0;
        o.onLine(e);
      }
    } catch (e) {
      if (o.signal.aborted) return null;
      if (o.fatal?.(e)) {
        o.onStatus?.({ state: 'failed', error: e });
        return null;
      }
      error = e;
    }
    if (o.signal.aborted) return null;
    failures++;
    if (failures > max) {
      o.onStatus?.({ state: 'failed', error });
      return null;
    }
    const waitMs = backoff(failures);
    o.onStatus?.({ state: 'reconnecting', offset: next, attempt: failures, waitMs, error });
    await sleep(waitMs, o.signal);
  }
  return null;
}

/**
 * The protocol's rules of template names and tags (TEMPLATE_NAME_PATTERN and
 * TEMPLATE_TAG_PATTERN, restated: the protocol's module would bring its schema library into
 * the bundle; build-log.test.ts checks they are the same).
 */
export const TEMPLATE_NAME_RE = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
export const TEMPLATE_TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

/** Whether a build in `state` is over. */
export function isFinal(state: BuildState): boolean {
  return state === 'ready' || state === 'error' || state === 'cancelled';
}

/** The text of a line as one line of the log view: its own trailing newline removed (the view adds one). */
export function lineText(l: LogLine): string {
  return l.text.endsWith('\n') ? l.text.slice(0, -1) : l.text;
}

/**
 * `NAME=value` lines into build args, or the first bad line. Blank lines and lines starting
 * with `#` are skipped; a name is what `ARG` accepts.
 */
export function parseBuildArgs(
  text: string,
): { args: Record<string, string> } | { error: { line: number; message: string } } {
  const args: Record<string, string> = {};
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i].replace(/\r$/, '');
    if (l.trim() === '' || l.trimStart().startsWith('#')) continue;
    const eq = l.indexOf('=');
    const name = (eq < 0 ? l : l.slice(0, eq)).trim();
    const line = i + 1;
    if (eq < 0 || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
      return { error: { line, message: `Line ${line}: write NAME=value (a name of letters, digits and _).` } };
    if (Object.hasOwn(args, name)) return { error: { line, message: `Line ${line}: ${name} is given twice.` } };
    args[name] = l.slice(eq + 1);
  }
  return { args };
}

/** Allowed domains typed with commas, spaces or newlines, as the route's comma-separated list. */
export function parseDomains(text: string): string[] {
  return [...new Set(text.split(/[\s,]+/).filter(Boolean))];
}

/** Seconds or minutes between two instants, for a build's duration. */
export function formatDuration(fromIso: string, toIso: string | number): string {
  const ms = (typeof toIso === 'number' ? toIso : Date.parse(toIso)) - Date.parse(fromIso);
  if (!Number.isFinite(ms) || ms < 0) return '—';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, '0')} min`;
}
