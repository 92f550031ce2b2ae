import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import * as dnsPacket from 'dns-packet';
import { EgressResolver } from './dns.js';

/** A real upstream on 127.0.0.1: answers A for names in `records` (TTL 300), NXDOMAIN else; logs questions. */
async function upstream(
  records: Record<string, string[]>,
): Promise<{ sock: Socket; port: number; asked: string[]; askedFrom: { port: number; id: number }[] }> {
  const sock = createSocket('udp4');
  const asked: string[] = [];
  const askedFrom: { port: number; id: number }[] = [];
  sock.on('message', async (msg, r) => {
    const q = decode(msg);
    const name = q.questions![0].name.toLowerCase();
    asked.push(`${q.questions![0].type} ${name}`);
    askedFrom.push({ port: r.port, id: q.id! });
    if (name === 'slow.test') await release;
    const ips = q.questions![0].type === 'A' ? (records[name] ?? []) : [];
    sock.send(
      dnsPacket.encode({
        type: 'response',
        id: q.id,
        flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | (records[name] ? 0 : 3),
        questions: q.questions,
        answers: ips.map((data, i) => ({ type: 'A' as const, name, ttl: 300 - i, class: 'IN' as const, data })),
      }),
      r.port,
      r.address,
    );
  });
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
  return { sock, port: sock.address().port, asked, askedFrom };
}

let letGo: () => void = () => {};
/** The upstream answers `slow.test` only once this settles. */
const release = new Promise<void>((r) => {
  letGo = r;
});

/** dns-packet's decode, with the rcode it sets (its types leave it out). */
const decode = (b: Buffer) => dnsPacket.decode(b) as dnsPacket.DecodedPacket & { rcode: string };

const query = (name: string, type: 'A' | 'AAAA' = 'A', id = 4242) =>
  dnsPacket.encode({ type: 'query', id, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type, name, class: 'IN' }] });

describe('the sandboxes resolver', () => {
  let up: Awaited<ReturnType<typeof upstream>>;
  let resolver: EgressResolver;
  const recorded: unknown[] = [];
  const modes: Record<string, 'none' | 'internet' | 'allow'> = {
    '10.0.0.2': 'allow',
    '10.0.0.3': 'internet',
    '127.0.0.1': 'allow', // the TCP case connects from here
  };
  let ports: { udp: number; tcp: number };

  before(async () => {
    up = await upstream({
      'pypi.org': ['151.101.0.223', '151.101.64.223'],
      'evil.test': ['203.0.113.9'],
      'slow.test': ['198.51.100.7'],
    });
    resolver = new EgressResolver({
      gateway: '127.0.0.1',
      upstream: [{ host: '127.0.0.1', port: up.port }],
      upstreamTimeoutMs: 60_000,
      policy: {
        modeOf: (a) => modes[a] ?? 'none',
        allowsName: (_a, n) => n === 'pypi.org',
        record: async (a, n, addrs, ttl) => void recorded.push({ a, n, addrs, ttl }),
      },
    });
    ports = await resolver.listen();
  });
  after(() => {
    resolver.close();
    up.sock.close();
  });

  it('answers an allowed name from upstream, records its A addresses and TTL before answering', async () => {
    const r = decode((await resolver.answer(query('PyPI.org'), '10.0.0.2'))!);
    assert.equal(r.id, 4242, 'the sandbox gets its own id back');
    assert.deepEqual(
      (r.answers as dnsPacket.StringAnswer[]).map((a) => a.data),
      ['151.101.0.223', '151.101.64.223'],
    );
    assert.deepEqual(recorded, [
      { a: '10.0.0.2', n: 'pypi.org', addrs: ['151.101.0.223', '151.101.64.223'], ttl: 299 },
    ]);
  });

  it('denied names: NXDOMAIN, never asked upstream; AAAA of an allowed name: empty; none: REFUSED', async () => {
    const before = up.asked.length;
    const denied = decode((await resolver.answer(query('secret.evil.test'), '10.0.0.2'))!);
    assert.equal(denied.rcode, 'NXDOMAIN');
    const v6 = decode((await resolver.answer(query('pypi.org', 'AAAA'), '10.0.0.2'))!);
    assert.deepEqual([v6.rcode, v6.answers?.length], ['NOERROR', 0]);
    assert.equal(up.asked.length, before, 'nothing of those went upstream');
    const refused = decode((await resolver.answer(query('pypi.org'), '10.0.0.9'))!);
    assert.equal(refused.rcode, 'REFUSED');
  });

  it('internet: forwarded as is; garbage and odd queries get no answer or FORMERR, never a throw', async () => {
    const r = decode((await resolver.answer(query('evil.test'), '10.0.0.3'))!);
    assert.deepEqual(
      (r.answers as dnsPacket.StringAnswer[]).map((a) => a.data),
      ['203.0.113.9'],
    );
    assert.equal(await resolver.answer(Buffer.from('garbage'), '10.0.0.2'), null);
    assert.equal(await resolver.answer(Buffer.alloc(0), '10.0.0.2'), null);
    const two = dnsPacket.encode({
      type: 'query',
      id: 1,
      questions: [
        { type: 'A', name: 'pypi.org', class: 'IN' },
        { type: 'A', name: 'evil.test', class: 'IN' },
      ],
    });
    assert.equal(decode((await resolver.answer(two, '10.0.0.2'))!).rcode, 'FORMERR');
    for (let i = 0; i < 200; i++) {
      const junk = Buffer.from(Array.from({ length: 12 + (i % 60) }, (_, j) => (i * 31 + j * 7) & 255));
      await resolver.answer(junk, '10.0.0.2');
    }
  });

  it('answers over TCP too (length-prefixed, several queries on one connection)', async () => {
    const sock = connect({ host: '127.0.0.1', port: ports.tcp });
    await new Promise((r) => sock.once('connect', r));
    const frame = (m: Buffer) => Buffer.concat([Buffer.from([m.length >> 8, m.length & 255]), m]);
    sock.write(Buffer.concat([frame(query('pypi.org', 'A', 1)), frame(query('evil.test', 'A', 2))]));
    let buf = Buffer.alloc(0);
    const replies: ReturnType<typeof decode>[] = [];
    await new Promise<void>((done) => {
      sock.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
          replies.push(decode(buf.subarray(2, 2 + buf.readUInt16BE(0))));
          buf = buf.subarray(2 + buf.readUInt16BE(0));
        }
        if (replies.length === 2) done();
      });
    });
    sock.destroy();
    assert.deepEqual(
      replies.map((r) => [r.id, r.rcode, r.answers?.length]),
      [
        [1, 'NOERROR', 2],
        [2, 'NXDOMAIN', 0],
      ],
    );
  });

  it('takes a reply only from the upstream it asked, to its question: forged ones are ignored', async () => {
    const spoof = createSocket('udp4');
    await new Promise<void>((r) => spoof.bind(0, '127.0.0.1', () => r()));
    const pending = resolver.lookup('slow.test');
    for (let i = 0; i < 200 && up.asked.at(-1) !== 'A slow.test'; i++) await new Promise((r) => setTimeout(r, 10));
    const { port, id } = up.askedFrom.at(-1)!;
    const forged = (name: string) =>
      dnsPacket.encode({
        type: 'response',
        id,
        questions: [{ type: 'A', name, class: 'IN' }],
        answers: [{ type: 'A', name, ttl: 9, class: 'IN', data: '6.6.6.6' }],
      });
    // The right id from another port; the right id and port, another question.
    await new Promise((r) => spoof.send(forged('slow.test'), port, '127.0.0.1', r));
    await new Promise((r) => up.sock.send(forged('other.test'), port, '127.0.0.1', r));
    await new Promise((r) => setTimeout(r, 100));
    letGo();
    const got = await pending;
    assert.deepEqual(got?.addrs, ['198.51.100.7']);
    spoof.close();
  });
});

describe('the sandboxes resolver: each sandbox has its share', () => {
  // An upstream that answers `ok.test` at once and holds every `hold*.test` until released.
  let sock: Socket;
  let releaseHeld: () => void = () => {};
  const held = new Promise<void>((r) => {
    releaseHeld = r;
  });
  let resolver: EgressResolver;
  let tcp = 0;
  const NOISY = '10.0.1.5';
  const modes: Record<string, 'internet' | 'allow'> = {
    [NOISY]: 'internet',
    '10.0.1.6': 'allow',
    '10.0.1.7': 'internet',
    '127.0.0.9': 'internet',
    '127.0.0.10': 'internet',
  };

  before(async () => {
    sock = createSocket('udp4');
    sock.on('message', async (msg, r) => {
      const q = decode(msg);
      const name = q.questions![0].name.toLowerCase();
      if (name.startsWith('hold')) await held;
      const ok = name === 'ok.test' || name.startsWith('hold');
      sock.send(
        dnsPacket.encode({
          type: 'response',
          id: q.id,
          flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | (ok ? 0 : 3),
          questions: q.questions,
          answers: ok ? [{ type: 'A' as const, name, ttl: 300, class: 'IN' as const, data: '198.51.100.9' }] : [],
        }),
        r.port,
        r.address,
      );
    });
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
    resolver = new EgressResolver({
      gateway: '127.0.0.1',
      upstream: [{ host: '127.0.0.1', port: sock.address().port }],
      upstreamTimeoutMs: 60_000,
      maxPendingPerSandbox: 8,
      policy: {
        modeOf: (a) => modes[a] ?? 'none',
        allowsName: () => true,
        record: async () => {},
      },
    });
    tcp = (await resolver.listen()).tcp;
  });
  after(() => {
    releaseHeld();
    resolver.close();
    sock.close();
  });

  it('a sandbox flooding it with queries upstream holds back is refused past its share; its neighbours are answered', async () => {
    // 4,096 queries at once (the resolver's global bound) that upstream does not answer.
    const noisy: string[] = [];
    const flood = Array.from({ length: 4096 }, (_, i) =>
      resolver.answer(query(`hold${i}.test`, 'A', i), NOISY).then((b) => noisy.push(decode(b!).rcode)),
    );
    for (const from of ['10.0.1.6', '10.0.1.7']) {
      const r = decode((await resolver.answer(query('ok.test'), from))!);
      assert.deepEqual([from, r.rcode, r.answers?.length], [from, 'NOERROR', 1], 'a neighbour starved');
    }
    assert.deepEqual(
      (await resolver.lookup('ok.test', '10.0.1.6'))?.addrs,
      ['198.51.100.9'],
      "a neighbour's proxy lookup",
    );
    // The noisy one: all but its share refused at once; its lookups too while the share is used up.
    for (let i = 0; i < 100 && noisy.length < 4096 - 8; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(noisy.length, 4096 - 8);
    assert.deepEqual([...new Set(noisy)], ['REFUSED']);
    assert.equal(await resolver.lookup('ok.test', NOISY), null);
    assert.equal(decode((await resolver.answer(query('ok.test'), NOISY))!).rcode, 'REFUSED');
    // Once upstream answers, the share is free again.
    releaseHeld();
    await Promise.all(flood);
    assert.equal(noisy.filter((c) => c === 'NOERROR').length, 8);
    const again = decode((await resolver.answer(query('ok.test'), NOISY))!);
    assert.deepEqual([again.rcode, again.answers?.length], ['NOERROR', 1]);
  });

  it('a sandbox holding 16 TCP connections gets no 17th; another one still connects', async () => {
    const open = (from: string) =>
      new Promise<import('node:net').Socket>((res, rej) => {
        const c = connect({ host: '127.0.0.1', port: tcp, localAddress: from });
        c.once('connect', () => res(c)).once('error', rej);
      });
    const closed = (c: import('node:net').Socket) =>
      new Promise<boolean>((res) => {
        if (c.destroyed || c.readableEnded) return res(true);
        c.once('close', () => res(true)).once('end', () => res(true));
        setTimeout(() => res(false), 5000).unref();
      });
    const mine = await Promise.all(Array.from({ length: 16 }, () => open('127.0.0.9')));
    const extra = await open('127.0.0.9');
    assert.equal(await closed(extra), true, 'a 17th connection was kept');
    const other = await open('127.0.0.10');
    const frame = (m: Buffer) => Buffer.concat([Buffer.from([m.length >> 8, m.length & 255]), m]);
    other.write(frame(query('ok.test', 'A', 7)));
    const got = await new Promise<Buffer>((r) => other.once('data', r));
    assert.equal(decode(got.subarray(2)).rcode, 'NOERROR');
    for (const c of [...mine, extra, other]) c.destroy();
  });
});
