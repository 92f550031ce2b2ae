/**
 * The egress proxy's certificate authority: a per-driver CA (`<dataDir>/egress-ca/`, ECDSA
 * P-256, made at first start) that signs, on demand, short-lived leaf certificates for the
 * names the proxy terminates TLS for (secret injection). X.509 is written here (a small DER
 * writer) and signed with node:crypto: no openssl per name, no dependency.
 */
import {
  createHash,
  createPrivateKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign,
  X509Certificate,
} from 'node:crypto';
import { closeSync, constants, fstatSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSecureContext, type SecureContext } from 'node:tls';

/** How long a leaf certificate is valid. */
export const LEAF_VALIDITY_MS = 7 * 24 * 3600_000;
/** A cached leaf with less than this left is made again. */
const LEAF_RENEW_MS = 24 * 3600_000;
/** Leaves valid from this long ago (clocks of sandboxes and hosts differ a little). */
const BACKDATE_MS = 3600_000;
/** How long the CA is valid. */
const CA_VALIDITY_MS = 10 * 365 * 24 * 3600_000;
/** Most leaves kept in memory; past it the least recently used goes. */
export const MAX_CACHED_LEAVES = 1024;

// --- DER ---------------------------------------------------------------------------------

function len(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}
function tlv(tag: number, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from([tag]), len(body.length), body]);
}
const seq = (...parts: Buffer[]) => tlv(0x30, Buffer.concat(parts));
const set = (...parts: Buffer[]) => tlv(0x31, Buffer.concat(parts));
const octets = (b: Buffer) => tlv(0x04, b);
const bits = (b: Buffer, unused = 0) => tlv(0x03, Buffer.concat([Buffer.from([unused]), b]));
const bool = (v: boolean) => tlv(0x01, Buffer.from([v ? 0xff : 0]));
const explicit = (n: number, body: Buffer) => tlv(0xa0 + n, body);
function int(b: Buffer): Buffer {
  let v = b;
  while (v.length > 1 && v[0] === 0 && v[1] < 0x80) v = v.subarray(1);
  if (v[0] >= 0x80) v = Buffer.concat([Buffer.from([0]), v]);
  return tlv(0x02, v);
}
function oid(dotted: string): Buffer {
  const n = dotted.split('.').map(Number);
  const out: number[] = [n[0] * 40 + n[1]];
  for (const x of n.slice(2)) {
    const b: number[] = [x & 0x7f];
    for (let v = Math.floor(x / 128); v > 0; v = Math.floor(v / 128)) b.unshift(0x80 | (v & 0x7f));
    out.push(...b);
  }
  return tlv(0x06, Buffer.from(out));
}
function time(d: Date): Buffer {
  const iso = d.toISOString().replace(/[-:T]/g, '').slice(0, 14); // YYYYMMDDHHMMSS
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`)) : tlv(0x18, Buffer.from(`${iso}Z`));
}
const cn = (name: string) => seq(set(seq(oid('2.5.4.3'), tlv(0x0c, Buffer.from(name, 'utf8')))));
const ext = (id: string, critical: boolean, value: Buffer) =>
  seq(oid(id), ...(critical ? [bool(true)] : []), octets(value));
const ECDSA_SHA256 = seq(oid('1.2.840.10045.4.3.2'));

/** The key identifier of a public key: SHA-1 of its subjectPublicKey bits (RFC 5280 4.2.1.2 (1)). */
function keyId(spki: Buffer): Buffer {
  // SubjectPublicKeyInfo = SEQ { AlgorithmIdentifier, BIT STRING }; the P-256 point is its last 65 bytes.
  return createHash('sha1')
    .update(spki.subarray(spki.length - 65))
    .digest();
}

interface CertInput {
  subject: string;
  issuer: string;
  publicKey: KeyObject;
  signer: KeyObject;
  /** Key id of the signer's public key (authority key identifier); absent for the CA itself. */
  authorityKeyId?: Buffer;
  notBefore: Date;
  notAfter: Date;
  ca: boolean;
  /** dNSName of the subjectAltName (leaves). */
  dnsName?: string;
}

/** A DER X.509 v3 certificate, signed ECDSA-SHA256. */
function certificate(c: CertInput): Buffer {
  const spki = c.publicKey.export({ type: 'spki', format: 'der' });
  const serial = randomBytes(16);
  serial[0] &= 0x7f;
  serial[0] |= 0x01; // positive, non-zero, 16 bytes
  const exts = [
    ext('2.5.29.19', true, c.ca ? seq(bool(true)) : seq()), // basicConstraints
    // keyUsage: CA keyCertSign|cRLSign (bits 5, 6); leaf digitalSignature (bit 0).
    ext('2.5.29.15', true, c.ca ? bits(Buffer.from([0x06]), 1) : bits(Buffer.from([0x80]), 7)),
    ext('2.5.29.14', false, octets(keyId(spki))), // subjectKeyIdentifier
  ];
  if (c.authorityKeyId) exts.push(ext('2.5.29.35', false, seq(tlv(0x80, c.authorityKeyId))));
  if (!c.ca) exts.push(ext('2.5.29.37', false, seq(oid('1.3.6.1.5.5.7.3.1')))); // extKeyUsage serverAuth
  if (c.dnsName) exts.push(ext('2.5.29.17', false, seq(tlv(0x82, Buffer.from(c.dnsName, 'ascii'))))); // SAN
  const tbs = seq(
    explicit(0, int(Buffer.from([2]))),
    int(serial),
    ECDSA_SHA256,
    cn(c.issuer),
    seq(time(c.notBefore), time(c.notAfter)),
    cn(c.subject),
    spki,
    explicit(3, seq(...exts)),
  );
  const sig = sign('sha256', tbs, { key: c.signer, dsaEncoding: 'der' });
  return seq(tbs, ECDSA_SHA256, bits(sig));
}

function pem(der: Buffer): string {
  const b64 = der
    .toString('base64')
    .replace(/(.{64})/g, '$1\n')
    .replace(/\n$/, '');
  return `-----BEGIN CERTIFICATE-----\n${b64}\n-----END CERTIFICATE-----\n`;
}

/** A leaf: its certificate and key (PEM) and until when it is valid. */
export interface Leaf {
  cert: string;
  key: string;
  notAfter: number;
  context: SecureContext;
}

/**
 * The CA of one driver. {@link EgressCa.open} makes it at first use (`ca.key` 0600, written
 * exclusively, never read through a symlink; `ca.crt`), else reads it.
 */
export class EgressCa {
  readonly #leaves = new Map<string, Leaf>();

  private constructor(
    readonly certPem: string,
    private readonly key: KeyObject,
    private readonly keyIdentifier: Buffer,
    private readonly subject: string,
  ) {}

  /** The CA of `dir` (`<dataDir>/egress-ca`), made when there is none. */
  static open(dir: string): EgressCa {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const keyPath = join(dir, 'ca.key');
    const crtPath = join(dir, 'ca.crt');
    let keyPem: string | null = null;
    try {
      const fd = openSync(keyPath, constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        if (!fstatSync(fd).isFile()) throw new Error(`${keyPath} is not a regular file`);
        keyPem = readFileSync(fd, 'utf8');
      } finally {
        closeSync(fd);
      }
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    let certPem: string;
    if (keyPem === null) {
      const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
      const now = Date.now();
      const subject = `sandboxd egress CA ${randomBytes(4).toString('hex')}`;
      certPem = pem(
        certificate({
          subject,
          issuer: subject,
          publicKey,
          signer: privateKey,
          notBefore: new Date(now - BACKDATE_MS),
          notAfter: new Date(now + CA_VALIDITY_MS),
          ca: true,
        }),
      );
      keyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
      // The certificate first: a key without one is never left (a crash between: made again).
      writeFileSync(crtPath, certPem, { mode: 0o644 });
      const fd = openSync(
        keyPath,
        constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
        0o600,
      );
      try {
        writeFileSync(fd, keyPem);
      } finally {
        closeSync(fd);
      }
    } else {
      certPem = readFileSync(crtPath, 'utf8');
    }
    const key = createPrivateKey(keyPem);
    const x = new X509Certificate(certPem);
    if (!x.checkPrivateKey(key)) throw new Error(`${crtPath} does not match ${keyPath}`);
    const spki = x.publicKey.export({ type: 'spki', format: 'der' });
    const subject = x.subject.replace(/^CN=/, '');
    return new EgressCa(certPem, key, keyId(spki), subject);
  }

  /** A leaf for `name` (SAN = name), from the cache while it has more than a day left. */
  leaf(name: string, now = Date.now()): Leaf {
    const had = this.#leaves.get(name);
    if (had && had.notAfter - now > LEAF_RENEW_MS) {
      this.#leaves.delete(name);
      this.#leaves.set(name, had); // most recently used last
      return had;
    }
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    const notAfter = now + LEAF_VALIDITY_MS;
    const cert = pem(
      certificate({
        subject: name,
        issuer: this.subject,
        publicKey,
        signer: this.key,
        authorityKeyId: this.keyIdentifier,
        notBefore: new Date(now - BACKDATE_MS),
        notAfter: new Date(notAfter),
        ca: false,
        dnsName: name,
      }),
    );
    const key = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    const leaf = { cert, key, notAfter, context: createSecureContext({ cert, key }) };
    this.#leaves.delete(name);
    this.#leaves.set(name, leaf);
    while (this.#leaves.size > MAX_CACHED_LEAVES) {
      const oldest = this.#leaves.keys().next().value as string;
      this.#leaves.delete(oldest);
    }
    return leaf;
  }

  /** Leaves in the cache (tests). */
  get cached(): number {
    return this.#leaves.size;
  }
}
