/**
 * E2B's `sandbox.files` with the unchanged `e2b` package against sandboxd on the real runtime:
 * envd's `filesystem.Filesystem` (stat, list, mkdir, move, remove, watch, polling watchers)
 * and its HTTP `/files` (download, multipart and octet-stream uploads, gzip, signed URLs).
 * The sandbox is made with sandboxd's own API (a Debian image with a `user` account) and
 * reached with `Sandbox.connect`; concurrent changes come from sandboxd's own exec API.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import {
  AuthenticationError,
  FileNotFoundError,
  FileType,
  type FilesystemEvent,
  FilesystemEventType,
  InvalidArgumentError,
  NotEnoughSpaceError,
  NotFoundError,
  Sandbox,
  SandboxError,
  TimeoutError,
} from 'e2b';
import { Filesystem } from '../../../packages/server/src/e2b/envd/gen/filesystem_pb.js';
import { RUNTIME } from '../harness.js';
import { type E2bEnv, startE2b } from './support.js';

const DEBIAN = 'local/debian:bookworm';
const MiB = 1 << 20;

/** A deterministic stream of `total` bytes, hashed as it is produced. */
function pattern(total: number) {
  const hash = createHash('sha256');
  const block = Buffer.alloc(MiB);
  for (let i = 0; i < block.length; i++) block[i] = (i * 7 + (i >> 9)) & 0xff;
  let sent = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(c) {
      if (sent >= total) return c.close();
      const part = block.subarray(0, Math.min(block.length, total - sent));
      hash.update(part);
      sent += part.length;
      c.enqueue(new Uint8Array(part));
    },
  });
  return { stream, digest: () => hash.digest('hex') };
}

async function sha256Of(stream: ReadableStream<Uint8Array>): Promise<{ hex: string; size: number }> {
  const h = createHash('sha256');
  let size = 0;
  for await (const chunk of stream) {
    h.update(chunk);
    size += chunk.length;
  }
  return { hex: h.digest('hex'), size };
}

/** Waits until `pred` holds (polling), failing with `what` after `ms`. */
async function until(pred: () => boolean, what: () => string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('E2B sandbox.files (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 600_000,
}, () => {
  let e: E2bEnv;
  let id: string;
  let sbx: Sandbox;
  let token: string;

  const exec = async (command: string) => {
    const r = await e.s.api('POST', `/api/v1/sandboxes/${id}/exec`, { key: e.key, body: { command } });
    assert.equal(r.status, 200, r.text);
    return r.body as { stdout: string; stderr: string; exitCode: number };
  };
  /** A raw envd client (what E2B's Python SDK uses for polling watchers). */
  const rawFs = () =>
    createClient(
      Filesystem,
      createConnectTransport({
        baseUrl: e.s.baseUrl,
        httpVersion: '1.1',
        interceptors: [
          (next) => (req) => {
            req.header.set('E2b-Sandbox-Id', id);
            req.header.set('X-Access-Token', token);
            req.header.set('Authorization', `Basic ${Buffer.from('user:').toString('base64')}`);
            return next(req);
          },
        ],
      }),
    );

  before(async () => {
    e = await startE2b();
    const c = await e.s.api('POST', '/api/v1/sandboxes', {
      key: e.key,
      body: { image: DEBIAN, volumes: { '/small': { name: 'e2b_files_small', sizeGb: 1 } } },
    });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    // The Debian image of the tests has the `user` account of E2B's templates (uid 1000).
    const u = await exec('id -u user 2>/dev/null || useradd -m -u 1000 -s /bin/bash user; id -u user');
    assert.equal(u.stdout.trim().split('\n').pop(), '1000', u.stderr);
    await exec('chown user:user /small && mkdir -m 1777 /tmp/e2b');
    sbx = await Sandbox.connect(id);
    const r = await fetch(`${e.s.baseUrl}/e2b/v2/sandboxes/${id}/connect`, {
      method: 'POST',
      headers: { 'x-api-key': e.key, 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(r.status, 200);
    token = ((await r.json()) as { envdAccessToken: string }).envdAccessToken;
  });
  after(() => e?.s.stop());

  it('writes and reads text; relative paths and ~ land in the user home', async () => {
    const w = await sbx.files.write('/tmp/e2b/hello.txt', 'hello from e2b\n');
    assert.deepEqual([w.name, w.type, w.path], ['hello.txt', FileType.FILE, '/tmp/e2b/hello.txt']);
    assert.equal(await sbx.files.read('/tmp/e2b/hello.txt'), 'hello from e2b\n');
    assert.equal((await exec('cat /tmp/e2b/hello.txt')).stdout, 'hello from e2b\n');

    const rel = await sbx.files.write('notes/today.txt', 'relative', { user: 'user' });
    assert.equal(rel.path, '/home/user/notes/today.txt');
    assert.equal(await sbx.files.read('~/notes/today.txt', { user: 'user' }), 'relative');
    assert.equal(await sbx.files.read('notes/../notes/today.txt', { user: 'user' }), 'relative');
    assert.equal((await sbx.files.getInfo('notes', { user: 'user' })).path, '/home/user/notes');
    // Root's home is /root.
    assert.equal((await sbx.files.write('r.txt', 'r', { user: 'root' })).path, '/root/r.txt');
    await assert.rejects(sbx.files.read('~nobody/x', { user: 'user' }), InvalidArgumentError);
  });

  it('round-trips every byte value, read as bytes, blob and stream', async () => {
    const all = new Uint8Array(256).map((_, i) => i);
    await sbx.files.write('/tmp/e2b/bytes.bin', all.buffer);
    assert.deepEqual(await sbx.files.read('/tmp/e2b/bytes.bin', { format: 'bytes' }), all);
    const blob = await sbx.files.read('/tmp/e2b/bytes.bin', { format: 'blob' });
    assert.deepEqual(new Uint8Array(await blob.arrayBuffer()), all);
    const stream = await sbx.files.read('/tmp/e2b/bytes.bin', { format: 'stream' });
    const chunks: Uint8Array[] = [];
    for await (const c of stream) chunks.push(c);
    assert.deepEqual(new Uint8Array(Buffer.concat(chunks)), all);
    assert.equal(
      (await exec('sha256sum /tmp/e2b/bytes.bin')).stdout.split(' ')[0],
      createHash('sha256').update(all).digest('hex'),
    );
    // An empty file too.
    await sbx.files.write('/tmp/e2b/empty', '');
    assert.equal(await sbx.files.read('/tmp/e2b/empty'), '');
  });

  it('writes several files in one multipart upload', async () => {
    const r = await sbx.files.write(
      [
        { path: '/tmp/e2b/multi/a.txt', data: 'A' },
        { path: '/tmp/e2b/multi/deeper/b.txt', data: new Blob(['BB']) },
        { path: 'multi/c.txt', data: new TextEncoder().encode('CCC').buffer },
      ],
      { user: 'user' },
    );
    assert.deepEqual(
      r.map((f) => [f.name, f.path]),
      [
        ['a.txt', '/tmp/e2b/multi/a.txt'],
        ['b.txt', '/tmp/e2b/multi/deeper/b.txt'],
        ['c.txt', '/home/user/multi/c.txt'],
      ],
    );
    assert.equal(
      (await exec('cat /tmp/e2b/multi/a.txt /tmp/e2b/multi/deeper/b.txt /home/user/multi/c.txt')).stdout,
      'ABBCCC',
    );
    assert.deepEqual(await sbx.files.write([]), []);
  });

  it('streams a 20 MiB file up (octet-stream) and down with the same sha256', async () => {
    const size = 20 * MiB;
    const p = pattern(size);
    const w = await sbx.files.write('/tmp/e2b/big.bin', p.stream);
    assert.equal(w.path, '/tmp/e2b/big.bin');
    const want = p.digest();
    assert.equal((await exec('sha256sum /tmp/e2b/big.bin')).stdout.split(' ')[0], want);
    assert.deepEqual(await sha256Of(await sbx.files.read('/tmp/e2b/big.bin', { format: 'stream' })), {
      hex: want,
      size,
    });
    assert.equal((await sbx.files.getInfo('/tmp/e2b/big.bin')).size, size);
  });

  it('gzip: compressed uploads and downloads', async () => {
    const text = 'squeeze me '.repeat(10_000);
    await sbx.files.write('/tmp/e2b/gz.txt', text, { gzip: true });
    assert.equal((await exec('wc -c < /tmp/e2b/gz.txt')).stdout.trim(), String(text.length));
    assert.equal(await sbx.files.read('/tmp/e2b/gz.txt', { gzip: true }), text);
    const p = pattern(3 * MiB + 17);
    await sbx.files.write('/tmp/e2b/gz.bin', p.stream, { gzip: true });
    const want = p.digest();
    assert.equal((await sha256Of(await sbx.files.read('/tmp/e2b/gz.bin', { format: 'stream', gzip: true }))).hex, want);
    // Plain fetch: gzip only when asked for.
    const url = await sbx.downloadUrl('/tmp/e2b/gz.txt');
    const res = await fetch(url, { headers: { 'E2b-Sandbox-Id': id, 'accept-encoding': 'gzip' } });
    assert.equal(res.headers.get('content-encoding'), 'gzip');
    assert.equal(await res.text(), text);
  });

  it('lists (depth 1 and 2), tells existence, describes entries', async () => {
    await exec(
      'mkdir -p /tmp/e2b/tree/sub/deep && echo -n 12345 > /tmp/e2b/tree/f.txt && touch /tmp/e2b/tree/sub/g && ' +
        'touch /tmp/e2b/tree/sub/deep/h && ln -s f.txt /tmp/e2b/tree/link && mkfifo /tmp/e2b/tree/pipe && chmod 640 /tmp/e2b/tree/f.txt',
    );
    const one = await sbx.files.list('/tmp/e2b/tree');
    assert.deepEqual(
      one.map((x) => [x.name, x.type, x.path]),
      [
        ['f.txt', FileType.FILE, '/tmp/e2b/tree/f.txt'],
        ['link', FileType.SYMLINK, '/tmp/e2b/tree/link'],
        ['sub', FileType.DIR, '/tmp/e2b/tree/sub'],
      ],
      'a fifo has no E2B type: the SDK leaves it out',
    );
    const two = await sbx.files.list('/tmp/e2b/tree', { depth: 2 });
    assert.deepEqual(two.map((x) => x.path).sort(), [
      '/tmp/e2b/tree/f.txt',
      '/tmp/e2b/tree/link',
      '/tmp/e2b/tree/sub',
      '/tmp/e2b/tree/sub/deep',
      '/tmp/e2b/tree/sub/g',
    ]);
    await assert.rejects(sbx.files.list('/tmp/e2b/tree', { depth: 0 }), InvalidArgumentError);
    await assert.rejects(sbx.files.list('/tmp/e2b/tree/f.txt'), InvalidArgumentError);
    await assert.rejects(sbx.files.list('/tmp/e2b/nope'), NotFoundError);

    assert.equal(await sbx.files.exists('/tmp/e2b/tree/f.txt'), true);
    assert.equal(await sbx.files.exists('/tmp/e2b/tree'), true);
    assert.equal(await sbx.files.exists('/tmp/e2b/tree/missing'), false);

    const f = await sbx.files.getInfo('/tmp/e2b/tree/f.txt');
    assert.deepEqual(
      [f.name, f.type, f.path, f.size, f.mode, f.permissions, f.owner, f.group],
      ['f.txt', FileType.FILE, '/tmp/e2b/tree/f.txt', 5, 0o640, '-rw-r-----', 'root', 'root'],
    );
    assert.ok(f.modifiedTime instanceof Date && Math.abs(f.modifiedTime.getTime() - Date.now()) < 120_000);
    const d = await sbx.files.getInfo('/tmp/e2b/tree/sub');
    assert.deepEqual([d.type, d.permissions], [FileType.DIR, 'drwxr-xr-x']);
    const l = await sbx.files.getInfo('/tmp/e2b/tree/link');
    assert.deepEqual([l.type, l.symlinkTarget, l.permissions], [FileType.SYMLINK, '/tmp/e2b/tree/f.txt', 'Lrwxrwxrwx']);
    assert.equal((await sbx.files.getInfo('/tmp')).permissions, 'dtrwxrwxrwx');
    await assert.rejects(sbx.files.getInfo('/tmp/e2b/tree/missing'), NotFoundError);
  });

  it('makes directories (false when there), renames, removes', async () => {
    assert.equal(await sbx.files.makeDir('/tmp/e2b/mk/a/b'), true);
    assert.equal(await sbx.files.makeDir('/tmp/e2b/mk/a/b'), false);
    assert.equal((await exec('test -d /tmp/e2b/mk/a/b && echo yes')).stdout, 'yes\n');
    await sbx.files.write('/tmp/e2b/mk/file', 'x');
    await assert.rejects(sbx.files.makeDir('/tmp/e2b/mk/file'), InvalidArgumentError);

    const moved = await sbx.files.rename('/tmp/e2b/mk/file', '/tmp/e2b/mk/renamed');
    assert.deepEqual(
      [moved.name, moved.path, moved.type, moved.size],
      ['renamed', '/tmp/e2b/mk/renamed', FileType.FILE, 1],
    );
    assert.equal(await sbx.files.exists('/tmp/e2b/mk/file'), false);
    // Like a rename: missing parents are made, a file at the destination is replaced.
    await sbx.files.write('/tmp/e2b/mk/other', 'other');
    await sbx.files.rename('/tmp/e2b/mk/other', '/tmp/e2b/mk/renamed');
    assert.equal(await sbx.files.read('/tmp/e2b/mk/renamed'), 'other');
    await sbx.files.rename('/tmp/e2b/mk/renamed', '/tmp/e2b/mk/new/parent/it');
    assert.equal(await sbx.files.read('/tmp/e2b/mk/new/parent/it'), 'other');
    await assert.rejects(sbx.files.rename('/tmp/e2b/mk/missing', '/tmp/e2b/mk/x'), NotFoundError);
    const dir = await sbx.files.rename('/tmp/e2b/mk/a', '/tmp/e2b/mk/z');
    assert.equal(dir.type, FileType.DIR);

    await sbx.files.remove('/tmp/e2b/mk/z');
    assert.equal(await sbx.files.exists('/tmp/e2b/mk/z'), false);
    await sbx.files.remove('/tmp/e2b/mk/z'); // nothing there: no error, as envd's rm -rf
    await sbx.files.remove('/tmp/e2b/mk/new/parent/it');
    assert.equal(await sbx.files.exists('/tmp/e2b/mk/new/parent/it'), false);
  });

  it('reports a missing file as FileNotFoundError and a directory as a bad argument', async () => {
    await assert.rejects(sbx.files.read('/tmp/e2b/no/such/file'), FileNotFoundError);
    await assert.rejects(sbx.files.read('/tmp/e2b/no/such/file', { format: 'stream' }), FileNotFoundError);
    await assert.rejects(sbx.files.read('/tmp/e2b'), InvalidArgumentError);
    await assert.rejects(sbx.files.write('/tmp', 'x'), InvalidArgumentError);
  });

  it('runs as the user: ownership, permission denied, unknown users', async () => {
    const asUser = await sbx.files.write('/tmp/e2b/own/by-user.txt', 'u', { user: 'user' });
    const asRoot = await sbx.files.write('/tmp/e2b/own/by-root.txt', 'r', { user: 'root' });
    const byDefault = await sbx.files.write('/tmp/e2b/own/by-default.txt', 'd');
    assert.deepEqual(
      [asUser, asRoot, byDefault].map((w) => w.path),
      ['/tmp/e2b/own/by-user.txt', '/tmp/e2b/own/by-root.txt', '/tmp/e2b/own/by-default.txt'],
    );
    assert.equal(
      (await exec("stat -c '%U:%G %n' /tmp/e2b/own/by-user.txt /tmp/e2b/own/by-root.txt /tmp/e2b/own/by-default.txt"))
        .stdout,
      // A sandbox made with sandboxd's own API has no E2B template: its default user is the image's (root).
      'user:user /tmp/e2b/own/by-user.txt\nroot:root /tmp/e2b/own/by-root.txt\nroot:root /tmp/e2b/own/by-default.txt\n',
    );
    const info = await sbx.files.getInfo('/tmp/e2b/own/by-user.txt');
    assert.deepEqual([info.owner, info.group], ['user', 'user']);
    const made = await sbx.files.write('/home/user/made/deep/x.txt', 'x', { user: 'user' });
    assert.equal(made.path, '/home/user/made/deep/x.txt');
    assert.equal((await exec("stat -c '%U' /home/user/made /home/user/made/deep")).stdout, 'user\nuser\n');
    assert.equal(await sbx.files.makeDir('mine', { user: 'user' }), true);
    assert.equal((await sbx.files.getInfo('/home/user/mine')).owner, 'user');

    // The user may not write into /root, nor read root's files there.
    await assert.rejects(sbx.files.write('/root/nope.txt', 'x', { user: 'user' }), (err: Error) => {
      assert.ok(err instanceof SandboxError, String(err));
      assert.match(err.message, /403|[Pp]ermission denied/);
      return true;
    });
    await assert.rejects(sbx.files.read('/root/r.txt', { user: 'user' }), SandboxError);
    await assert.rejects(sbx.files.makeDir('/root/nope', { user: 'user' }), (err: Error) => {
      assert.ok(err instanceof SandboxError);
      assert.match(err.message, /permission_denied|[Pp]ermission denied/);
      return true;
    });
    assert.equal((await exec('ls /root')).stdout, 'r.txt\n');
    await assert.rejects(sbx.files.read('/tmp/e2b/hello.txt', { user: 'ghost' }), AuthenticationError);
    await assert.rejects(sbx.files.write('/tmp/e2b/ghost.txt', 'x', { user: 'ghost' }), AuthenticationError);
    await assert.rejects(sbx.files.list('/tmp', { user: 'ghost' }), AuthenticationError);
    await assert.rejects(sbx.files.getInfo('relative', { user: 'ghost' }), AuthenticationError);
  });

  it('answers a full disk with NotEnoughSpaceError and keeps the old file', async () => {
    await sbx.files.write('/small/keep.txt', 'old content', { user: 'user' });
    const fill = await exec(
      'avail=$(df --output=avail -B1 /small | tail -1); fallocate -l $((avail - 2097152)) /small/fill && df --output=avail -B1 /small | tail -1',
    );
    assert.equal(fill.exitCode, 0, fill.stderr);
    const p = pattern(8 * MiB);
    await assert.rejects(sbx.files.write('/small/keep.txt', p.stream, { user: 'user' }), NotEnoughSpaceError);
    assert.equal(await sbx.files.read('/small/keep.txt'), 'old content');
    await assert.rejects(
      sbx.files.write('/small/keep.txt', new Uint8Array(8 * MiB).buffer, { user: 'user' }),
      NotEnoughSpaceError,
    );
    assert.equal(await sbx.files.read('/small/keep.txt'), 'old content');
    assert.equal((await exec('ls -a /small')).stdout, '.\n..\nfill\nkeep.txt\nlost+found\n', 'no temp file is left');
    await exec('rm /small/fill');
  });

  it('watches a directory: create, write, rename and remove events, recursively too', async () => {
    await sbx.files.makeDir('/tmp/e2b/watched/sub');
    const events: FilesystemEvent[] = [];
    const h = await sbx.files.watchDir('/tmp/e2b/watched', (ev) => void events.push(ev));
    const seen = (name: string, type: FilesystemEventType) => events.some((x) => x.name === name && x.type === type);
    const show = () => JSON.stringify(events);
    await exec('echo one > /tmp/e2b/watched/a.txt');
    await until(() => seen('a.txt', FilesystemEventType.CREATE) && seen('a.txt', FilesystemEventType.WRITE), show);
    await exec('mv /tmp/e2b/watched/a.txt /tmp/e2b/watched/b.txt && chmod 600 /tmp/e2b/watched/b.txt');
    await until(
      () =>
        seen('a.txt', FilesystemEventType.RENAME) &&
        seen('b.txt', FilesystemEventType.CREATE) &&
        seen('b.txt', FilesystemEventType.CHMOD),
      show,
    );
    await exec('rm /tmp/e2b/watched/b.txt');
    await until(() => seen('b.txt', FilesystemEventType.REMOVE), show);
    await exec('echo nested > /tmp/e2b/watched/sub/n.txt');
    await new Promise((r) => setTimeout(r, 500));
    assert.ok(!events.some((x) => x.name.startsWith('sub/')), `not recursive: ${show()}`);
    await h.stop();

    const deep: FilesystemEvent[] = [];
    const r = await sbx.files.watchDir('/tmp/e2b/watched', (ev) => void deep.push(ev), {
      recursive: true,
      user: 'user',
    });
    await exec(
      'mkdir -p /tmp/e2b/watched/sub/new && echo x > /tmp/e2b/watched/sub/new/f.txt && rm /tmp/e2b/watched/sub/n.txt',
    );
    await until(
      () =>
        deep.some((x) => x.name === 'sub/new' && x.type === FilesystemEventType.CREATE) &&
        deep.some((x) => x.name === 'sub/new/f.txt') &&
        deep.some((x) => x.name === 'sub/n.txt' && x.type === FilesystemEventType.REMOVE),
      () => JSON.stringify(deep),
    );
    await r.stop();

    await assert.rejects(
      sbx.files.watchDir('/tmp/e2b/nowhere', () => {}),
      NotFoundError,
    );
    await sbx.files.write('/tmp/e2b/plain', 'x');
    await assert.rejects(
      sbx.files.watchDir('/tmp/e2b/plain', () => {}),
      InvalidArgumentError,
    );
  });

  it('ends a watch at its timeout (Connect-Timeout-Ms) and sends keepalives when asked', async () => {
    const exit: { err?: Error; done: boolean } = { done: false };
    await sbx.files.watchDir('/tmp/e2b', () => {}, {
      timeoutMs: 1500,
      onExit: (err) => {
        Object.assign(exit, { err, done: true });
      },
    });
    await until(
      () => exit.done,
      () => 'the watch to end',
    );
    assert.ok(exit.err instanceof TimeoutError, String(exit.err));

    const fs = rawFs();
    const kinds: string[] = [];
    const ctl = new AbortController();
    const stream = fs.watchDir(
      { path: '/tmp/e2b' },
      { headers: { 'Keepalive-Ping-Interval': '1' }, signal: ctl.signal, timeoutMs: 10_000 },
    );
    try {
      for await (const m of stream) {
        kinds.push(m.event.case ?? '');
        if (kinds.filter((k) => k === 'keepalive').length >= 2) break;
      }
    } finally {
      ctl.abort();
    }
    assert.equal(kinds[0], 'start');
    assert.ok(kinds.filter((k) => k === 'keepalive').length >= 2, kinds.join());
  });

  it('serves polling watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher)', async () => {
    const fs = rawFs();
    await sbx.files.makeDir('/tmp/e2b/polled', { user: 'user' });
    const { watcherId } = await fs.createWatcher({ path: '/tmp/e2b/polled', recursive: true });
    assert.match(watcherId, /^w/);
    await exec('echo 1 > /tmp/e2b/polled/one && mkdir /tmp/e2b/polled/d && touch /tmp/e2b/polled/d/two');
    const got: { name: string; type: number }[] = [];
    const end = Date.now() + 10_000;
    while (!got.some((x) => x.name === 'd/two')) {
      if (Date.now() > end) assert.fail(`no event for d/two: ${JSON.stringify(got)}`);
      const r = await fs.getWatcherEvents({ watcherId });
      got.push(...r.events.map((x) => ({ name: x.name, type: x.type })));
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(got.some((x) => x.name === 'one'));
    await fs.removeWatcher({ watcherId });
    await assert.rejects(fs.getWatcherEvents({ watcherId }), /not_found|not found/);
    await assert.rejects(fs.removeWatcher({ watcherId: 'wnope' }), /not found/);
  });

  it('signed URLs: download and upload with plain fetch and no token; a tampered signature is refused', async () => {
    await sbx.files.write('/tmp/e2b/signed.txt', 'signed content');
    const down = await sbx.downloadUrl('/tmp/e2b/signed.txt');
    assert.match(down, /signature=v1_/);
    let r = await fetch(down, { headers: { 'E2b-Sandbox-Id': id } });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-type'), 'application/octet-stream');
    assert.equal(r.headers.get('content-length'), '14', 'fetch accepts several encodings: the file comes as it is');
    assert.equal(await r.text(), 'signed content');

    // The same URL through the per-sandbox host (49983-<id>.<publicHost>), with no header at all.
    const u = new URL(down);
    const viaHost = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: e.s.port,
          path: `${u.pathname}${u.search}`,
          headers: { host: `49983-${id}.sandbox.localhost:${e.s.port}` },
        },
        (res) => {
          let body = '';
          res.on('data', (c) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.end();
    });
    assert.deepEqual(viaHost, { status: 200, body: 'signed content' });

    const tampered = down.replace(/signature=v1_./, (m) => m.slice(0, -1) + (m.endsWith('A') ? 'B' : 'A'));
    r = await fetch(tampered, { headers: { 'E2b-Sandbox-Id': id } });
    assert.equal(r.status, 404);
    await r.text();
    // A signature is for one path and one operation.
    r = await fetch(down.replace('signed.txt', 'hello.txt'), { headers: { 'E2b-Sandbox-Id': id } });
    assert.equal(r.status, 404);
    await r.text();
    r = await fetch(down, { method: 'POST', headers: { 'E2b-Sandbox-Id': id }, body: new FormData() });
    assert.equal(r.status, 404);
    await r.text();

    const up = await sbx.uploadUrl('/tmp/e2b/uploaded.txt', { user: 'user' });
    const form = new FormData();
    form.append('file', new Blob(['uploaded via url']), 'ignored-name.txt');
    r = await fetch(up, { method: 'POST', headers: { 'E2b-Sandbox-Id': id }, body: form });
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), [{ name: 'uploaded.txt', type: 'file', path: '/tmp/e2b/uploaded.txt' }]);
    assert.equal(
      (await exec("stat -c '%U' /tmp/e2b/uploaded.txt; cat /tmp/e2b/uploaded.txt")).stdout,
      'user\nuploaded via url',
    );
    // Expiring signatures: a past one is refused.
    const soon = await sbx.downloadUrl('/tmp/e2b/signed.txt', { useSignatureExpiration: 60 });
    assert.equal((await fetch(soon, { headers: { 'E2b-Sandbox-Id': id } })).status, 200);
    const past = new URL(soon);
    past.searchParams.set('signature_expiration', String(Math.floor(Date.now() / 1000) - 10));
    assert.equal((await fetch(past, { headers: { 'E2b-Sandbox-Id': id } })).status, 404);
  });

  it('a signed URL acts only as the user it was signed for: another user in Authorization is refused', async () => {
    const h = (user?: string): Record<string, string> => ({
      'E2b-Sandbox-Id': id,
      ...(user === undefined ? {} : { Authorization: `Basic ${Buffer.from(`${user}:`).toString('base64')}` }),
    });
    // One multipart body as a string: sent with the headers at once, so the refusal (which
    // closes the connection without reading a body) is read rather than cut by EPIPE.
    const form = (text: string, user?: string) => ({
      method: 'POST',
      headers: { ...h(user), 'content-type': 'multipart/form-data; boundary=zzz' },
      body: `--zzz\r\nContent-Disposition: form-data; name="file"; filename="f.txt"\r\n\r\n${text}\r\n--zzz--\r\n`,
    });
    const refused = async (r: Response, what: string) => {
      assert.equal(r.status, 403, what);
      const body = (await r.json()) as { code: number; message: string };
      assert.equal(body.code, 403, what);
      assert.match(body.message, /signed for/, what);
    };
    await exec(
      'rm -f /tmp/e2b/bound*.txt; echo root secret > /tmp/e2b/root-only.txt; chmod 600 /tmp/e2b/root-only.txt',
    );
    // An upload URL signed for `user`, sent with `Authorization: Basic root:` by whoever holds it.
    const up = await sbx.uploadUrl('/tmp/e2b/bound.txt', { user: 'user' });
    await refused(await fetch(up, form('as root', 'root')), 'upload as root');
    // Signed with no user (the template's default): any named user is another one.
    const upNoUser = await sbx.uploadUrl('/tmp/e2b/bound-default.txt');
    await refused(await fetch(upNoUser, form('x', 'root')), 'unsigned root');
    const down = await sbx.downloadUrl('/tmp/e2b/root-only.txt');
    await refused(await fetch(down, { headers: h('root') }), 'download as root');
    const downUser = await sbx.downloadUrl('/tmp/e2b/root-only.txt', { user: 'user' });
    await refused(await fetch(downUser, { headers: h('root') }), 'download signed for user, as root');
    assert.equal(
      (await exec('ls /tmp/e2b/bound.txt /tmp/e2b/bound-default.txt 2>&1 | grep -c "No such"')).stdout.trim(),
      '2',
      'nothing was written',
    );
    // The honest requests: no Authorization, or the signed user's own.
    let r = await fetch(up, form('honest'));
    assert.equal(r.status, 200, await r.clone().text());
    await r.text();
    r = await fetch(up, form('honest again', 'user'));
    assert.equal(r.status, 200);
    await r.text();
    assert.equal((await exec("stat -c '%U' /tmp/e2b/bound.txt; cat /tmp/e2b/bound.txt")).stdout, 'user\nhonest again');
    r = await fetch(downUser, { headers: h() });
    assert.equal(r.status, 403, 'user may not read the root-only file');
    await r.text();
    r = await fetch(down, { headers: h() });
    assert.equal(r.status, 200, "the image's default user (root) reads it");
    assert.equal(await r.text(), 'root secret\n');
  });

  it('answers envd errors as JSON on /files, and /health', async () => {
    const h = { 'E2b-Sandbox-Id': id, 'X-Access-Token': token };
    let r = await fetch(`${e.s.baseUrl}/health`, { headers: h });
    assert.equal(r.status, 204);
    r = await fetch(`${e.s.baseUrl}/files?path=/tmp/e2b/none`, { headers: h });
    assert.equal(r.status, 404);
    assert.equal(((await r.json()) as { code: number }).code, 404);
    r = await fetch(`${e.s.baseUrl}/files?path=/tmp/e2b/x`, {
      method: 'POST',
      headers: { ...h, 'content-type': 'text/plain' },
      body: 'x',
    });
    assert.equal(r.status, 400);
    assert.match(((await r.json()) as { message: string }).message, /content type/);
    r = await fetch(`${e.s.baseUrl}/files`, {
      method: 'POST',
      headers: { ...h, 'content-type': 'application/octet-stream' },
      body: 'x',
    });
    assert.equal(r.status, 400);
    await r.text();
    r = await fetch(`${e.s.baseUrl}/files?path=/tmp/e2b/x`, {
      method: 'POST',
      headers: { ...h, 'content-type': 'multipart/form-data; boundary=zzz' },
      body: '--zzz\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nunterminated',
    });
    assert.equal(r.status, 400);
    await r.text();
    r = await fetch(`${e.s.baseUrl}/files?path=/tmp/e2b/x`, {
      method: 'POST',
      headers: { ...h, 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
      body: 'not gzip at all',
    });
    assert.equal(r.status, 400);
    await r.text();
    assert.equal(await sbx.files.exists('/tmp/e2b/x'), false, 'nothing is left of failed uploads');
    r = await fetch(`${e.s.baseUrl}/files?path=/tmp/e2b/x`, { method: 'DELETE', headers: h });
    assert.equal(r.status, 404);
    await r.text();
  });
});
