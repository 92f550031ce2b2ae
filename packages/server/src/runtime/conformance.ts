import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { type CopyEntry, decodeCopyStream, encodeCopyStream } from './copy-stream.js';
import type { ImageConfigOverride, PtyProcess, RuntimeDriver, SandboxSpec } from './driver.js';
import { rejectsWith } from './waiting.js';

/**
 * The behaviour every RuntimeDriver must show, the in-memory fake included. Commands used
 * here stay within a small vocabulary a fake can interpret: `echo` (with `>&2` and `> file`),
 * `cat file`, `echo "$NAME"`, `pwd`, `stty size` (on a PTY), `exit N`, `sleep N`, `kill -9 $$`, `head -c N /dev/zero`.
 */
export interface ConformanceTarget {
  name: string;
  /** A fresh driver, initialised and recovered. */
  make: () => Promise<RuntimeDriver>;
  /** Frees everything the driver made on the host. */
  destroy: (driver: RuntimeDriver) => Promise<void>;
  /** An image the driver can run (e.g. `local/busybox:latest`). */
  image: string;
}

/** The limits of every sandbox the suite makes. */
export const CONFORMANCE_LIMITS = {
  memoryBytes: 256 * 1024 * 1024,
  cpus: 1,
  pids: 128,
  rootDiskBytes: 256 * 1024 * 1024,
};

function waitFor(pty: PtyProcess, pattern: RegExp, timeoutMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const t = setTimeout(
      () => reject(new Error(`timed out waiting for ${pattern}; saw ${JSON.stringify(seen.slice(-300))}`)),
      timeoutMs,
    );
    pty.onData((d) => {
      seen += d.toString();
      if (pattern.test(seen)) {
        clearTimeout(t);
        resolve(seen);
      }
    });
  });
}

/** Copy stream entries for the suite. */
const copy = {
  dir: (path: string, mode = 0o755, uid = 0, gid = 0): CopyEntry => ({ path, type: 'dir', mode, uid, gid, size: 0 }),
  file: (path: string, data: Buffer | string, mode = 0o644, uid = 0, gid = 0): CopyEntry => {
    const b = Buffer.from(data);
    return {
      path,
      type: 'file',
      mode,
      uid,
      gid,
      size: b.length,
      body: async function* () {
        yield b;
      },
    };
  },
  link: (path: string, target: string, uid = 0, gid = 0): CopyEntry => ({
    path,
    type: 'symlink',
    mode: 0o777,
    uid,
    gid,
    size: 0,
    target,
  }),
};

/** The entries of a copy stream, each file's content read (`data`). */
async function decodeAll(body: AsyncIterable<Uint8Array>): Promise<Array<Omit<CopyEntry, 'body'> & { data?: Buffer }>> {
  const out: Array<Omit<CopyEntry, 'body'> & { data?: Buffer }> = [];
  for await (const e of decodeCopyStream(body)) {
    const { body: read, ...rest } = e;
    if (!read) {
      out.push(rest);
      continue;
    }
    const parts: Buffer[] = [];
    for await (const c of read()) parts.push(Buffer.from(c));
    out.push({ ...rest, data: Buffer.concat(parts) });
  }
  return out;
}

/** Raw bytes as a body (a stream the encoder would refuse to make). */
async function* raw(text: string | Buffer): AsyncIterable<Uint8Array> {
  yield Buffer.from(text);
}

/** Paths in the order the agent writes a tree: pre-order, by name per directory. */
function treeOrder(a: string, b: string): number {
  const x = a.split('/');
  const y = b.split('/');
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
  return x.length - y.length;
}

let seq = 0;
/** A sandbox id unique to this process and test. */
export function testId(prefix = 'conf'): string {
  return `${prefix}_${process.pid}_${Date.now().toString(36)}_${seq++}`;
}

/** Registers the conformance suite for `target` with node's test runner. */
export function runDriverConformance(target: ConformanceTarget): void {
  describe(`RuntimeDriver conformance: ${target.name}`, () => {
    let driver: RuntimeDriver;
    const spec = (over: Partial<SandboxSpec> = {}): SandboxSpec => ({
      id: testId(),
      image: target.image,
      env: { GREETING: 'hello', SHARED: 'sandbox' },
      volumes: [],
      limits: CONFORMANCE_LIMITS,
      ...over,
    });
    before(async () => {
      driver = await target.make();
    });
    after(async () => {
      await target.destroy(driver);
    });

    it('creates a running sandbox that is listed and inspectable', async () => {
      const s = await driver.create(spec());
      assert.equal(s.state, 'running');
      assert.match(s.address, /^\d+\.\d+\.\d+\.\d+$/);
      assert.match(s.imageDigest, /^sha256:[0-9a-f]{64}$/);
      assert.ok((await driver.list()).some((x) => x.id === s.id));
      assert.equal((await driver.inspect(s.id))?.state, 'running');
      await driver.delete(s.id);
    });

    it('takes an egress at create and a new one while running (setEgress); an unknown id is not_found', async () => {
      const s = await driver.create(spec({ egress: { allow: ['pypi.org', '*.npmjs.org', '203.0.113.0/24'] } }));
      if (driver.setEgress) {
        await driver.setEgress(s.id, 'internet');
        await driver.setEgress(s.id, { allow: ['files.pythonhosted.org'] });
        await driver.setEgress(s.id, 'none');
        await rejectsWith(driver.setEgress(testId('none'), 'none'), 'not_found');
      }
      assert.equal((await driver.exec(s.id, 'echo ok')).stdout, 'ok\n');
      await driver.delete(s.id);
    });

    it('reports its capacity: memory, disk and addresses left, each unknown (null) or a count', async () => {
      const count = (n: unknown) => n === null || (Number.isSafeInteger(n) && (n as number) >= 0);
      const s = await driver.create(spec());
      const c = await driver.capacity();
      assert.ok(count(c.memoryAvailableBytes) && count(c.diskFreeBytes), JSON.stringify(c));
      if (c.addresses) {
        assert.ok(count(c.addresses.free) && count(c.addresses.total), JSON.stringify(c.addresses));
        assert.ok(c.addresses.free < c.addresses.total, 'the running sandbox holds an address');
      }
      await driver.delete(s.id);
    });

    it('rejects an unknown image, a taken id and a bad mount path', async () => {
      await rejectsWith(driver.create(spec({ image: 'local/no-such-image:latest' })), 'template_not_found');
      const s = await driver.create(spec());
      await rejectsWith(driver.create(spec({ id: s.id })), 'conflict');
      // Two creates of one id at once: exactly one wins.
      const twin = spec();
      const both = await Promise.allSettled([driver.create(twin), driver.create(twin)]);
      assert.equal(both.filter((r) => r.status === 'fulfilled').length, 1);
      await driver.delete(twin.id);
      await rejectsWith(
        driver.create(spec({ volumes: [{ name: `v_${seq++}`, mountPath: '/proc/x', sizeGb: 1 }] })),
        'validation',
      );
      await driver.delete(s.id);
    });

    describe('exec', () => {
      let id: string;
      before(async () => {
        id = (await driver.create(spec())).id;
      });
      after(async () => {
        await driver.delete(id);
      });

      it('keeps stdout, stderr and exit code apart', async () => {
        const r = await driver.exec(id, 'echo out; echo err >&2; exit 3');
        assert.deepEqual(
          [r.stdout, r.stderr, r.exitCode, r.truncated, r.timedOut],
          ['out\n', 'err\n', 3, false, false],
        );
      });
      it('gives every command the sandbox env, merged under the exec env', async () => {
        assert.equal((await driver.exec(id, 'echo "$GREETING"')).stdout, 'hello\n');
        assert.equal((await driver.exec(id, 'echo "$GREETING"', { env: { GREETING: 'over' } })).stdout, 'over\n');
        assert.equal((await driver.exec(id, 'echo "$SHARED"', { env: { OTHER: '1' } })).stdout, 'sandbox\n');
      });
      it('runs in the requested working directory', async () => {
        assert.equal((await driver.exec(id, 'pwd', { cwd: '/tmp' })).stdout, '/tmp\n');
      });
      it('reports 128+signal for a killed process and 124 on timeout', async () => {
        assert.equal((await driver.exec(id, 'kill -9 $$')).exitCode, 137);
        const r = await driver.exec(id, 'sleep 30', { timeoutMs: 300 });
        assert.equal(r.exitCode, 124);
        assert.equal(r.timedOut, true);
      });
      it('caps output and says so', async () => {
        const r = await driver.exec(id, 'head -c 300000 /dev/zero', { maxOutputBytes: 1000 });
        assert.equal(r.stdout.length, 1000);
        assert.equal(r.truncated, true);
        assert.equal(r.exitCode, 0);
      });
      it('starts background commands that outlive the request', async () => {
        const { pid } = await driver.execBackground(id, 'echo bg > /tmp/bg.txt; sleep 30');
        assert.ok(pid > 1);
        let out = '';
        for (let i = 0; i < 50 && out !== 'bg\n'; i++) {
          out = (await driver.exec(id, 'cat /tmp/bg.txt')).stdout;
          if (out !== 'bg\n') await new Promise((r) => setTimeout(r, 20));
        }
        assert.equal(out, 'bg\n');
      });
      it('runs a shell on a PTY with resize and exit code', async () => {
        const pty = await driver.execTty(id, { argv: ['/bin/sh'], cols: 100, rows: 30 });
        assert.ok(pty.pid > 1);
        const exited = new Promise<{ exitCode: number; signal: string | null }>((r) => pty.onExit(r));
        const hello = waitFor(pty, /\bhello\b/);
        pty.write('echo "$GREETING"\r'); // the echo of the typed line does not contain "hello"
        await hello;
        pty.resize(120, 40);
        const size = waitFor(pty, /\b40 120\b/);
        pty.write('stty size\r');
        await size;
        pty.write('exit 4\r');
        assert.deepEqual(await exited, { exitCode: 4, signal: null });
      });
    });

    it('kill stops every process; exec then answers conflict; delete forgets it', async () => {
      const s = await driver.create(spec());
      await driver.kill(s.id);
      assert.equal((await driver.inspect(s.id))?.state, 'stopped');
      await rejectsWith(driver.exec(s.id, 'echo x'), 'conflict');
      await driver.delete(s.id);
      assert.equal(await driver.inspect(s.id), null);
      await rejectsWith(driver.exec(s.id, 'echo x'), 'not_found');
      await driver.delete(s.id); // unknown id: no-op
    });

    describe('snapshots', () => {
      const owner = `conf_${process.pid}`;
      const ref = (name: string) => `snapshot/${owner}/${name}.${Date.now().toString(36)}_${seq++}`;

      it('makes an image of a sandbox that a create uses at once, listed until deleted', async () => {
        const s = await driver.create(spec());
        assert.equal((await driver.exec(s.id, 'echo kept > /snap.txt')).exitCode, 0);
        const r = ref('first');
        const info = await driver.snapshot(s.id, r);
        assert.equal(info.ref, r);
        assert.match(info.digest, /^sha256:[0-9a-f]{64}$/);
        assert.ok(info.sizeBytes > 0, 'the snapshot adds the file');
        assert.equal((await driver.resolveImage(r)).digest, info.digest);
        assert.equal((await driver.inspect(s.id))?.state, 'running', 'a snapshot leaves the sandbox running');
        assert.equal((await driver.exec(s.id, 'cat /snap.txt')).stdout, 'kept\n');
        const c = await driver.create(spec({ image: r }));
        assert.equal(c.imageDigest, info.digest);
        assert.equal((await driver.exec(c.id, 'cat /snap.txt')).stdout, 'kept\n');
        assert.ok((await driver.listSnapshots()).some((x) => x.ref === r && x.digest === info.digest));
        await driver.deleteImage(r);
        await rejectsWith(driver.resolveImage(r), 'template_not_found');
        assert.ok(!(await driver.listSnapshots()).some((x) => x.ref === r));
        // A sandbox made from a deleted snapshot keeps its files.
        assert.equal((await driver.exec(c.id, 'cat /snap.txt')).stdout, 'kept\n');
        await driver.deleteImage(r); // missing: no-op
        await driver.delete(c.id);
        await driver.delete(s.id);
      });

      it('rejects a taken ref, a bad ref, an unknown sandbox; a missing snapshot is template_not_found', async () => {
        const s = await driver.create(spec());
        const r = ref('taken');
        await driver.snapshot(s.id, r);
        await rejectsWith(driver.snapshot(s.id, r), 'conflict');
        for (const bad of ['snapshot/Upper/x', 'snapshot/a/b/c', 'snapshot/a/b:1', 'snapshot/a/.x', 'snapshot/a/'])
          await rejectsWith(driver.snapshot(s.id, bad), 'validation');
        await rejectsWith(driver.snapshot(`no_such_${seq++}`, ref('x')), 'not_found');
        await rejectsWith(driver.resolveImage(ref('never')), 'template_not_found');
        await rejectsWith(driver.create(spec({ image: ref('never') })), 'template_not_found');
        await driver.deleteImage(r);
        await driver.delete(s.id);
      });
    });

    describe("copies: files.unpack and files.pack (image builds' COPY)", () => {
      let id: string;
      before(async () => {
        id = (await driver.create(spec())).id;
      });
      after(async () => {
        await driver.delete(id);
      });

      it('unpack then pack keeps modes, owners, symlinks as symlinks, a filled 0555 dir and a large file', async () => {
        const big = randomBytes(3 * 1024 * 1024 + 11);
        const entries = [
          copy.dir(''),
          copy.dir('app', 0o750, 1000, 1000),
          copy.file('app/hello.txt', 'hello\n', 0o640, 1000, 1001),
          copy.dir('ro', 0o555),
          copy.file('ro/inside.txt', 'inside\n', 0o444),
          copy.dir('sticky', 0o1777),
          copy.file('big.bin', big, 0o600),
          copy.file('empty', ''),
          copy.link('link', 'app/hello.txt', 1000, 1000),
        ];
        const r = await driver.files.unpack(id, '/dst/copy', encodeCopyStream(entries));
        assert.deepEqual(r, { entries: entries.length, bytes: big.length + 6 + 7 });
        assert.equal((await driver.exec(id, 'cat /dst/copy/app/hello.txt')).stdout, 'hello\n');
        assert.equal((await driver.exec(id, 'cat /dst/copy/ro/inside.txt')).stdout, 'inside\n');
        const back = await decodeAll(await driver.files.pack(id, '/dst/copy'));
        const want = [...entries].sort((a, b) => treeOrder(a.path, b.path));
        const shape = (e: Omit<CopyEntry, 'body'>) => [e.path, e.type, e.mode, e.uid, e.gid, e.size, e.target];
        assert.deepEqual(back.map(shape), want.map(shape));
        assert.ok(back.find((e) => e.path === 'big.bin')?.data?.equals(big), 'the large file comes back the same');
        assert.equal(back.find((e) => e.path === 'app/hello.txt')?.data?.toString(), 'hello\n');
        // A file, a symlink (kept), the symlink followed.
        const one = await decodeAll(await driver.files.pack(id, '/dst/copy/app/hello.txt'));
        assert.deepEqual(
          one.map((e) => [...shape(e), e.data?.toString()]),
          [['hello.txt', 'file', 0o640, 1000, 1001, 6, undefined, 'hello\n']],
        );
        const l = await decodeAll(await driver.files.pack(id, '/dst/copy/link'));
        assert.deepEqual(l.map(shape), [['link', 'symlink', 0o777, 1000, 1000, 0, 'app/hello.txt']]);
        const lf = await decodeAll(await driver.files.pack(id, '/dst/copy/link', { follow: true }));
        assert.deepEqual(
          lf.map((e) => [e.path, e.type, e.data?.toString()]),
          [['link', 'file', 'hello\n']],
        );
        await rejectsWith(driver.files.pack(id, '/dst/copy/nothing-here'), 'not_found');
      });

      it('unpack refuses a bad stream, a path out of the destination, a type clash and a symlink above an entry', async () => {
        const dest = '/dst/errors';
        await driver.files.unpack(id, dest, encodeCopyStream([copy.dir('d'), copy.file('keep.txt', 'old')]));
        await rejectsWith(driver.files.unpack(id, dest, raw('this is no header\n')), 'validation');
        await rejectsWith(
          driver.files.unpack(id, dest, raw('{"p":"../escaped","t":"f","m":420,"u":0,"g":0,"s":1}\nx')),
          'validation',
        );
        await rejectsWith(driver.files.unpack(id, dest, encodeCopyStream([copy.file('d', 'x')])), 'conflict');
        await rejectsWith(
          driver.files.unpack(id, dest, encodeCopyStream([copy.link('up', '/etc'), copy.file('up/planted', 'x')])),
          'conflict',
        );
        await rejectsWith(driver.files.pack(id, '/etc/planted'), 'not_found');
        await rejectsWith(driver.files.pack(id, '/dst/escaped'), 'not_found');
        // A stream that ends inside a file: nothing of it is written, the file there stays.
        const cut = (p: string) => raw(`{"p":"${p}","t":"f","m":420,"u":0,"g":0,"s":100}\n0123456789`);
        await rejectsWith(driver.files.unpack(id, dest, cut('keep.txt')), 'validation');
        await rejectsWith(driver.files.unpack(id, dest, cut('new.txt')), 'validation');
        const left = await decodeAll(await driver.files.pack(id, dest));
        assert.deepEqual(
          left.filter((e) => e.type === 'file').map((e) => [e.path, e.data?.toString()]),
          [['keep.txt', 'old']],
        );
      });
    });

    describe('image builds: snapshot with a config, deriveImage', () => {
      const owner = `conf_${process.pid}`;
      const ref = (name: string) => `snapshot/${owner}/${name}.${Date.now().toString(36)}_${seq++}`;
      const layerRef = () => `snapshot/${owner}/_l.${randomBytes(32).toString('hex')}`;
      const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

      it('a snapshot with a config: the image and a sandbox made from it have its env, working dir and user', async () => {
        const s = await driver.create(spec());
        assert.equal((await driver.exec(s.id, 'echo layer > /layer.txt')).exitCode, 0);
        const r = layerRef();
        const config: ImageConfigOverride = {
          env: { PATH, BUILT: 'yes' },
          workingDir: '/tmp',
          user: '1000:1000',
          cmd: ['/bin/sh'],
          entrypoint: null,
          labels: { 'org.example.layer': '1' },
        };
        const info = await driver.snapshot(s.id, r, { config });
        assert.equal(info.ref, r);
        assert.deepEqual([info.env, info.workingDir, info.user], [config.env, '/tmp', '1000:1000']);
        const resolved = await driver.resolveImage(r);
        assert.deepEqual(
          [resolved.digest, resolved.env, resolved.workingDir, resolved.entrypoint, resolved.cmd, resolved.labels],
          [info.digest, config.env, '/tmp', [], ['/bin/sh'], config.labels],
        );
        const c = await driver.create(spec({ image: r }));
        assert.equal((await driver.exec(c.id, 'echo "$BUILT"')).stdout, 'yes\n');
        assert.equal((await driver.exec(c.id, 'echo "$GREETING"')).stdout, 'hello\n', "the create's env over it");
        assert.equal((await driver.exec(c.id, 'pwd')).stdout, '/tmp\n');
        assert.equal((await driver.inspect(c.id))?.user, '1000:1000');
        assert.equal((await driver.exec(c.id, 'cat /layer.txt')).stdout, 'layer\n');
        await driver.delete(c.id);
        await driver.delete(s.id);
        await driver.deleteImage(r);
      });

      it('deriveImage: the files of `from` with the config given, a snapshot like the others', async () => {
        const s = await driver.create(spec());
        assert.equal((await driver.exec(s.id, 'echo base > /base.txt')).exitCode, 0);
        const from = ref('from');
        const base = await driver.snapshot(s.id, from);
        await driver.delete(s.id);
        const to = layerRef();
        const info = await driver.deriveImage(from, to, { env: { PATH, DERIVED: '1' }, workingDir: '/tmp' });
        assert.equal(info.ref, to);
        assert.notEqual(info.digest, base.digest);
        assert.deepEqual([info.env, info.workingDir, info.user], [{ PATH, DERIVED: '1' }, '/tmp', base.user]);
        assert.equal(info.sizeBytes, 0, 'it adds no file');
        assert.equal((await driver.resolveImage(to)).digest, info.digest);
        assert.ok((await driver.listSnapshots()).some((x) => x.ref === to && x.digest === info.digest));
        const c = await driver.create(spec({ image: to }));
        assert.equal((await driver.exec(c.id, 'cat /base.txt')).stdout, 'base\n');
        assert.equal((await driver.exec(c.id, 'echo "$DERIVED"')).stdout, '1\n');
        assert.equal((await driver.exec(c.id, 'pwd')).stdout, '/tmp\n');
        await driver.delete(c.id);
        // From an image that is no snapshot: its files, the config given (the rest its own).
        const plain = layerRef();
        const p = await driver.deriveImage(target.image, plain, { workingDir: '/tmp', labels: { built: 'yes' } });
        const img = await driver.resolveImage(target.image);
        assert.deepEqual(
          [p.env, p.workingDir, p.user, p.cmd, p.entrypoint, p.labels],
          [img.env, '/tmp', img.user, img.cmd, img.entrypoint, { built: 'yes' }],
        );
        const d = await driver.create(spec({ image: plain }));
        assert.equal((await driver.exec(d.id, 'pwd')).stdout, '/tmp\n');
        await driver.delete(d.id);
        await rejectsWith(driver.deriveImage(from, to, {}), 'conflict');
        await rejectsWith(driver.deriveImage(ref('never'), layerRef(), {}), 'template_not_found');
        await rejectsWith(driver.deriveImage('local/no-such-image:latest', layerRef(), {}), 'template_not_found');
        for (const bad of ['snapshot/a/b/c', 'snapshot/Upper/x', 'snapshot/a/_', 'local/x:1'])
          await rejectsWith(driver.deriveImage(from, bad, {}), 'validation');
        for (const r of [to, plain, from]) await driver.deleteImage(r);
        await rejectsWith(driver.resolveImage(to), 'template_not_found');
        assert.ok(!(await driver.listSnapshots()).some((x) => [to, plain].includes(x.ref)));
      });
    });

    describe('lifecycle: pause, resume, stop, start', () => {
      it('pauses (exec answers conflict at once) and resumes (exec works again)', async () => {
        const s = await driver.create(spec());
        await driver.pause(s.id);
        assert.equal((await driver.inspect(s.id))?.state, 'paused');
        assert.ok((await driver.list()).some((x) => x.id === s.id && x.state === 'paused'));
        await driver.pause(s.id); // paused already: no-op
        await rejectsWith(driver.exec(s.id, 'echo x'), 'conflict');
        await rejectsWith(driver.start(s.id, { limits: CONFORMANCE_LIMITS }), 'conflict');
        await driver.resume(s.id);
        await driver.resume(s.id); // running already: no-op
        assert.equal((await driver.inspect(s.id))?.state, 'running');
        assert.equal((await driver.exec(s.id, 'echo back')).stdout, 'back\n');
        await driver.delete(s.id);
      });

      it('stops keeping the root layer and starts again with the file written before', async () => {
        const s = await driver.create(spec());
        assert.equal((await driver.exec(s.id, 'echo kept > /tmp/kept.txt')).exitCode, 0);
        await driver.stop(s.id);
        const stopped = await driver.inspect(s.id);
        assert.equal(stopped?.state, 'stopped');
        assert.equal(stopped?.pid, 0);
        assert.ok((await driver.list()).some((x) => x.id === s.id && x.state === 'stopped'));
        await rejectsWith(driver.exec(s.id, 'echo x'), 'conflict');
        await rejectsWith(driver.pause(s.id), 'conflict');
        await rejectsWith(driver.resume(s.id), 'conflict');
        await driver.stop(s.id); // stopped already: no-op
        const started = await driver.start(s.id, { limits: CONFORMANCE_LIMITS });
        assert.equal(started.state, 'running');
        assert.ok(started.pid > 0);
        assert.equal((await driver.exec(s.id, 'cat /tmp/kept.txt')).stdout, 'kept\n');
        assert.equal((await driver.exec(s.id, 'echo "$GREETING"')).stdout, 'hello\n');
        // Running already: start returns it.
        assert.equal((await driver.start(s.id, { limits: CONFORMANCE_LIMITS })).state, 'running');
        await driver.delete(s.id);
        assert.equal(await driver.inspect(s.id), null);
      });

      it('stops a paused sandbox', async () => {
        const s = await driver.create(spec());
        await driver.pause(s.id);
        await driver.stop(s.id);
        assert.equal((await driver.inspect(s.id))?.state, 'stopped');
        await driver.start(s.id, { limits: CONFORMANCE_LIMITS });
        assert.equal((await driver.exec(s.id, 'echo up')).stdout, 'up\n');
        await driver.delete(s.id);
      });

      it('answers not_found for an unknown id', async () => {
        const id = testId('none');
        await rejectsWith(driver.pause(id), 'not_found');
        await rejectsWith(driver.resume(id), 'not_found');
        await rejectsWith(driver.stop(id), 'not_found');
        await rejectsWith(driver.start(id, { limits: CONFORMANCE_LIMITS }), 'not_found');
      });
    });

    it('keeps named volumes across sandboxes and guards their size and deletion', async () => {
      const name = `conf_vol_${process.pid}_${seq++}`;
      await driver.ensureVolume(name, 1);
      await rejectsWith(driver.ensureVolume(name, 2), 'conflict');
      const a = await driver.create(spec({ volumes: [{ name, mountPath: '/data', sizeGb: 1 }] }));
      const b = await driver.create(spec({ volumes: [{ name, mountPath: '/mnt/shared', sizeGb: 1 }] }));
      assert.equal((await driver.exec(a.id, 'echo kept > /data/f.txt')).exitCode, 0);
      assert.equal((await driver.exec(b.id, 'cat /mnt/shared/f.txt')).stdout, 'kept\n');
      assert.deepEqual(
        (await driver.listVolumes()).find((v) => v.name === name)?.mountedBy.sort(),
        [a.id, b.id].sort(),
      );
      await rejectsWith(driver.deleteVolume(name), 'conflict');
      await driver.delete(a.id);
      await driver.delete(b.id);
      const c = await driver.create(spec({ volumes: [{ name, mountPath: '/data', sizeGb: 1 }] }));
      assert.equal((await driver.exec(c.id, 'cat /data/f.txt')).stdout, 'kept\n');
      await driver.delete(c.id);
      await driver.deleteVolume(name);
      await rejectsWith(driver.deleteVolume(name), 'not_found');
    });
  });
}
