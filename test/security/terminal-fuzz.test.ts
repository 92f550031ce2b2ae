/**
 * Property-based fuzz of the terminal WebSocket (docs/terminals.md), black box against the
 * real server (the real runtime under `npm test`): generated sequences of malformed JSON,
 * wrong types, unknown control kinds, resizes to 0 / -1 / 100000 / NaN, invalid UTF-8 in
 * text frames, binary where text is expected and back, fragmented and oversized messages,
 * pings and pongs; then hand-made protocol violations on a raw socket, rapid open/close,
 * and many clients on one terminal. Expected: a violation closes that connection with its
 * close code (1002 protocol, 1007 bad UTF-8, 1009 too big), anything else leaves it open;
 * a second client watching all along keeps working, the terminal still runs commands and
 * resizes afterwards, the server never crashes, and its memory is printed before/after.
 *
 * On the local runtime the shell first runs `stty raw -echo; sed ...` so that fuzzed input
 * (^C, ^D, ^Z included) goes to a sink that only a sentinel line ends.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import WebSocket from 'ws';
import { TermClient, terminalUrl } from '../../packages/server/test/terminals.js';
import { ADMIN_KEY, IMAGE, RUNTIME, startServer, type Server } from '../e2e/harness.js';
import { INSPECTABLE, MiB, settledMemory, showMemory, type ServerMemory } from './abuse-support.js';

const SOAK = process.env.SANDBOXD_SOAK === '1';
const RUNS = Number(process.env.SANDBOXD_FUZZ_RUNS ?? (SOAK ? 600 : 40));
const local = RUNTIME === 'local';
const auth = { authorization: `Bearer ${ADMIN_KEY}` };
const LIMIT = 1024 * 1024; // the server's largest client message
const SINK_END = 'SINK_END_7f3a';

type Frame =
  | { k: 'text'; s: string }
  | { k: 'bigtext'; kib: number }
  | { k: 'bin'; b: Uint8Array }
  | { k: 'badutf8'; b: Uint8Array }
  | { k: 'huge'; extra: number; binary: boolean }
  | { k: 'frag'; parts: string[]; binary: boolean }
  | { k: 'fraghuge'; binary: boolean }
  | { k: 'ping' | 'pong'; b: Uint8Array };

/** The close code a frame must cause, or null when the connection must stay open. */
const violation = (f: Frame): number | null =>
  f.k === 'badutf8' ? 1007 : f.k === 'huge' || f.k === 'fraghuge' ? 1009 : null;

/** Input may reach a shell on the fake runtime: nothing that ends it. */
const harmless = (s: string) => !/exit|kill/i.test(s);

const weirdNumber = fc.oneof(
  fc.constantFrom<unknown>(
    0,
    -1,
    1,
    80,
    1000,
    1001,
    100_000,
    1.5,
    -0,
    1e308,
    Number.MAX_SAFE_INTEGER,
    2 ** 31,
    2 ** 32 + 24,
    '80',
    '',
    null,
    true,
    [],
    {},
    [80],
    { n: 80 },
  ),
  fc.integer(),
  fc.double(),
);
const controlObject = fc.record(
  {
    type: fc.oneof(
      fc.constantFrom(
        'resize',
        'resize',
        'resize',
        'ready',
        'exit',
        'input',
        'RESIZE',
        'resize ',
        '__proto__',
        'constructor',
        'toString',
        '',
      ),
      fc.string({ maxLength: 20 }),
    ),
    cols: weirdNumber,
    rows: weirdNumber,
    extra: fc.jsonValue({ maxDepth: 3 }),
  },
  { requiredKeys: ['type'] },
);
const malformed = fc.constantFrom(
  '{',
  '{"type":',
  '{"type":"resize","cols":',
  '{"type":"resize","cols":NaN,"rows":24}',
  '{"type":"resize","cols":Infinity,"rows":-Infinity}',
  '{"type":"resize","cols":1e999,"rows":1e999}',
  '{"type":"resize","cols":-0,"rows":"24"}',
  '   \n\t{"type":"resize","cols":0,"rows":0}',
  '{"type":"resize","cols":100000,"rows":100000}',
  '{"type":"resize","cols":-5,"rows":-5}',
  '[{"type":"resize","cols":10,"rows":10}]',
  '{"type":{"x":1}}',
  '{"type":null}',
  '{"__proto__":{"type":"resize"},"cols":5}',
  '{"type":"resize"}{"type":"resize"}',
  'null',
  '"resize"',
  `{"type":"resize","cols":${'['.repeat(5000)}${']'.repeat(5000)},"rows":24}`,
  `{"type":"resize","x":${'{"a":'.repeat(3000)}1${'}'.repeat(3000)}}`,
  '{"type":"resize","cols":80,"rows":24,"cols":0}',
  '\u0000{"type":"resize"}',
  '{"type":"\ud800"}',
);
const textFrame: fc.Arbitrary<Frame> = fc
  .oneof(
    { arbitrary: controlObject.map((o) => JSON.stringify(o)), weight: 5 },
    { arbitrary: malformed, weight: 3 },
    { arbitrary: fc.string({ maxLength: 200 }), weight: 2 },
    { arbitrary: fc.string({ unit: 'binary', maxLength: 100 }), weight: 1 },
  )
  .filter(harmless)
  .map((s): Frame => ({ k: 'text', s }));
const frame: fc.Arbitrary<Frame> = fc.oneof(
  { arbitrary: textFrame, weight: 10 },
  // big but legal: input (the fake runtime's shell echoes byte by byte, so smaller there)
  { arbitrary: fc.integer({ min: 1, max: local ? 1000 : 32 }).map((kib): Frame => ({ k: 'bigtext', kib })), weight: 1 },
  {
    arbitrary: fc
      .oneof(
        fc.uint8Array({ maxLength: 300 }),
        controlObject.map((o) => new TextEncoder().encode(JSON.stringify(o))),
      )
      .filter((b) => harmless(Buffer.from(b).toString('latin1')))
      .map((b) => ({ k: 'bin' as const, b })),
    weight: 4,
  },
  {
    arbitrary: fc
      .tuple(
        fc.string({ maxLength: 10 }).filter(harmless),
        fc.constantFrom(
          [0xff],
          [0xfe, 0xff],
          [0xc0, 0xaf],
          [0xed, 0xa0, 0x80],
          [0xe2, 0x82],
          [0xf8, 0x88, 0x80, 0x80, 0x80],
          [0xf4, 0x90, 0x80, 0x80],
        ),
      )
      .map(([p, bad]) => ({ k: 'badutf8' as const, b: new Uint8Array([...Buffer.from(p), ...bad]) })),
    weight: 1,
  },
  {
    arbitrary: fc
      .record({ extra: fc.integer({ min: 1, max: 64 * 1024 }), binary: fc.boolean() })
      .map((r) => ({ k: 'huge' as const, ...r })),
    weight: 1,
  },
  {
    arbitrary: fc
      .record({
        parts: fc.oneof(
          controlObject
            .map((o) => JSON.stringify(o))
            .chain((j) =>
              fc.integer({ min: 1, max: Math.max(1, j.length - 1) }).map((i) => [j.slice(0, i), j.slice(i)]),
            ),
          fc.array(fc.string({ maxLength: 40 }).filter(harmless), { minLength: 2, maxLength: 5 }),
        ),
        binary: fc.boolean(),
      })
      .map((r) => ({ k: 'frag' as const, ...r })),
    weight: 2,
  },
  { arbitrary: fc.boolean().map((binary) => ({ k: 'fraghuge' as const, binary })), weight: 1 },
  {
    arbitrary: fc.record({
      k: fc.constantFrom('ping' as const, 'pong' as const),
      b: fc.uint8Array({ maxLength: 125 }),
    }),
    weight: 1,
  },
);

/** Sends one frame; returns the bytes put on the wire (payloads). */
function sendFrame(ws: WebSocket, f: Frame): number {
  const send = (data: string | Buffer | Uint8Array, o: { binary: boolean; fin?: boolean }) =>
    ws.send(data, { binary: o.binary, fin: o.fin ?? true, compress: false });
  switch (f.k) {
    case 'text':
      send(f.s, { binary: false });
      return Buffer.byteLength(f.s);
    case 'bigtext':
      send(`{${'x'.repeat(f.kib * 1024 - 1)}`, { binary: false });
      return f.kib * 1024;
    case 'bin':
      send(f.b, { binary: true });
      return f.b.length;
    case 'badutf8':
      send(Buffer.from(f.b), { binary: false });
      return f.b.length; // ws does not check what it sends
    case 'huge':
      send(Buffer.alloc(LIMIT + f.extra, 0x61), { binary: f.binary });
      return LIMIT + f.extra;
    case 'frag': {
      for (const [i, p] of f.parts.entries()) send(p, { binary: f.binary, fin: i === f.parts.length - 1 });
      return f.parts.reduce((n, p) => n + Buffer.byteLength(p), 0);
    }
    case 'fraghuge': {
      const part = Buffer.alloc(400 * 1024, 0x62);
      for (let i = 0; i < 3; i++) send(part, { binary: f.binary, fin: i === 2 });
      return 3 * part.length;
    }
    case 'ping':
      ws.ping(Buffer.from(f.b));
      return f.b.length;
    case 'pong':
      ws.pong(Buffer.from(f.b));
      return f.b.length;
  }
}

/** Resolves when `p` does, rejects after `ms`. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<T>((_, rej) => (t = setTimeout(() => rej(new Error(`${what}: not within ${ms} ms`)), ms))),
  ]).finally(() => clearTimeout(t));
}

/** A ping answered by a pong: every frame sent before it was processed. */
function roundTrip(ws: WebSocket): Promise<void> {
  return within(
    new Promise<void>((resolve, reject) => {
      const mark = randomBytes(8);
      const onPong = (d: Buffer) => {
        if (!d.equals(mark)) return;
        ws.off('pong', onPong);
        resolve();
      };
      ws.on('pong', onPong);
      ws.once('close', (code) => reject(new Error(`closed with ${code} instead of answering the ping`)));
      ws.ping(mark);
    }),
    20_000,
    'ping round trip',
  );
}

/** One client frame as a browser would send it (masked), with every field settable. */
function rawFrame(o: {
  fin?: boolean;
  rsv?: number;
  opcode: number;
  payload?: Buffer;
  mask?: boolean;
  length?: bigint;
}): Buffer {
  const payload = o.payload ?? Buffer.alloc(0);
  const len = o.length ?? BigInt(payload.length);
  const head = [((o.fin ?? true) ? 0x80 : 0) | ((o.rsv ?? 0) << 4) | o.opcode];
  const m = (o.mask ?? true) ? 0x80 : 0;
  let ext = Buffer.alloc(0);
  if (len < 126n) head.push(m | Number(len));
  else if (len < 65536n) {
    head.push(m | 126);
    ext = Buffer.alloc(2);
    ext.writeUInt16BE(Number(len));
  } else {
    head.push(m | 127);
    ext = Buffer.alloc(8);
    ext.writeBigUInt64BE(len);
  }
  if (!(o.mask ?? true)) return Buffer.concat([Buffer.from(head), ext, payload]);
  const key = randomBytes(4);
  const masked = Buffer.from(payload.map((b, i) => b ^ key[i % 4]));
  return Buffer.concat([Buffer.from(head), ext, key, masked]);
}

/** A raw WebSocket to `url` (after a real handshake); `closeCode()` waits for the server's close frame. */
async function rawWebSocket(
  url: string,
  headers: Record<string, string>,
): Promise<{ sock: Socket; closeCode: () => Promise<number | null> }> {
  const u = new URL(url);
  const sock = connect(Number(u.port), u.hostname);
  let buf = Buffer.alloc(0);
  let waiter: (() => void) | null = null;
  let ended = false;
  sock.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    waiter?.();
  });
  sock.on('close', () => {
    ended = true;
    waiter?.();
  });
  sock.on('error', () => {});
  const wait = (pred: () => boolean, what: string) =>
    within(
      new Promise<void>((resolve, reject) => {
        const check = () => (pred() ? resolve() : ended ? reject(new Error(`${what}: socket closed`)) : undefined);
        waiter = check;
        check();
      }),
      15_000,
      what,
    );
  const hs = {
    host: u.host,
    upgrade: 'websocket',
    connection: 'Upgrade',
    'sec-websocket-key': randomBytes(16).toString('base64'),
    'sec-websocket-version': '13',
    ...headers,
  };
  sock.write(
    `GET ${u.pathname}${u.search} HTTP/1.1\r\n${Object.entries(hs)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('')}\r\n`,
  );
  await wait(() => buf.includes('\r\n\r\n'), 'handshake');
  const end = buf.indexOf('\r\n\r\n');
  assert.match(buf.subarray(0, end).toString(), /^HTTP\/1\.1 101/, 'upgraded');
  buf = buf.subarray(end + 4);
  /** Server frames are unmasked; returns the close frame's code once it came (null: closed without one). */
  const closeCode = async (): Promise<number | null> => {
    let code: number | null | undefined;
    const scan = () => {
      let off = 0;
      while (off + 2 <= buf.length) {
        const op = buf[off] & 0x0f;
        let len = buf[off + 1] & 0x7f;
        let p = off + 2;
        if (len === 126) {
          len = buf.readUInt16BE(p);
          p += 2;
        } else if (len === 127) {
          len = Number(buf.readBigUInt64BE(p));
          p += 8;
        }
        if (p + len > buf.length) return false;
        if (op === 8) {
          code = len >= 2 ? buf.readUInt16BE(p) : null;
          return true;
        }
        off = p + len;
      }
      return false;
    };
    await wait(() => scan() || ended, 'close frame').catch(() => {});
    return code ?? null;
  };
  return { sock, closeCode };
}

describe(`terminal WebSocket fuzz (${RUNTIME})`, { timeout: 600_000 }, () => {
  let s: Server;
  let sandboxId = '';
  let terminalId = '';
  let url = '';
  let observer: TermClient;
  let memStart: ServerMemory;
  let frames = 0;
  let bytes = 0;
  let connections = 0;

  const clientCount = async () =>
    (await s.api('GET', `/api/v1/sandboxes/${sandboxId}/terminals/${terminalId}`)).body.clientCount as number;
  /** Polls until the terminal has `n` clients (bounded). */
  const settleClients = async (n: number) => {
    for (let i = 0; i < 200 && (await clientCount()) !== n; i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(await clientCount(), n, 'clientCount is exact again');
  };
  const assertAlive = async () => {
    assert.equal(s.proc.exitCode, null, 'the server is running');
    assert.equal((await s.api('GET', '/healthz', { key: null })).status, 200);
    assert.equal(
      observer.closeInfo,
      null,
      `the watching client is still connected: ${JSON.stringify(observer.closeInfo)}`,
    );
  };

  before(async () => {
    // Many clients on one terminal is what this suite fuzzes: the per-sandbox shares (16
    // clients per terminal, 64 sockets per sandbox; fair-share.test.ts) are raised past its count.
    s = await startServer({
      env: {
        SANDBOXD_LOG_LEVEL: 'error',
        SANDBOXD_FAIR_SHARE_CLIENTS_PER_TERMINAL: '512',
        SANDBOXD_FAIR_SHARE_TERMINAL_SOCKETS_PER_SANDBOX: '512',
        ...INSPECTABLE,
      },
    });
    const c = await s.api('POST', '/api/v1/sandboxes', { body: { image: IMAGE, timeoutMs: 1_800_000 } });
    assert.equal(c.status, 201, c.text);
    sandboxId = c.body.sandbox.id;
    const t = await s.api('POST', `/api/v1/sandboxes/${sandboxId}/terminals`, { body: { cols: 80, rows: 24 } });
    assert.equal(t.status, 201, t.text);
    terminalId = t.body.terminal.id;
    url = terminalUrl(s.baseUrl, sandboxId, terminalId);
    observer = await TermClient.connect(url, auth);
    await observer.control('ready');
    if (local) {
      observer.type(`stty raw -echo; echo READY-$((2*3)); sed -n '/^${SINK_END}$/q'; stty sane; echo AFTER-$((6*7))\r`);
      await observer.waitForOutput(/READY-6/);
    }
    memStart = await settledMemory(s.baseUrl, s);
  });
  after(async () => {
    observer?.close();
    if (s) await s.api('DELETE', `/api/v1/sandboxes/${sandboxId}`);
    await s?.stop();
  });

  it(`${RUNS} generated frame sequences: violations close with their code, the rest stays open`, async () => {
    const codes = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(fc.array(frame, { minLength: 1, maxLength: 8 }), async (seq) => {
        const c = await TermClient.connect(url, auth);
        connections++;
        let expected: number | null = null;
        for (const f of seq) {
          bytes += sendFrame(c.ws, f);
          frames++;
          expected = violation(f);
          if (expected !== null) break; // the server closes on the first one
        }
        if (expected === null) {
          await roundTrip(c.ws);
          assert.equal(c.closeInfo, null, `still open after ${seq.map((f) => f.k).join(',')}`);
          c.close();
          await within(c.closed, 20_000, 'close');
          codes.set('open', (codes.get('open') ?? 0) + 1);
        } else {
          const info = await within(c.closed, 20_000, `close after ${seq.map((f) => f.k).join(',')}`);
          assert.equal(
            info.code,
            expected,
            `close code after ${seq.map((f) => f.k).join(',')} (reason ${info.reason})`,
          );
          codes.set(String(info.code), (codes.get(String(info.code)) ?? 0) + 1);
        }
        assert.equal(observer.closeInfo, null, 'the watching client is unaffected');
      }),
      { numRuns: RUNS, endOnFailure: true, includeErrorInReport: true },
    );
    console.log(
      `# ${RUNS} sequences, ${frames} frames, ${MiB(bytes)}; connections ended: ${[...codes].map(([k, v]) => `${v} ${k}`).join(', ')}`,
    );
    await assertAlive();
  });

  it('hand-made protocol violations on a raw socket each get their close code', async () => {
    const text = (s: string) => Buffer.from(s);
    const cases: Array<[string, Buffer[], number]> = [
      ['an unmasked frame', [rawFrame({ opcode: 1, payload: text('hi'), mask: false })], 1002],
      ['RSV1 set without an extension', [rawFrame({ opcode: 1, rsv: 4, payload: text('hi') })], 1002],
      ['reserved opcode 3', [rawFrame({ opcode: 3, payload: text('x') })], 1002],
      ['reserved control opcode 0xB', [rawFrame({ opcode: 0xb })], 1002],
      ['a ping of 126 bytes', [rawFrame({ opcode: 9, payload: Buffer.alloc(126) })], 1002],
      ['a fragmented ping', [rawFrame({ opcode: 9, fin: false, payload: text('p') })], 1002],
      ['a continuation with nothing to continue', [rawFrame({ opcode: 0, payload: text('x') })], 1002],
      [
        'a new message inside a fragmented one',
        [rawFrame({ opcode: 1, fin: false, payload: text('{"ty') }), rawFrame({ opcode: 2, payload: text('x') })],
        1002,
      ],
      ['a close with code 999', [rawFrame({ opcode: 8, payload: Buffer.from([0x03, 0xe7]) })], 1002],
      ['a close with a 1-byte body', [rawFrame({ opcode: 8, payload: Buffer.from([0x03]) })], 1002],
      [
        'a close with invalid UTF-8 in its reason',
        [rawFrame({ opcode: 8, payload: Buffer.from([0x03, 0xe8, 0xff]) })],
        1007,
      ],
      ['invalid UTF-8 in a text frame', [rawFrame({ opcode: 1, payload: Buffer.from([0x7b, 0xff]) })], 1007],
      ['an overlong UTF-8 encoding', [rawFrame({ opcode: 1, payload: Buffer.from([0xc0, 0xaf]) })], 1007],
      ['an encoded UTF-16 surrogate', [rawFrame({ opcode: 1, payload: Buffer.from([0xed, 0xa0, 0x80]) })], 1007],
      [
        'invalid UTF-8 split across fragments',
        [
          rawFrame({ opcode: 1, fin: false, payload: Buffer.from([0x61, 0xe2]) }),
          rawFrame({ opcode: 0, payload: Buffer.from([0x28, 0xa1]) }),
        ],
        1007,
      ],
      ['a 2 MiB frame announced, not sent', [rawFrame({ opcode: 2, length: 2n * 1024n * 1024n })], 1009],
      ['a length of 2^63', [rawFrame({ opcode: 2, length: 2n ** 63n })], 1009],
      ['HTTP text after the handshake', [Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')], 1002],
    ];
    for (const [what, wire, code] of cases) {
      const ws = await rawWebSocket(url, auth);
      connections++;
      for (const b of wire) ws.sock.write(b);
      assert.equal(await ws.closeCode(), code, what);
      ws.sock.destroy();
    }
    await assertAlive();
  });

  it('rapid open/close and aborted handshakes leave no client behind', async () => {
    const n = SOAK ? 400 : 60;
    for (let i = 0; i < n; i += 10) {
      await Promise.all(
        Array.from({ length: 10 }, async (_, j) => {
          connections++;
          switch ((i + j) % 4) {
            case 0: {
              const c = await TermClient.connect(url, auth);
              c.close();
              await within(c.closed, 20_000, 'close');
              break;
            }
            case 1: {
              const c = await TermClient.connect(url, auth);
              c.ws.terminate();
              await within(c.closed, 20_000, 'terminate');
              break;
            }
            case 2: {
              const ws = new WebSocket(url, { headers: auth });
              ws.on('error', () => {});
              setImmediate(() => ws.terminate());
              await new Promise((r) => ws.once('close', r));
              break;
            }
            case 3: {
              const raw = await rawWebSocket(url, auth);
              raw.sock.destroy();
              break;
            }
          }
        }),
      );
    }
    await settleClients(1);
    await assertAlive();
  });

  it('input a program does not read is not piled up in the server: the sender is paused, then everything arrives', async () => {
    const t = await s.api('POST', `/api/v1/sandboxes/${sandboxId}/terminals`, { body: {} });
    assert.equal(t.status, 201, t.text);
    const c = await TermClient.connect(terminalUrl(s.baseUrl, sandboxId, t.body.terminal.id), auth);
    connections++;
    await c.control('ready');
    const MIB = local ? 40 : 1; // the fake runtime's shell echoes byte by byte
    const go = local ? '/tmp/go-abuse' : '';
    if (local) {
      c.type(
        `stty raw -echo; echo WAIT-$((2*2)); while [ ! -e ${go} ]; do sleep 0.1; done; head -c ${MIB * 1024 * 1024} > /dev/null; stty sane; echo DRAINED-$((3*3))\r`,
      );
      await c.waitForOutput(/WAIT-4/);
    }
    const before = await settledMemory(s.baseUrl, s);
    const chunk = Buffer.alloc(1024 * 1024, 0x61);
    for (let i = 0; i < MIB; i++) c.ws.send(chunk, { binary: true });
    // The server stops reading: what it has not taken stays queued in this client.
    let last = -1;
    for (let i = 0; i < 100 && c.ws.bufferedAmount !== last; i++) {
      last = c.ws.bufferedAmount;
      await new Promise((r) => setTimeout(r, 200));
    }
    const held = await settledMemory(s.baseUrl, s);
    console.log(
      `# ${MIB} MiB typed into a program that does not read: ${MiB(c.ws.bufferedAmount)} still queued in the client; server ${showMemory(held)}`,
    );
    if (local) {
      // Kernel socket buffers on loopback take up to ~10 MiB of it; the server must not take the rest.
      assert.ok(c.ws.bufferedAmount > (MIB - 20) * 1024 * 1024, 'the server stopped reading that client');
      assert.ok(
        held.external - before.external < 8 * 2 ** 20,
        `the server holds ${MiB(held.external - before.external)} of it`,
      );
      assert.equal(
        (await s.api('POST', `/api/v1/sandboxes/${sandboxId}/exec`, { body: { command: `touch ${go}` } })).status,
        200,
      );
      await c.waitForOutput(/DRAINED-9/, 60_000); // head read every byte: nothing was lost on the way
    }
    assert.equal(c.closeInfo, null);
    c.close();
    await within(c.closed, 20_000, 'close');
    assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${sandboxId}/terminals/${t.body.terminal.id}`)).status, 204);
    await assertAlive();
  });

  it('many clients on one terminal, then the terminal still runs commands and resizes for every one of them', async () => {
    const n = SOAK ? 200 : 48;
    const clients = await Promise.all(Array.from({ length: n }, () => TermClient.connect(url, auth)));
    connections += n;
    await Promise.all(clients.map((c) => c.control('ready')));
    assert.equal(await clientCount(), n + 1);
    if (local) {
      observer.type(`\n${SINK_END}\n\n`); // ends the sink (sed reads a line ahead): the shell is back
      await observer.waitForOutput(/AFTER-42/);
    }
    observer.resize(100, 30);
    // The leading Enter ends any fuzzed line still pending; `$TERM` tells the output from the echo.
    observer.type('\rstty size; echo alive-$TERM\r');
    await Promise.all([observer, ...clients].map((c) => c.waitForOutput(/30 100[\s\S]*alive-xterm/)));
    for (const c of clients) c.close();
    await Promise.all(clients.map((c) => within(c.closed, 20_000, 'close')));
    await settleClients(1);
    await assertAlive();
    const memEnd = await settledMemory(s.baseUrl, s);
    console.log(
      `# ${connections} connections in all; server memory before: ${showMemory(memStart)}; after: ${showMemory(memEnd)}`,
    );
    // After a full GC the frames are gone; RSS only loosely (V8 and malloc keep freed pages).
    assert.ok(
      memEnd.heapUsed - memStart.heapUsed < 32 * 2 ** 20,
      `JS heap grew by ${MiB(memEnd.heapUsed - memStart.heapUsed)}`,
    );
    assert.ok(
      memEnd.external - memStart.external < 32 * 2 ** 20,
      `external memory grew by ${MiB(memEnd.external - memStart.external)}`,
    );
    assert.ok(memEnd.rss - memStart.rss < 256 * 2 ** 20, `RSS grew by ${MiB(memEnd.rss - memStart.rss)}`);
  });
});
