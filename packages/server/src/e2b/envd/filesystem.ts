import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import { type FileEntry, SandboxdError } from '@sandboxd/protocol';
import type { FileWatch } from '../../runtime/files.js';
import type { FileService } from '../../services/files.js';
import { type EnvdCall, envdCall, toConnectError, userOf } from './context.js';
import { normalizePath, toEntryInfo, toFilesystemEvent } from './entries.js';
import type { Filesystem, FilesystemEventSchema, WatchDirResponseSchema } from './gen/filesystem_pb.js';
import { EventQueue } from './event-queue.js';
import type { EnvdPaths } from './paths.js';

/** Entries one ListDir answers at most (a deeper or bigger tree: list fewer levels). */
export const MAX_LIST_ENTRIES = 10_000;
/** Deepest listing asked of the file tool (it walks no deeper than 256 levels itself). */
const MAX_LIST_DEPTH = 256;
/** Events a WatchDir stream holds for a client that reads slower than they come. */
export const MAX_STREAM_QUEUE = 10_000;
/** Polling watchers (CreateWatcher) one sandbox may hold. */
export const MAX_POLLING_WATCHERS = 8;
/** Events a polling watcher keeps between two polls; past it the watcher fails. */
export const MAX_POLLED_EVENTS = 10_000;
/** A polling watcher nobody asked for its events this long is removed. */
export const POLLING_WATCHER_IDLE_MS = 10 * 60_000;
/** The longest keepalive interval honoured (`Keepalive-Ping-Interval`, seconds). */
const MAX_KEEPALIVE_S = 3600;

type FilesystemEventInit = MessageInitShape<typeof FilesystemEventSchema>;
type WatchDirResponseInit = MessageInitShape<typeof WatchDirResponseSchema>;

export interface EnvdFilesystemDeps {
  files: Pick<FileService, 'stat' | 'list' | 'mkdir' | 'move' | 'remove' | 'watch'>;
  paths: Pick<EnvdPaths, 'resolve'>;
  now?: () => number;
}

/**
 * A sandboxd error as the Connect error envd gives for a file call: an unknown user is
 * `unauthenticated` (envd's "invalid username"), an existing path `already_exists`, a sandbox
 * that went meanwhile `unavailable` (the SDK's "sandbox was killed"); the rest by kind.
 */
export function fileConnectError(e: unknown, user: string | undefined): unknown {
  if (e instanceof SandboxdError) {
    const d = (typeof e.details === 'object' && e.details !== null ? e.details : {}) as Record<string, unknown>;
    if (e.kind === 'validation' && d.unknownUser === true)
      return new ConnectError(`invalid username: '${user ?? ''}'`, Code.Unauthenticated);
    if (e.kind === 'conflict' && (d.code === 'EEXIST' || d.code === 'ENOTEMPTY'))
      return new ConnectError(e.message, Code.AlreadyExists);
    if (e.kind === 'conflict' && 'state' in d) return new ConnectError(e.message, Code.Unavailable);
  }
  return toConnectError(e);
}

const detailsOf = (e: SandboxdError) =>
  (typeof e.details === 'object' && e.details !== null ? e.details : {}) as Record<string, unknown>;
const isKind = (e: unknown, kind: SandboxdError['kind']): e is SandboxdError =>
  e instanceof SandboxdError && e.kind === kind;

/**
 * envd's `filesystem.Filesystem` over sandboxd's file service: every call runs inside the
 * sandbox as the call's user (`Authorization: Basic`, else the template's default user),
 * paths resolved like envd's (relative ones and `~` against that user's home).
 */
export function filesystemService(d: EnvdFilesystemDeps): ServiceImpl<typeof Filesystem> {
  const now = d.now ?? Date.now;
  const watchers = new PollingWatchers(now);

  /** Runs `fn` with the call, its user and a path resolver; errors become envd's. */
  const run = async <T>(
    ctx: HandlerContext,
    fn: (c: { call: EnvdCall; user: string | undefined; path: (p: string) => Promise<string> }) => Promise<T>,
  ): Promise<T> => {
    const call = envdCall(ctx);
    const user = userOf(call);
    try {
      return await fn({ call, user, path: (p) => d.paths.resolve(call, p, user) });
    } catch (e) {
      throw fileConnectError(e, user);
    }
  };

  /** A started watch of a directory (envd watches directories only). */
  const startWatch = async (
    call: EnvdCall,
    user: string | undefined,
    path: string,
    recursive: boolean,
  ): Promise<{ root: string; watch: FileWatch }> => {
    const root = normalizePath(path);
    const e = await d.files.stat(call.accountId, call.sandbox.id, root, user);
    if (e.type !== 'dir') throw new ConnectError(`path ${root} is not a directory`, Code.InvalidArgument);
    return { root, watch: await d.files.watch(call.accountId, call.sandbox.id, root, { recursive, user }) };
  };

  return {
    stat: (req, ctx) =>
      run(ctx, async ({ call, user, path }) => ({
        entry: toEntryInfo(await d.files.stat(call.accountId, call.sandbox.id, await path(req.path), user)),
      })),

    listDir: (req, ctx) =>
      run(ctx, async ({ call, user, path }) => {
        const dir = await path(req.path);
        // 0 is envd's default (1); the file tool walks at most MAX_LIST_DEPTH levels anyway.
        const depth = Math.min(req.depth === 0 ? 1 : req.depth, MAX_LIST_DEPTH);
        const r = await d.files.list(call.accountId, call.sandbox.id, dir, { depth, user });
        if (r.truncated)
          throw new ConnectError(
            `${dir} holds more than ${MAX_LIST_ENTRIES} entries ${depth} levels deep: list fewer levels`,
            Code.OutOfRange,
          );
        return { entries: r.entries.map(toEntryInfo) };
      }),

    makeDir: (req, ctx) =>
      run(ctx, async ({ call, user, path }) => {
        const dir = await path(req.path);
        try {
          // As envd (root): missing directories, this one too, are made and handed to the user.
          const made = await d.files.mkdir(call.accountId, call.sandbox.id, dir, user, { parentsAsRoot: true });
          return { entry: toEntryInfo(made) };
        } catch (e) {
          if (!isKind(e, 'conflict') || detailsOf(e).code !== 'EEXIST') throw e;
          const have = await d.files.stat(call.accountId, call.sandbox.id, dir, user).catch(() => null);
          if (have && have.type !== 'dir')
            throw new ConnectError(`path already exists but it is not a directory: ${dir}`, Code.InvalidArgument);
          throw new ConnectError(`directory already exists: ${dir}`, Code.AlreadyExists);
        }
      }),

    move: (req, ctx) =>
      run(ctx, async ({ call, user, path }) => {
        const from = await path(req.source);
        const to = await path(req.destination);
        return { entry: toEntryInfo(await moveLikeRename(d.files, call, from, to, user)) };
      }),

    remove: (req, ctx) =>
      run(ctx, async ({ call, user, path }) => {
        try {
          await d.files.remove(call.accountId, call.sandbox.id, await path(req.path), user);
        } catch (e) {
          // envd removes like `rm -rf`: nothing there is no error.
          if (!isKind(e, 'not_found') || !('path' in detailsOf(e))) throw e;
        }
        return {};
      }),

    async *watchDir(req, ctx) {
      const { root, watch } = await run(ctx, ({ call, user, path }) =>
        path(req.path).then((p) => startWatch(call, user, p, req.recursive)),
      );
      yield* watchStream(watch, root, req.includeEntry, ctx);
    },

    createWatcher: (req, ctx) =>
      run(ctx, async ({ call, user, path }) => {
        watchers.sweep();
        if (watchers.countOf(call.sandbox.id) >= MAX_POLLING_WATCHERS)
          throw new ConnectError(
            `The sandbox already has ${MAX_POLLING_WATCHERS} watchers: remove one first`,
            Code.ResourceExhausted,
          );
        const { root, watch } = await startWatch(call, user, await path(req.path), req.recursive);
        return { watcherId: watchers.add(call.sandbox.id, root, watch, req.includeEntry) };
      }),

    getWatcherEvents: (req, ctx) =>
      run(ctx, async ({ call }) => ({ events: watchers.take(call.sandbox.id, req.watcherId) })),

    removeWatcher: (req, ctx) =>
      run(ctx, async ({ call }) => {
        watchers.remove(call.sandbox.id, req.watcherId);
        return {};
      }),
  };
}

/**
 * A move with envd's semantics (a rename): missing parents of `to` are created, and a file
 * or link at `to` is replaced. sandboxd's own move refuses both, so they are done here: the
 * parent made, or what is at `to` removed, then the move tried once more.
 */
async function moveLikeRename(
  files: EnvdFilesystemDeps['files'],
  call: EnvdCall,
  from: string,
  to: string,
  user: string | undefined,
): Promise<FileEntry> {
  const { accountId, sandbox } = call;
  const move = () => files.move(accountId, sandbox.id, from, to, user);
  const isTo = (e: SandboxdError) => normalizePath(String(detailsOf(e).path)) === normalizePath(to);
  try {
    return await move();
  } catch (e) {
    if (isKind(e, 'conflict') && detailsOf(e).code === 'EEXIST' && isTo(e)) {
      const there = await files.stat(accountId, sandbox.id, to, user);
      // rename(2) replaces a file, never a directory with something in it.
      if (there.type === 'dir') throw e;
      await files.stat(accountId, sandbox.id, from, user); // the source must be there before `to` goes
      await files.remove(accountId, sandbox.id, to, user);
      return await move();
    }
    if (isKind(e, 'not_found') && isTo(e)) {
      const parent = posix.dirname(normalizePath(to));
      await files.mkdir(accountId, sandbox.id, parent, user, { parentsAsRoot: true }).catch((m) => {
        if (!isKind(m, 'conflict')) throw m;
      });
      return await move();
    }
    throw e;
  }
}

/**
 * The messages of a WatchDir stream: events as they come, a keepalive after every
 * `Keepalive-Ping-Interval` seconds without one, until the client goes, the call's deadline
 * (`Connect-Timeout-Ms`: `deadline_exceeded`), or the watch ends (its directory went). A
 * client more than {@link MAX_STREAM_QUEUE} events behind gets `resource_exhausted`.
 */
async function* watchStream(
  watch: FileWatch,
  root: string,
  includeEntry: boolean,
  ctx: HandlerContext,
): AsyncGenerator<WatchDirResponseInit> {
  // Each queued event counts 1 towards the bound.
  const queue = new EventQueue<WatchDirResponseInit>();
  watch.onEvent((ev) => {
    const fe = toFilesystemEvent(root, ev, includeEntry);
    if (!fe) return;
    if (queue.buffered >= MAX_STREAM_QUEUE) {
      queue.fail(
        new ConnectError(
          `The client fell more than ${MAX_STREAM_QUEUE} events behind the watch of ${root}`,
          Code.ResourceExhausted,
        ),
      );
      watch.close();
    } else queue.push({ event: { case: 'filesystem', value: fe } }, 1);
  });
  watch.onEnd(() => queue.end());
  const interval = Number(ctx.requestHeader.get('keepalive-ping-interval'));
  const keepalive =
    Number.isInteger(interval) && interval > 0
      ? { intervalMs: Math.min(interval, MAX_KEEPALIVE_S) * 1000, event: () => KEEPALIVE }
      : undefined;
  try {
    yield { event: { case: 'start', value: {} } };
    yield* queue.events(ctx.signal, keepalive);
  } catch (e) {
    // The client went (not the call's deadline): nobody to tell.
    if (ctx.signal.aborted && !(ctx.signal.reason instanceof ConnectError)) return;
    throw e;
  } finally {
    watch.close();
  }
}

const KEEPALIVE: WatchDirResponseInit = { event: { case: 'keepalive', value: {} } };

interface PollingWatcher {
  sandboxId: string;
  root: string;
  watch: FileWatch;
  events: FilesystemEventInit[];
  error: ConnectError | null;
  ended: boolean;
  lastPoll: number;
}

/**
 * envd's polling watchers (CreateWatcher / GetWatcherEvents / RemoveWatcher, what E2B's
 * synchronous Python SDK watches with): a watch whose events are kept until the next poll.
 * Bounded: {@link MAX_POLLING_WATCHERS} per sandbox, {@link MAX_POLLED_EVENTS} kept (then
 * the watcher fails with `resource_exhausted`), and one not polled for
 * {@link POLLING_WATCHER_IDLE_MS} is removed. A watcher is seen from its own sandbox only.
 */
class PollingWatchers {
  private readonly all = new Map<string, PollingWatcher>();
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly now: () => number) {}

  countOf(sandboxId: string): number {
    let n = 0;
    for (const w of this.all.values()) if (w.sandboxId === sandboxId) n++;
    return n;
  }

  add(sandboxId: string, root: string, watch: FileWatch, includeEntry: boolean): string {
    const id = `w${randomBytes(12).toString('base64url')}`;
    const w: PollingWatcher = { sandboxId, root, watch, events: [], error: null, ended: false, lastPoll: this.now() };
    watch.onEvent((ev) => {
      const fe = toFilesystemEvent(root, ev, includeEntry);
      if (!fe || w.error) return;
      if (w.events.length >= MAX_POLLED_EVENTS) {
        w.error = new ConnectError(
          `More than ${MAX_POLLED_EVENTS} events came between two polls of watcher ${id}: poll more often`,
          Code.ResourceExhausted,
        );
        w.events = [];
        watch.close();
      } else w.events.push(fe);
    });
    watch.onEnd(() => {
      w.ended = true;
    });
    this.all.set(id, w);
    this.timer ??= setInterval(() => this.sweep(), 60_000).unref();
    return id;
  }

  /** The events since the last poll; an ended watcher gives what it kept, then `not_found`. */
  take(sandboxId: string, id: string): FilesystemEventInit[] {
    const w = this.get(sandboxId, id);
    w.lastPoll = this.now();
    if (w.error) throw w.error;
    const events = w.events;
    w.events = [];
    if (w.ended && events.length === 0) {
      this.drop(id, w);
      throw new ConnectError(`watcher ${id} ended: its directory is gone or the sandbox stopped`, Code.NotFound);
    }
    return events;
  }

  remove(sandboxId: string, id: string): void {
    this.drop(id, this.get(sandboxId, id));
  }

  /** Removes watchers not polled for {@link POLLING_WATCHER_IDLE_MS}. */
  sweep(): void {
    const now = this.now();
    for (const [id, w] of this.all) if (now - w.lastPoll > POLLING_WATCHER_IDLE_MS) this.drop(id, w);
  }

  private get(sandboxId: string, id: string): PollingWatcher {
    const w = this.all.get(id);
    if (!w || w.sandboxId !== sandboxId) throw new ConnectError(`watcher with id ${id} not found`, Code.NotFound);
    return w;
  }

  private drop(id: string, w: PollingWatcher): void {
    w.watch.close();
    this.all.delete(id);
    if (this.all.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }
}
