import assert from 'node:assert/strict';
import { posix } from 'node:path';
import { describe, it } from 'node:test';
import { Code, ConnectError, createContextValues, createHandlerContext } from '@connectrpc/connect';
import { type FileEntry, type FileEvent, SandboxdError } from '@sandboxd/protocol';
import type { SandboxRecord } from '../../domain/sandbox.js';
import type { FileWatch } from '../../runtime/files.js';
import { type EnvdCall, envdCallKey } from './context.js';
import { resolveEnvdPath } from './entries.js';
import {
  type EnvdFilesystemDeps,
  fileConnectError,
  filesystemService,
  MAX_POLLED_EVENTS,
  MAX_POLLING_WATCHERS,
  MAX_STREAM_QUEUE,
  POLLING_WATCHER_IDLE_MS,
} from './filesystem.js';
import { EventType, FileType, Filesystem } from './gen/filesystem_pb.js';

const toolError = (kind: SandboxdError['kind'], code: string, path: string) =>
  new SandboxdError(kind, `${code}: ${path}`, { path, code, op: 'test' });

class FakeWatch implements FileWatch {
  closed = false;
  private onEv: ((e: FileEvent | { type: 'overflow' }) => void) | null = null;
  private onEnds: (() => void)[] = [];
  constructor(readonly path: string) {}
  onEvent(l: (e: FileEvent | { type: 'overflow' }) => void) {
    this.onEv = l;
  }
  onEnd(l: () => void) {
    this.onEnds.push(l);
  }
  close() {
    if (this.closed) return;
    this.closed = true;
    this.end();
  }
  emit(e: FileEvent | { type: 'overflow' }) {
    this.onEv?.(e);
  }
  end() {
    for (const l of this.onEnds.splice(0)) l();
  }
}

/** An in-memory sandbox file system failing like the agent's file tool. */
class FakeFiles {
  readonly entries = new Map<string, FileEntry>();
  readonly users: (string | undefined)[] = [];
  readonly watches: FakeWatch[] = [];
  fail: SandboxdError | null = null;
  truncated = false;
  lastDepth = 0;

  add(path: string, type: FileEntry['type'] = 'file') {
    this.entries.set(path, {
      name: posix.basename(path),
      path,
      type,
      size: 1,
      mode: type === 'dir' ? 0o755 : 0o644,
      owner: 'user',
      group: 'user',
      modifiedAt: '2026-11-24T10:00:00.000Z',
    });
  }
  private check(user: string | undefined) {
    this.users.push(user);
    if (this.fail) throw this.fail;
  }
  private get(path: string): FileEntry {
    const e = this.entries.get(path);
    if (!e) throw toolError('not_found', 'ENOENT', path);
    return e;
  }
  async stat(_a: string, _s: string, path: string, user?: string) {
    this.check(user);
    return this.get(path);
  }
  async list(_a: string, _s: string, path: string, o: { depth: number; user?: string }) {
    this.check(o.user);
    this.get(path);
    this.lastDepth = o.depth;
    const entries = [...this.entries.values()].filter((e) => {
      const rel = posix.relative(path, e.path);
      return rel !== '' && !rel.startsWith('..') && rel.split('/').length <= o.depth;
    });
    return { entries, truncated: this.truncated };
  }
  async mkdir(_a: string, _s: string, path: string, user?: string) {
    this.check(user);
    if (this.entries.has(path)) throw toolError('conflict', 'EEXIST', path);
    this.add(path, 'dir');
    return this.get(path);
  }
  async move(_a: string, _s: string, from: string, to: string, user?: string) {
    this.check(user);
    const e = this.get(from);
    if (this.entries.has(to)) throw toolError('conflict', 'EEXIST', to);
    if (!this.entries.has(posix.dirname(to))) throw toolError('not_found', 'ENOENT', to);
    this.entries.delete(from);
    this.entries.set(to, { ...e, path: to, name: posix.basename(to) });
    return this.get(to);
  }
  async remove(_a: string, _s: string, path: string, user?: string) {
    this.check(user);
    this.get(path);
    for (const p of [...this.entries.keys()]) if (p === path || p.startsWith(`${path}/`)) this.entries.delete(p);
  }
  async watch(_a: string, _s: string, path: string, o: { recursive: boolean; user?: string }) {
    this.check(o.user);
    const w = new FakeWatch(path);
    this.watches.push(w);
    return w;
  }
}

function setup(o: { user?: string; defaultUser?: string } = {}) {
  const files = new FakeFiles();
  for (const p of ['/', '/home', '/home/user', '/tmp']) files.add(p, 'dir');
  let now = 1_000_000;
  const svc = filesystemService({
    files: files satisfies EnvdFilesystemDeps['files'],
    paths: { resolve: async (_c, p) => resolveEnvdPath(p, '/home/user') },
    now: () => now,
  });
  const call = (sandboxId = 'sbx_a', user = o.user): EnvdCall => ({
    accountId: 'acc',
    sandbox: { id: sandboxId } as SandboxRecord,
    user,
    defaultUser: o.defaultUser,
  });
  const ctx = (c: { sandboxId?: string; headers?: Record<string, string>; timeoutMs?: number } = {}) =>
    createHandlerContext({
      service: Filesystem,
      method: Filesystem.method.stat,
      protocolName: 'connect',
      requestMethod: 'POST',
      url: 'http://envd/filesystem.Filesystem/Stat',
      requestHeader: c.headers,
      timeoutMs: c.timeoutMs,
      contextValues: createContextValues().set(envdCallKey, call(c.sandboxId)),
    });
  return { files, svc, ctx, advance: (ms: number) => (now += ms) };
}

const rejectsWith = (p: Promise<unknown>, code: Code) =>
  assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof ConnectError, String(e));
    assert.equal(Code[e.code], Code[code], e.message);
    return true;
  });

/** Drains a stream of the service into [case, value] pairs, up to `max`. */
async function take(it: AsyncIterable<{ event?: { case?: string; value?: unknown } }>, max: number) {
  const out: [string | undefined, unknown][] = [];
  for await (const m of it) {
    out.push([m.event?.case, m.event?.value]);
    if (out.length >= max) break;
  }
  return out;
}

describe('envd filesystem service', () => {
  it('stats as the call user (else the default), resolving relative paths in its home', async () => {
    const { files, svc, ctx } = setup({ defaultUser: 'user' });
    files.add('/home/user/a.txt');
    const r = await svc.stat({ path: 'a.txt' } as never, ctx());
    assert.equal((r as { entry: { path: string } }).entry.path, '/home/user/a.txt');
    assert.deepEqual(files.users, ['user']);
    const asRoot = setup({ user: 'root', defaultUser: 'user' });
    asRoot.files.add('/tmp/x');
    await asRoot.svc.stat({ path: '/tmp/x' } as never, asRoot.ctx());
    assert.deepEqual(asRoot.files.users, ['root']);
    await rejectsWith(Promise.resolve(svc.stat({ path: '/nope' } as never, ctx())), Code.NotFound);
  });

  it('lists depth levels (0 means 1) and refuses a truncated listing', async () => {
    const { files, svc, ctx } = setup();
    files.add('/tmp/d', 'dir');
    files.add('/tmp/d/f');
    files.add('/tmp/e');
    const one = (await svc.listDir({ path: '/tmp', depth: 0 } as never, ctx())) as { entries: { path: string }[] };
    assert.deepEqual(one.entries.map((e) => e.path).sort(), ['/tmp/d', '/tmp/e']);
    const two = (await svc.listDir({ path: '/tmp', depth: 2 } as never, ctx())) as { entries: { path: string }[] };
    assert.deepEqual(two.entries.map((e) => e.path).sort(), ['/tmp/d', '/tmp/d/f', '/tmp/e']);
    const deep = (await svc.listDir({ path: '/tmp', depth: 2 ** 32 - 1 } as never, ctx())) as { entries: unknown[] };
    assert.equal(deep.entries.length, 3);
    assert.equal(files.lastDepth, 256, 'a huge depth is the deepest the tool walks');
    files.truncated = true;
    await rejectsWith(Promise.resolve(svc.listDir({ path: '/tmp', depth: 1 } as never, ctx())), Code.OutOfRange);
  });

  it('makeDir: already_exists for a directory, invalid_argument for a file', async () => {
    const { files, svc, ctx } = setup();
    const made = (await svc.makeDir({ path: '/tmp/new' } as never, ctx())) as { entry: { type: FileType } };
    assert.equal(made.entry.type, FileType.DIRECTORY);
    await rejectsWith(Promise.resolve(svc.makeDir({ path: '/tmp/new' } as never, ctx())), Code.AlreadyExists);
    files.add('/tmp/file');
    await rejectsWith(Promise.resolve(svc.makeDir({ path: '/tmp/file' } as never, ctx())), Code.InvalidArgument);
  });

  it('move is a rename: a file at the destination is replaced, missing parents made', async () => {
    const { files, svc, ctx } = setup();
    files.add('/tmp/a');
    files.add('/tmp/b');
    await svc.move({ source: '/tmp/a', destination: '/tmp/b' } as never, ctx());
    assert.deepEqual([files.entries.has('/tmp/a'), files.entries.has('/tmp/b')], [false, true]);
    await svc.move({ source: '/tmp/b', destination: '/tmp/deep/c' } as never, ctx());
    assert.deepEqual([files.entries.get('/tmp/deep')?.type, files.entries.has('/tmp/deep/c')], ['dir', true]);
    files.add('/tmp/dir', 'dir');
    files.add('/tmp/x');
    await rejectsWith(
      Promise.resolve(svc.move({ source: '/tmp/x', destination: '/tmp/dir' } as never, ctx())),
      Code.AlreadyExists,
    );
    files.add('/tmp/keep');
    await rejectsWith(
      Promise.resolve(svc.move({ source: '/tmp/missing', destination: '/tmp/keep' } as never, ctx())),
      Code.NotFound,
    );
    assert.ok(files.entries.has('/tmp/keep'), 'a missing source never costs the destination');
  });

  it('remove: nothing there is no error; other errors are envd codes', async () => {
    const { files, svc, ctx } = setup();
    await svc.remove({ path: '/tmp/none' } as never, ctx());
    files.fail = toolError('permission', 'EACCES', '/root/x');
    await rejectsWith(Promise.resolve(svc.remove({ path: '/root/x' } as never, ctx())), Code.PermissionDenied);
  });

  it('maps sandboxd errors: unknown user, sandbox gone, exists, the rest by kind', () => {
    const code = (e: unknown) => Code[(fileConnectError(e, 'ghost') as ConnectError).code];
    const unknown = new SandboxdError('validation', 'Unknown user in the sandbox: ghost', { unknownUser: true });
    assert.equal(code(unknown), 'Unauthenticated');
    assert.match((fileConnectError(unknown, 'ghost') as ConnectError).message, /invalid username: 'ghost'/);
    assert.equal(code(new SandboxdError('conflict', 'Sandbox is not running', { state: 'lost' })), 'Unavailable');
    assert.equal(code(toolError('conflict', 'EEXIST', '/x')), 'AlreadyExists');
    assert.equal(code(toolError('no_space', 'ENOSPC', '/x')), 'ResourceExhausted');
    assert.equal(code(new SandboxdError('validation', 'path: must be absolute')), 'InvalidArgument');
    const plain = new Error('boom');
    assert.equal(fileConnectError(plain, undefined), plain);
  });

  it('WatchDir: start first, events named relative to the directory, ends with the watch', async () => {
    const { files, svc, ctx } = setup();
    files.add('/tmp/w', 'dir');
    files.add('/tmp/file');
    const stream = svc.watchDir({ path: '/tmp/w/', recursive: true, includeEntry: false } as never, ctx());
    const it = stream[Symbol.asyncIterator]();
    assert.equal((await it.next()).value?.event.case, 'start');
    const w = files.watches[0];
    assert.equal(w.path, '/tmp/w');
    w.emit({ type: 'create', path: '/tmp/w/a' });
    w.emit({ type: 'overflow' });
    w.emit({ type: 'write', path: '/tmp/w/sub/b' });
    const a = (await it.next()).value;
    assert.deepEqual([a?.event.case, a?.event.value], ['filesystem', { name: 'a', type: EventType.CREATE }]);
    assert.deepEqual((await it.next()).value?.event.value, { name: 'sub/b', type: EventType.WRITE });
    w.end();
    assert.equal((await it.next()).done, true);
    // Not a directory, not there.
    await rejectsWith(take(svc.watchDir({ path: '/tmp/file' } as never, ctx()), 1), Code.InvalidArgument);
    await rejectsWith(take(svc.watchDir({ path: '/tmp/none' } as never, ctx()), 1), Code.NotFound);
  });

  it('WatchDir: the deadline ends it with deadline_exceeded, the watch closed', async () => {
    const { files, svc, ctx } = setup();
    await rejectsWith(take(svc.watchDir({ path: '/tmp' } as never, ctx({ timeoutMs: 50 })), 10), Code.DeadlineExceeded);
    assert.equal(files.watches[0].closed, true);
  });

  it('WatchDir: keepalives after Keepalive-Ping-Interval seconds of silence', async () => {
    const { svc, ctx } = setup();
    const t0 = Date.now();
    const got = await take(
      svc.watchDir({ path: '/tmp' } as never, ctx({ headers: { 'keepalive-ping-interval': '1' } })),
      2,
    );
    assert.deepEqual(
      got.map(([c]) => c),
      ['start', 'keepalive'],
    );
    assert.ok(Date.now() - t0 >= 900);
  });

  it('WatchDir: a client too far behind gets resource_exhausted', async () => {
    const { files, svc, ctx } = setup();
    const it = svc.watchDir({ path: '/tmp' } as never, ctx())[Symbol.asyncIterator]();
    await it.next();
    for (let i = 0; i <= MAX_STREAM_QUEUE; i++) files.watches[0].emit({ type: 'write', path: `/tmp/f${i}` });
    assert.equal(files.watches[0].closed, true);
    let n = 0;
    await rejectsWith(
      (async () => {
        for (let r = await it.next(); !r.done; r = await it.next()) n++;
      })(),
      Code.ResourceExhausted,
    );
    assert.equal(n, MAX_STREAM_QUEUE, 'what was queued is delivered first');
  });

  it('polling watchers: events kept between polls, seen from their own sandbox only, removed', async () => {
    const { files, svc, ctx } = setup();
    files.add('/tmp/w', 'dir');
    const { watcherId } = (await svc.createWatcher({ path: '/tmp/w', recursive: false } as never, ctx())) as {
      watcherId: string;
    };
    const w = files.watches[0];
    w.emit({ type: 'create', path: '/tmp/w/a' });
    w.emit({ type: 'remove', path: '/tmp/w/a' });
    const got = (await svc.getWatcherEvents({ watcherId } as never, ctx())) as { events: unknown[] };
    assert.deepEqual(got.events, [
      { name: 'a', type: EventType.CREATE },
      { name: 'a', type: EventType.REMOVE },
    ]);
    assert.deepEqual(((await svc.getWatcherEvents({ watcherId } as never, ctx())) as { events: unknown[] }).events, []);
    await rejectsWith(
      Promise.resolve(svc.getWatcherEvents({ watcherId } as never, ctx({ sandboxId: 'sbx_b' }))),
      Code.NotFound,
    );
    await rejectsWith(
      Promise.resolve(svc.removeWatcher({ watcherId } as never, ctx({ sandboxId: 'sbx_b' }))),
      Code.NotFound,
    );
    await svc.removeWatcher({ watcherId } as never, ctx());
    assert.equal(w.closed, true);
    await rejectsWith(Promise.resolve(svc.getWatcherEvents({ watcherId } as never, ctx())), Code.NotFound);
  });

  it('polling watchers: bounded in number and in events; an ended one gives its events then not_found', async () => {
    const { files, svc, ctx, advance } = setup();
    const ids: string[] = [];
    for (let i = 0; i < MAX_POLLING_WATCHERS; i++)
      ids.push(((await svc.createWatcher({ path: '/tmp' } as never, ctx())) as { watcherId: string }).watcherId);
    await rejectsWith(Promise.resolve(svc.createWatcher({ path: '/tmp' } as never, ctx())), Code.ResourceExhausted);
    // Another sandbox has its own count.
    await svc.createWatcher({ path: '/tmp' } as never, ctx({ sandboxId: 'sbx_b' }));

    for (let i = 0; i <= MAX_POLLED_EVENTS; i++) files.watches[0].emit({ type: 'write', path: `/tmp/f${i}` });
    await rejectsWith(
      Promise.resolve(svc.getWatcherEvents({ watcherId: ids[0] } as never, ctx())),
      Code.ResourceExhausted,
    );
    assert.equal(files.watches[0].closed, true);

    files.watches[1].emit({ type: 'create', path: '/tmp/last' });
    files.watches[1].end();
    const last = (await svc.getWatcherEvents({ watcherId: ids[1] } as never, ctx())) as { events: unknown[] };
    assert.equal(last.events.length, 1);
    await rejectsWith(Promise.resolve(svc.getWatcherEvents({ watcherId: ids[1] } as never, ctx())), Code.NotFound);

    // Watchers nobody polls go: then there is room again.
    advance(POLLING_WATCHER_IDLE_MS + 1);
    await svc.createWatcher({ path: '/tmp' } as never, ctx());
    assert.ok(files.watches.slice(2, MAX_POLLING_WATCHERS).every((w) => w.closed));
    await rejectsWith(Promise.resolve(svc.getWatcherEvents({ watcherId: ids[2] } as never, ctx())), Code.NotFound);
  });
});
