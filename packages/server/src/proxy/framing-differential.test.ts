import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import {
  exchange,
  parseRequests,
  recordingUpstream,
  type RecordingUpstream,
  type StrictRequest,
} from '../../test/http1-strict.js';
import { get, IDS, startFixture, type Fixture } from '../../test/proxy.js';

/**
 * Differential framing test of the port proxy: generated malformed and ambiguous requests
 * go as raw bytes through the proxy to a recording upstream. A strict RFC 9112 parser
 * (test/http1-strict.ts) says what the client sent; the upstream must see only requests
 * the client sent, each exactly (method, target, body, end-to-end headers), in order, or
 * none (the proxy or node refused it with a 4xx). Honest inputs must all be forwarded.
 * After each input an honest "next visitor" must get its own answer from a clean
 * connection. Deterministic seed, bounded count.
 */

const SEED = 3317;
const RUNS = 260;

const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'expect',
  'content-length',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
  'x-sandboxd-key',
]);

/** The end-to-end headers a correct proxy passes on, lower-cased names. */
function endToEnd(r: StrictRequest): string[] {
  const named = new Set(
    r.headers
      .filter(([k]) => k.toLowerCase() === 'connection')
      .flatMap(([, v]) => v.split(','))
      .map((t) => t.trim().toLowerCase())
      .filter((t) => t !== 'host' && t !== 'content-length' && t !== 'transfer-encoding'),
  );
  return r.headers
    .filter(([k]) => !HOP.has(k.toLowerCase()) && !named.has(k.toLowerCase()))
    .map(([k, v]) => `${k.toLowerCase()}: ${v}`);
}

const show = (r: StrictRequest) =>
  JSON.stringify({ m: r.method, t: r.target, b: r.body.toString('latin1'), h: endToEnd(r) });

// ---- the generator -------------------------------------------------------------------

const FRAMINGS = [
  'none',
  'cl',
  'cl+1',
  'cl-1',
  'cl-dup',
  'cl-list',
  'cl-conflict',
  'cl-plus',
  'cl-zero-pad',
  'cl-space-colon',
  'te',
  'te+cl',
  'te-space-colon',
] as const;
const TE_VALUES = [
  'chunked',
  'Chunked',
  'CHUNKED',
  'gzip, chunked',
  'chunked, gzip',
  'identity',
  'xchunked',
  'chunked,',
  'chunked, chunked',
  'two-headers',
  'gzip-then-chunked',
] as const;
const CHUNKS = [
  'plain',
  'split',
  'upper-pad',
  'ext',
  'ext-quoted',
  'ext-bws',
  'ext-ctl',
  'size-space',
  'size-0x',
  'size-neg',
  'size-huge',
  'no-crlf',
  'lf',
  'trailer',
  'trailer-bad',
  'last-ext',
] as const;
const CONNECTIONS = [
  '',
  'keep-alive',
  'close',
  'Content-Length',
  'Transfer-Encoding',
  'content-length, transfer-encoding',
  'keep-alive, X-Extra',
  'host',
  'x-forwarded-for',
] as const;
const EXTRAS = [
  'X-A: 1',
  'X-Latin: caf\xe9 \xff',
  'X-Tab: a\tb',
  'X-Extra: e',
  'Keep-Alive: timeout=5',
  'TE: trailers',
  'Trailer: X-T',
  'X-Forwarded-For: 192.0.2.1',
  'Proxy-Connection: keep-alive',
  'Expect: 100-continue',
  'Upgrade: h2c',
  'X-Fold: a{EOL} b',
  'X-CR: a\rb',
  'X-NUL: a\x00b',
  `X-Big: ${'x'.repeat(17 * 1024)}`,
] as const;
const HONEST_EXTRAS = new Set(EXTRAS.slice(0, 10));
const HONEST_CHUNKS = new Set(['plain', 'split', 'upper-pad', 'ext', 'ext-quoted', 'trailer', 'last-ext']);
const TARGETS = ['/', '/a/b?c=d', '/%2e%2e/x', 'http://evil.example/', '*', '/caf\xe9'] as const;

interface Part {
  method: string;
  target: string;
  version: string;
  framing: (typeof FRAMINGS)[number];
  te: (typeof TE_VALUES)[number];
  chunks: (typeof CHUNKS)[number];
  connection: (typeof CONNECTIONS)[number];
  extras: string[];
  body: string;
  eol: string;
}

/** Any mix of parts, mostly adversarial. */
const anyPart = (bodies: string[]) =>
  fc.record<Part>({
    method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'),
    target: fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...TARGETS.slice(0, 3)) }, fc.constantFrom(...TARGETS)),
    version: fc.oneof({ weight: 6, arbitrary: fc.constant('HTTP/1.1') }, fc.constant('HTTP/1.0')),
    framing: fc.constantFrom(...FRAMINGS),
    te: fc.oneof({ weight: 3, arbitrary: fc.constant('chunked' as const) }, fc.constantFrom(...TE_VALUES)),
    chunks: fc.oneof({ weight: 2, arbitrary: fc.constant('plain' as const) }, fc.constantFrom(...CHUNKS)),
    connection: fc.constantFrom(...CONNECTIONS),
    extras: fc.subarray([...EXTRAS], { maxLength: 3 }),
    body: fc.oneof(fc.constantFrom(...bodies), fc.string({ maxLength: 24 })),
    eol: fc.oneof({ weight: 12, arbitrary: fc.constant('\r\n') }, fc.constant('\n')),
  });

/** Valid requests an honest client may send, `Connection` games on framing headers included. */
const honestPart = (bodies: string[]) =>
  fc.record<Part>({
    method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'),
    target: fc.constantFrom(...TARGETS.slice(0, 3)),
    version: fc.constant('HTTP/1.1'),
    framing: fc.constantFrom('cl', 'te'),
    te: fc.constantFrom('chunked', 'Chunked', 'CHUNKED'),
    chunks: fc.constantFrom(...([...HONEST_CHUNKS] as Part['chunks'][])),
    connection: fc.constantFrom('', 'keep-alive', 'Content-Length', 'Transfer-Encoding', 'keep-alive, X-Extra'),
    extras: fc.subarray([...HONEST_EXTRAS], { maxLength: 3 }),
    body: fc.oneof(fc.constantFrom(...bodies), fc.string({ maxLength: 24 })),
    eol: fc.constant('\r\n'),
  });

const part = (bodies: string[]) =>
  fc.oneof({ weight: 2, arbitrary: anyPart(bodies) }, { weight: 1, arbitrary: honestPart(bodies) });

function chunked(body: string, style: Part['chunks']): string {
  const hex = (n: number) => n.toString(16);
  const L = body.length;
  const last = style === 'last-ext' ? '0;done=1\r\n' : '0\r\n';
  const trailer = style === 'trailer' ? 'X-T: 1\r\n\r\n' : style === 'trailer-bad' ? 'bad trailer\r\n\r\n' : '\r\n';
  const one = (size: string, data: string) => (data.length ? `${size}\r\n${data}\r\n` : '');
  switch (style) {
    case 'split': {
      const h = Math.floor(L / 2);
      return one(hex(h), body.slice(0, h)) + one(hex(L - h), body.slice(h)) + last + trailer;
    }
    case 'upper-pad':
      return one(`000${hex(L).toUpperCase()}`, body) + last + trailer;
    case 'ext':
      return one(`${hex(L)};a=b;flag`, body) + last + trailer;
    case 'ext-quoted':
      return one(`${hex(L)};q="x y\\"z"`, body) + last + trailer;
    case 'ext-bws':
      return one(`${hex(L)} ;a=b`, body) + last + trailer;
    case 'ext-ctl':
      return one(`${hex(L)};a\x01`, body) + last + trailer;
    case 'size-space':
      return one(`${hex(L)} `, body) + last + trailer;
    case 'size-0x':
      return one(`0x${hex(L)}`, body) + last + trailer;
    case 'size-neg':
      return one(`-${hex(L)}`, body) + last + trailer;
    case 'size-huge':
      return one(`1${'0'.repeat(16)}${hex(L)}`, body) + last + trailer;
    case 'no-crlf':
      return L ? `${hex(L)}\r\n${body}${last}${trailer}` : last + trailer;
    case 'lf':
      return `${L ? `${hex(L)}\n${body}\n` : ''}0\n\n`;
    default:
      return one(hex(L), body) + last + trailer;
  }
}

/**
 * The `Content-Length` headers of the length framings both generators share, for a body of
 * `L` bytes (`cl-conflict`'s second value is `L + conflictBy`); null for any other framing.
 */
function lengthHeaders(framing: string, L: number, conflictBy: number): string[] | null {
  switch (framing) {
    case 'cl':
      return [`Content-Length: ${L}`];
    case 'cl+1':
      return [`Content-Length: ${L + 1}`];
    case 'cl-1':
      return [`Content-Length: ${Math.max(0, L - 1)}`];
    case 'cl-dup':
      return [`Content-Length: ${L}`, `Content-Length: ${L}`];
    case 'cl-list':
      return [`Content-Length: ${L}, ${L}`];
    case 'cl-conflict':
      return [`Content-Length: ${L}`, `Content-Length: ${L + conflictBy}`];
    default:
      return null;
  }
}

function serialize(p: Part, host: string): string {
  const L = p.body.length;
  const h: string[] = [`Host: ${host}`];
  let body = p.body;
  const lengths = lengthHeaders(p.framing, L, 3);
  if (lengths) h.push(...lengths);
  else
    switch (p.framing) {
      case 'none':
        break;
      case 'cl-plus':
        h.push(`Content-Length: +${L}`);
        break;
      case 'cl-zero-pad':
        h.push(`Content-Length: 00${L}`);
        break;
      case 'cl-space-colon':
        h.push(`Content-Length : ${L}`);
        break;
      case 'te':
      case 'te+cl':
      case 'te-space-colon': {
        const name = p.framing === 'te-space-colon' ? 'Transfer-Encoding ' : 'Transfer-Encoding';
        if (p.te === 'two-headers') h.push(`${name}: chunked`, `${name}: chunked`);
        else if (p.te === 'gzip-then-chunked') h.push(`${name}: gzip`, `${name}: chunked`);
        else h.push(`${name}: ${p.te}`);
        if (p.framing === 'te+cl') h.push(`Content-Length: ${L}`);
        body = chunked(p.body, p.chunks);
        break;
      }
    }
  if (p.connection) h.push(`Connection: ${p.connection}`);
  for (const x of p.extras) h.push(x.replace('{EOL}', p.eol));
  return `${p.method} ${p.target} ${p.version}${p.eol}${h.join(p.eol)}${p.eol}${p.eol}${body}`;
}

/** Whether an honest client could have sent `p` (every part a plain, valid choice): then it must be forwarded. */
function honest(p: Part, lastOfPipeline: boolean): boolean {
  const framingOk =
    p.framing === 'cl' ||
    (p.framing === 'none' && p.body === '') ||
    (p.framing === 'te' && ['chunked', 'Chunked', 'CHUNKED'].includes(p.te) && HONEST_CHUNKS.has(p.chunks));
  return (
    p.version === 'HTTP/1.1' &&
    TARGETS.slice(0, 3).includes(p.target as never) &&
    framingOk &&
    p.eol === '\r\n' &&
    p.extras.every((x) => HONEST_EXTRAS.has(x as never)) &&
    (lastOfPipeline || p.connection !== 'close') &&
    p.connection !== 'host' // the proxy keeps Host whatever Connection says; the strict reading agrees
  );
}

// ---- the property --------------------------------------------------------------------

describe('port proxy: differential framing test (generated malformed and ambiguous requests)', () => {
  let f: Fixture;
  let up: RecordingUpstream;
  let host: string;
  before(async () => {
    f = await startFixture({ timeoutMs: 3000 });
    up = await recordingUpstream();
    host = f.host(IDS.pub, up.port);
  });
  after(async () => {
    await f.close();
    await up.close();
  });

  it(`${RUNS} generated inputs: each forwarded exactly or refused, nothing smuggled, the next visitor unaffected`, async (t) => {
    const smuggle = (h: string) => [
      `GET /smuggled HTTP/1.1\r\nHost: ${h}\r\n\r\n`,
      `POST /smuggled HTTP/1.1\r\nHost: ${h}\r\nContent-Length: 5\r\n\r\nxxxxx`,
      `GET /capture HTTP/1.1\r\nHost: ${h}\r\nX-Captured: `,
      '0\r\n\r\n',
      'abc',
      '',
      '\x00\xff\r\n\r\n',
    ];
    const stats = { forwarded: 0, refused: 0, honest: 0 };
    await fc.assert(
      fc.asyncProperty(fc.array(part(smuggle(host)), { minLength: 1, maxLength: 2 }), async (parts) => {
        const raw = parts.map((p) => serialize(p, host)).join('');
        const input = Buffer.from(raw, 'latin1');
        const ref = parseRequests(input, { maxHead: 16 * 1024 });
        const isHonest =
          !ref.error && ref.rest.length === 0 && parts.every((p, i) => honest(p, i === parts.length - 1));
        if (isHonest) stats.honest++;
        const from = up.seen.length;
        const want = ref.requests.length + (ref.error ? 1 : 0);
        const { responses } = await exchange(f.port, input, { responses: want, limitMs: 1500 });
        await nextVisitor(); // the sync point: what the upstream saw before it belongs to this input
        const seen = up.seen.slice(from, -1);
        const ctx = () => `input ${JSON.stringify(raw.slice(0, 300))}\nupstream saw ${JSON.stringify(seen)}`;
        // 1. Only valid requests reach the sandbox, each one the client sent, in order, once.
        let j = 0;
        for (const s of seen) {
          assert.ok('req' in s, `the proxy sent bytes a strict parser refuses: ${ctx()}`);
          while (j < ref.requests.length && show(ref.requests[j]) !== show(s.req)) j++;
          assert.ok(j < ref.requests.length, `a request the client did not send reached the sandbox: ${ctx()}`);
          j++;
        }
        // 2. Every answer is the sandbox's answer to that request, in order, or a refusal by the
        // proxy or node (4xx). Node's parser failing on a later pipelined request cuts the
        // connection, so answers may stop short of what the sandbox saw (a prefix).
        const answered = responses.filter((r) => r.headers['x-upstream-seq'] !== undefined);
        const seqs = seen.map((s) => ('seq' in s ? s.seq : '?'));
        assert.deepEqual(
          answered.map((r) => r.headers['x-upstream-seq']),
          isHonest ? seqs : seqs.slice(0, answered.length),
          `answers out of step: ${ctx()}`,
        );
        for (const r of responses)
          if (r.headers['x-upstream-seq'] === undefined)
            assert.ok(r.status >= 400 && r.status < 500, `refused with ${r.status}: ${ctx()}`);
        stats.forwarded += seen.length;
        stats.refused += responses.length - answered.length;
        // 3. Honest input is forwarded, all of it.
        if (isHonest) assert.equal(seen.length, ref.requests.length, `an honest request was not forwarded: ${ctx()}`);
      }),
      { seed: SEED, numRuns: RUNS, endOnFailure: true },
    );
    t.diagnostic(`framing corpus: ${JSON.stringify(stats)}`);
    assert.ok(stats.honest > RUNS / 10 && stats.forwarded > 0 && stats.refused > 0, JSON.stringify(stats));
  });

  /** An honest visitor: exactly its request reaches the sandbox, its answer is its own, nothing is left pending. */
  const nextVisitor = async () => {
    const from = up.seen.length;
    const r = await get(f.port, host, { path: '/next-visitor', headers: { cookie: 'session=victim' } });
    assert.equal(r.status, 200);
    const last = up.seen.at(-1);
    assert.ok(last && 'req' in last && last.req.target === '/next-visitor', `the next visitor's request came last`);
    assert.equal(r.body, last.seq, 'the next visitor got the answer to its own request');
    assert.ok(up.seen.length > from);
    assert.equal(up.pending(), 0, 'no partial request left on a pooled connection');
  };
});

// ---- the sandbox side ----------------------------------------------------------------

const R_FRAMINGS = [
  'close',
  'cl',
  'cl+1',
  'cl-1',
  'cl-dup',
  'cl-list',
  'cl-conflict',
  'te',
  'te+cl',
  'te-gzip',
  'te-twice',
] as const;
const R_CONNECTIONS = ['', 'close', 'keep-alive', 'Content-Length', 'Transfer-Encoding'] as const;
const R_CHUNKS = ['plain', 'ext', 'lf', 'bad-size', 'trailer', 'unfinished'] as const;
const POISON = 'HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON';

interface Answer {
  version: string;
  status: number;
  early: boolean;
  framing: (typeof R_FRAMINGS)[number];
  connection: (typeof R_CONNECTIONS)[number];
  chunks: (typeof R_CHUNKS)[number];
  body: string;
  after: string;
  extra: string;
}

const anyAnswer = fc.record<Answer>({
  version: fc.oneof({ weight: 5, arbitrary: fc.constant('HTTP/1.1') }, fc.constant('HTTP/1.0')),
  status: fc.oneof({ weight: 6, arbitrary: fc.constant(200) }, fc.constantFrom(204, 304, 404)),
  early: fc.boolean(),
  framing: fc.constantFrom(...R_FRAMINGS),
  connection: fc.constantFrom(...R_CONNECTIONS),
  chunks: fc.oneof({ weight: 3, arbitrary: fc.constant('plain' as const) }, fc.constantFrom(...R_CHUNKS)),
  body: fc.constantFrom('hello', '', POISON, 'a\r\n0\r\n\r\n'),
  after: fc.oneof({ weight: 3, arbitrary: fc.constant('') }, fc.constantFrom(POISON, 'garbage\r\n\r\n')),
  extra: fc.constantFrom('', 'X-A: 1\r\n', 'X-Fold: a\r\n b\r\n', 'X-Bad: a\nb\r\n'),
});

function answerBytes(a: Answer): string {
  const L = a.body.length;
  const h: string[] = [];
  let body = a.body;
  const chunkedBody = () => {
    const hex = L.toString(16);
    const one = L ? (a.chunks === 'lf' ? `${hex}\n${a.body}\n` : `${hex}\r\n${a.body}\r\n`) : '';
    switch (a.chunks) {
      case 'ext':
        return `${L ? `${hex};x=y\r\n${a.body}\r\n` : ''}0\r\n\r\n`;
      case 'lf':
        return `${one}0\n\n`;
      case 'bad-size':
        return `${L ? `z${hex}\r\n${a.body}\r\n` : ''}0\r\n\r\n`;
      case 'trailer':
        return `${one}0\r\nX-T: 1\r\n\r\n`;
      case 'unfinished':
        return one;
      default:
        return `${one}0\r\n\r\n`;
    }
  };
  const lengths = lengthHeaders(a.framing, L, 2);
  if (lengths) h.push(...lengths);
  else
    switch (a.framing) {
      case 'te':
      case 'te+cl':
      case 'te-gzip':
      case 'te-twice':
        h.push(
          a.framing === 'te-gzip'
            ? 'Transfer-Encoding: gzip, chunked'
            : a.framing === 'te-twice'
              ? 'Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked'
              : 'Transfer-Encoding: chunked',
        );
        if (a.framing === 'te+cl') h.push(`Content-Length: ${L}`);
        body = chunkedBody();
        break;
    }
  if (a.connection) h.push(`Connection: ${a.connection}`);
  const head = `${a.version} ${a.status} X\r\n${h.map((x) => `${x}\r\n`).join('')}${a.extra}\r\n`;
  const bodyless = a.status === 204 || a.status === 304;
  return `${a.early ? 'HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n' : ''}${head}${bodyless ? '' : body}${a.after}`;
}

const honestAnswerArb = fc.record<Answer>({
  version: fc.constant('HTTP/1.1'),
  status: fc.constantFrom(200, 200, 404, 204, 304),
  early: fc.boolean(),
  framing: fc.constantFrom('cl', 'te'),
  connection: fc.constantFrom('', 'keep-alive', 'Content-Length', 'Transfer-Encoding'),
  chunks: fc.constantFrom('plain', 'ext', 'trailer'),
  body: fc.constantFrom('hello', '', POISON, 'a\r\n0\r\n\r\n'),
  after: fc.constant(''),
  extra: fc.constantFrom('', 'X-A: 1\r\n'),
});
const answerArb = fc.oneof({ weight: 2, arbitrary: anyAnswer }, { weight: 1, arbitrary: honestAnswerArb });

/** A well-framed answer an honest app sends: its status and body must reach the client as they are. */
function honestAnswer(a: Answer): boolean {
  const bodyless = a.status === 204 || a.status === 304;
  return (
    a.extra !== 'X-Fold: a\r\n b\r\n' &&
    a.extra !== 'X-Bad: a\nb\r\n' &&
    a.after === '' &&
    (bodyless
      ? a.framing === 'cl' || a.framing === 'close'
      : a.framing === 'cl' ||
        (a.framing === 'te' && a.version === 'HTTP/1.1' && ['plain', 'ext', 'trailer'].includes(a.chunks)))
  );
}

describe('port proxy: differential framing test of the sandbox side (generated answers)', () => {
  let f: Fixture;
  let current: Answer | null = null;
  const bad: string[] = [];
  let sandboxHost: string;
  let close: () => Promise<void>;
  before(async () => {
    f = await startFixture({ timeoutMs: 1000 });
    const { createServer } = await import('node:net');
    const socks = new Set<import('node:net').Socket>();
    const server = createServer((sock) => {
      socks.add(sock);
      sock.on('close', () => socks.delete(sock));
      sock.on('error', () => {});
      let buf = Buffer.alloc(0);
      sock.on('data', (d: Buffer) => {
        const p = parseRequests(Buffer.concat([buf, d]));
        buf = Buffer.from(p.rest);
        if (p.error) bad.push(p.error);
        for (const r of p.requests) {
          if (r.target === '/next') sock.write('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext');
          else if (current) {
            sock.write(answerBytes(current), 'latin1');
            if (current.framing === 'close' || current.connection === 'close') sock.end();
          }
        }
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    sandboxHost = f.host(IDS.pub, (server.address() as import('node:net').AddressInfo).port);
    close = () => {
      for (const s of socks) s.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    };
  });
  after(async () => {
    await f.close();
    await close();
  });

  it('150 generated answers: relayed as framed, or 502/cut; never out of step for the next visitor', async (t) => {
    const stats = { relayed: 0, refused: 0, honest: 0 };
    await fc.assert(
      fc.asyncProperty(answerArb, async (a) => {
        current = a;
        const ctx = `answer ${JSON.stringify(answerBytes(a))}`;
        const { responses } = await exchange(
          f.port,
          Buffer.from(`GET /case HTTP/1.1\r\nHost: ${sandboxHost}\r\n\r\n`),
          {
            limitMs: 1500,
          },
        );
        const r = responses[0];
        if (r && r.headers['x-sandboxd-proxy'] !== 'error') {
          stats.relayed++;
          // Close-delimited, what follows is body; otherwise bytes after the answer's end must not reach the client.
          const closeBody = a.framing === 'close' && a.status !== 204 && a.status !== 304;
          assert.ok(
            !r.body.includes('POISON') || a.body === POISON || closeBody,
            `bytes after the answer reached the client: ${ctx}`,
          );
        } else stats.refused++;
        if (honestAnswer(a)) {
          stats.honest++;
          const bodyless = a.status === 204 || a.status === 304;
          assert.deepEqual([r?.status, r?.body], [a.status, bodyless ? '' : a.body], ctx);
          if (!bodyless)
            assert.equal(r.headers['content-length'], a.framing === 'cl' ? String(a.body.length) : undefined);
        }
        // The next visitor, most likely on the connection just used, gets its own answer.
        for (let i = 0; i < 2; i++) {
          const next = await get(f.port, sandboxHost, { path: '/next' });
          assert.deepEqual([next.status, next.body], [200, 'next'], `the next visitor after ${ctx}`);
        }
        assert.deepEqual(bad, [], 'the proxy sent the sandbox only well-formed requests');
      }),
      { seed: SEED, numRuns: 150, endOnFailure: true },
    );
    t.diagnostic(`answer corpus: ${JSON.stringify(stats)}`);
    assert.ok(stats.honest > 10 && stats.relayed > 0 && stats.refused > 0, JSON.stringify(stats));
  });
});
