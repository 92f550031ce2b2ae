/**
 * A full host against the real server process (fake runtime by default;
 * SANDBOXD_E2E_RUNTIME=local for crun): with SANDBOXD_MAX_SANDBOXES=2 the third create
 * answers 503 `capacity` with Retry-After, naming the resource, over HTTP, through the SDK
 * (CapacityError) and the CLI (its message); a delete makes room; /healthz and /metrics
 * report what is left.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { CapacityError, Sandbox, SandboxdClient, ServiceUnavailableError } from '@sandboxd/sdk';
import { LocalDriver } from '../../packages/server/src/runtime/local/driver.js';
import { IMAGE, newAccount, RUNTIME, startServer, type Server } from './harness.js';
import { localOptions, releaseSlot } from './local-runtime.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../../packages/cli/bin/sbx.js');
const FULL = 'The host has no room for more sandboxes: 2 of 2 are in use (maxSandboxes); retry in 5 s';

/** Runs the `sbx` CLI to completion (bounded) against `s` with `key`. */
function sbx(s: Server, key: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const home = mkdtempSync(join(tmpdir(), 'sbx-home-'));
  return new Promise((res, rej) => {
    const p = spawn(process.execPath, [SBX, ...args], {
      env: { PATH: process.env.PATH ?? '', HOME: home, SANDBOX_API_URL: s.baseUrl, SANDBOX_API_KEY: key },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (b) => (stdout += b));
    p.stderr.on('data', (b) => (stderr += b));
    const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
    p.on('error', rej);
    p.on('close', (code) => {
      clearTimeout(timer);
      rmSync(home, { recursive: true, force: true });
      res({ code, stdout, stderr });
    });
  });
}

describe(`capacity on the ${RUNTIME} runtime`, { timeout: 300_000 }, () => {
  let s: Server;
  let key: string;
  before(async () => {
    s = await startServer({ env: { SANDBOXD_MAX_SANDBOXES: '2' } });
    key = (await newAccount(s, { tokens: 100_000 })).key;
  });
  after(() => s?.stop());

  const create = () => s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, timeoutMs: 600_000 } });

  it('the third create answers 503 capacity with Retry-After naming sandboxes; nothing is charged; a delete makes room', async () => {
    const made: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await create();
      assert.equal(r.status, 201, r.text);
      made.push(r.body.sandbox.id);
    }
    const ran = await s.api('POST', `/api/v1/sandboxes/${made[1]}/exec`, { key, body: { command: 'echo up' } });
    assert.equal(ran.body.stdout, 'up\n', 'the sandboxes run');
    const balance = (await s.api('GET', '/api/v1/account', { key })).body.balance;

    const full = await create();
    assert.equal(full.status, 503, full.text);
    assert.equal(full.headers.get('retry-after'), '5');
    assert.deepEqual(full.body, {
      code: 503,
      kind: 'capacity',
      message: FULL,
      details: { resource: 'sandboxes', retryAfterMs: 5000, used: 2, max: 2 },
    });
    assert.equal((await s.api('GET', '/api/v1/account', { key })).body.balance, balance, 'nothing charged');
    const listed = await s.api('GET', '/api/v1/sandboxes?limit=100', { key });
    assert.deepEqual(listed.body.sandboxes.map((x: { id: string }) => x.id).sort(), [...made].sort(), 'no record');

    assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${made[0]}`, { key })).status, 204);
    // A delete answers before the kernel freed the sandbox's veth, and the address comes free
    // only then: until that, a create is a 503 to retry (bounded here), never a 500.
    let again = await create();
    for (let i = 0; i < 100 && again.status === 503; i++) {
      assert.equal(again.body.details?.resource, 'addresses', again.text);
      await new Promise((r) => setTimeout(r, 100));
      again = await create();
    }
    assert.equal(again.status, 201, again.text);
    const id = again.body.sandbox.id;
    const echo = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key, body: { command: 'echo again' } });
    assert.equal(echo.body.stdout, 'again\n');
  });

  it('/healthz answers 200 with what is left; /metrics has the gauges', async () => {
    const h = await s.api('GET', '/healthz', { key: null });
    assert.equal(h.status, 200, 'a full host is still healthy');
    const c = h.body.capacity;
    assert.equal(h.body.status, 'ok');
    assert.deepEqual(c.sandboxes, { used: 2, max: 2, free: 0 });
    assert.deepEqual(c.full, ['sandboxes']);
    assert.ok(c.memory.availableBytes > 0 && c.memory.floorBytes === 256 * 2 ** 20, JSON.stringify(c.memory));
    assert.ok(c.disk.freeBytes > 0 && c.disk.floorBytes === 512 * 2 ** 20, JSON.stringify(c.disk));
    // Figures are measured at most once a second, so these may predate the last create.
    if (RUNTIME === 'local') {
      // The e2e servers' subnet is a /24: 253 sandbox addresses; pooled networks hold some.
      assert.equal(c.addresses.total, 253);
      assert.ok(c.addresses.free < 253 && c.addresses.free > 200, JSON.stringify(c.addresses));
    } else assert.ok(c.addresses.free <= c.addresses.total);

    const m = await s.api('GET', '/metrics', { key: null });
    const lines = m.text.split('\n');
    for (const line of [
      'sandboxd_capacity_sandboxes_used 2',
      'sandboxd_capacity_sandboxes_max 2',
      'sandboxd_capacity_full{resource="sandboxes"} 1',
      'sandboxd_capacity_full{resource="memory"} 0',
      `sandboxd_capacity_memory_floor_bytes ${256 * 2 ** 20}`,
    ])
      assert.ok(lines.includes(line), `${line} in /metrics`);
    for (const name of [
      'sandboxd_capacity_memory_available_bytes',
      'sandboxd_capacity_disk_free_bytes',
      'sandboxd_capacity_addresses_free',
      'sandboxd_capacity_addresses_total',
    ]) {
      const v = Number(lines.find((l) => l.startsWith(`${name} `))?.split(' ')[1]);
      assert.ok(v > 0, `${name} ${v}`);
    }
  });

  it('the SDK throws CapacityError with retryAfterMs; the CLI prints the message', async () => {
    const client = new SandboxdClient({ apiKey: key, apiUrl: s.baseUrl });
    await assert.rejects(Sandbox.create({ image: IMAGE }, client), (e: unknown) => {
      assert.ok(e instanceof CapacityError, String(e));
      assert.ok(e instanceof ServiceUnavailableError);
      assert.equal(e.status, 503);
      assert.equal(e.kind, 'capacity');
      assert.equal(e.retryAfterMs, 5000);
      assert.equal(e.message, FULL);
      assert.deepEqual(e.details, { resource: 'sandboxes', retryAfterMs: 5000, used: 2, max: 2 });
      return true;
    });
    const cli = await sbx(s, key, ['create', '--image', IMAGE]);
    assert.equal(cli.code, 1, cli.stderr);
    assert.equal(cli.stderr, `error: ${FULL}\n`);
  });
});

describe('capacity: sandbox addresses on the local runtime', { skip: RUNTIME !== 'local', timeout: 300_000 }, () => {
  // A /29 has 5 sandbox addresses; networks the pool keeps made hold some of them.
  let s: Server;
  let dataDir: string;
  let subnet: string;
  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
    subnet = localOptions(dataDir).subnet!.replace(/\/24$/, '/29');
    s = await startServer({ dataDir, env: { SANDBOXD_SUBNET: subnet } });
  });
  after(async () => {
    await s?.stop({ keepData: true });
    // The harness tears down the /24 it would have used: this server's network is the /29.
    await new LocalDriver({ ...localOptions(dataDir), subnet }).destroyAll();
    releaseSlot(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('creates past the free addresses answer 503 naming addresses, never 500; a delete makes room', async () => {
    const { key } = await newAccount(s, { tokens: 100_000, plan: 'PRO' }); // concurrency 50
    const create = () => s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, timeoutMs: 600_000 } });
    const made: string[] = [];
    let refused: Awaited<ReturnType<typeof create>> | undefined;
    for (let i = 0; i < 7 && !refused; i++) {
      const r = await create();
      if (r.status === 201) made.push(r.body.sandbox.id);
      else refused = r;
    }
    assert.ok(refused, `refused once the addresses ran out (${made.length} made)`);
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.headers.get('retry-after'), '5');
    assert.equal(refused.body.kind, 'capacity');
    assert.equal(refused.body.details.resource, 'addresses');
    assert.match(refused.body.message, /^The host has no room for more sandboxes: .*address.*; retry in 5 s$/);
    assert.ok(made.length >= 3 && made.length <= 5, `${made.length} made`);
    const h = await s.api('GET', '/healthz', { key: null });
    assert.equal(h.body.capacity.addresses.total, 5);
    assert.deepEqual(h.body.capacity.full, ['addresses']);
    assert.deepEqual((await s.api('GET', '/api/v1/sandboxes?limit=100', { key })).body.sandboxes.length, made.length);

    assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${made[0]}`, { key })).status, 204);
    // A delete answers before the kernel freed the sandbox's veth, and the address comes free
    // only then: until that, a create is a 503 to retry (bounded here), never a 500.
    let again = await create();
    for (let i = 0; i < 100 && again.status === 503; i++) {
      assert.equal(again.body.details?.resource, 'addresses', again.text);
      await new Promise((r) => setTimeout(r, 100));
      again = await create();
    }
    assert.equal(again.status, 201, again.text);
    const ran = await s.api('POST', `/api/v1/sandboxes/${again.body.sandbox.id}/exec`, {
      key,
      body: { command: 'echo room' },
    });
    assert.equal(ran.body.stdout, 'room\n');
  });
});
