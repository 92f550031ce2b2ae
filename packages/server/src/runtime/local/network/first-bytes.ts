/**
 * The name a client claims in the first bytes of a connection: the Host header of an HTTP
 * request, the server name (SNI) of a TLS ClientHello. Pure, bounded, never throws on
 * garbage: each answers `more` (not enough bytes yet), a name, or why there is none.
 */

/** Most bytes read before deciding: a ClientHello (or request head) larger than this is refused. */
export const MAX_FIRST_BYTES = 16 * 1024;

export type FirstBytes = { name: string } | 'more' | { refused: string };

const NAME_RE = /^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/;

function cleanName(raw: string): FirstBytes {
  const name = raw.toLowerCase().replace(/\.$/, '');
  if (name.length === 0 || name.length > 253 || !NAME_RE.test(name)) return { refused: 'not a host name' };
  return { name };
}

/** The Host of the request at the start of `buf` (port dropped); `more` until the head ends. */
export function httpHost(buf: Buffer): FirstBytes {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return buf.length >= MAX_FIRST_BYTES ? { refused: 'request head too large' } : 'more';
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  if (!/^[A-Z]+ \S+ HTTP\/1\.[01]$/.test(lines[0])) return { refused: 'not an HTTP/1 request' };
  const hosts = lines.slice(1).filter((l) => /^host:/i.test(l));
  if (hosts.length !== 1) return { refused: hosts.length ? 'more than one Host header' : 'no Host header' };
  const value = hosts[0].slice(5).trim();
  const m = /^([^:[\]]+)(:\d{1,5})?$/.exec(value);
  if (!m) return { refused: 'bad Host header' };
  return cleanName(m[1]);
}

/**
 * The SNI host name of the TLS ClientHello at the start of `buf` (the handshake may span
 * several records); `more` until it is complete.
 */
export function tlsServerName(buf: Buffer): FirstBytes {
  // Reassemble the handshake message from the records' payloads.
  const parts: Buffer[] = [];
  let got = 0;
  let off = 0;
  let need = -1;
  while (need < 0 || got < need) {
    if (buf.length < off + 5) return buf.length >= MAX_FIRST_BYTES ? { refused: 'ClientHello too large' } : 'more';
    if (buf[off] !== 0x16) return { refused: 'not a TLS handshake' };
    if (buf[off + 1] !== 3) return { refused: 'not TLS' };
    const len = buf.readUInt16BE(off + 3);
    if (len === 0) return { refused: 'empty TLS record' };
    if (buf.length < off + 5 + len)
      return off + 5 + len > MAX_FIRST_BYTES ? { refused: 'ClientHello too large' } : 'more';
    parts.push(buf.subarray(off + 5, off + 5 + len));
    got += len;
    off += 5 + len;
    if (need < 0) {
      const head = Buffer.concat(parts);
      if (head.length < 4) continue;
      if (head[0] !== 1) return { refused: 'not a ClientHello' };
      need = 4 + head.readUIntBE(1, 3);
      if (need > MAX_FIRST_BYTES) return { refused: 'ClientHello too large' };
    }
  }
  return sniOf(Buffer.concat(parts).subarray(4, need));
}

/** The host_name entry of the server_name extension of a ClientHello body. */
function sniOf(b: Buffer): FirstBytes {
  let p = 2 + 32; // legacy_version, random
  const skip = (lenBytes: 1 | 2): boolean => {
    if (p + lenBytes > b.length) return false;
    const n = lenBytes === 1 ? b[p] : b.readUInt16BE(p);
    p += lenBytes + n;
    return p <= b.length;
  };
  if (!skip(1) || !skip(2) || !skip(1)) return { refused: 'malformed ClientHello' }; // session id, suites, compression
  if (p === b.length) return { refused: 'no SNI' };
  if (p + 2 > b.length) return { refused: 'malformed ClientHello' };
  const end = p + 2 + b.readUInt16BE(p);
  if (end > b.length) return { refused: 'malformed ClientHello' };
  p += 2;
  while (p + 4 <= end) {
    const type = b.readUInt16BE(p);
    const len = b.readUInt16BE(p + 2);
    const data = p + 4;
    if (data + len > end) return { refused: 'malformed ClientHello' };
    if (type === 0) {
      // server_name_list: length, then (type, length, name) entries.
      let q = data + 2;
      const listEnd = data + len;
      while (q + 3 <= listEnd) {
        const nameLen = b.readUInt16BE(q + 1);
        if (q + 3 + nameLen > listEnd) return { refused: 'malformed SNI' };
        if (b[q] === 0) return cleanName(b.subarray(q + 3, q + 3 + nameLen).toString('latin1'));
        q += 3 + nameLen;
      }
      return { refused: 'no SNI' };
    }
    p = data + len;
  }
  return { refused: 'no SNI' };
}
