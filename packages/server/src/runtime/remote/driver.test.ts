import assert from 'node:assert/strict';
import { spawn as spawnChild, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { selfSignedCert } from '../../../test/tls.js';
import { errorBody, isSandboxdError } from '@sandboxd/protocol';
import pino from 'pino';
import WebSocket, { WebSocketServer } from 'ws';
import { makeTestDriver } from '../../../test/local-driver.js';
import { DEFAULT_FAIR_SHARE, type FairShareConfig } from '../../config-fair-share.js';
import { RunnerServer } from '../../runner/server.js';
import { CONFORMANCE_LIMITS, runDriverConformance, testId } from '../conformance.js';
import type { SandboxSpec } from '../driver.js';
import { LocalDriver, type LocalDriverOptions } from '../local/driver.js';
import { runTerminalConformance, shTerminalSpec, TestTerminalClient } from '../terminals/conformance.js';
import { runProcessConformance, TestFollower } from '../processes/conformance.js';
import { ProcessHost } from '../processes/host.js';
import { TerminalHost } from '../terminals/host.js';
import { rawErrorResponse } from '../../http/front-door.js';
import { RunnerClient } from './client.js';
import { RemoteDriver } from './driver.js';

const TOKEN = 'test-runner-token-0123456789';
const log = pino({ level: 'warn' });

/** A self-signed certificate for 127.0.0.1, in a temporary directory. */
function selfSigned(): { cert: Buffer; key: Buffer; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'sbxd-runner-tls-'));
  selfSignedCert(dir, { cn: '127.0.0.1', san: ['IP:127.0.0.1'] });
  return { cert: readFileSync(join(dir, 'cert.pem')), key: readFileSync(join(dir, 'key.pem')), dir };
}

/** A LocalDriver behind a RunnerServer on loopback (TLS), and a RemoteDriver to it. */
async function startRunner(tag: string, shares?: FairShareConfig) {
  const { driver: local, dataDir } = makeTestDriver(tag);
  await local.init();
  const tls = selfSigned();
  const terminals = new TerminalHost({ execTty: (id, o) => local.execTty(id, o), log, shares });
  const server = new RunnerServer({
    driver: local,
    terminals,
    processes: ProcessHost.over(local, { shares }),
    token: TOKEN,
    nodeName: `node-${tag}`,
    tls,
    log,
  });
  server.recovered = await local.recover();
  const url = await server.listen('127.0.0.1', 0);
  const remote = new RemoteDriver({ url, token: TOKEN, ca: tls.cert });
  await remote.init();
  await remote.recover();
  return {
    url,
    ca: tls.cert,
    remote,
    local,
    server,
    async stop() {
      await remote.close();
      await server.close();
      await local.destroyAll();
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(tls.dir, { recursive: true, force: true });
    },
  };
}

let conf: Awaited<ReturnType<typeof startRunner>> | null = null;
runDriverConformance({
  name: 'remote (a runner over HTTPS on loopback, wrapping the local driver)',
  image: 'local/busybox:latest',
  make: async () => {
    conf = await startRunner('remote');
    return conf.remote;
  },
  destroy: async () => {
    await conf?.stop();
    conf = null;
  },
});

// The terminals of a runner through two API replicas (two RemoteDrivers to one runner).
let termRunner: Awaited<ReturnType<typeof startRunner>> | null = null;
let secondReplica: RemoteDriver | null = null;
runTerminalConformance({
  name: 'a runner over HTTPS on loopback, seen by two replicas (RemoteDriver)',
  image: 'local/busybox:latest',
  realPty: true,
  make: async () => {
    termRunner = await startRunner('rterm');
    secondReplica = new RemoteDriver({ url: termRunner.url, token: TOKEN, ca: termRunner.ca });
    await secondReplica.init();
    return { driver: termRunner.remote, views: [termRunner.remote.terminals, secondReplica.terminals] };
  },
  destroy: async () => {
    await secondReplica?.close();
    await termRunner?.stop();
    termRunner = null;
  },
});

// The tracked processes of a runner through two API replicas (two RemoteDrivers to one runner).
let procRunner: Awaited<ReturnType<typeof startRunner>> | null = null;
let procReplica: RemoteDriver | null = null;
runProcessConformance({
  name: 'a runner over HTTPS on loopback, seen by two replicas (RemoteDriver)',
  image: 'local/busybox:latest',
  make: async () => {
    procRunner = await startRunner('rproc');
    procReplica = new RemoteDriver({ url: procRunner.url, token: TOKEN, ca: procRunner.ca });
    await procReplica.init();
    return { driver: procRunner.remote, views: [procRunner.remote.processes, procReplica.processes] };
  },
  destroy: async () => {
    await procReplica?.close();
    await procRunner?.stop();
    procRunner = null;
  },
});

const spec = (over: Partial<SandboxSpec> = {}): SandboxSpec => ({
  id: testId('remote'),
  image: 'local/busybox:latest',
  env: {},
  volumes: [],
  limits: CONFORMANCE_LIMITS,
  ...over,
});

async function* chunks(...parts: string[]): AsyncIterable<Uint8Array> {
  for (const p of parts) yield Buffer.from(p);
}

describe('remote driver: streams, files, tunnel, health and the token', { timeout: 180_000 }, () => {
  let r: Awaited<ReturnType<typeof startRunner>>;
  let id: string;
  before(async () => {
    r = await startRunner('remstream');
    id = (await r.remote.create(spec())).id;
  });
  after(async () => {
    await r?.stop();
  });

  it('spawns a process with stdin, stdout, stderr and its exit', async () => {
    const p = await r.remote.spawn(id, ['/bin/sh', '-c', 'cat; echo err >&2; exit 5'], { stdin: true });
    assert.ok(p.pid > 1);
    assert.equal(p.stdinOpen, true);
    let out = '';
    let err = '';
    p.onData((stream, c) => {
      if (stream === 'stdout') out += c.toString();
      else err += c.toString();
    });
    const exit = new Promise((res) => p.onExit(res));
    p.write(Buffer.from('hello '));
    p.write(Buffer.from('runner\n'));
    p.closeStdin();
    assert.equal(p.stdinOpen, false);
    assert.deepEqual(await exit, { exitCode: 5, signal: null, timedOut: false });
    assert.equal(out, 'hello runner\n');
    assert.equal(err, 'err\n');
  });

  it('carries a large stdin with backpressure, and pauses output', async () => {
    const p = await r.remote.spawn(id, ['/bin/sh', '-c', 'wc -c'], { stdin: true });
    let out = '';
    p.onData((_s, c) => {
      out += c.toString();
    });
    const exit = new Promise((res) => p.onExit(res));
    const block = Buffer.alloc(64 * 1024, 120);
    let refused = 0;
    for (let i = 0; i < 64; i++) {
      if (!p.write(block)) {
        refused++;
        await new Promise<void>((res) => p.onDrain(res));
      }
    }
    p.closeStdin();
    await exit;
    assert.equal(out.trim(), String(64 * 64 * 1024));
    assert.ok(refused > 0, 'a 4 MiB stdin met the in-flight window at least once');
  });

  it('kills a spawned process with a signal, and reports unknown users as validation', async () => {
    const p = await r.remote.spawn(id, ['/bin/sleep', '30']);
    const exit = new Promise<{ exitCode: number; signal: string | null }>((res) => p.onExit(res));
    p.kill('SIGTERM');
    const e = await exit;
    assert.equal(e.signal, 'SIGTERM');
    await assert.rejects(r.remote.spawn(id, ['/bin/true'], { user: 'ghost' }), { kind: 'validation' });
    await assert.rejects(r.remote.spawn('no_such_sandbox', ['/bin/true']), { kind: 'not_found' });
  });

  it('writes, stats, reads (with a range), lists, moves and removes files', async () => {
    const entry = await r.remote.files.write(id, '/tmp/a.txt', chunks('hello ', 'files\n'), { length: 12 });
    assert.equal(entry.size, 12);
    assert.equal((await r.remote.files.stat(id, '/tmp/a.txt')).size, 12);
    const read = await r.remote.files.read(id, '/tmp/a.txt');
    assert.equal(read.unsatisfiable, false);
    if (!read.unsatisfiable) {
      let text = '';
      for await (const c of read.body) text += c.toString();
      assert.equal(text, 'hello files\n');
    }
    const part = await r.remote.files.read(id, '/tmp/a.txt', { range: '6-10' });
    assert.ok(!part.unsatisfiable && part.start === 6 && part.end === 10);
    if (!part.unsatisfiable) {
      let text = '';
      for await (const c of part.body) text += c.toString();
      assert.equal(text, 'files');
    }
    const far = await r.remote.files.read(id, '/tmp/a.txt', { range: '100-' });
    assert.deepEqual(far, { unsatisfiable: true, size: 12 });
    await r.remote.files.mkdir(id, '/tmp/d/e');
    await r.remote.files.move(id, '/tmp/a.txt', '/tmp/d/b.txt');
    const list = await r.remote.files.list(id, '/tmp/d', { depth: 2 });
    assert.deepEqual(list.entries.map((e) => e.path).sort(), ['/tmp/d/b.txt', '/tmp/d/e']);
    await r.remote.files.remove(id, '/tmp/d');
    await assert.rejects(r.remote.files.stat(id, '/tmp/d'), { kind: 'not_found' });
    assert.equal((await r.remote.files.whoami(id)).uid, 0);
  });

  it('a write whose body fails or is aborted leaves nothing and rejects', async () => {
    async function* failing(): AsyncIterable<Uint8Array> {
      yield Buffer.from('part');
      throw new Error('the client went away');
    }
    await assert.rejects(r.remote.files.write(id, '/tmp/fail.txt', failing()), /went away/);
    const ac = new AbortController();
    async function* slow(): AsyncIterable<Uint8Array> {
      yield Buffer.from('part');
      ac.abort(new Error('stopped by the caller'));
      await new Promise((res) => setTimeout(res, 50));
      yield Buffer.from('more');
    }
    await assert.rejects(r.remote.files.write(id, '/tmp/abort.txt', slow(), { signal: ac.signal }), /stopped/);
    for (let i = 0; i < 50; i++) {
      const ls = (await r.remote.exec(id, 'ls -a /tmp')).stdout;
      if (!/fail|abort/.test(ls)) break;
      await new Promise((res) => setTimeout(res, 20));
    }
    assert.doesNotMatch((await r.remote.exec(id, 'ls -a /tmp')).stdout, /fail\.txt|abort\.txt/);
  });

  it('watches a directory and ends the watch on close', { timeout: 20_000 }, async () => {
    await r.remote.files.mkdir(id, '/tmp/w');
    const w = await r.remote.files.watch(id, '/tmp/w', { recursive: false });
    const seen = new Promise<string>((res) =>
      w.onEvent((e) => {
        if ('path' in e && e.path.includes('x.txt')) res(e.path);
      }),
    );
    const ended = new Promise<void>((res) => w.onEnd(res));
    await r.remote.exec(id, 'echo 1 > /tmp/w/x.txt');
    assert.match(await seen, /x\.txt/);
    w.close();
    await ended;
  });

  it('tunnels a TCP connection to a sandbox port; refuses a sandbox it does not run', async () => {
    await r.remote.execBackground(id, 'while true; do echo tunnelled | nc -l -p 7000; done');
    let got = '';
    for (let i = 0; i < 50 && !got.includes('tunnelled'); i++) {
      got = await r.remote.tunnel(id, 7000).then(
        (s) =>
          new Promise<string>((res) => {
            let acc = '';
            s.on('data', (d: Buffer) => {
              acc += d.toString();
            });
            s.on('close', () => res(acc));
            s.on('error', () => res(acc));
          }),
        () => '',
      );
      if (!got.includes('tunnelled')) await new Promise((res) => setTimeout(res, 50));
    }
    assert.match(got, /tunnelled/);
    await assert.rejects(r.remote.tunnel('no_such_sandbox', 7000), { kind: 'not_found' });
  });

  it('a terminal: deleting its sandbox through the runner ends it; the attach socket refuses unknown terminals (404)', async () => {
    const other = (await r.remote.create(spec())).id;
    const t = await r.remote.terminals.create(other, shTerminalSpec());
    const c = new TestTerminalClient();
    c.attachment = await r.remote.terminals.attach(other, t.id, c);
    await c.control('ready');
    await r.remote.delete(other);
    assert.equal((await c.control('exit')).type, 'exit');
    assert.equal((await c.closing()).code, 1000);
    assert.deepEqual(await r.remote.terminals.list(other), []);
    await assert.rejects(r.remote.terminals.attach(id, 'term_aaaaaaaaaaaaaaaa', new TestTerminalClient()), {
      kind: 'not_found',
    });
    await assert.rejects(r.remote.terminals.create('no_such_sandbox', shTerminalSpec()), { kind: 'not_found' });
  });

  it('tracked processes: deleting the sandbox through the runner kills and forgets them; the reader socket refuses unknown pids (404); a stdin refused midway answers its error', async () => {
    const other = (await r.remote.create(spec())).id;
    const p = await r.remote.processes.start(other, {
      argv: ['/bin/sh', '-c', 'read x; echo "got $x"; sleep 60'],
      run: { stdin: true },
      env: {},
      tag: null,
      startedAt: 0,
      held: false,
    });
    const f = new TestFollower();
    f.following = await r.remote.processes.follow(other, p.pid, f, { reconnect: false, follow: true });
    await r.remote.processes.writeStdin(other, p.pid, chunks('one\n'));
    await f.until('its answer', () => f.text() === 'got one\n');
    await r.remote.processes.closeStdin(other, p.pid);
    // The runner answers 409 while the body is still coming: the write rejects with it, nothing hangs.
    async function* endless(): AsyncIterable<Uint8Array> {
      for (let i = 0; i < 10_000; i++) yield Buffer.alloc(64 * 1024, 0x62);
    }
    await assert.rejects(r.remote.processes.writeStdin(other, p.pid, endless()), { kind: 'conflict' });
    await r.remote.delete(other);
    await f.done();
    assert.equal(f.exit?.signal, 'SIGKILL');
    assert.deepEqual(await r.remote.processes.list(other), []);
    await assert.rejects(
      r.remote.processes.follow(id, 999_999, new TestFollower(), { reconnect: false, follow: true }),
      { kind: 'not_found', message: /No process 999999/ },
    );
    await assert.rejects(
      r.remote.processes.start('no_such_sandbox', {
        argv: ['/bin/true'],
        run: {},
        env: {},
        tag: null,
        startedAt: 0,
        held: false,
      }),
      { kind: 'not_found' },
    );
  });

  it('secrets: setSecrets reaches the runner (values sealed in its record); injections are fetched once, by one replica', async () => {
    const value = 'remote-secret-value-0123456789';
    const rules = [
      { secret: 'API', domains: ['api.example.test'], format: '{value}', placeholder: 'sbx-secret-00ff', value },
    ];
    await r.remote.setSecrets(id, rules);
    const rec = (r.local as unknown as { records: Map<string, { spec: SandboxSpec }> }).records.get(id);
    assert.deepEqual(rec?.spec.secrets, rules);
    const dir = (r.local as unknown as { state: { dirOf(id: string): string } }).state.dirOf(id);
    const files = readdirSync(dir).filter((f) => f.startsWith('state'));
    for (const f of files) assert.ok(!readFileSync(join(dir, f), 'utf8').includes(value), 'a value in clear on disk');
    await assert.rejects(r.remote.setSecrets('nope_0', rules), { kind: 'not_found' });
    // Events: what the runner's proxy reports is fetched by the replicas, each event once.
    const other = new RemoteDriver({ url: r.url, token: TOKEN, ca: r.ca });
    const got: { replica: number; at: number }[] = [];
    const offs = [r.remote, other].map((d, replica) => d.onInjection((e) => got.push({ replica, at: e.at })));
    const event = (at: number) => ({
      sandboxId: id,
      secret: 'API',
      destination: 'api.example.test:443',
      method: 'GET',
      status: 200,
      at,
    });
    for (let i = 0; i < 1200; i++) r.server.injections.push(event(i));
    await Promise.all([r.remote.fetchInjections(), other.fetchInjections()]);
    for (let i = 1200; i < 1210; i++) r.server.injections.push(event(i));
    await Promise.all([r.remote.fetchInjections(), other.fetchInjections()]);
    await Promise.all([r.remote.fetchInjections(), other.fetchInjections()]);
    assert.deepEqual(
      got.map((g) => g.at).sort((a, b) => a - b),
      Array.from({ length: 1210 }, (_, i) => i),
      'every event once',
    );
    for (const off of offs) off();
    await other.close();
    await r.remote.setSecrets(id, []);
  });

  it('reports the node name and capacity on its health endpoint', async () => {
    const h = await r.remote.health();
    assert.equal(h.node, 'node-remstream');
    assert.ok(h.capacity.addresses && h.capacity.addresses.total > 0);
  });

  it('refuses requests and upgrades without the right token (401)', async () => {
    for (const token of ['', 'wrong-token', `${TOKEN}x`]) {
      const bad = new RemoteDriver({ url: r.url, token, ca: r.ca });
      await assert.rejects(bad.list(), { kind: 'unauthorized' });
      await assert.rejects(bad.init(), { kind: 'unauthorized' });
      await assert.rejects(bad.spawn(id, ['/bin/true']), { kind: 'unauthorized' });
      await assert.rejects(bad.tunnel(id, 7000), { kind: 'unauthorized' });
      await assert.rejects(bad.terminals.list(id), { kind: 'unauthorized' });
      await assert.rejects(bad.processes.list(id), { kind: 'unauthorized' });
      await assert.rejects(bad.processes.writeStdin(id, 1, chunks('x')), { kind: 'unauthorized' });
      await assert.rejects(bad.processes.follow(id, 1, new TestFollower(), { reconnect: false, follow: true }), {
        kind: 'unauthorized',
      });
      await assert.rejects(bad.terminals.attach(id, 'term_aaaaaaaaaaaaaaaa', new TestTerminalClient()), {
        kind: 'unauthorized',
      });
      await bad.close();
    }
    const status = await new Promise<number>((res, rej) => {
      const ws = new WebSocket(`${r.url.replace('https', 'wss')}/runner/v1/tty`, { ca: r.ca });
      ws.on('unexpected-response', (_q, s) => res(s.statusCode ?? 0));
      ws.on('open', () => rej(new Error('opened without a token')));
      ws.on('error', rej);
    });
    assert.equal(status, 401);
  });

  it('unary calls share one calls socket per client; a call it cannot take is answered with an error, not dropped', async () => {
    const other = new RemoteDriver({ url: r.url, token: TOKEN, ca: r.ca });
    await Promise.all(Array.from({ length: 20 }, () => other.inspect(id)));
    assert.equal(r.server.callSocketCount, 2, "this test's client and the suite's: one socket each");
    await other.close();
    const ws = new WebSocket(`${r.url.replace('https', 'wss')}/runner/v1/calls`, {
      ca: r.ca,
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    await new Promise((res, rej) => {
      ws.once('open', res);
      ws.once('error', rej);
    });
    const answers: Array<{ id: unknown; result?: { id?: string }; error?: { kind: string; message: string } }> = [];
    ws.on('message', (d) => answers.push(JSON.parse(String(d))));
    ws.send('not json');
    ws.send(JSON.stringify({ id: 1, method: 'no.such.method', args: [] }));
    ws.send(JSON.stringify({ id: 2, method: 'list' }));
    ws.send(JSON.stringify({ id: 3, method: 'inspect', args: [id] }));
    for (let i = 0; answers.length < 4 && i < 200; i++) await new Promise((res) => setTimeout(res, 25));
    ws.close();
    const byId = new Map(answers.map((a) => [a.id, a]));
    assert.equal(byId.get(null)?.error?.kind, 'validation');
    assert.deepEqual(byId.get(1)?.error && { kind: byId.get(1)?.error?.kind }, { kind: 'not_found' });
    assert.match(String(byId.get(1)?.error?.message), /no\.such\.method/);
    assert.equal(byId.get(2)?.error?.kind, 'validation');
    assert.equal(byId.get(3)?.result?.id, id);
  });
});

// An API replica of this version in front of a runner that predates the calls socket (a rolling upgrade).
/** `f()` once it stops being refused `rate_limited` (a slot freed on the far side), at most 5 s. */
async function eventually<T>(f: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await f();
    } catch (e) {
      if (i >= 100 || !isSandboxdError(e) || e.kind !== 'rate_limited') throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

describe('remote driver: the runner answers the shares of clients and readers before the socket', {
  timeout: 120_000,
}, () => {
  let r: Awaited<ReturnType<typeof startRunner>>;
  before(async () => {
    r = await startRunner('remshare', { ...DEFAULT_FAIR_SHARE, clientsPerTerminal: 1, followersPerProcess: 1 });
  });
  after(async () => {
    await r?.stop();
  });

  it('a second client of a terminal and a second reader of a process are rate_limited naming the limit; released, they attach', async () => {
    const id = (await r.remote.create(spec())).id;
    const t = await r.remote.terminals.create(id, shTerminalSpec());
    const first = new TestTerminalClient();
    first.attachment = await r.remote.terminals.attach(id, t.id, first);
    await first.control('ready');
    await assert.rejects(r.remote.terminals.attach(id, t.id, new TestTerminalClient()), {
      kind: 'rate_limited',
      details: { limit: 'clientsPerTerminal', max: 1 },
    });
    first.attachment.detach(); // seen by the runner once its socket closes
    const second = new TestTerminalClient();
    second.attachment = await eventually(() => r.remote.terminals.attach(id, t.id, second));
    await second.control('ready');
    second.attachment.detach();

    const p = await r.remote.processes.start(id, {
      argv: ['/bin/sh', '-c', 'sleep 60'],
      run: {},
      env: {},
      tag: null,
      startedAt: 0,
      held: false,
    });
    const f = new TestFollower();
    f.following = await r.remote.processes.follow(id, p.pid, f, { reconnect: false, follow: true });
    await assert.rejects(r.remote.processes.follow(id, p.pid, new TestFollower(), { reconnect: false, follow: true }), {
      kind: 'rate_limited',
      details: { limit: 'followersPerProcess', max: 1 },
    });
    // A replay without follow is not a live reader: not counted.
    const replay = new TestFollower();
    await r.remote.processes.follow(id, p.pid, replay, { reconnect: false, follow: false });
    f.following.detach();
    const g = new TestFollower();
    g.following = await eventually(() => r.remote.processes.follow(id, p.pid, g, { reconnect: false, follow: true }));
    g.following.detach();
    await r.remote.delete(id);
  });
});

describe('runner client: a runner without the calls socket', () => {
  it('is called over HTTP, each call', async () => {
    const seen: string[] = [];
    const server = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ result: [] }));
      });
    });
    server.on('upgrade', (req, socket) => {
      seen.push(`upgrade ${req.url}`);
      socket.end(rawErrorResponse(errorBody('not_found', `No runner endpoint ${req.url}`)));
    });
    await new Promise<void>((res) => server.listen(0, '127.0.0.1', res));
    const client = new RunnerClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, TOKEN);
    try {
      assert.deepEqual(await client.call('list', []), []);
      assert.deepEqual(await client.call('list', []), []);
      assert.deepEqual(seen, ['upgrade /runner/v1/calls', 'POST /runner/v1/list', 'POST /runner/v1/list']);
    } finally {
      client.close();
      server.close();
    }
  });
});

// A runner whose host went away without closing the connection: it answers nothing, pings included.
describe('runner client: a runner that stops answering on an open calls socket', () => {
  it('fails the calls in flight `unavailable` within two ping periods, not at their own time limit', async () => {
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', autoPong: false });
    await new Promise((res) => wss.once('listening', res));
    const client = new RunnerClient(`http://127.0.0.1:${(wss.address() as AddressInfo).port}`, TOKEN, {
      callsPingMs: 100,
    });
    try {
      // The call's own limit would fail it as "did not answer within 60 s".
      await assert.rejects(client.call('list', [], 60_000), (e: unknown) => {
        assert.ok(isSandboxdError(e), String(e));
        assert.equal(e.kind, 'unavailable');
        assert.match(e.message, /closed the connection before answering/);
        return true;
      });
    } finally {
      client.close();
      wss.close();
    }
  });
});

describe('remote driver: a runner killed mid-call', { timeout: 120_000 }, () => {
  let child: ChildProcess;
  let info: { url: string; options: LocalDriverOptions; dataDir: string };
  before(async () => {
    child = spawnChild(
      process.execPath,
      ['--import', 'tsx', join(import.meta.dirname, '../../../test/runner-child.ts')],
      {
        env: { ...process.env, RUNNER_TOKEN: TOKEN, RUNNER_TAG: 'rkill' },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const line = await new Promise<string>((res, rej) => {
      const t = setTimeout(() => rej(new Error('the runner did not start within 60 s')), 60_000);
      createInterface({ input: child.stdout! }).once('line', (l) => {
        clearTimeout(t);
        res(l);
      });
      child.once('exit', (c) => rej(new Error(`the runner exited (${c})`)));
    });
    info = JSON.parse(line);
  });
  after(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    // What the killed runner's driver left: removed by a driver on the same options.
    const d = new LocalDriver(info.options);
    await d.init();
    await d.destroyAll();
    rmSync(info.dataDir, { recursive: true, force: true });
  });

  it('an exec in flight, a stream, a terminal client, a process reader and the next calls fail `unavailable` (1011, lost), not a hang', async () => {
    const remote = new RemoteDriver({ url: info.url, token: TOKEN });
    await remote.init();
    const s = await remote.create(spec());
    const p = await remote.spawn(s.id, ['/bin/sleep', '60']);
    const streamExit = new Promise<{ exitCode: number }>((res) => p.onExit(res));
    const term = await remote.terminals.create(s.id, shTerminalSpec());
    const viewer = new TestTerminalClient();
    viewer.attachment = await remote.terminals.attach(s.id, term.id, viewer);
    await viewer.control('ready');
    const tracked = await remote.processes.start(s.id, {
      argv: ['/bin/sh', '-c', 'echo tracked; sleep 60'],
      run: {},
      env: {},
      tag: null,
      startedAt: 0,
      held: false,
    });
    const reader = new TestFollower();
    reader.following = await remote.processes.follow(s.id, tracked.pid, reader, { reconnect: false, follow: true });
    await reader.until('its output', () => reader.text() === 'tracked\n');
    const inFlight = remote.exec(s.id, 'sleep 60');
    await new Promise((res) => setTimeout(res, 300));
    child.kill('SIGKILL');
    await assert.rejects(inFlight, (e: unknown) => {
      assert.ok(isSandboxdError(e), String(e));
      assert.equal(e.kind, 'unavailable');
      assert.match(e.message, /Runner 127\.0\.0\.1:\d+/);
      return true;
    });
    assert.equal((await streamExit).exitCode, 137);
    const cut = await viewer.closing();
    assert.equal(cut.code, 1011, 'a terminal client whose runner went is closed with 1011');
    assert.match(cut.reason, /lost the connection to runner/);
    await reader.done();
    assert.match(String(reader.lostReason), /lost the connection to runner/, 'a reader whose runner went is lost');
    assert.equal(reader.exit, null, 'and sees no exit');
    await assert.rejects(remote.terminals.list(s.id), { kind: 'unavailable' });
    await assert.rejects(remote.processes.list(s.id), { kind: 'unavailable' });
    await assert.rejects(remote.list(), { kind: 'unavailable', message: /unreachable.*ECONNREFUSED/ });
    await assert.rejects(remote.spawn(s.id, ['/bin/true']), { kind: 'unavailable' });
    await assert.rejects(remote.files.stat(s.id, '/'), { kind: 'unavailable' });
    assert.deepEqual(await remote.capacity(), { memoryAvailableBytes: null, diskFreeBytes: null, addresses: null });
    await remote.close();
  });
});

// A raw request without a token: the runner answers 401 with the error body.
describe('runner HTTP without a token', () => {
  it('answers 401 with {code, kind, message}', async () => {
    const { driver, dataDir } = makeTestDriver('notoken');
    const terminals = new TerminalHost({ execTty: (id, o) => driver.execTty(id, o), log });
    const server = new RunnerServer({
      driver,
      terminals,
      processes: ProcessHost.over(driver),
      token: TOKEN,
      nodeName: 'n',
      tls: null,
      log,
    });
    const url = await server.listen('127.0.0.1', 0);
    const { status, body } = await new Promise<{ status: number; body: string }>((res, rej) => {
      const req = request(`${url}/runner/v1/list`, { method: 'POST' }, (r) => {
        let b = '';
        r.on('data', (c) => {
          b += c;
        });
        r.on('end', () => res({ status: r.statusCode ?? 0, body: b }));
      });
      req.on('error', rej);
      req.end('{"args":[]}');
    });
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
    assert.equal(status, 401);
    assert.equal(JSON.parse(body).kind, 'unauthorized');
  });
});
