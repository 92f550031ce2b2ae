/**
 * Black-box, real runtime: isolation tiers through the HTTP API (issue 38). Both tiers run
 * commands (gVisor's own kernel tells them apart); a plan refuses a tier it does not allow;
 * a gVisor sandbox paused to disk comes back with its processes and their memory (a shell
 * loop whose counter lives in memory counts on from where it was); a fork of a running
 * gVisor sandbox makes sandboxes whose processes continue from the source's state, each
 * with its own address (reached through the port proxy) and writable layer.
 *
 * The gVisor cases skip, naming the reason, only when the server's runtime does not offer
 * `gvisor` (or offers it without memory snapshots) in `/healthz`.
 */
import assert from 'node:assert/strict';
import { readFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Sandbox as E2bSandbox } from 'e2b';
import { e2bAt } from './e2b/support.js';
import { newAccount, RUNTIME, startServer, type Server, until } from './harness.js';
import { hget, waitListening } from './proxy-support.js';

const DEBIAN = 'local/debian:bookworm';
/** A loop whose counter lives in the shell's memory: each round appends it to /tmp/log. */
const COUNTER = `echo $$ > /tmp/pid; i=0; while :; do i=$((i+1)); echo $i >> /tmp/log; sleep 0.1; done`;

interface Tier {
  isolation: string;
  runtime: string;
  platform?: string;
  memorySnapshots: boolean;
}

describe('isolation tiers (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs the real runtime',
  timeout: 900_000,
}, () => {
  let s: Server;
  let key: string;
  let tiers: Tier[] = [];
  const cfgDir = mkdtempSync(join(tmpdir(), 'sbx-isolation-cfg-'));
  const config = join(cfgDir, 'config.json');
  writeFileSync(
    config,
    JSON.stringify({
      plans: { CONTAINERS: { isolations: ['container'] } },
      e2bTemplates: { 'base-gvisor': { image: DEBIAN, user: 'user', isolation: 'gvisor' } },
    }),
  );
  const made: string[] = [];

  before(async () => {
    s = await startServer({ env: { SANDBOXD_CONFIG: config } });
    key = (await newAccount(s, { tokens: 10_000, plan: 'PRO' })).key;
    const h = await s.api('GET', '/healthz', { key: null });
    assert.equal(h.status, 200, h.text);
    tiers = h.body.isolations ?? [];
  });
  after(async () => {
    for (const id of made) await s?.api('DELETE', `/api/v1/sandboxes/${id}`, { key }).catch(() => undefined);
    await s?.stop();
    rmSync(cfgDir, { recursive: true, force: true });
  });

  const gvisor = () => tiers.find((t) => t.isolation === 'gvisor');
  /** Why the gVisor cases cannot run here, or null. */
  const noGvisor = (snapshots = false): string | null => {
    const g = gvisor();
    if (!g)
      return `the runtime does not offer gvisor (/healthz isolations: ${tiers.map((t) => t.isolation).join(', ')})`;
    if (snapshots && !g.memorySnapshots) return 'the runtime offers gvisor without memory snapshots';
    return null;
  };
  const api = (method: string, path: string, body?: unknown, k = key) => s.api(method, path, { key: k, body });
  const create = async (body: object = {}, k = key) => {
    const c = await api('POST', '/api/v1/sandboxes', { image: DEBIAN, timeoutMs: 600_000, ...body }, k);
    assert.equal(c.status, 201, c.text);
    made.push(c.body.sandbox.id);
    return c.body.sandbox as { id: string; name: string; isolation: string; publicAccessUrlTemplate: string };
  };
  const sh = async (id: string, command: string) => {
    const r = await api('POST', `/api/v1/sandboxes/${id}/exec`, { command });
    assert.equal(r.status, 200, r.text);
    return r.body as { stdout: string; stderr: string; exitCode: number };
  };
  const background = async (id: string, command: string) => {
    const r = await api('POST', `/api/v1/sandboxes/${id}/exec`, { command, options: { background: true } });
    assert.equal(r.status, 200, r.text);
  };
  /** The counter's log as numbers. */
  const log = async (id: string) =>
    (await sh(id, 'cat /tmp/log 2>/dev/null')).stdout.split('\n').filter(Boolean).map(Number);
  /** Waits (bounded) until the counter of `id` is past `n`; its log then. */
  const pastCount = (id: string, n: number, what: string) =>
    until(
      what,
      async () => {
        const l = await log(id);
        return l.length > n ? l : undefined;
      },
      60_000,
    );
  /** The log counts 1, 2, 3, ... without a restart or a gap. */
  const assertContiguous = (l: number[], what: string) => {
    for (const [i, n] of l.entries()) assert.equal(n, i + 1, `${what}: the counter never restarted nor skipped`);
  };

  it('both tiers run commands; gVisor answers with its own kernel, the container with the host’s', async (t) => {
    const hostVersion = readFileSync('/proc/version', 'utf8');
    const c = await create({ isolation: 'container' });
    assert.equal(c.isolation, 'container');
    const inC = await sh(c.id, 'echo in-container; cat /proc/version');
    assert.equal(inC.exitCode, 0, inC.stderr);
    assert.equal(inC.stdout, `in-container\n${hostVersion}`, "a container shares the host's kernel");
    const why = noGvisor();
    if (why) return t.skip(why);
    const g = await create({ isolation: 'gvisor' });
    assert.equal(g.isolation, 'gvisor');
    assert.equal((await api('GET', `/api/v1/sandboxes/${g.id}`)).body.sandbox.isolation, 'gvisor');
    const inG = await sh(g.id, 'echo in-gvisor; cat /proc/version; id -u');
    assert.equal(inG.exitCode, 0, inG.stderr);
    const [hello, version] = inG.stdout.split('\n');
    assert.equal(hello, 'in-gvisor');
    assert.notEqual(`${version}\n`, hostVersion, "gVisor's kernel is not the host's");
    // Files and env work the same way.
    const put = await s.api('PUT', `/api/v1/sandboxes/${g.id}/files/content?path=/tmp/f.txt`, {
      key,
      raw: 'through the files API',
      headers: { 'content-type': 'application/octet-stream' },
    });
    assert.equal(put.status, 200, put.text);
    assert.equal((await sh(g.id, 'cat /tmp/f.txt')).stdout, 'through the files API');
  });

  it('a plan refuses a tier it does not allow (403 quota naming its list); the host one it does not offer (400)', async () => {
    const small = await newAccount(s, { tokens: 1000, plan: 'CONTAINERS' });
    const r = await api('POST', '/api/v1/sandboxes', { image: DEBIAN, isolation: 'gvisor' }, small.key);
    assert.equal(r.status, 403, r.text);
    assert.equal(r.body.kind, 'quota');
    assert.deepEqual(r.body.details.allowed, ['container']);
    assert.match(r.body.message, /isolation gvisor is not allowed on plan CONTAINERS/);
    const list = await api('GET', '/api/v1/sandboxes', undefined, small.key);
    assert.equal(list.body.count, 0, 'nothing was made');
    if (!gvisor()) {
      const h = await api('POST', '/api/v1/sandboxes', { image: DEBIAN, isolation: 'gvisor' });
      assert.equal(h.status, 400, h.text);
      assert.equal(h.body.details[0].path, '/isolation');
    }
    // A container sandbox neither pauses to disk nor forks.
    const c = await create({}, key);
    assert.equal(c.isolation, 'container', "the plan's default");
    const p = await api('POST', `/api/v1/sandboxes/${c.id}/pause`, { memory: 'disk' });
    assert.equal(p.status, 400, p.text);
    assert.match(p.body.message, /isolation is container/);
    const f = await api('POST', `/api/v1/sandboxes/${c.id}/fork`, { count: 1 });
    assert.equal(f.status, 400, f.text);
    assert.equal(f.body.details.isolation, 'container');
  });

  it('pause to disk keeps every process and its memory: a counter loop counts on from where it was after resume', async (t) => {
    const why = noGvisor(true);
    if (why) return t.skip(why);
    const g = await create({ isolation: 'gvisor' });
    await background(g.id, `sh -c '${COUNTER}'`);
    const pid = (
      await until(
        'the loop to start',
        async () => (await sh(g.id, 'cat /tmp/pid 2>/dev/null')).stdout.trim() || undefined,
      )
    ).trim();
    await pastCount(g.id, 3, 'three rounds before the pause');

    const p = await api('POST', `/api/v1/sandboxes/${g.id}/pause`, { memory: 'disk' });
    assert.equal(p.status, 200, p.text);
    assert.deepEqual([p.body.sandbox.state, p.body.sandbox.pausedMemory], ['paused', 'disk']);
    const got = (await api('GET', `/api/v1/sandboxes/${g.id}`)).body.sandbox;
    assert.deepEqual([got.state, got.pausedMemory], ['paused', 'disk']);
    const exec = await api('POST', `/api/v1/sandboxes/${g.id}/exec`, { command: 'true' });
    assert.equal(exec.status, 409, 'nothing runs while it is on disk');

    const r = await api('POST', `/api/v1/sandboxes/${g.id}/resume`, { timeoutMs: 300_000 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.sandbox.state, 'started');
    assert.equal(r.body.sandbox.pausedMemory, undefined);
    const atResume = (await log(g.id)).length;
    const l = await pastCount(g.id, atResume + 3, 'three rounds after the resume');
    assertContiguous(l, 'after a pause to disk');
    assert.equal((await sh(g.id, 'cat /tmp/pid')).stdout.trim(), pid);
    assert.equal((await sh(g.id, `kill -0 ${pid} && echo alive`)).stdout, 'alive\n', 'the same process');
  });

  it('requests in flight when a pause to disk comes get an answer, never a 500; a terminal open then ends, and the sandbox resumes', async (t) => {
    const why = noGvisor(true);
    if (why) return t.skip(why);
    const g = await create({ isolation: 'gvisor' });
    const term = await api('POST', `/api/v1/sandboxes/${g.id}/terminals`, {});
    assert.equal(term.status, 201, term.text);
    // A command, a file listing and a terminal asked for while the save runs.
    const exec = api('POST', `/api/v1/sandboxes/${g.id}/exec`, { command: 'sleep 2; echo late' });
    await new Promise((r) => setTimeout(r, 200));
    const pause = api('POST', `/api/v1/sandboxes/${g.id}/pause`, { memory: 'disk' });
    const during = await Promise.all([
      exec,
      api('GET', `/api/v1/sandboxes/${g.id}/files?path=%2F&depth=1`),
      api('POST', `/api/v1/sandboxes/${g.id}/terminals`, {}),
    ]);
    assert.equal((await pause).status, 200);
    for (const r of during) assert.ok(r.status < 500, `${r.status} ${r.text}`);
    assert.deepEqual((await api('GET', `/api/v1/sandboxes/${g.id}/terminals`)).body.terminals, []);
    assert.equal((await api('POST', `/api/v1/sandboxes/${g.id}/resume`, {})).status, 200);
    assert.equal((await sh(g.id, 'echo back')).stdout, 'back\n');
    const t2 = await api('POST', `/api/v1/sandboxes/${g.id}/terminals`, {});
    assert.equal(t2.status, 201, t2.text);
  });

  it("fork N=2: two sandboxes whose processes continue from the source's state, each with its own address and files", async (t) => {
    const why = noGvisor(true);
    if (why) return t.skip(why);
    const src = await create({ isolation: 'gvisor', env: { ROLE: 'source' } });
    await sh(src.id, 'mkdir -p /srv && echo source > /srv/who');
    await background(src.id, `sh -c '${COUNTER}'`);
    // Its web server is waited for by its log (a request would do as well: a save drops open connections).
    await background(src.id, 'python3 -u -m http.server 8000 --directory /srv > /tmp/http.log 2>&1');
    await until('the web server to listen', async () =>
      /Serving HTTP/.test((await sh(src.id, 'cat /tmp/http.log')).stdout) ? true : undefined,
    );
    const host = (sb: { publicAccessUrlTemplate: string }) => sb.publicAccessUrlTemplate.replace('{{PORT}}', '8000');
    const pid = (await sh(src.id, 'cat /tmp/pid')).stdout.trim();
    const before = (await pastCount(src.id, 3, 'three rounds before the fork')).length;

    const f = await api('POST', `/api/v1/sandboxes/${src.id}/fork`, { count: 2 });
    assert.equal(f.status, 201, f.text);
    const forks = f.body.sandboxes as Array<{
      id: string;
      name: string;
      state: string;
      isolation: string;
      publicAccessUrlTemplate: string;
    }>;
    made.push(...forks.map((x) => x.id));
    assert.equal(forks.length, 2);
    assert.deepEqual(
      forks.map((x) => [x.name, x.state, x.isolation]),
      [
        [`${src.name}-fork-1`, 'started', 'gvisor'],
        [`${src.name}-fork-2`, 'started', 'gvisor'],
      ],
    );

    for (const x of forks) {
      // The counter goes on from the source's count at the checkpoint (it lives in memory).
      const start = (await log(x.id)).length;
      assert.ok(start >= before, `the fork has the source's log (${start} >= ${before})`);
      const l = await pastCount(x.id, start + 3, `three rounds in ${x.name}`);
      assertContiguous(l, x.name);
      assert.equal((await sh(x.id, 'cat /tmp/pid')).stdout.trim(), pid);
      assert.equal((await sh(x.id, `kill -0 ${pid} && echo alive`)).stdout, 'alive\n', 'the same process, forked');
      assert.equal((await sh(x.id, 'printenv ROLE')).stdout, 'source\n');
      // Its own writable layer.
      await sh(x.id, `echo ${x.id} > /srv/who`);
    }
    assert.equal((await sh(src.id, 'cat /srv/who')).stdout, 'source\n', "the forks' writes are their own");
    // Its own address: the port proxy reaches each one's web server, which serves its own file.
    for (const x of [src, ...forks]) {
      await waitListening(s, host(x), '/who');
      const r = await hget(s.port, host(x), { path: '/who' });
      assert.equal(r.status, 200, `${x.id}: ${r.body}`);
      assert.equal(r.body, x.id === src.id ? 'source\n' : `${x.id}\n`);
    }
    const addrs = await Promise.all([src, ...forks].map(async (x) => (await sh(x.id, 'hostname -I')).stdout.trim()));
    assert.equal(new Set(addrs).size, 3, `three addresses: ${addrs.join(' | ')}`);
    // The source runs on.
    const srcNow = (await log(src.id)).length;
    assertContiguous(await pastCount(src.id, srcNow + 2, 'the source counting on'), 'the source');
    // Served through the port proxy just now (connections kept alive by the proxy): a pause
    // to disk drops them, and after the resume the web server answers through the proxy again.
    const p2 = await api('POST', `/api/v1/sandboxes/${src.id}/pause`, { memory: 'disk' });
    assert.equal(p2.status, 200, p2.text);
    const r2 = await api('POST', `/api/v1/sandboxes/${src.id}/resume`, { timeoutMs: 300_000 });
    assert.equal(r2.status, 200, r2.text);
    await waitListening(s, host(src), '/who');
    assert.equal((await hget(s.port, host(src), { path: '/who' })).body, 'source\n');
  });

  it("E2B's SDK: a gVisor template's pause goes to disk and connect restores it; sandbox.fork() gives running forks", async (t) => {
    const why = noGvisor(true);
    if (why) return t.skip(why);
    e2bAt(s, key);
    const sbx = await E2bSandbox.create('base-gvisor', { timeoutMs: 300_000 });
    made.push(sbx.sandboxId);
    assert.equal((await api('GET', `/api/v1/sandboxes/${sbx.sandboxId}`)).body.sandbox.isolation, 'gvisor');
    await sbx.commands.run(`sh -c '${COUNTER}'`, { background: true, timeoutMs: 0 });
    await pastCount(sbx.sandboxId, 3, 'three rounds before the pause');
    assert.equal(await sbx.pause(), true);
    assert.equal((await api('GET', `/api/v1/sandboxes/${sbx.sandboxId}`)).body.sandbox.pausedMemory, 'disk');
    const again = await E2bSandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 });
    const atResume = (await log(sbx.sandboxId)).length;
    assertContiguous(await pastCount(sbx.sandboxId, atResume + 3, 'counting on after connect'), 'E2B resume');
    const forks = await again.fork({ count: 2 });
    assert.equal(forks.length, 2);
    for (const f of forks) {
      assert.ok(!(f instanceof Error), String(f));
      const fork = f as E2bSandbox;
      made.push(fork.sandboxId);
      assert.equal((await fork.commands.run('echo in-fork')).stdout, 'in-fork\n');
      const start = (await log(fork.sandboxId)).length;
      assertContiguous(await pastCount(fork.sandboxId, start + 3, 'a fork counting on'), 'E2B fork');
    }
  });
});
