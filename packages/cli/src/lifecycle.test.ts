/**
 * `sbx pause|resume|stop|start|snapshot|snapshots`, `create --metadata --on-timeout` and
 * `ls --state --metadata`, run as the real binary against a stub server on 127.0.0.1 that
 * records each request and answers as the contract says: the argument parsing and the
 * request each verb sends.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, beforeEach, describe, it } from 'node:test';
import { parsePairs } from './ui.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../bin/sbx.js');
const KEY = 'sk_cli_lifecycle_unit';
const ID = 'sbx_aaaaaaaaaaaaaaaaaaaa';
const FAR = new Date(Date.now() + 3_600_000).toISOString();

const sandbox = (over: Record<string, unknown> = {}) => ({
  id: ID,
  name: 'unit',
  state: 'started',
  region: 'local',
  image: 'local/busybox:latest',
  createdAt: new Date().toISOString(),
  stopAt: FAR,
  publicAccessUrlTemplate: `{{PORT}}-${ID}.sandbox.localhost:8080`,
  metadata: {},
  onTimeout: 'stop',
  isolation: 'container',
  ...over,
});
const snap = (name: string) => ({
  name,
  image: `snapshots/${name}`,
  sizeBytes: 1536,
  baseImage: 'local/busybox:latest',
  sandboxId: ID,
  createdAt: new Date().toISOString(),
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe('sbx lifecycle verbs against a stub server', { timeout: 120_000 }, () => {
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
    home = mkdtempSync(join(tmpdir(), 'sbx-lifecycle-home-'));
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    rmSync(home, { recursive: true, force: true });
  });
  beforeEach(() => {
    seen.length = 0;
    replies.clear();
    replies.set(`GET /api/v1/sandboxes/${ID}`, { status: 200, body: { sandbox: sandbox() } });
  });

  const sbx = (args: string[]): Promise<Run> =>
    new Promise((res, rej) => {
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('SANDBOX_')) env[k] = v;
      Object.assign(env, { HOME: home, SANDBOX_API_URL: url, SANDBOX_API_KEY: KEY, NO_COLOR: '1' });
      delete env.XDG_CONFIG_HOME;
      const p = spawn(process.execPath, [SBX, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b) => (stdout += b));
      p.stderr.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
    });
  const ok = (r: Run) => assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  const posts = () => seen.filter((r) => r.method !== 'GET').map((r) => `${r.method} ${r.url} ${r.body}`);

  it('parses KEY=VALUE pairs: the value may hold =, the flag is named in errors', () => {
    assert.deepEqual(parsePairs(['a=1', 'b=x=y', 'a=2', 'c='], '--metadata'), { a: '2', b: 'x=y', c: '' });
    assert.equal(parsePairs([], '--metadata'), undefined);
    assert.throws(() => parsePairs(['=v'], '--metadata'), /--metadata must be KEY=VALUE \(got "=v"\)/);
    assert.throws(() => parsePairs(['novalue'], '--metadata'), /--metadata must be KEY=VALUE/);
  });

  it('create --allow / --egress and `sbx network` send network.egress; contradictions never reach the server', async () => {
    const rules = ['pypi.org', '*.npmjs.org', '203.0.113.0/24'];
    replies.set('POST /api/v1/sandboxes', {
      status: 201,
      body: { sandbox: sandbox({ network: { egress: { allow: rules } } }) },
    });
    const r = await sbx(['create', '--allow', rules[0], '-a', rules[1], '-a', rules[2]]);
    ok(r);
    assert.deepEqual(JSON.parse(seen[0].body).network, { egress: { allow: rules } });
    assert.match(r.stdout, /egress {4}allow: pypi\.org, \*\.npmjs\.org, 203\.0\.113\.0\/24/);
    ok(await sbx(['create', '--egress', 'internet']));
    assert.deepEqual(JSON.parse(seen[1].body).network, { egress: 'internet' });
    const both = await sbx(['create', '--egress', 'none', '--allow', 'pypi.org']);
    assert.equal(both.code, 1);
    assert.match(both.stderr, /--allow and --egress none\|internet exclude each other/);
    const odd = await sbx(['create', '--egress', 'some']);
    assert.equal(odd.code, 1);
    assert.match(odd.stderr, /--egress must be none or internet/);
    assert.equal(seen.length, 2);

    replies.set(`PATCH /api/v1/sandboxes/${ID}/network`, {
      status: 200,
      body: { id: ID, network: { egress: { allow: ['files.pythonhosted.org'] } } },
    });
    const n = await sbx(['network', ID, '-a', 'files.pythonhosted.org']);
    ok(n);
    assert.equal(n.stdout, `${ID} egress: allow: files.pythonhosted.org\n`);
    assert.deepEqual(
      posts().at(-1),
      `PATCH /api/v1/sandboxes/${ID}/network {"egress":{"allow":["files.pythonhosted.org"]}}`,
    );
    ok(await sbx(['network', ID, 'none']));
    assert.deepEqual(posts().at(-1), `PATCH /api/v1/sandboxes/${ID}/network {"egress":"none"}`);
    const nothing = await sbx(['network', ID]);
    assert.equal(nothing.code, 1);
    assert.match(nothing.stderr, /say none, internet, or --allow RULE/);
  });

  it('create sends --metadata (repeatable) and --on-timeout; bad values never reach the server', async () => {
    replies.set('POST /api/v1/sandboxes', {
      status: 201,
      body: { sandbox: sandbox({ metadata: { team: 'ml', q: 'a=b' }, onTimeout: 'pause' }) },
    });
    const r = await sbx(['create', '-m', 'team=ml', '--metadata', 'q=a=b', '--on-timeout', 'pause']);
    ok(r);
    assert.deepEqual(JSON.parse(seen[0].body), {
      image: 'local/debian:bookworm',
      metadata: { team: 'ml', q: 'a=b' },
      onTimeout: 'pause',
    });
    assert.match(r.stdout, /pauses at/);
    assert.match(r.stdout, /metadata {2}team=ml, q=a=b/);
    const bad = await sbx(['create', '--on-timeout', 'delete']);
    assert.equal(bad.code, 1);
    assert.match(
      bad.stderr,
      /^error: option '--on-timeout <action>' argument 'delete' is invalid\. Allowed choices are stop, pause\./,
    );
    const badMeta = await sbx(['create', '--metadata', 'oops']);
    assert.equal(badMeta.code, 1);
    assert.equal(badMeta.stderr, 'error: --metadata must be KEY=VALUE (got "oops")\n');
    assert.equal(seen.length, 1);
  });

  it('ls --state paused --metadata k=v builds the filter query and shows paused sandboxes', async () => {
    replies.set('GET /api/v1/sandboxes', {
      status: 200,
      body: { count: 1, sandboxes: [sandbox({ state: 'paused', metadata: { team: 'ml' }, expiresAt: FAR })] },
    });
    const r = await sbx(['ls', '--state', 'paused', '--metadata', 'team=ml', '-m', 'run=4 2']);
    ok(r);
    assert.equal(seen[0].url, '/api/v1/sandboxes?state=paused&limit=1000&metadata.team=ml&metadata.run=4+2');
    assert.match(r.stdout, /^ID +NAME +STATE +IMAGE +ISOLATION +CREATED +STOPS +EXPIRES +METADATA\n/);
    assert.match(
      r.stdout,
      new RegExp(`${ID} +unit +paused +local/busybox:latest +container .* - +in \\d+m +team=ml\\n$`),
    );
    const bad = await sbx(['ls', '--state', 'frozen']);
    assert.equal(bad.code, 1);
    assert.equal(bad.stderr, 'error: --state must be one of started, paused, stopped, error\n');
  });

  it('isolation: create --isolation, pause --memory disk / --to-disk, fork -n, ls shows the tier; bad values never reach the server', async () => {
    const base = `/api/v1/sandboxes/${ID}`;
    replies.set('POST /api/v1/sandboxes', { status: 201, body: { sandbox: sandbox({ isolation: 'gvisor' }) } });
    const c = await sbx(['create', '--isolation', 'gvisor']);
    ok(c);
    assert.deepEqual(JSON.parse(seen[0].body), { image: 'local/debian:bookworm', isolation: 'gvisor' });
    assert.match(c.stdout, /isolation gvisor/);
    const badTier = await sbx(['create', '--isolation', 'vm']);
    assert.equal(badTier.code, 1);
    assert.match(badTier.stderr, /argument 'vm' is invalid\. Allowed choices are container, gvisor\./);
    replies.set(`POST ${base}/pause`, {
      status: 200,
      body: { sandbox: sandbox({ state: 'paused', isolation: 'gvisor', pausedMemory: 'disk', expiresAt: FAR }) },
    });
    const p = await sbx(['pause', '--to-disk', ID]);
    ok(p);
    assert.match(p.stdout, new RegExp(`^${ID} paused to disk; deleted unless resumed by`));
    ok(await sbx(['pause', '--memory', 'disk', ID]));
    ok(await sbx(['pause', ID]));
    const contra = await sbx(['pause', '--to-disk', '--memory', 'ram', ID]);
    assert.equal(contra.code, 1);
    assert.match(contra.stderr, /--to-disk and --memory ram contradict/);
    const F = 'sbx_bbbbbbbbbbbbbbbbbbbb';
    replies.set(`POST ${base}/fork`, {
      status: 201,
      body: { sandboxes: [sandbox({ id: F, name: 'unit-fork-1', isolation: 'gvisor' })] },
    });
    const f = await sbx(['fork', ID, '-n', '2']);
    ok(f);
    assert.equal(f.stdout, `Forked ${F} (unit-fork-1) from ${ID}\n`);
    const q = await sbx(['fork', '-q', ID]);
    assert.equal(q.stdout, `${F}\n`);
    for (const n of ['0', '11', 'x', '1.5']) {
      const bad = await sbx(['fork', ID, '-n', n]);
      assert.equal(bad.code, 1, n);
      assert.match(bad.stderr, /--count must be a whole number from 1 to 10/);
    }
    assert.deepEqual(posts(), [
      'POST /api/v1/sandboxes {"image":"local/debian:bookworm","isolation":"gvisor"}',
      `POST ${base}/pause {"memory":"disk"}`,
      `POST ${base}/pause {"memory":"disk"}`,
      `POST ${base}/pause `,
      `POST ${base}/fork {"count":2}`,
      `POST ${base}/fork {"count":1}`,
    ]);
    replies.set('GET /api/v1/sandboxes', {
      status: 200,
      body: {
        count: 1,
        sandboxes: [sandbox({ state: 'paused', isolation: 'gvisor', pausedMemory: 'disk', expiresAt: FAR })],
      },
    });
    const ls = await sbx(['ls']);
    ok(ls);
    assert.match(ls.stdout, new RegExp(`${ID} +unit +paused \\(disk\\) +local/busybox:latest +gvisor `));
  });

  it('pause, resume -t, stop, start map to their routes and print the new state', async () => {
    const base = `/api/v1/sandboxes/${ID}`;
    replies.set(`POST ${base}/pause`, { status: 200, body: { sandbox: sandbox({ state: 'paused', expiresAt: FAR }) } });
    replies.set(`POST ${base}/resume`, { status: 200, body: { sandbox: sandbox() } });
    replies.set(`POST ${base}/stop`, { status: 200, body: { sandbox: sandbox({ state: 'stopped', expiresAt: FAR }) } });
    replies.set(`POST ${base}/start`, { status: 200, body: { sandbox: sandbox({ onTimeout: 'pause' }) } });
    const pause = await sbx(['pause', ID]);
    ok(pause);
    assert.match(pause.stdout, new RegExp(`^${ID} paused; deleted unless resumed by ${FAR} \\(in \\d+m\\)\\n$`));
    const resume = await sbx(['resume', '--timeout', '1h', ID]);
    ok(resume);
    assert.match(resume.stdout, new RegExp(`^${ID} started; stops at ${FAR}`));
    const stop = await sbx(['stop', ID]);
    ok(stop);
    assert.match(stop.stdout, new RegExp(`^${ID} stopped; root layer kept until ${FAR}`));
    const start = await sbx(['start', '--json', ID]);
    ok(start);
    assert.equal(JSON.parse(start.stdout).state, 'started');
    assert.deepEqual(posts(), [
      `POST ${base}/pause `,
      `POST ${base}/resume {"timeoutMs":3600000}`,
      `POST ${base}/stop `,
      `POST ${base}/start {}`,
    ]);
    const badT = await sbx(['start', '-t', 'soon', ID]);
    assert.equal(badT.code, 1);
    assert.match(badT.stderr, /^error: --timeout must be milliseconds/);
  });

  it('a wrong state prints the server message (with the state) and exits 1', async () => {
    replies.set(`POST /api/v1/sandboxes/${ID}/resume`, {
      status: 409,
      body: { code: 409, kind: 'conflict', message: 'Sandbox is started, not paused', details: { state: 'started' } },
    });
    const r = await sbx(['resume', ID]);
    assert.equal(r.code, 1);
    assert.equal(r.stderr, 'error: Sandbox is started, not paused\n');
    // A message that does not name the state gets it from details.state.
    replies.set(`POST /api/v1/sandboxes/${ID}/start`, {
      status: 409,
      body: { code: 409, kind: 'conflict', message: 'Cannot start', details: { state: 'paused' } },
    });
    const r2 = await sbx(['start', ID]);
    assert.equal(r2.code, 1);
    assert.equal(r2.stderr, 'error: Cannot start (the sandbox is paused)\n');
  });

  it('snapshot ID NAME, snapshots (ls by default), snapshots rm NAME...', async () => {
    replies.set(`POST /api/v1/sandboxes/${ID}/snapshot`, { status: 201, body: snap('with-deps') });
    replies.set('GET /api/v1/snapshots', { status: 200, body: { count: 2, snapshots: [snap('b'), snap('a')] } });
    replies.set('DELETE /api/v1/snapshots/a', { status: 204 });
    const made = await sbx(['snapshot', ID, 'with-deps']);
    ok(made);
    assert.equal(
      made.stdout,
      `Snapshot with-deps of ${ID} (1.5 KiB over local/busybox:latest)\n  image  snapshots/with-deps\n`,
    );
    const ls = await sbx(['snapshots']);
    ok(ls);
    assert.match(ls.stdout, /^NAME +IMAGE +SIZE +BASE IMAGE +FROM +CREATED\nb +snapshots\/b +1\.5 KiB/);
    const json = await sbx(['snapshots', 'ls', '--json']);
    ok(json);
    assert.deepEqual(
      JSON.parse(json.stdout).map((s: { name: string }) => s.name),
      ['b', 'a'],
    );
    const rm = await sbx(['snapshots', 'rm', 'a', 'nope']);
    assert.equal(rm.code, 1);
    assert.equal(rm.stdout, 'Deleted snapshot a\n');
    assert.equal(rm.stderr, 'error: nope: Not found\nerror: 1 of 2 snapshot(s) not deleted\n');
    assert.deepEqual(posts(), [
      `POST /api/v1/sandboxes/${ID}/snapshot {"name":"with-deps"}`,
      'DELETE /api/v1/snapshots/a ',
      'DELETE /api/v1/snapshots/nope ',
    ]);
  });
});
