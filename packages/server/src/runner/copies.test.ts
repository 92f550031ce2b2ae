/**
 * Image builds' driver calls through a runner (files.unpack / files.pack as streamed bodies,
 * snapshot's config, deriveImage), against a runner on the fake driver: fast proof of the
 * wire; the real one is in remote/driver.test.ts (conformance over the local driver).
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { SandboxdError } from '@sandboxd/protocol';
import pino from 'pino';
import { decodeCopyStream, encodeCopyStream } from '../runtime/copy-stream.js';
import { FakeDriver } from '../runtime/fake/driver.js';
import { ProcessHost } from '../runtime/processes/host.js';
import { RemoteDriver } from '../runtime/remote/driver.js';
import { TerminalHost } from '../runtime/terminals/host.js';
import { RunnerServer } from './server.js';

const TOKEN = 'test-runner-token-copies-0123456';
const log = pino({ level: 'silent' });
const LIMITS = { memoryBytes: 1 << 28, cpus: 1, pids: 64, rootDiskBytes: 1 << 28 };

async function* chunks(n: number, size: number): AsyncIterable<Uint8Array> {
  for (let i = 0; i < n; i++) yield Buffer.alloc(size, i % 251);
}

describe('copies and derived images through a runner', () => {
  const driver = new FakeDriver();
  const server = new RunnerServer({
    driver,
    terminals: new TerminalHost({ execTty: (id, o) => driver.execTty(id, o), log }),
    processes: ProcessHost.over(driver),
    token: TOKEN,
    nodeName: 'copies-unit-node',
    tls: null,
    log,
  });
  let remote: RemoteDriver;
  before(async () => {
    remote = new RemoteDriver({ url: await server.listen('127.0.0.1', 0), token: TOKEN });
    await remote.init();
  });
  after(async () => {
    await remote.close();
    await server.close();
  });

  it('streams a large copy in and out (unpack, pack) with its entries', async () => {
    const s = await remote.create({
      id: 'copy_one',
      image: 'local/busybox:latest',
      env: {},
      volumes: [],
      limits: LIMITS,
    });
    const size = 64 * 1024 * 100;
    const r = await remote.files.unpack(
      s.id,
      '/app',
      encodeCopyStream([
        { path: 'd', type: 'dir', mode: 0o700, uid: 5, gid: 6, size: 0 },
        { path: 'd/big', type: 'file', mode: 0o600, uid: 5, gid: 6, size, body: () => chunks(100, 64 * 1024) },
      ]),
    );
    assert.deepEqual(r, { entries: 2, bytes: size });
    const got: Array<[string, string, number, number]> = [];
    for await (const e of decodeCopyStream(await remote.files.pack(s.id, '/app'))) {
      let n = 0;
      if (e.body) for await (const c of e.body()) n += c.length;
      got.push([e.path, e.type, e.mode, n]);
    }
    assert.deepEqual(got, [
      ['', 'dir', 0o755, 0],
      ['d', 'dir', 0o700, 0],
      ['d/big', 'file', 0o600, size],
    ]);
    await remote.delete(s.id);
  });

  it("passes the runner's refusals on: a bad stream, an unknown sandbox, a missing path", async () => {
    const s = await remote.create({
      id: 'copy_two',
      image: 'local/busybox:latest',
      env: {},
      volumes: [],
      limits: LIMITS,
    });
    const bad = async function* () {
      yield Buffer.from('{"p":"/abs","t":"d","m":0,"u":0,"g":0,"s":0}\n');
    };
    await assert.rejects(
      remote.files.unpack(s.id, '/app', bad()),
      (e) => e instanceof SandboxdError && e.kind === 'validation' && /\/abs/.test(e.message),
    );
    await assert.rejects(
      remote.files.unpack('no_such', '/app', bad()),
      (e) => (e as SandboxdError).kind === 'not_found',
    );
    await assert.rejects(remote.files.pack(s.id, '/nothing'), (e) => (e as SandboxdError).kind === 'not_found');
    await remote.delete(s.id);
  });

  it('a stream the runner refuses early is not sent to its end', async () => {
    const s = await remote.create({
      id: 'copy_five',
      image: 'local/busybox:latest',
      env: {},
      volumes: [],
      limits: LIMITS,
    });
    let pulled = 0;
    const total = 800;
    async function* big() {
      yield Buffer.from('{"p":"../out","t":"f","m":420,"u":0,"g":0,"s":52428800}\n');
      for (; pulled < total; pulled++) yield Buffer.alloc(64 * 1024);
    }
    await assert.rejects(remote.files.unpack(s.id, '/app', big()), (e) => (e as SandboxdError).kind === 'validation');
    assert.ok(pulled < total, `${pulled} of ${total} chunks were sent after the refusal`);
    await remote.delete(s.id);
  });

  it('a pack that fails midway errors the body on the client (it never ends cleanly)', async () => {
    const s = await remote.create({
      id: 'copy_three',
      image: 'local/busybox:latest',
      env: {},
      volumes: [],
      limits: LIMITS,
    });
    const pack = driver.files.pack;
    driver.files.pack = async () =>
      Readable.from(
        (async function* () {
          yield Buffer.from('{"p":"f","t":"f","m":420,"u":0,"g":0,"s":100}\n0123');
          await new Promise((r) => setTimeout(r, 20));
          throw new Error('the disk went away');
        })(),
      );
    try {
      const body = await remote.files.pack(s.id, '/x');
      await assert.rejects(async () => {
        for await (const e of decodeCopyStream(body)) if (e.body) for await (const _ of e.body());
      });
    } finally {
      driver.files.pack = pack;
    }
    await remote.delete(s.id);
  });

  it('snapshot takes its config and deriveImage makes an image, through the runner', async () => {
    const s = await remote.create({
      id: 'copy_four',
      image: 'local/busybox:latest',
      env: {},
      volumes: [],
      limits: LIMITS,
    });
    const layer = `snapshot/acct/_l.${'ab'.repeat(32)}`;
    const info = await remote.snapshot(s.id, layer, { config: { env: { A: '1' }, workingDir: '/w' } });
    assert.deepEqual([info.env, info.workingDir], [{ A: '1' }, '/w']);
    const derived = await remote.deriveImage(layer, 'snapshot/acct/_d', { user: '7:7' });
    assert.deepEqual([derived.env, derived.workingDir, derived.user], [{ A: '1' }, '/w', '7:7']);
    await assert.rejects(
      remote.deriveImage(layer, 'snapshot/acct/_d', {}),
      (e) => (e as SandboxdError).kind === 'conflict',
    );
    await remote.delete(s.id);
  });
});
