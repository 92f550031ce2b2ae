import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { connect } from 'node:tls';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { httpHost, MAX_FIRST_BYTES, tlsServerName } from './first-bytes.js';

/** The first bytes a real TLS client (node's) sends for `servername` (undefined: no SNI). */
async function clientHello(servername?: string): Promise<Buffer> {
  const got: Buffer[] = [];
  const server = createServer((s) => {
    s.on('data', (b) => {
      got.push(b);
      s.destroy();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((r) => {
    const c = connect({ host: '127.0.0.1', port, servername, rejectUnauthorized: false });
    c.on('error', () => r());
    c.on('close', () => r());
  });
  server.close();
  return Buffer.concat(got);
}

describe('the name a connection claims', () => {
  it('reads the SNI of a real ClientHello, whatever its chunking, and says "more" until it is whole', async () => {
    const hello = await clientHello('Pypi.ORG');
    assert.deepEqual(tlsServerName(hello), { name: 'pypi.org' });
    for (let i = 0; i < hello.length; i += 7) assert.equal(tlsServerName(hello.subarray(0, i)), 'more', `prefix ${i}`);
    // The same handshake split over two TLS records (a client may fragment it).
    const body = hello.subarray(5);
    const cut = 40;
    const rec = (b: Buffer) => Buffer.concat([Buffer.from([0x16, 3, 1, b.length >> 8, b.length & 255]), b]);
    assert.deepEqual(tlsServerName(Buffer.concat([rec(body.subarray(0, cut)), rec(body.subarray(cut))])), {
      name: 'pypi.org',
    });
  });

  it('refuses a ClientHello without SNI, a non-TLS start and an oversized hello', async () => {
    const bare = await clientHello(undefined);
    assert.deepEqual(tlsServerName(bare), { refused: 'no SNI' });
    assert.deepEqual(tlsServerName(Buffer.from('GET / HTTP/1.1\r\n')), { refused: 'not a TLS handshake' });
    const huge = Buffer.concat([Buffer.from([0x16, 3, 1, 0xff, 0xff]), Buffer.alloc(MAX_FIRST_BYTES)]);
    assert.ok(typeof tlsServerName(huge) === 'object');
  });

  it('reads the Host of an HTTP/1 request (port dropped) and refuses none, two or a bad one', () => {
    const req = (h: string) => Buffer.from(`GET /x HTTP/1.1\r\n${h}Accept: */*\r\n\r\n`);
    assert.deepEqual(httpHost(req('Host: Files.PythonHosted.org:80\r\n')), { name: 'files.pythonhosted.org' });
    assert.equal(httpHost(Buffer.from('GET / HTTP/1.1\r\nHost: a.b\r\n')), 'more');
    assert.deepEqual(httpHost(req('')), { refused: 'no Host header' });
    assert.deepEqual(httpHost(req('Host: a.org\r\nHost: b.org\r\n')), { refused: 'more than one Host header' });
    assert.deepEqual(httpHost(req('Host: a.org@b.org\r\n')), { refused: 'not a host name' });
    assert.deepEqual(httpHost(Buffer.from('\x16\x03\x01 junk\r\n\r\n')), { refused: 'not an HTTP/1 request' });
    assert.ok(typeof httpHost(Buffer.alloc(MAX_FIRST_BYTES, 'a')) === 'object', 'a head that never ends is refused');
  });

  it('never throws on garbage (fast-check, both parsers, also after a valid record header)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 4096 }), fc.boolean(), (bytes, tlsHeader) => {
        const b = Buffer.from(bytes);
        const buf = tlsHeader ? Buffer.concat([Buffer.from([0x16, 3, 1, b.length >> 8, b.length & 255, 1]), b]) : b;
        for (const parse of [tlsServerName, httpHost]) {
          const r = parse(buf);
          assert.ok(r === 'more' || 'name' in r || 'refused' in r);
        }
      }),
      { numRuns: 2000 },
    );
  });
});
