import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TEMPLATE_NAME_PATTERN, TEMPLATE_TAG_PATTERN } from '@sandboxd/protocol';
import { ServerError } from '@sandboxd/sdk';
import {
  followBuildLog,
  formatDuration,
  lineText,
  ndjson,
  parseBuildArgs,
  parseDomains,
  type FollowStatus,
  type LogLine,
  TEMPLATE_NAME_RE,
  TEMPLATE_TAG_RE,
} from './build-log.js';

const enc = new TextEncoder();

/** A body that sends `chunks` and then ends, or fails with `error` after them. */
function body(chunks: string[], error?: Error): ReadableStream<Uint8Array> {
  let i = 0;
  return new ReadableStream({
    pull(c) {
      if (i < chunks.length) c.enqueue(enc.encode(chunks[i++]));
      else if (error) c.error(error);
      else c.close();
    },
  });
}

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

const line = (seq: number, text = `line ${seq}`): LogLine => ({
  type: 'log',
  seq,
  time: '2025-01-01T00:00:00.000Z',
  stream: 'stdout',
  text,
});
const nd = (...xs: unknown[]) => xs.map((x) => `${JSON.stringify(x)}\n`).join('');

describe('build log: NDJSON reading', () => {
  it('lines split anywhere across chunks, blank lines skipped, multi-byte characters cut between chunks', async () => {
    const text = `${nd({ a: 1 }, { b: 'é✓' })}\n${JSON.stringify({ c: 3 })}`;
    const bytes = enc.encode(text);
    // Three bytes at a time: lines and the multi-byte characters are cut between chunks.
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < bytes.length; i += 3) c.enqueue(bytes.subarray(i, i + 3));
        c.close();
      },
    });
    assert.deepEqual(await all(ndjson(stream)), [{ a: 1 }, { b: 'é✓' }, { c: 3 }]);
  });

  it('a last line cut inside (no newline, not JSON) is dropped; a whole line that is not JSON throws', async () => {
    assert.deepEqual(await all(ndjson(body([nd({ a: 1 }), '{"b":']))), [{ a: 1 }]);
    await assert.rejects(all(ndjson(body(['nope\n']))), ServerError);
  });
});

describe('build log: following through dropped connections', () => {
  /** A fake server: each open from `offset` gets what `script(offset, n)` returns (n = attempt from 0). */
  function server(script: (offset: number, n: number) => ReadableStream<Uint8Array> | Error) {
    const opened: number[] = [];
    const open = async (offset: number) => {
      const r = script(offset, opened.length);
      opened.push(offset);
      if (r instanceof Error) throw r;
      return ndjson(r);
    };
    return { open, opened };
  }
  const noSleep = async () => {};

  it('a stream that drops mid-build is reopened from the next seq: no line lost or shown twice, until `end`', async () => {
    const { open, opened } = server((offset, n) => {
      if (n === 0) return body([nd(line(0), line(1)), '{"type":"log","se'], new TypeError('network error'));
      if (n === 1) return new TypeError('Failed to fetch');
      if (n === 2) return body([nd(line(1), line(2), line(3))]); // resends 1 (skipped), ends without `end`
      return body([
        nd(line(offset), { type: 'end', state: 'error', error: { code: 400, kind: 'validation', message: 'x' } }),
      ]);
    });
    const got: number[] = [];
    const statuses: FollowStatus['state'][] = [];
    const end = await followBuildLog({
      open,
      onLine: (l) => got.push(l.seq),
      onStatus: (s) => statuses.push(s.state),
      signal: new AbortController().signal,
      sleep: noSleep,
    });
    assert.deepEqual(got, [0, 1, 2, 3, 4]);
    assert.deepEqual(opened, [0, 2, 2, 4]);
    assert.equal(end?.state, 'error');
    assert.equal(end?.error?.message, 'x');
    assert.deepEqual(statuses, ['connected', 'reconnecting', 'reconnecting', 'connected', 'reconnecting', 'connected']);
  });

  it('starts at `offset`; an end line at once (a final build) ends the follow', async () => {
    const { open, opened } = server(() => body([nd(line(5), { type: 'end', state: 'ready' })]));
    const got: number[] = [];
    const end = await followBuildLog({
      open,
      offset: 5,
      onLine: (l) => got.push(l.seq),
      signal: new AbortController().signal,
    });
    assert.deepEqual(opened, [5]);
    assert.deepEqual(got, [5]);
    assert.equal(end?.state, 'ready');
  });

  it('gives up after maxAttempts failures in a row (bounded), with the backoff asked each time', async () => {
    const { open, opened } = server(() => new TypeError('down'));
    const waits: number[] = [];
    let failed: unknown;
    const end = await followBuildLog({
      open,
      onLine: () => {},
      onStatus: (s) => {
        if (s.state === 'reconnecting') waits.push(s.waitMs);
        if (s.state === 'failed') failed = s.error;
      },
      signal: new AbortController().signal,
      maxAttempts: 5,
      sleep: noSleep,
    });
    assert.equal(end, null);
    assert.equal(opened.length, 6);
    assert.deepEqual(waits, [500, 1000, 2000, 4000, 8000]);
    assert.match(String(failed), /down/);
  });

  it('lines received reset the failure count', async () => {
    let seq = 0;
    const { open, opened } = server((_o, n) =>
      n < 20 ? body([nd(line(seq++))], new TypeError('drop')) : body([nd({ type: 'end', state: 'ready' })]),
    );
    const end = await followBuildLog({
      open,
      onLine: () => {},
      signal: new AbortController().signal,
      maxAttempts: 2,
      sleep: noSleep,
    });
    assert.equal(end?.state, 'ready');
    assert.equal(opened.length, 21);
  });

  it('a fatal error (build gone, signed out) ends at once; an abort ends quietly', async () => {
    class Gone extends Error {}
    const a = server(() => new Gone('404'));
    const statuses: string[] = [];
    const end = await followBuildLog({
      open: a.open,
      onLine: () => {},
      onStatus: (s) => statuses.push(s.state),
      fatal: (e) => e instanceof Gone,
      signal: new AbortController().signal,
    });
    assert.equal(end, null);
    assert.deepEqual(statuses, ['failed']);
    assert.equal(a.opened.length, 1);

    const ctrl = new AbortController();
    const b = server(() =>
      body([nd(line(0))], undefined).pipeThrough(
        new TransformStream({
          transform(chunk, c) {
            c.enqueue(chunk);
            ctrl.abort();
          },
        }),
      ),
    );
    assert.equal(await followBuildLog({ open: b.open, onLine: () => {}, signal: ctrl.signal }), null);
    assert.equal(b.opened.length, 1, 'no reconnect after an abort');
  });
});

describe('build form helpers', () => {
  it('parseBuildArgs: NAME=value lines, = in values, blank and # lines skipped; a bad or repeated line named', () => {
    assert.deepEqual(parseBuildArgs('A=1\n\n# c\nB_2=x=y\r\nEMPTY=\n'), { args: { A: '1', B_2: 'x=y', EMPTY: '' } });
    assert.deepEqual(parseBuildArgs(''), { args: {} });
    const bad = (t: string) => {
      const r = parseBuildArgs(t);
      assert.ok('error' in r, t);
      return r.error;
    };
    assert.equal(bad('A=1\nnovalue').line, 2);
    assert.equal(bad('1A=x').line, 1);
    assert.equal(bad('A B=x').line, 1);
    assert.match(bad('A=1\nA=2').message, /Line 2: A is given twice/);
  });

  it('parseDomains: commas, spaces or newlines; duplicates once', () => {
    assert.deepEqual(parseDomains(' pypi.org, *.pythonhosted.org\nexample.com  pypi.org,'), [
      'pypi.org',
      '*.pythonhosted.org',
      'example.com',
    ]);
    assert.deepEqual(parseDomains('  '), []);
  });

  it("the name and tag rules are the protocol's", () => {
    assert.equal(TEMPLATE_NAME_RE.source, TEMPLATE_NAME_PATTERN);
    assert.equal(TEMPLATE_TAG_RE.source, TEMPLATE_TAG_PATTERN);
  });

  it('lineText and formatDuration', () => {
    assert.equal(lineText(line(0, 'a\n')), 'a');
    assert.equal(lineText(line(0, 'a')), 'a');
    assert.equal(lineText(line(0, 'a\n\n')), 'a\n');
    assert.equal(formatDuration('2025-01-01T00:00:00Z', '2025-01-01T00:00:09.6Z'), '10 s');
    assert.equal(formatDuration('2025-01-01T00:00:00Z', '2025-01-01T00:02:05Z'), '2 min 05 s');
    assert.equal(formatDuration('2025-01-01T00:00:00Z', '2025-01-01T03:04:00Z'), '3 h 04 min');
    assert.equal(formatDuration('2025-01-01T00:01:00Z', '2025-01-01T00:00:00Z'), '—');
  });
});
