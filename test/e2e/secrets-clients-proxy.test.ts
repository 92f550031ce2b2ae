/**
 * Real runtime, the whole path through the clients: a secret set with `sbx secret set` from
 * a pipe, a sandbox made by `sbx create --secret` and another by the unchanged `e2b` SDK's
 * `Sandbox.create` with `network.rules`; each curls the fake internet's echo over HTTPS
 * (its CA trusted by the proxy through SANDBOXD_EGRESS_CA_FILE) holding only the
 * placeholder: the value arrives there, the sandbox never sees it; `sbx secret audit` and the
 * SDK's `secrets.injections` list each injection with the upstream's 200. Needs
 * SANDBOXD_E2E_RUNTIME=local and a driver that injects (the fake internet's `caFile`): it
 * skips otherwise.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { SandboxdClient } from '@sandboxd/sdk';
import { ALL_TRAFFIC, Sandbox as E2bSandbox, Secret } from 'e2b';
import { e2bAt } from './e2b/support.js';
import { type FakeInternet, NET, startFakeInternet } from './fake-internet.js';
import { newAccount, RUNTIME, type Server, startServer } from './harness.js';
import { localOptions, teardownLocal } from './local-runtime.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../../packages/cli/bin/sbx.js');
const DEBIAN = 'local/debian:bookworm';
const VALUE = `sk-clients-proxy-${process.pid}-0123456789abcdef`;
const NAME = NET.allowed.name;

/** A request the fake internet logged; its echo's target and headers with the injecting proxy's tree. */
type Logged = { http?: { target?: string; headers?: Record<string, string | string[]> } };

describe('secrets through the clients, injected by the egress proxy (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 600_000,
}, () => {
  let s: Server | undefined;
  let fi: FakeInternet | undefined;
  let key = '';
  let home = '';
  let client: SandboxdClient;
  /** The fake internet's CA file: absent before the injecting proxy (then the tests skip). */
  let caFile: string | undefined;

  before(async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
    const o = localOptions(dataDir);
    fi = await startFakeInternet(Number(o.subnet!.split('.')[2]));
    caFile = (fi as FakeInternet & { caFile?: string }).caFile;
    s = await startServer({
      dataDir,
      env: {
        SANDBOXD_EGRESS_VIA: fi.via,
        SANDBOXD_EGRESS_DNS: NET.dns,
        ...(caFile ? { SANDBOXD_EGRESS_CA_FILE: caFile } : {}),
      },
    }).catch(async (e) => {
      await teardownLocal(dataDir).catch(() => {});
      rmSync(dataDir, { recursive: true, force: true });
      throw e;
    });
    key = (await newAccount(s, { tokens: 1_000_000 })).key;
    home = mkdtempSync(join(tmpdir(), 'sbx-secrets-proxy-home-'));
    client = new SandboxdClient({ apiUrl: s.baseUrl, apiKey: key, maxRetries: 0 });
    e2bAt(s, key);
  });
  after(async () => {
    await s?.stop();
    await fi?.close();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  const sbx = (args: string[], stdin?: string): Promise<{ code: number | null; stdout: string; stderr: string }> =>
    new Promise((res, rej) => {
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env))
        if (v !== undefined && !k.startsWith('SANDBOX_') && k !== 'XDG_CONFIG_HOME' && k !== 'FORCE_COLOR') env[k] = v;
      Object.assign(env, { HOME: home, SANDBOX_API_URL: s!.baseUrl, SANDBOX_API_KEY: key, NO_COLOR: '1' });
      const p = spawn(process.execPath, [SBX, ...args], {
        env,
        stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
      if (stdin !== undefined) p.stdin?.end(stdin);
      let stdout = '';
      let stderr = '';
      p.stdout?.on('data', (b) => (stdout += b));
      p.stderr?.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 180_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        assert.ok(!stdout.includes(VALUE) && !stderr.includes(VALUE), 'sbx printed the value');
        res({ code, stdout, stderr });
      });
    });
  const ok = async (args: string[], stdin?: string) => {
    const r = await sbx(args, stdin);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stdout}\n${r.stderr}`);
    return r.stdout;
  };
  /** Runs `command` in the sandbox; the output must not hold the value. */
  const exec = async (id: string, command: string) => {
    const r = await s!.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key,
      body: { command, options: { timeoutMs: 60_000 } },
    });
    assert.equal(r.status, 200, r.text);
    assert.ok(!r.text.includes(VALUE), `the sandbox saw the value: ${r.text}`);
    return r.body as { stdout: string; stderr: string; exitCode: number };
  };
  /** The echo's record of the request whose target has `tag` (bounded wait). */
  const echoed = async (tag: string) => {
    for (let i = 0; i < 200; i++) {
      const hit = (fi!.log as Logged[]).find((l) => l.http?.target?.includes(tag));
      if (hit?.http) return hit.http;
      await new Promise((r) => setTimeout(r, 25));
    }
    assert.fail(`the fake internet saw no request ${tag}`);
  };
  /** The audit's entries of sandbox `id` once there are `n` (the trail is written in batches). */
  const audited = async (id: string, n: number) => {
    for (let i = 0; i < 200; i++) {
      const page = await client.secrets.injections({ sandboxId: id });
      if (page.injections.length >= n) return page.injections;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.fail(`fewer than ${n} injections of ${id} were recorded`);
  };

  it('sbx: secret set from a pipe, create --secret, the value reaches the echo, secret audit lists it', async (t) => {
    if (!caFile) return t.skip('the fake internet has no HTTPS CA (no injecting proxy in this tree)');
    assert.equal(await ok(['secret', 'set', 'API', '-d', 'e2e'], `${VALUE}\n`), 'Created secret API (version 1)\n');
    const id = (
      await ok([
        'create',
        '-q',
        '-i',
        DEBIAN,
        '-t',
        '5m',
        '--allow',
        NAME,
        '--secret',
        `API=${NAME}:Authorization:Bearer {value}`,
      ])
    ).trim();
    try {
      const r = await exec(id, `curl -sS --max-time 20 -H "X-Key: $API" "https://${NAME}/echo?t=cli1"`);
      assert.equal(r.exitCode, 0, r.stderr);
      const h = await echoed('t=cli1');
      assert.equal(h.headers?.authorization, `Bearer ${VALUE}`);
      assert.match(String(h.headers?.['x-key']), /^sbx-secret-[0-9a-f]{24}$/, 'a header rule sets its header only');
      const [entry] = await audited(id, 1);
      assert.deepEqual([entry.secret, entry.method, entry.status], ['API', 'GET', 200]);
      const audit = await ok(['secret', 'audit', '--sandbox', id]);
      assert.match(audit, new RegExp(`${id} +API +GET +${NAME.replace(/\./g, '\\.')}\\S* +200\\n`));
    } finally {
      await ok(['rm', id]);
    }
  });

  it('e2b SDK: Sandbox.create with network.rules holding Secret.fill; the value reaches the echo', async (t) => {
    if (!caFile) return t.skip('the fake internet has no HTTPS CA (no injecting proxy in this tree)');
    await Secret.create('e2b-api', VALUE);
    const sbx = await E2bSandbox.create(DEBIAN, {
      timeoutMs: 300_000,
      network: {
        allowOut: [NAME],
        denyOut: [ALL_TRAFFIC],
        rules: { [NAME]: [{ transform: { headers: { 'X-Api-Key': Secret.fill('e2b-api') } } }] },
      },
    });
    try {
      const r = await exec(
        sbx.sandboxId,
        `curl -sS --max-time 20 "https://${NAME}/echo?t=e2b1"; echo; echo "$e2b_api"`,
      );
      assert.equal(r.exitCode, 0, r.stderr);
      assert.match(r.stdout, /\nsbx-secret-[0-9a-f]{24}\n$/, 'the env holds the placeholder');
      assert.equal((await echoed('t=e2b1')).headers?.['x-api-key'], VALUE);
      const [entry] = await audited(sbx.sandboxId, 1);
      assert.deepEqual([entry.secret, entry.status], ['e2b-api', 200]);
    } finally {
      await sbx.kill();
    }
    assert.ok(!s!.stdout().includes(VALUE), 'the value is in the server log');
  });
});
