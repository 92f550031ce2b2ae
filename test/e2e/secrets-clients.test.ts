/**
 * Secrets through the TypeScript SDK and the real `sbx` binary (a child process) against the
 * real server (fake runtime by default; SANDBOXD_E2E_RUNTIME=local for crun): CRUD with the
 * SDK's typed errors, `network.secrets` on create and on the network update, the audit list;
 * `sbx secret set` from a pipe (an argument refused), `ls`, `create --secret`, `network
 * --secret/--no-secrets`, `audit`, `rm`. No value in any answer, output or the server's log.
 * The proxy's injection itself: the proxy's suites; the SDK and CLI against stubs (every
 * request's shape): packages/sdk/src/secrets.test.ts, packages/cli/src/secret.test.ts.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { ConflictError, NotFoundError, SandboxdClient, ValidationError } from '@sandboxd/sdk';
import { IMAGE, newAccount, startServer, type Server } from './harness.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../../packages/cli/bin/sbx.js');
const VALUE = `sk-clients-VALUE-${process.pid}-0123456789`;
const GH_VALUE = `ghp-clients-VALUE-${process.pid}-abcdef`;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe('secrets through the SDK and sbx against the real server', { timeout: 300_000 }, () => {
  let s: Server;
  let key: string;
  let home: string;
  let client: SandboxdClient;

  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { tokens: 100_000 })).key;
    home = mkdtempSync(join(tmpdir(), 'sbx-secrets-home-'));
    client = new SandboxdClient({ apiUrl: s.baseUrl, apiKey: key, maxRetries: 0 });
  });
  after(async () => {
    await s?.stop();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  /** Runs sbx to completion (bounded) with `stdin` piped in (or none). */
  const sbx = (args: string[], stdin?: string): Promise<Run> =>
    new Promise((res, rej) => {
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env))
        if (v !== undefined && !k.startsWith('SANDBOX_') && k !== 'XDG_CONFIG_HOME' && k !== 'FORCE_COLOR') env[k] = v;
      Object.assign(env, { HOME: home, SANDBOX_API_URL: s.baseUrl, SANDBOX_API_KEY: key, NO_COLOR: '1' });
      const p = spawn(process.execPath, [SBX, ...args], {
        env,
        stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
      if (stdin !== undefined) p.stdin?.end(stdin);
      let stdout = '';
      let stderr = '';
      p.stdout?.on('data', (b) => (stdout += b));
      p.stderr?.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 120_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
    });
  const ok = (r: Run) => {
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    assert.ok(!`${r.stdout}${r.stderr}`.includes(VALUE) && !`${r.stdout}${r.stderr}`.includes(GH_VALUE));
    return r.stdout;
  };

  it('SDK: create, conflict, put, list, get, rules on create and setNetwork, the audit list, delete', async () => {
    const made = await client.secrets.create('OPENAI', VALUE, { description: 'prod key' });
    assert.deepEqual([made.name, made.description, made.version], ['OPENAI', 'prod key', 1]);
    await assert.rejects(client.secrets.create('OPENAI', VALUE), ConflictError);
    await assert.rejects(client.secrets.create('BAD', `${VALUE}\n`), (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.ok(!e.message.includes(VALUE));
      return true;
    });
    const changed = await client.secrets.put('OPENAI', { value: `${VALUE}-2` });
    assert.deepEqual([changed.created, changed.secret.version], [false, 2]);
    assert.equal((await client.secrets.put('SPARE', { value: VALUE })).created, true);
    assert.deepEqual(
      (await client.secrets.list()).map((x) => x.name),
      ['OPENAI', 'SPARE'],
    );
    assert.equal((await client.secrets.get('OPENAI')).version, 2);
    await assert.rejects(client.secrets.get('NOPE'), NotFoundError);

    const rule = { secret: 'OPENAI', domains: ['api.example.com'], header: 'Authorization', format: 'Bearer {value}' };
    const sb = await client.sandboxes.create({
      image: IMAGE,
      timeoutMs: 120_000,
      network: { egress: { allow: ['api.example.com'] }, secrets: [rule] },
    });
    try {
      const shown = sb.info.network?.secrets ?? [];
      assert.equal(shown.length, 1);
      assert.match(shown[0].placeholder ?? '', /^sbx-secret-[0-9a-f]{24}$/);
      await assert.rejects(
        sb.setNetwork({ egress: 'internet', secrets: [{ ...rule, secret: 'NOPE' }] }),
        (e: unknown) => {
          assert.ok(e instanceof ValidationError, String(e));
          assert.deepEqual(
            e.problems.map((d) => d.path),
            ['/secrets/0/secret'],
          );
          return true;
        },
      );
      const kept = await sb.setNetwork('internet');
      assert.equal(kept.secrets?.[0].placeholder, shown[0].placeholder, 'absent secrets: kept');
      const none = await sb.setNetwork({ egress: 'internet', secrets: [] });
      assert.equal(none.secrets, undefined);
      const page = await client.secrets.injections({ sandboxId: sb.id, limit: 10 });
      assert.deepEqual(page.injections, []);
    } finally {
      await sb.delete();
    }
    await client.secrets.delete('SPARE');
    await assert.rejects(client.secrets.delete('SPARE'), NotFoundError);
  });

  it('sbx: secret set from a pipe (never an argument), ls, create --secret, network --secret, audit, rm', async () => {
    assert.equal(
      ok(await sbx(['secret', 'set', 'GH', '-d', 'ci token'], `${GH_VALUE}\n`)),
      'Created secret GH (version 1)\n',
    );
    const refused = await sbx(['secret', 'set', 'GH', GH_VALUE]);
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /never a command-line argument/);
    assert.equal((await client.secrets.get('GH')).version, 1, 'the refused call sent nothing');
    assert.match(ok(await sbx(['secret', 'ls'])), /\nGH +1 +.* +ci token\n/);

    const id = ok(
      await sbx([
        'create',
        '-q',
        '-i',
        IMAGE,
        '-t',
        '2m',
        '--allow',
        'api.github.com',
        '--secret',
        'GH=api.github.com:Authorization:token {value}',
      ]),
    ).trim();
    try {
      const info = await client.sandboxes.get(id);
      assert.deepEqual(
        info.info.network?.secrets?.map(({ placeholder, ...r }) => r),
        [{ secret: 'GH', domains: ['api.github.com'], header: 'Authorization', format: 'token {value}' }],
      );
      const n = ok(await sbx(['network', id, '--secret', 'GH=api.github.com:X-Token']));
      assert.match(
        n,
        /egress: allow: api\.github\.com\n {2}secret GH -> api\.github\.com \[X-Token: \{value\}\] \$GH=sbx-secret-/,
      );
      const bad = await sbx(['network', id, '--secret', 'GH=elsewhere.example.com']);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /elsewhere\.example\.com/);
      assert.match(ok(await sbx(['network', id, '--no-secrets'])), /^sbx_\S+ egress: allow: api\.github\.com\n$/);
      assert.equal(ok(await sbx(['secret', 'audit', '--sandbox', id])), 'No injections.\n');
    } finally {
      ok(await sbx(['rm', id]));
    }
    assert.equal(ok(await sbx(['secret', 'rm', 'GH', 'OPENAI'])), 'Deleted secret GH\nDeleted secret OPENAI\n');
    assert.equal(ok(await sbx(['secret', 'ls'])), 'No secrets.\n');
    const log = s.stdout();
    assert.ok(!log.includes(VALUE) && !log.includes(GH_VALUE), 'a value is in the server log');
  });
});
