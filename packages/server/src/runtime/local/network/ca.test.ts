import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { lstatSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { EgressCa, LEAF_VALIDITY_MS, MAX_CACHED_LEAVES } from './ca.js';

describe('egress CA', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'egress-ca-'));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('is made at first open (key 0600), then read back the same', () => {
    const dir = join(tmp, 'a');
    const ca = EgressCa.open(dir);
    assert.equal(statSync(join(dir, 'ca.key')).mode & 0o777, 0o600);
    const x = new X509Certificate(ca.certPem);
    assert.equal(x.ca, true);
    assert.equal(x.verify(x.publicKey), true);
    assert.equal(x.checkIssued(x), true);
    const again = EgressCa.open(dir);
    assert.equal(again.certPem, ca.certPem);
  });

  it('signs leaves for a name that node and openssl verify against it', () => {
    const dir = join(tmp, 'b');
    const ca = EgressCa.open(dir);
    const now = Date.now();
    const leaf = ca.leaf('api.example.test', now);
    const x = new X509Certificate(leaf.cert);
    const cax = new X509Certificate(ca.certPem);
    assert.equal(x.ca, false);
    assert.equal(x.checkIssued(cax), true);
    assert.equal(x.verify(cax.publicKey), true);
    assert.equal(x.checkHost('api.example.test'), 'api.example.test');
    assert.equal(x.checkHost('other.example.test'), undefined);
    assert.equal(x.subjectAltName, 'DNS:api.example.test');
    assert.ok(Math.abs(Date.parse(x.validTo) - (now + LEAF_VALIDITY_MS)) < 2000);
    assert.ok(x.keyUsage?.includes('1.3.6.1.5.5.7.3.1'));
    writeFileSync(join(tmp, 'leaf.pem'), leaf.cert);
    const out = execFileSync(
      'openssl',
      [
        'verify',
        '-x509_strict',
        '-purpose',
        'sslserver',
        '-verify_hostname',
        'api.example.test',
        '-CAfile',
        join(dir, 'ca.crt'),
        join(tmp, 'leaf.pem'),
      ],
      { encoding: 'utf8' },
    );
    assert.match(out, /OK/);
    // From the cache while fresh; made again near its end.
    assert.equal(ca.leaf('api.example.test', now + 1000), leaf);
    assert.notEqual(ca.leaf('api.example.test', now + LEAF_VALIDITY_MS - 3600_000), leaf);
  });

  it('keeps at most MAX_CACHED_LEAVES leaves', () => {
    const ca = EgressCa.open(join(tmp, 'c'));
    for (let i = 0; i < MAX_CACHED_LEAVES + 5; i++) ca.leaf(`n${i}.test`);
    assert.equal(ca.cached, MAX_CACHED_LEAVES);
  });

  it('never reads the key through a symlink', () => {
    const dir = join(tmp, 'd');
    EgressCa.open(dir);
    const real = join(tmp, 'elsewhere.key');
    writeFileSync(real, readFileSync(join(dir, 'ca.key')));
    rmSync(join(dir, 'ca.key'));
    symlinkSync(real, join(dir, 'ca.key'));
    assert.ok(lstatSync(join(dir, 'ca.key')).isSymbolicLink());
    assert.throws(() => EgressCa.open(dir), /ELOOP/);
  });
});
