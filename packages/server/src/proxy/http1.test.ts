import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BodyDecoder, framingOf, parseResponseHead, type Framing } from './http1.js';

/** Feeds `wire` to a decoder in pieces cut at `cuts`; returns the body and what followed it. */
function decode(framing: Framing, wire: string, cuts: number[] = []): { body: string; done: boolean; extra: number } {
  const d = new BodyDecoder(framing);
  const buf = Buffer.from(wire, 'latin1');
  let body = '';
  let done = false;
  let extra = 0;
  let at = 0;
  for (const end of [...cuts, buf.length]) {
    const fed = d.feed(buf.subarray(at, end));
    body += fed.data.map((b) => b.toString('latin1')).join('');
    at = end;
    if (fed.done) {
      done = true;
      extra = fed.extra + (buf.length - end);
      break;
    }
  }
  return { body, done, extra };
}

describe('HTTP/1.1 response reading', () => {
  it('parses a head, keeping header order, case and duplicates', () => {
    const h = parseResponseHead('HTTP/1.1 201 Made It\r\nSet-Cookie: a=1\r\nX-Y:  spaced  \r\nset-cookie: b=2');
    assert.deepEqual(h, {
      statusCode: 201,
      statusMessage: 'Made It',
      minor: 1,
      rawHeaders: ['Set-Cookie', 'a=1', 'X-Y', 'spaced', 'set-cookie', 'b=2'],
    });
    assert.equal(parseResponseHead('HTTP/1.0 200').statusMessage, '');
    for (const bad of [
      'HTTP/2 200 OK',
      'HTTP/1.1 20 OK',
      'ICY 200 OK',
      'HTTP/1.1 200 OK\r\n folded',
      'HTTP/1.1 200 OK\r\nBad Name: x',
      'HTTP/1.1 200 OK\r\nX: a\x00b',
      'HTTP/1.1 200 OK\r\nnocolon',
    ]) {
      assert.throws(() => parseResponseHead(bad), Error, JSON.stringify(bad));
    }
  });

  it('decides framing and reuse as RFC 9112 says', () => {
    const f = (head: string, method = 'GET') => framingOf(parseResponseHead(head), method);
    assert.deepEqual(f('HTTP/1.1 200 OK\r\nContent-Length: 5'), {
      framing: { kind: 'length', length: 5 },
      keepAlive: true,
    });
    // Framing in doubt (repeated Content-Length, CL with TE): relayed, the connection not reused.
    assert.deepEqual(f('HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\nContent-Length: 5'), {
      framing: { kind: 'length', length: 5 },
      keepAlive: false,
    });
    assert.deepEqual(f('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9'), {
      framing: { kind: 'chunked' },
      keepAlive: false,
    });
    assert.deepEqual(f('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked'), {
      framing: { kind: 'chunked' },
      keepAlive: false,
    });
    assert.deepEqual(f('HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 2'), {
      framing: { kind: 'length', length: 2 },
      keepAlive: true,
    });
    assert.deepEqual(f('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1'), {
      framing: { kind: 'length', length: 1 },
      keepAlive: false,
    });
    assert.deepEqual(f('HTTP/1.0 200 OK\r\nContent-Length: 1'), {
      framing: { kind: 'length', length: 1 },
      keepAlive: false,
    });
    assert.deepEqual(f('HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1'), {
      framing: { kind: 'length', length: 1 },
      keepAlive: true,
    });
    assert.deepEqual(f('HTTP/1.1 200 OK'), { framing: { kind: 'close' }, keepAlive: false });
    assert.deepEqual(f('HTTP/1.1 200 OK\r\nContent-Length: 10', 'HEAD'), {
      framing: { kind: 'none' },
      keepAlive: true,
    });
    for (const s of [204, 304]) assert.equal(f(`HTTP/1.1 ${s} X\r\nContent-Length: 10`).framing.kind, 'none');
    assert.throws(() => f('HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2'), /conflicting/);
    assert.throws(() => f('HTTP/1.1 200 OK\r\nContent-Length: -1'), /malformed/);
    assert.throws(() => f('HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked'), /unsupported/);
  });

  it('decodes chunked bodies wherever the reads are cut, with extensions and trailers', () => {
    const wire = '5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\nNEXT';
    for (let cut = 0; cut <= wire.length; cut++) {
      for (const cuts of [[cut], [cut, Math.min(wire.length, cut + 3)]]) {
        const r = decode({ kind: 'chunked' }, wire, cuts);
        assert.deepEqual(r, { body: 'hello 0123456789', done: true, extra: 4 }, `cuts ${cuts}`);
      }
    }
    assert.deepEqual(decode({ kind: 'chunked' }, '0\r\n\r\n'), { body: '', done: true, extra: 0 });
    for (const bad of ['x\r\n', '5\r\nhelloXX\r\n', `${'1'.repeat(5000)}`, '5\nhello\r\n', '5;a\x01\r\n'])
      assert.throws(() => decode({ kind: 'chunked' }, bad), Error, bad);
  });

  it('length and close framing: exact bytes, then what follows is extra', () => {
    assert.deepEqual(decode({ kind: 'length', length: 4 }, 'abcdef', [2]), { body: 'abcd', done: true, extra: 2 });
    assert.deepEqual(decode({ kind: 'close' }, 'abc', [1]), { body: 'abc', done: false, extra: 0 });
    assert.equal(new BodyDecoder({ kind: 'length', length: 0 }).empty, true);
    assert.equal(new BodyDecoder({ kind: 'none' }).empty, true);
  });
});
