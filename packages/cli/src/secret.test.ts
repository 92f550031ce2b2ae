/**
 * `sbx secret set|ls|rm|audit`, `create --secret` and `network --secret/--no-secrets`, run as
 * the real binary against a stub server on 127.0.0.1 that records each request and answers
 * as the contract says (packages/protocol/src/secrets.ts): the value comes from a pipe or a
 * hidden prompt (a real pseudo-terminal, through util-linux `script`), never an argument,
 * and never shows in the output.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, beforeEach, describe, it } from 'node:test';
import { parseSecretRule, VALUE_ARGUMENT_REFUSED, valueProblem } from './commands/secret.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../bin/sbx.js');
const KEY = 'sk_cli_secret_unit';
const ID = 'sbx_aaaaaaaaaaaaaaaaaaaa';
const VALUE = 'sk-live-CLI-VALUE-9f8e7d6c5b4a';
const NOW = new Date().toISOString();

const sandbox = (over: Record<string, unknown> = {}) => ({
  id: ID,
  name: 'unit',
  state: 'started',
  region: 'local',
  image: 'local/busybox:latest',
  createdAt: NOW,
  stopAt: new Date(Date.now() + 3_600_000).toISOString(),
  publicAccessUrlTemplate: `{{PORT}}-${ID}.sandbox.localhost:8080`,
  metadata: {},
  onTimeout: 'stop',
  ...over,
});
const secret = (name: string, over: Record<string, unknown> = {}) => ({
  name,
  description: '',
  version: 1,
  createdAt: NOW,
  updatedAt: NOW,
  ...over,
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe('sbx secret, create --secret, network --secret against a stub server', { timeout: 120_000 }, () => {
  const seen: { method: string; url: string; body: string }[] = [];
  const replies = new Map<string, { status: number; body?: unknown }>();
  let url = '';
  let home = '';
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', body });
      const r = replies.get(`${req.method} ${(req.url ?? '').split('?')[0]}`) ?? {
        status: 404,
        body: { code: 404, kind: 'not_found', message: 'Not found' },
      };
      if (r.body === undefined) {
        res.writeHead(r.status);
        return res.end();
      }
      res.writeHead(r.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(r.body));
    });
  });
  before(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    home = mkdtempSync(join(tmpdir(), 'sbx-secret-home-'));
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    rmSync(home, { recursive: true, force: true });
  });
  beforeEach(() => {
    seen.length = 0;
    replies.clear();
    replies.set(`GET /api/v1/sandboxes/${ID}`, {
      status: 200,
      body: { sandbox: sandbox({ network: { egress: { allow: ['api.openai.com'] } } }) },
    });
  });

  const env = () => {
    const e: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('SANDBOX_')) e[k] = v;
    Object.assign(e, { HOME: home, SANDBOX_API_URL: url, SANDBOX_API_KEY: KEY, NO_COLOR: '1' });
    delete e.XDG_CONFIG_HOME;
    return e;
  };
  /** Runs sbx with `stdin` piped in (or /dev/null). */
  const sbx = (args: string[], stdin?: string): Promise<Run> =>
    new Promise((res, rej) => {
      const p = spawn(process.execPath, [SBX, ...args], {
        env: env(),
        stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
      if (stdin !== undefined) p.stdin?.end(stdin);
      let stdout = '';
      let stderr = '';
      p.stdout?.on('data', (b) => (stdout += b));
      p.stderr?.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
    });
  const ok = (r: Run) => assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  const noValue = (r: Run) => assert.ok(!`${r.stdout}${r.stderr}`.includes(VALUE), 'the value shows in the output');
  const writes = () => seen.filter((r) => r.method !== 'GET');

  it('parses NAME=DOMAINS[:HEADER[:FORMAT]]; the format keeps its colons; mistakes name the flag', () => {
    assert.deepEqual(parseSecretRule('OPENAI=api.openai.com:Authorization:Bearer {value}'), {
      secret: 'OPENAI',
      domains: ['api.openai.com'],
      header: 'Authorization',
      format: 'Bearer {value}',
    });
    assert.deepEqual(parseSecretRule('GH=api.github.com,*.githubusercontent.com'), {
      secret: 'GH',
      domains: ['api.github.com', '*.githubusercontent.com'],
    });
    assert.deepEqual(parseSecretRule('K=a.example.com:X-Api-Key'), {
      secret: 'K',
      domains: ['a.example.com'],
      header: 'X-Api-Key',
    });
    assert.deepEqual(parseSecretRule('B=b.example.com:Authorization:Basic x:{value}').format, 'Basic x:{value}');
    assert.throws(() => parseSecretRule('api.openai.com'), /--secret must be NAME=DOMAIN\[,DOMAIN\.\.\.\]/);
    assert.throws(() => parseSecretRule('=a.com'), /--secret must be NAME=DOMAIN/);
    assert.throws(() => parseSecretRule('A=a.com,,b.com'), /no empty item/);
    assert.throws(() => parseSecretRule('A=a.com::x'), /the header of "A" is empty/);
    assert.throws(() => parseSecretRule('A=a.com:H:'), /the format of "A" is empty/);
    assert.equal(valueProblem(VALUE), null);
    assert.match(valueProblem('') ?? '', /empty/);
    assert.match(valueProblem('a\nb') ?? '', /one line/);
    assert.match(valueProblem('caf\u00e9') ?? '', /printable ASCII/);
    assert.match(valueProblem('x'.repeat(8193)) ?? '', /at most 8192 bytes/);
  });

  it('each secret verb has --help with an example', async () => {
    for (const v of [
      ['secret', 'set'],
      ['secret', 'ls'],
      ['secret', 'rm'],
      ['secret', 'audit'],
    ]) {
      const r = await sbx([...v, '--help']);
      ok(r);
      assert.ok(r.stdout.includes(`$ sbx ${v.join(' ')}`), `${v.join(' ')}: ${r.stdout}`);
    }
    assert.match(
      (await sbx(['create', '--help'])).stdout,
      /--secret OPENAI=api\.openai\.com:Authorization:'Bearer \{value\}'/,
    );
  });

  it('set reads the value from a pipe (one final newline dropped) and PUTs it; output never shows it', async () => {
    replies.set('PUT /api/v1/secrets/OPENAI', { status: 201, body: { secret: secret('OPENAI') } });
    const r = await sbx(['secret', 'set', 'OPENAI', '--description', 'prod key'], `${VALUE}\n`);
    ok(r);
    noValue(r);
    assert.equal(r.stdout, 'Created secret OPENAI (version 1)\n');
    assert.deepEqual(JSON.parse(seen[0].body), { value: VALUE, description: 'prod key' });
    replies.set('PUT /api/v1/secrets/OPENAI', { status: 200, body: { secret: secret('OPENAI', { version: 2 }) } });
    const again = await sbx(['secrets', 'set', 'OPENAI'], `${VALUE}\r\n`);
    ok(again);
    assert.equal(again.stdout, 'Updated secret OPENAI (version 2)\n');
    assert.deepEqual(JSON.parse(seen[1].body), { value: VALUE });
    const desc = await sbx(['secret', 'set', 'OPENAI', '--keep-value', '-d', 'rotated']);
    ok(desc);
    assert.deepEqual(JSON.parse(seen[2].body), { description: 'rotated' });
    const json = await sbx(['secret', 'set', 'OPENAI', '--json'], VALUE);
    ok(json);
    assert.equal(JSON.parse(json.stdout).name, 'OPENAI');
    assert.deepEqual(JSON.parse(seen[3].body), { value: VALUE });
  });

  it('refuses a value given as an argument or --value, saying why, and bad piped values, before any request', async () => {
    for (const args of [
      ['secret', 'set', 'OPENAI', VALUE],
      ['secret', 'set', 'OPENAI', '--value', VALUE],
      ['secret', 'set', `--value=${VALUE}`, 'OPENAI'],
    ]) {
      const r = await sbx(args, '');
      assert.equal(r.code, 2, r.stderr);
      assert.equal(r.stderr, `error: ${VALUE_ARGUMENT_REFUSED}\n`);
      noValue(r);
    }
    for (const [input, why] of [
      ['', /the value is empty; nothing was changed/],
      [`${VALUE}\nsecond line\n`, /the value is one line/],
      [`${VALUE}\u0007`, /printable ASCII only/],
    ] as const) {
      const r = await sbx(['secret', 'set', 'OPENAI'], input);
      assert.equal(r.code, 1);
      assert.match(r.stderr, why);
      noValue(r);
    }
    const noDesc = await sbx(['secret', 'set', 'OPENAI', '--keep-value']);
    assert.match(noDesc.stderr, /--keep-value changes only the description: give --description/);
    assert.equal(seen.length, 0);
  });

  it('set at a terminal asks without echo (a real pty through script)', async () => {
    replies.set('PUT /api/v1/secrets/TTYSEC', { status: 201, body: { secret: secret('TTYSEC') } });
    const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
    const p = spawn(
      'script',
      ['-qfec', [process.execPath, SBX, 'secret', 'set', 'TTYSEC'].map(quote).join(' '), '/dev/null'],
      {
        env: env(),
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let typed = false;
    p.stdout.on('data', (b) => {
      out += b;
      // Type only once the prompt is up (raw mode is set before it is written).
      if (!typed && out.includes('Value of TTYSEC (not shown): ')) {
        typed = true;
        p.stdin.write(`${VALUE}\r`);
      }
    });
    p.stderr.on('data', (b) => (out += b));
    const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
    const code = await new Promise<number | null>((r) => p.on('close', r));
    clearTimeout(timer);
    assert.equal(code, 0, out);
    assert.ok(typed, out);
    assert.match(out, /Created secret TTYSEC \(version 1\)/);
    assert.ok(!out.includes(VALUE), `the typed value was echoed: ${out}`);
    assert.deepEqual(JSON.parse(seen[0].body), { value: VALUE });
  });

  it('ls shows name, version, updated and description; rm deletes each; audit pages with its filters', async () => {
    replies.set('GET /api/v1/secrets', {
      status: 200,
      body: { secrets: [secret('OPENAI', { description: 'prod key', version: 3 }), secret('GH')] },
    });
    const ls = await sbx(['secret', 'ls']);
    ok(ls);
    assert.match(ls.stdout, /^NAME +VERSION +UPDATED +DESCRIPTION\n/);
    assert.match(ls.stdout, /\nOPENAI +3 +\S.* +prod key\n/);
    assert.match(ls.stdout, /\nGH +1 /);
    replies.set('GET /api/v1/secrets', { status: 200, body: { secrets: [] } });
    assert.equal((await sbx(['secret', 'ls'])).stdout, 'No secrets.\n');

    replies.set('DELETE /api/v1/secrets/OPENAI', { status: 204 });
    replies.set('DELETE /api/v1/secrets/GH', { status: 204 });
    const rm = await sbx(['secret', 'rm', 'OPENAI', 'GH']);
    ok(rm);
    assert.equal(rm.stdout, 'Deleted secret OPENAI\nDeleted secret GH\n');
    const gone = await sbx(['secret', 'rm', 'NOPE']);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /^error: Not found/);

    const inj = (n: number, status: number | null) => ({
      id: `inj_${n}`,
      sandboxId: ID,
      secret: 'OPENAI',
      destination: 'api.openai.com:443',
      method: 'POST',
      status,
      ...(status === null ? { error: 'upstream refused the connection' } : {}),
      at: `2026-01-01T00:00:0${n}.000Z`,
    });
    replies.set('GET /api/v1/secrets/injections', {
      status: 200,
      body: { injections: [inj(2, 200), inj(1, null)] },
    });
    seen.length = 0;
    const audit = await sbx(['secret', 'audit', '--sandbox', ID, '--secret', 'OPENAI']);
    ok(audit);
    const q = new URL(seen[0].url, 'http://x').searchParams;
    assert.equal(q.get('sandboxId'), ID);
    assert.equal(q.get('secret'), 'OPENAI');
    assert.match(audit.stdout, /^TIME +SANDBOX +SECRET +METHOD +DESTINATION +STATUS\n/);
    assert.match(audit.stdout, /2026-01-01T00:00:02\.000Z +sbx_a+ +OPENAI +POST +api\.openai\.com:443 +200\n/);
    assert.match(audit.stdout, /error: upstream refused the connection\n$/);
    const one = await sbx(['secret', 'audit', '-n', '1', '--json']);
    assert.deepEqual(
      JSON.parse(one.stdout).map((i: { id: string }) => i.id),
      ['inj_2'],
    );
    const bad = await sbx(['secret', 'audit', '-n', 'many']);
    assert.match(bad.stderr, /--limit must be a whole number/);
  });

  it('create --secret and network --secret/--no-secrets send network.secrets; rules alone keep the egress', async () => {
    const rule = { secret: 'OPENAI', domains: ['api.openai.com'], header: 'Authorization', format: 'Bearer {value}' };
    const shown = { ...rule, placeholder: 'sbx-secret-0123456789abcdef01234567' };
    replies.set('POST /api/v1/sandboxes', {
      status: 201,
      body: { sandbox: sandbox({ network: { egress: { allow: ['api.openai.com'] }, secrets: [shown] } }) },
    });
    const r = await sbx([
      'create',
      '--allow',
      'api.openai.com',
      '--secret',
      'OPENAI=api.openai.com:Authorization:Bearer {value}',
    ]);
    ok(r);
    assert.deepEqual(JSON.parse(seen[0].body).network, { egress: { allow: ['api.openai.com'] }, secrets: [rule] });
    assert.match(
      r.stdout,
      /secret {4}OPENAI -> api\.openai\.com \[Authorization: Bearer \{value\}\] \$OPENAI=sbx-secret-0123456789abcdef01234567\n/,
    );
    const noEgress = await sbx(['create', '--secret', 'OPENAI=api.openai.com']);
    assert.equal(noEgress.code, 1);
    assert.match(noEgress.stderr, /--secret needs the egress its domains go through/);
    const badRule = await sbx(['create', '--egress', 'internet', '--secret', 'OPENAI']);
    assert.match(badRule.stderr, /--secret must be NAME=DOMAIN/);
    assert.equal(writes().length, 1);

    const patch = `PATCH /api/v1/sandboxes/${ID}/network`;
    replies.set(patch, {
      status: 200,
      body: { id: ID, network: { egress: { allow: ['api.openai.com'] }, secrets: [shown] } },
    });
    seen.length = 0;
    const n = await sbx(['network', ID, '-s', 'OPENAI=api.openai.com:Authorization:Bearer {value}']);
    ok(n);
    assert.deepEqual(JSON.parse(writes()[0].body), { egress: { allow: ['api.openai.com'] }, secrets: [rule] });
    assert.match(n.stdout, /^sbx_a+ egress: allow: api\.openai\.com\n {2}secret OPENAI -> /);
    ok(await sbx(['network', ID, 'internet', '--no-secrets']));
    assert.deepEqual(JSON.parse(writes()[1].body), { egress: 'internet', secrets: [] });
    ok(await sbx(['network', ID, 'internet']));
    assert.deepEqual(JSON.parse(writes()[2].body), { egress: 'internet' });
    const both = await sbx(['network', ID, '--no-secrets', '-s', 'A=a.example.com']);
    assert.match(both.stderr, /--secret and --no-secrets exclude each other/);
    assert.equal(writes().length, 3);
  });
});
