import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

/**
 * Writes a self-signed P-256 certificate valid 2 days (`cert.pem`) and its key (`key.pem`)
 * into `dir`, with OpenSSL: common name `cn`, subject alternative names `san` (e.g.
 * `['DNS:sandbox.localhost', 'IP:127.0.0.1']`). Returns the two paths.
 */
export function selfSignedCert(dir: string, o: { cn: string; san: string[] }): { cert: string; key: string } {
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '2',
      '-subj',
      `/CN=${o.cn}`,
      '-addext',
      `subjectAltName=${o.san.join(',')}`,
    ],
    { stdio: 'ignore' },
  );
  return { cert, key };
}
