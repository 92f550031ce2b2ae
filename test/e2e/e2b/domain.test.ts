/**
 * E2B's per-sandbox hosts: `E2B_DOMAIN` alone (no E2B_API_URL, no E2B_SANDBOX_URL), with
 * the server on TLS. The unchanged SDK then calls `https://api.<domain>` for the control
 * API and `https://49983-<id>.<domain>` for envd, and `getHost(port)` names
 * `<port>-<id>.<domain>`, served by the port proxy. The test's self-signed certificate is
 * made trusted in this process (tls.setDefaultCACertificates, as NODE_EXTRA_CA_CERTS would),
 * and `*.localhost` resolves to loopback through localhost-dns.mjs, standing in for a
 * wildcard DNS record.
 */
import './localhost-dns.mjs';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getCACertificates, setDefaultCACertificates } from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { selfSignedCert } from '../../../packages/server/test/tls.js';
import { Sandbox } from 'e2b';
import { freePort, newAccount, type Server, startServer } from '../harness.js';

describe('E2B SDK with E2B_DOMAIN over TLS', { timeout: 240_000 }, () => {
  let s: Server;
  let dir: string;
  let port: number;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sandboxd-tls-'));
    selfSignedCert(dir, {
      cn: 'sandbox.localhost',
      san: ['DNS:sandbox.localhost', 'DNS:*.sandbox.localhost', 'IP:127.0.0.1'],
    });
    setDefaultCACertificates([...getCACertificates('default'), readFileSync(join(dir, 'cert.pem'), 'utf8')]);
    port = await freePort();
    s = await startServer({
      port,
      https: true,
      env: { SANDBOXD_TLS_CERT: join(dir, 'cert.pem'), SANDBOXD_TLS_KEY: join(dir, 'key.pem') },
    });
    process.env.E2B_DOMAIN = `sandbox.localhost:${port}`;
    process.env.E2B_API_KEY = (await newAccount(s, { tokens: 1_000_000 })).key;
    delete process.env.E2B_API_URL;
    delete process.env.E2B_SANDBOX_URL;
  });
  after(async () => {
    await s?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates, runs, writes and reads files, reaches a port through getHost, lists and kills', async () => {
    const sbx = await Sandbox.create({ template: 'base', metadata: { suite: 'domain' } });
    try {
      assert.equal((await sbx.commands.run('echo "hello $(whoami)"')).stdout, 'hello user\n');
      await sbx.files.write('/tmp/over-tls.txt', 'over TLS');
      assert.equal(await sbx.files.read('/tmp/over-tls.txt'), 'over TLS');
      await sbx.commands.run('cd /tmp && exec python3 -m http.server 8000 >/dev/null 2>&1', {
        background: true,
        timeoutMs: 0,
      });
      const host = sbx.getHost(8000);
      assert.equal(host, `8000-${sbx.sandboxId}.sandbox.localhost:${port}`);
      let body: string | null = null;
      for (let i = 0; i < 100 && body === null; i++) {
        const r = await fetch(`https://${host}/over-tls.txt`).catch(() => null);
        if (r?.ok) body = await r.text();
        else await new Promise((res) => setTimeout(res, 100));
      }
      assert.equal(body, 'over TLS', 'the sandbox port answers through the proxy over TLS');
      const listed = await Sandbox.list({ query: { metadata: { suite: 'domain' } } }).nextItems();
      assert.deepEqual(
        listed.map((x) => x.sandboxId),
        [sbx.sandboxId],
      );
    } finally {
      assert.equal(await sbx.kill(), true);
    }
    assert.equal(await sbx.isRunning(), false);
  });

  it('refuses plain HTTP on the TLS port', async () => {
    const r = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (x) => x.status,
      () => 'refused',
    );
    assert.notEqual(r, 200);
  });
});
