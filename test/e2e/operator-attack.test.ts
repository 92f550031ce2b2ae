/**
 * Black-box, real runtime (docs/security.md, "Operator surfaces"): the credential-free
 * endpoints (`/healthz`, `/livez`, `/readyz`) of a server listening on every address
 * (SANDBOXD_HOST=0.0.0.0, the widest an operator can choose) are not reachable from a
 * sandbox, even one with `internet` egress: not on the bridge's gateway address, not on the
 * host's other addresses, and `127.0.0.1` inside a sandbox is its own loopback. Control: the
 * host reaches the same URLs, so the refusals are the sandbox network's, not an absent server.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { networkInterfaces } from 'node:os';
import { after, before, describe, it } from 'node:test';
import { ADMIN_KEY, RUNTIME, type Server, startServer } from './harness.js';
import { type Probe, type ProbeResult, probeCommand } from './egress-probe.js';
import { localOptions } from './local-runtime.js';

const DEBIAN = 'local/debian:bookworm';

describe("a sandbox cannot reach its server's credential-free endpoints", {
  skip: RUNTIME !== 'local' ? 'needs SANDBOXD_E2E_RUNTIME=local (and root)' : false,
  timeout: 300_000,
}, () => {
  let s: Server;
  before(async () => {
    s = await startServer({ env: { SANDBOXD_HOST: '0.0.0.0' } });
  });
  after(() => s?.stop());

  it("not on the gateway, the host's other addresses or 127.0.0.1, with internet egress; the host reaches them", async () => {
    const gateway = localOptions(s.dataDir).subnet!.replace(/0\/24$/, '1');
    const hostAddrs = Object.values(networkInterfaces())
      .flat()
      .filter((a) => a && a.family === 'IPv4' && !a.internal)
      .map((a) => a!.address)
      .filter((a) => a !== gateway)
      .slice(0, 3);
    const targets = [gateway, ...hostAddrs, '127.0.0.1'];
    // The same program on the host and in the sandbox: it connects and asks for `/`.
    const command = probeCommand(targets.map((to): Probe => ({ op: 'http', to, host: 'x', port: s.port })));
    const onHost = JSON.parse(execFileSync('sh', ['-c', command], { encoding: 'utf8' })) as ProbeResult[];
    assert.deepEqual(
      onHost.map((x) => x.ok),
      targets.map(() => true),
      `control: the host reaches the server on each address: ${JSON.stringify(onHost.map((x) => x.error ?? x.status))}`,
    );
    for (const t of targets)
      for (const p of ['/healthz', '/livez', '/readyz'])
        assert.equal((await fetch(`http://${t}:${s.port}${p}`)).status, 200, `control: ${t}${p}, no credentials`);
    const c = await s.api('POST', '/api/v1/sandboxes', {
      key: ADMIN_KEY,
      body: { image: DEBIAN, timeoutMs: 300_000, network: { egress: 'internet' } },
    });
    assert.equal(c.status, 201, c.text);
    const id = c.body.sandbox.id;
    try {
      const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
        key: ADMIN_KEY,
        body: { command, options: { timeoutMs: 120_000 } },
      });
      assert.equal(r.status, 200, r.text);
      const inside = JSON.parse(r.body.stdout) as ProbeResult[];
      assert.equal(inside.length, targets.length, r.body.stdout + r.body.stderr);
      for (const [i, t] of targets.entries())
        assert.equal(inside[i].ok, false, `${t}:${s.port} reached: ${JSON.stringify(inside[i])}`);
    } finally {
      await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key: ADMIN_KEY });
    }
  });
});
