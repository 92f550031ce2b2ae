import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  type BuildFailure,
  type BuildLogEvent,
  DEFAULT_TEMPLATE_TAG,
  type Egress,
  FINAL_BUILD_STATES,
  MAX_EGRESS_RULES,
  SandboxdError,
  TEMPLATE_NAME_PATTERN,
  TEMPLATE_TAG_PATTERN,
} from '@sandboxd/protocol';
import { BuildContext } from '../builds/context.js';
import { dockerfileBaseImages, parseDockerfile } from '../builds/dockerfile.js';
import type { BuildPlan, ImageConfig } from '../builds/plan.js';
import type { BuildOptions, BuildsApi } from '../builds/types.js';
import { buildLimits } from '../config-plans.js';
import { checkEgress, decideEgress } from '../domain/egress.js';
import { randomBase32 } from '../domain/ids.js';
import type { AccountRecord, BuildRecord, StoredBuild, TemplateRecord, UploadRecord } from '../store/store.js';
import { BuildCache } from './builds-cache.js';
import { BUILD_LOG_CAP, BuildLogNotifier, BuildLogWriter } from './builds-log.js';
import { BuildAborted, BuildRun, type CopyContext } from './builds-run.js';
import { planOf, type ServiceDeps } from './context.js';
import type { SandboxService } from './sandboxes.js';
import type { StorageGuard } from './storage.js';

/** Build id: `bld_` + 20 base32. */
export const newBuildId = (): string => `bld_${randomBase32(20)}`;

/** Entries a build context may hold. */
export const MAX_CONTEXT_ENTRIES = 100_000;
/** Builds of an account queued or running at once, over every server; more are refused (`quota`). */
export const MAX_PENDING_BUILDS = 16;
/** E2B uploads of an account received at once, in this process; more are refused (`quota`) before their body is read. */
export const MAX_UPLOADS_IN_FLIGHT = 4;
/** A file of the uploads directory that no row names (a temp file of a crashed upload, say) is removed once this old. */
const ORPHAN_UPLOAD_MS = 3_600_000;
/** An E2B reservation (`reserve`) not given its plan within this long ends `error`. */
export const RESERVATION_TTL_MS = 3_600_000;
/** The lease naming the server that runs a build; its time only bounds a holder that never lets go (the holder's presence says whether it runs). */
const buildLease = (id: string) => `build:${id}`;
const BUILD_LEASE_MS = 24 * 3_600_000;
/** How often a running build checks that nobody ended it elsewhere (a cancel on another server). */
const WATCH_MS = 1000;
/** How often the cache is collected, reservations expire and builds of servers that are gone are ended. */
const TICK_MS = 30_000;
/** How long a cancel or a shutdown waits for a running build to wind down (its sandboxes deleted). */
const WIND_DOWN_MS = 60_000;
/** Log lines read per store query. */
const LOG_PAGE = 1000;
/** How often a follower polls the store for a build running on another server. */
const FOLLOW_POLL_MS = 250;
const MAX_DOCKERFILE_READ = 1024 * 1024;
const HASH_RE = /^[a-f0-9]{64}$/;
const NAME_RE = new RegExp(TEMPLATE_NAME_PATTERN);
const TAG_RE = new RegExp(TEMPLATE_TAG_PATTERN);

/** A context the service spooled (a build's, an upload's), removed once closed. */
type OpenContext = CopyContext & { close(): Promise<void> };

interface Job {
  id: string;
  account: AccountRecord;
  build: StoredBuild;
  plan: BuildPlan;
  context: OpenContext | null;
  egress: Egress;
  noCache: boolean;
  abort: AbortController;
  running: boolean;
  /** Settles once the job is over (its sandboxes deleted, its row final). */
  done: Promise<void>;
  finish: () => void;
  /** The last progress written, and the write in flight. */
  progress: { done: number; cached: number; chain: Promise<unknown> };
}

/** A build record without what only the service reads (plan, holder, options). */
export function recordOf(b: StoredBuild): BuildRecord {
  const { plan: _p, allowDomains: _a, noCache: _n, holder: _h, ...r } = b;
  return r;
}

/** The wire form of a failure `e` of a build (a SandboxdError's kind, message and step details). */
export function failureOf(e: unknown): BuildFailure {
  if (e instanceof SandboxdError) {
    const details =
      e.details && typeof e.details === 'object' && !Array.isArray(e.details)
        ? (e.details as Record<string, unknown>)
        : undefined;
    return { code: e.status, kind: e.kind, message: e.message, ...(details ? { details } : {}) };
  }
  return { code: 500, kind: 'internal', message: 'The build failed in the runtime' };
}

/**
 * Image builds and templates (BuildsApi, builds/types.ts): every door's builds run here, in
 * the background of the server that accepted them, at most `SANDBOXD_BUILDS_MAX` at once and
 * the plan's `maxBuilds` per account (more wait `queued`). Each step runs in a sandbox of
 * the account (services/builds-run.ts); results are cached (services/builds-cache.ts); a
 * ready build's image is `templates/<name>:<tag>` of the account (a row naming a layer).
 *
 * A build runs on the server that accepted it (its context is spooled on that server's
 * disk): the row names that server (`holder`, its presence) and the lease `build:<id>`. A
 * build whose server is gone (a crash, a kill -9) ends `error` at the next start-up or,
 * with a shared database, once another server sees that its holder's presence ran out; its
 * step sandboxes are deleted. A server that shuts down ends its builds `error` itself.
 */
export class BuildService implements BuildsApi {
  private readonly jobs = new Map<string, Job>();
  /** Contexts being received (spooled, not yet a build record) per account, in this process: pending too. */
  private readonly receiving = new Map<string, number>();
  /** E2B uploads being received per account, in this process. */
  private readonly uploading = new Map<string, number>();
  /** Per account: the last of the changes to its uploads (room made, rows written, collection), one at a time. */
  private readonly uploadChain = new Map<string, Promise<unknown>>();
  private readonly notifier = new BuildLogNotifier();
  private readonly cache: BuildCache;
  private closing = false;
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;

  constructor(
    private readonly d: ServiceDeps & {
      sandboxes: Pick<SandboxService, 'create' | 'delete' | 'driverImage'>;
      /** Step sandboxes of builds that are over (recovery): listed and deleted through it. */
      sandboxList: Pick<SandboxService, 'list'>;
      storage: Pick<StorageGuard, 'check'>;
    },
  ) {
    this.cache = new BuildCache({ store: d.store, driver: d.driver, clock: d.clock, log: d.log });
  }

  // --- starting builds

  async createFromDockerfile(
    account: AccountRecord,
    o: BuildOptions & { dockerfile?: string; dockerfileText?: string; buildArgs?: Record<string, string> },
    context: Readable,
  ): Promise<BuildRecord> {
    this.assertOpen();
    const opts = this.checkOptions(o);
    const egress = this.egressOf(account, opts.allowDomains);
    await this.d.storage.check();
    await this.pendingRoom(account);
    const buildArgs = o.buildArgs ?? {};
    // An inline Dockerfile is checked before its context is read: its errors name the line at once.
    if (o.dockerfileText !== undefined) parseDockerfile(o.dockerfileText, { buildArgs });
    const limits = buildLimits(planOf(this.d.config, account.plan));
    const spoolDir = await this.dir('tmp');
    // Counted from here until the build record exists (or the upload fails): uploads in
    // flight are pending builds, else an account could spool any number of contexts at once.
    this.receiving.set(account.id, (this.receiving.get(account.id) ?? 0) + 1);
    const received = () => {
      const n = (this.receiving.get(account.id) ?? 1) - 1;
      if (n > 0) this.receiving.set(account.id, n);
      else this.receiving.delete(account.id);
    };
    let ctx: BuildContext;
    try {
      ctx = await BuildContext.open(context, {
        spoolDir,
        maxBytes: limits.buildContextBytes,
        maxEntries: MAX_CONTEXT_ENTRIES,
      });
    } catch (e) {
      received();
      throw e;
    }
    try {
      const text = o.dockerfileText ?? (await this.readDockerfile(ctx, o.dockerfile ?? 'Dockerfile'));
      // Syntax first (errors by line), then the bases' configs, then the plan with them.
      parseDockerfile(text, { buildArgs });
      const bases = new Map<string, Partial<ImageConfig>>();
      for (const ref of dockerfileBaseImages(text, { buildArgs })) {
        // One that does not resolve is refused by checkPlan below, naming its line.
        const info = await this.resolveFor(account, ref).catch(() => null);
        if (info)
          bases.set(ref, {
            env: info.env,
            workingDir: info.workingDir || '/',
            user: info.user,
            ...(info.entrypoint ? { entrypoint: info.entrypoint } : {}),
            ...(info.cmd ? { cmd: info.cmd } : {}),
            ...(info.labels ? { labels: info.labels } : {}),
          });
      }
      const plan = parseDockerfile(text, { buildArgs, baseConfig: (ref) => bases.get(ref) });
      await this.checkPlan(account, plan, ctx);
      return await this.enqueue(account, plan, { ...opts, source: 'dockerfile' }, ctx, egress);
    } catch (e) {
      await ctx.close();
      throw e;
    } finally {
      received();
    }
  }

  async start(
    account: AccountRecord,
    plan: BuildPlan,
    o: BuildOptions & { source: BuildRecord['source'] },
  ): Promise<BuildRecord> {
    return this.startWith(account, plan, o, null);
  }

  /**
   * {@link start} with a build context for the plan's context copies: the service owns it
   * from here (closed once the build is over, or now when the build is refused).
   */
  async startWith(
    account: AccountRecord,
    plan: BuildPlan,
    o: BuildOptions & { source: BuildRecord['source'] },
    context: OpenContext | null,
  ): Promise<BuildRecord> {
    try {
      this.assertOpen();
      const opts = this.checkOptions(o);
      const egress = this.egressOf(account, opts.allowDomains);
      await this.d.storage.check();
      await this.pendingRoom(account);
      await this.checkPlan(account, plan, context);
      return await this.enqueue(account, plan, { ...opts, source: o.source }, context, egress);
    } catch (e) {
      await context?.close().catch(() => undefined);
      throw e;
    }
  }

  async reserve(account: AccountRecord, o: BuildOptions & { source: BuildRecord['source'] }): Promise<BuildRecord> {
    this.assertOpen();
    const opts = this.checkOptions(o);
    this.egressOf(account, opts.allowDomains);
    await this.pendingRoom(account);
    const b = this.newRecord(account, null, { ...opts, source: o.source });
    await this.d.store.createBuild(b);
    this.d.log.info({ buildId: b.id, accountId: account.id }, 'build reserved');
    return recordOf(b);
  }

  async startReserved(
    account: AccountRecord,
    buildId: string,
    plan: BuildPlan,
    o: { noCache?: boolean } = {},
  ): Promise<BuildRecord> {
    this.assertOpen();
    const b = await this.owned(account.id, buildId);
    if (b.state !== 'queued' || b.plan !== null || this.jobs.has(b.id))
      throw new SandboxdError('conflict', b.state === 'queued' ? 'Build already started' : `Build is ${b.state}`, {
        buildId,
        state: b.state,
      });
    const egress = this.egressOf(account, b.allowDomains ?? undefined);
    await this.d.storage.check();
    await this.checkPlan(account, plan, null);
    const noCache = o.noCache ?? b.noCache;
    const updated = await this.d.store.updateBuild(b.id, {
      plan,
      noCache,
      holder: this.d.presence.id,
      stepsTotal: stepsOf(plan),
      expectStates: ['queued'],
    });
    await this.d.store.acquireLease(buildLease(b.id), this.d.presence.id, BUILD_LEASE_MS, this.d.clock.now());
    this.addJob(account, updated, plan, null, egress, noCache);
    return recordOf(updated);
  }

  // --- reading and changing builds

  async get(accountId: string, buildId: string): Promise<BuildRecord> {
    return recordOf(await this.owned(accountId, buildId));
  }

  async list(accountId: string, o: { name?: string; limit?: number } = {}): Promise<BuildRecord[]> {
    const limit = Math.min(Math.max(o.limit ?? 100, 1), 1000);
    return (await this.d.store.listBuilds(accountId, { name: o.name, limit })).map(recordOf);
  }

  async cancel(accountId: string, buildId: string): Promise<BuildRecord> {
    const b = await this.owned(accountId, buildId);
    if (FINAL_BUILD_STATES.includes(b.state))
      throw new SandboxdError('conflict', `Build is ${b.state}`, { buildId, state: b.state });
    const out = await this.d.store.updateBuild(buildId, {
      state: 'cancelled',
      finishedAt: this.d.clock.now(),
      plan: null,
      holder: null,
      expectStates: ['queued', 'building'],
    });
    await this.d.store
      .appendBuildLogs(
        buildId,
        [{ time: this.d.clock.now(), stream: 'system', text: 'Build cancelled' }],
        BUILD_LOG_CAP,
      )
      .catch(() => undefined);
    const job = this.jobs.get(buildId);
    if (job) {
      job.abort.abort(new BuildAborted('cancel'));
      if (!job.running) await this.dropQueued(job);
      await bounded(job.done, WIND_DOWN_MS);
    }
    this.notifier.notify(buildId);
    this.d.log.info({ buildId, accountId }, 'build cancelled');
    return recordOf(out);
  }

  async delete(accountId: string, buildId: string): Promise<void> {
    const b = await this.owned(accountId, buildId);
    if (!FINAL_BUILD_STATES.includes(b.state)) {
      await this.cancel(accountId, buildId).catch((e) => {
        if (!(e instanceof SandboxdError && e.kind === 'conflict')) throw e;
      });
    }
    await this.d.store.deleteBuild(buildId);
    this.notifier.notify(buildId);
  }

  async *logs(
    accountId: string,
    buildId: string,
    o: { offset?: number; follow?: boolean; signal?: AbortSignal },
  ): AsyncIterable<BuildLogEvent> {
    await this.owned(accountId, buildId);
    let from = o.offset ?? 0;
    for (;;) {
      // A server shutting down ends its followers without an end line: they resume on another (`offset`).
      if (o.signal?.aborted || this.closing) return;
      // The state first: lines are all written before a build's final state is.
      const b = await this.d.store.getBuild(buildId);
      for (;;) {
        const rows = await this.d.store.listBuildLogs(buildId, from, LOG_PAGE);
        for (const r of rows) {
          yield {
            type: 'log',
            seq: r.seq,
            time: new Date(r.time).toISOString(),
            ...(r.step !== undefined ? { step: r.step } : {}),
            stream: r.stream,
            text: r.text,
          };
        }
        if (rows.length) from = rows[rows.length - 1].seq + 1;
        if (rows.length < LOG_PAGE || o.signal?.aborted) break;
      }
      if (!o.follow || !b) return;
      if (FINAL_BUILD_STATES.includes(b.state)) {
        yield { type: 'end', state: b.state, ...(b.error ? { error: b.error } : {}) };
        return;
      }
      await this.notifier.wait(buildId, FOLLOW_POLL_MS, o.signal);
    }
  }

  // --- uploads (E2B)

  async hasUpload(accountId: string, hash: string): Promise<boolean> {
    if (!HASH_RE.test(hash)) return false;
    const u = await this.d.store.getUpload(accountId, hash);
    if (!u) return false;
    return stat(u.path).then(
      () => true,
      () => false,
    );
  }

  /**
   * Keeps `body` as the account's upload `hash` (whole or not at all). At most
   * {@link MAX_UPLOADS_IN_FLIGHT} of an account are received at once (`quota`, `uploads`,
   * before the body is read). The account's uploads together fit its plan's
   * `buildCacheBytes`: the oldest not named by a queued or running build of the account are
   * removed to make room, and when that is not enough the upload is refused (`quota`,
   * `buildCacheBytes`) and nothing changes.
   */
  async putUpload(accountId: string, hash: string, body: Readable): Promise<void> {
    if (!HASH_RE.test(hash))
      throw new SandboxdError('validation', 'The files hash must be 64 lowercase hex digits', { hash });
    const account = await this.d.store.getAccount(accountId);
    if (!account) throw new SandboxdError('not_found', 'Account not found');
    await this.d.storage.check();
    const inFlight = this.uploading.get(accountId) ?? 0;
    if (inFlight >= MAX_UPLOADS_IN_FLIGHT)
      throw new SandboxdError('quota', `Too many uploads at once: the account is sending ${inFlight}`, {
        quota: 'uploads',
        limit: MAX_UPLOADS_IN_FLIGHT,
      });
    this.uploading.set(accountId, inFlight + 1);
    try {
      await this.receiveUpload(account, hash, body);
    } finally {
      const n = (this.uploading.get(accountId) ?? 1) - 1;
      if (n > 0) this.uploading.set(accountId, n);
      else this.uploading.delete(accountId);
    }
  }

  private async receiveUpload(account: AccountRecord, hash: string, body: Readable): Promise<void> {
    const limits = buildLimits(planOf(this.d.config, account.plan));
    const max = limits.buildContextBytes;
    const dir = await this.dir('uploads', account.id);
    const tmp = join(dir, `.tmp-${randomBase32(12)}`);
    const path = join(dir, hash);
    let size = 0;
    try {
      await pipeline(
        body,
        async function* (src: AsyncIterable<Buffer>) {
          for await (const chunk of src) {
            size += chunk.length;
            if (size > max)
              throw new SandboxdError('payload_too_large', `The upload is larger than the plan allows (${max} bytes)`, {
                limit: max,
              });
            yield chunk;
          }
        },
        createWriteStream(tmp, { mode: 0o600 }),
      );
      await this.uploadsSerial(account.id, async () => {
        await this.uploadRoom(account.id, hash, size, limits.buildCacheBytes);
        await rename(tmp, path);
        await this.d.store.putUpload({
          accountId: account.id,
          hash,
          path,
          sizeBytes: size,
          createdAt: this.d.clock.now(),
        });
      });
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    }
  }

  /**
   * Makes room for an upload of `size` bytes under `hash` among the account's uploads
   * (within `limit` together): removes the oldest not needed by a queued or running build,
   * only if that is enough; else `quota` and nothing is removed.
   */
  private async uploadRoom(accountId: string, hash: string, size: number, limit: number): Promise<void> {
    // The upload it replaces (the same hash) does not count.
    const rows = (await this.d.store.listUploads(accountId)).filter((u) => u.hash !== hash);
    let used = rows.reduce((n, u) => n + u.sizeBytes, 0);
    if (used + size <= limit) return;
    const needed = await this.uploadsNeeded(accountId);
    const removable = rows.filter((u) => !needed.has(u.hash));
    const kept = used - removable.reduce((n, u) => n + u.sizeBytes, 0);
    if (kept + size > limit)
      throw new SandboxdError(
        'quota',
        `Build cache quota reached: the account's uploads would use ${kept + size} bytes even after removing every one no build needs; the plan allows ${limit}`,
        { quota: 'buildCacheBytes', limit, used: kept + size },
      );
    for (const u of removable) {
      if (used + size <= limit) break;
      await this.removeUpload(u);
      used -= u.sizeBytes;
    }
  }

  /** Hashes of the uploads that queued or running builds of the account copy from. */
  private async uploadsNeeded(accountId: string): Promise<Set<string>> {
    const needed = new Set<string>();
    for (const b of await this.d.store.listBuildsByState(['queued', 'building'])) {
      if (b.accountId !== accountId || !b.plan) continue;
      for (const stage of b.plan.stages)
        for (const step of stage.steps)
          if (step.kind === 'copy' && step.from.kind === 'upload') needed.add(step.from.hash);
    }
    return needed;
  }

  /** Removes an upload: its file, then its row. */
  private async removeUpload(u: UploadRecord): Promise<void> {
    await rm(u.path, { force: true });
    await this.d.store.deleteUpload(u.accountId, u.hash);
    this.d.log.info({ accountId: u.accountId, hash: u.hash, sizeBytes: u.sizeBytes }, 'upload removed');
  }

  /** Runs `fn` after the account's earlier upload changes (this process), one at a time. */
  private uploadsSerial<T>(accountId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.uploadChain.get(accountId) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.uploadChain.set(accountId, tail);
    void tail.then(() => {
      if (this.uploadChain.get(accountId) === tail) this.uploadChain.delete(accountId);
    });
    return next;
  }

  /**
   * The uploads kept on this server's disk: those older than `SANDBOXD_BUILD_UPLOAD_TTL_MS`
   * (and no queued or running build needs) are removed, file and row; a row whose file is
   * gone is forgotten (alone on the database: with replicas, the file may be another
   * server's); a file no row names is removed once {@link ORPHAN_UPLOAD_MS} old.
   */
  async collectUploads(): Promise<{ removed: number }> {
    const root = join(this.d.config.dataDir, 'builds', 'uploads');
    const accounts = await readdir(root).catch(() => [] as string[]);
    let removed = 0;
    for (const accountId of accounts) {
      try {
        removed += await this.uploadsSerial(accountId, () => this.collectUploadsOf(accountId, join(root, accountId)));
      } catch (err) {
        this.d.log.warn({ err, accountId }, 'upload collection failed');
      }
    }
    return { removed };
  }

  private async collectUploadsOf(accountId: string, dir: string): Promise<number> {
    const now = this.d.clock.now();
    const ttl = this.d.config.buildUploadTtlMs;
    const named = new Set<string>();
    let removed = 0;
    let needed: Set<string> | null = null;
    for (const u of await this.d.store.listUploads(accountId)) {
      const present = await stat(u.path).then(
        () => true,
        () => false,
      );
      if (!present && !this.d.presence.shared) {
        await this.d.store.deleteUpload(accountId, u.hash);
        removed++;
        continue;
      }
      if (now - u.createdAt >= ttl) {
        needed ??= await this.uploadsNeeded(accountId);
        if (!needed.has(u.hash)) {
          await this.removeUpload(u);
          removed++;
          continue;
        }
      }
      named.add(u.path);
    }
    for (const f of await readdir(dir).catch(() => [] as string[])) {
      const p = join(dir, f);
      if (named.has(p)) continue;
      const st = await stat(p).catch(() => null);
      if (!st?.isFile() || Date.now() - st.mtimeMs < ORPHAN_UPLOAD_MS) continue;
      await rm(p, { force: true });
      removed++;
    }
    return removed;
  }

  /** The account's upload `hash` as a context (spooled again for this build). `validation` when it has none. */
  private async openUpload(accountId: string, hash: string): Promise<OpenContext> {
    const u = await this.d.store.getUpload(accountId, hash);
    if (!u) throw new SandboxdError('validation', `No upload of hash ${hash}`, { hash });
    const account = await this.d.store.getAccount(accountId);
    const max = buildLimits(planOf(this.d.config, account?.plan ?? this.d.config.defaultPlan)).buildContextBytes;
    return BuildContext.open(createReadStream(u.path), {
      spoolDir: await this.dir('tmp'),
      maxBytes: max,
      maxEntries: MAX_CONTEXT_ENTRIES,
      // E2B's file sets are what its client chose to send (it applied its own ignore rules).
      dockerignore: false,
    });
  }

  // --- templates

  async listTemplates(accountId: string, o: { name?: string } = {}): Promise<TemplateRecord[]> {
    return this.d.store.listTemplates(accountId, o);
  }

  async getTemplate(accountId: string, name: string, tag: string): Promise<TemplateRecord> {
    const t = await this.d.store.getTemplate(accountId, name, tag);
    if (!t) throw new SandboxdError('not_found', 'Template not found');
    return t;
  }

  async deleteTemplate(accountId: string, name: string, tag?: string): Promise<void> {
    const n = await this.d.store.deleteTemplates(accountId, name, tag);
    if (!n) throw new SandboxdError('not_found', 'Template not found');
    this.d.log.info({ accountId, name, tag, removed: n }, 'template deleted');
    void this.collect(accountId);
  }

  // --- recovery, the periodic tick, shutdown

  /**
   * At start-up (and on each tick): builds left `queued` or `building` by a server that is
   * gone end `error` and their step sandboxes are deleted. With `startup`, what an earlier
   * run of this server left on its disk (spools, unfinished uploads) goes too; with `sweep`,
   * cache layers without a row (and rows without an image) are removed (see BuildCache.sweep).
   */
  async recover(o: { startup?: boolean; sweep?: boolean } = {}): Promise<{ ended: string[] }> {
    const ended: string[] = [];
    const busy = new Set<string>();
    for (const b of await this.d.store.listBuildsByState(['queued', 'building'])) {
      if (this.jobs.has(b.id)) {
        busy.add(b.accountId);
        continue;
      }
      if (b.holder === this.d.presence.id) continue; // this server's (a reservation, or one being queued)
      if (await this.heldElsewhere(b)) {
        busy.add(b.accountId);
        continue;
      }
      await this.endLost(b, 'The server stopped during the build (it was restarted or killed); start the build again');
      ended.push(b.id);
    }
    if (o.startup) {
      await rm(join(this.d.config.dataDir, 'builds', 'tmp'), { recursive: true, force: true }).catch(() => undefined);
      // Temp files of uploads an earlier run was receiving.
      const uploads = join(this.d.config.dataDir, 'builds', 'uploads');
      for (const accountId of await readdir(uploads).catch(() => [] as string[]))
        for (const f of await readdir(join(uploads, accountId)).catch(() => [] as string[]))
          if (f.startsWith('.tmp-')) await rm(join(uploads, accountId, f), { force: true }).catch(() => undefined);
    }
    if (o.sweep) await this.cache.sweep(busy).catch((err) => this.d.log.warn({ err }, 'build cache sweep failed'));
    if (ended.length) this.d.log.warn({ builds: ended }, 'builds whose server stopped ended in error');
    return { ended };
  }

  /** Starts the periodic tick (collection, reservations, builds of servers that are gone). */
  startTimer(): void {
    if (this.timer || this.closing) return;
    this.timer = setInterval(() => {
      this.ticking ??= this.tick()
        .catch((err) => this.d.log.warn({ err }, 'builds tick failed'))
        .finally(() => {
          this.ticking = null;
        });
    }, TICK_MS);
    this.timer.unref();
  }

  /** One pass: expired reservations end, builds of gone servers end, the cache matches the runtime, every account's cache fits its quota, old uploads go. */
  async tick(): Promise<void> {
    const now = this.d.clock.now();
    for (const b of await this.d.store.listBuildsByState(['queued'])) {
      if (b.plan !== null || now - b.createdAt < RESERVATION_TTL_MS) continue;
      await this.d.store
        .updateBuild(b.id, {
          state: 'error',
          finishedAt: now,
          holder: null,
          error: failureOf(
            new SandboxdError('request_timeout', 'The build was reserved but not started within an hour'),
          ),
          expectStates: ['queued'],
        })
        .catch(() => undefined);
      this.notifier.notify(b.id);
    }
    // Builds of servers that are gone (a shared database); rows whose layer image vanished are
    // forgotten and stray layer images removed (alone on the database only: with replicas, at
    // the start of the one that reaps).
    await this.recover({ sweep: !this.d.presence.shared });
    for (const accountId of await this.d.store.listLayerAccounts()) await this.collect(accountId);
    await this.collectUploads();
  }

  /**
   * Shutdown: queued builds end `error`, running ones are aborted (their sandboxes deleted)
   * and end `error` ("server shutting down"). Resolves once they are over (bounded).
   */
  async close(): Promise<void> {
    this.closing = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.notifier.wakeAll();
    const jobs = [...this.jobs.values()];
    for (const job of jobs) {
      if (job.running) job.abort.abort(new BuildAborted('shutdown'));
      else {
        job.abort.abort(new BuildAborted('shutdown'));
        await this.dropQueued(job, 'The server shut down before the build started; start it again');
      }
    }
    await bounded(Promise.all(jobs.map((j) => j.done)), WIND_DOWN_MS);
    await bounded(this.ticking ?? Promise.resolve(), WIND_DOWN_MS);
  }

  // --- the queue

  private enqueue(
    account: AccountRecord,
    plan: BuildPlan,
    o: ReturnType<BuildService['checkOptions']> & { source: BuildRecord['source'] },
    context: OpenContext | null,
    egress: Egress,
  ): Promise<BuildRecord> {
    return (async () => {
      const b = this.newRecord(account, plan, o);
      await this.d.store.createBuild(b);
      await this.d.store.acquireLease(buildLease(b.id), this.d.presence.id, BUILD_LEASE_MS, this.d.clock.now());
      this.addJob(account, b, plan, context, egress, o.noCache);
      this.d.log.info({ buildId: b.id, accountId: account.id, name: b.name, tag: b.tag }, 'build queued');
      return recordOf(b);
    })();
  }

  private newRecord(
    account: AccountRecord,
    plan: BuildPlan | null,
    o: ReturnType<BuildService['checkOptions']> & { source: BuildRecord['source'] },
  ): StoredBuild {
    return {
      id: newBuildId(),
      accountId: account.id,
      name: o.name,
      tag: o.tag,
      extraTags: o.extraTags,
      state: 'queued',
      source: o.source,
      createdAt: this.d.clock.now(),
      stepsTotal: plan ? stepsOf(plan) : 0,
      stepsDone: 0,
      stepsCached: 0,
      plan,
      allowDomains: o.allowDomains.length ? o.allowDomains : null,
      noCache: o.noCache,
      holder: this.d.presence.id,
    };
  }

  private addJob(
    account: AccountRecord,
    build: StoredBuild,
    plan: BuildPlan,
    context: OpenContext | null,
    egress: Egress,
    noCache: boolean,
  ): void {
    let finish = () => {};
    const done = new Promise<void>((r) => {
      finish = r;
    });
    const job: Job = {
      id: build.id,
      account,
      build,
      plan,
      context,
      egress,
      noCache,
      abort: new AbortController(),
      running: false,
      done,
      finish,
      progress: { done: 0, cached: 0, chain: Promise.resolve() },
    };
    this.jobs.set(build.id, job);
    // Accepted while the server began to shut down: it will not run here.
    if (this.closing) void this.dropQueued(job, 'The server shut down before the build started; start it again');
    else this.pump();
  }

  /** Starts the queued builds there is room for: this server's `buildsMax`, each account's `maxBuilds`. */
  private pump(): void {
    if (this.closing) return;
    let running = [...this.jobs.values()].filter((j) => j.running).length;
    for (const job of this.jobs.values()) {
      if (running >= this.d.config.buildsMax) return;
      if (job.running || job.abort.signal.aborted) continue;
      const max = buildLimits(planOf(this.d.config, job.account.plan)).maxBuilds;
      const mine = [...this.jobs.values()].filter((j) => j.running && j.account.id === job.account.id).length;
      if (mine >= max) continue;
      job.running = true;
      running++;
      void this.runJob(job).finally(() => {
        this.jobs.delete(job.id);
        job.finish();
        this.pump();
      });
    }
  }

  private async runJob(job: Job): Promise<void> {
    const log = new BuildLogWriter(
      { store: this.d.store, clock: this.d.clock, log: this.d.log, notifier: this.notifier },
      job.id,
    );
    const watch = setInterval(() => void this.watch(job), WATCH_MS);
    let run: BuildRun | null = null;
    const logger = this.d.log.child({ buildId: job.id, accountId: job.account.id });
    try {
      await this.d.store.updateBuild(job.id, {
        state: 'building',
        startedAt: this.d.clock.now(),
        expectStates: ['queued'],
      });
      this.notifier.notify(job.id);
      logger.info('build started');
      run = new BuildRun(
        {
          driver: this.d.driver,
          clock: this.d.clock,
          config: this.d.config,
          log: logger,
          sandboxes: this.d.sandboxes,
          cache: this.cache,
          openUpload: (accountId, hash) => this.openUpload(accountId, hash),
        },
        {
          build: job.build,
          account: job.account,
          plan: job.plan,
          context: job.context,
          egress: job.egress,
          noCache: job.noCache,
          signal: job.abort.signal,
          log,
          progress: (done, cached) => this.progress(job, done, cached),
        },
      );
      const r = await run.run();
      const image = `templates/${job.build.name}:${job.build.tag}`;
      log.system(`Successfully built ${image} (${r.digest})`);
      await log.flush();
      await job.progress.chain;
      const at = this.d.clock.now();
      const tags = [...new Set([job.build.tag, ...job.build.extraTags])];
      await this.d.store.updateBuild(job.id, {
        state: 'ready',
        finishedAt: at,
        digest: r.digest,
        sizeBytes: r.sizeBytes,
        stepsDone: job.progress.done,
        stepsCached: job.progress.cached,
        plan: null,
        holder: null,
        expectStates: ['building'],
        templates: tags.map((tag) => ({
          accountId: job.account.id,
          name: job.build.name,
          tag,
          driverRef: r.driverRef,
          digest: r.digest,
          sizeBytes: r.imageBytes,
          buildId: job.id,
          createdAt: at,
        })),
      });
      logger.info({ image, digest: r.digest, cached: job.progress.cached }, 'build ready');
    } catch (e) {
      await this.failJob(job, e, log, run, logger);
    } finally {
      clearInterval(watch);
      await job.context?.close().catch(() => undefined);
      await this.d.store.releaseLease(buildLease(job.id), this.d.presence.id).catch(() => undefined);
      this.notifier.notify(job.id);
      if (!this.closing) void this.collect(job.account.id);
    }
  }

  private async failJob(
    job: Job,
    e: unknown,
    log: BuildLogWriter,
    run: BuildRun | null,
    logger: ServiceDeps['log'],
  ): Promise<void> {
    const reason = e instanceof BuildAborted ? e.reason : job.abort.signal.aborted ? abortReason(job) : null;
    if (reason === 'cancel' || reason === 'gone') {
      // The cancel (here or on another server) wrote the final state.
      await log.flush();
      logger.info({ reason }, 'build stopped');
      return;
    }
    const failure =
      reason === 'shutdown'
        ? failureOf(new SandboxdError('unavailable', 'The server shut down during the build; start it again'))
        : failureOf(e);
    if (failure.kind === 'internal') logger.error({ err: e }, 'build failed in the runtime');
    else logger.info({ kind: failure.kind, message: failure.message }, 'build failed');
    // Layers that made the account pass its cache quota go with the build.
    if (failure.kind === 'quota' && run) for (const l of run.made) await this.cache.discard(l).catch(() => undefined);
    log.system(`ERROR: ${failure.message}`);
    await log.flush();
    await job.progress.chain;
    await this.d.store
      .updateBuild(job.id, {
        state: 'error',
        finishedAt: this.d.clock.now(),
        error: failure,
        plan: null,
        holder: null,
        expectStates: ['queued', 'building'],
      })
      .catch((err) => {
        if (!(err instanceof SandboxdError && (err.kind === 'conflict' || err.kind === 'not_found')))
          logger.warn({ err }, 'recording a failed build failed');
      });
  }

  /** Records the step counts (one write at a time, the last counts win). */
  private progress(job: Job, done: number, cached: number): void {
    job.progress.done = done;
    job.progress.cached = cached;
    job.progress.chain = job.progress.chain
      .then(() =>
        this.d.store.updateBuild(job.id, {
          stepsDone: job.progress.done,
          stepsCached: job.progress.cached,
          expectStates: ['building'],
        }),
      )
      .then(
        () => this.notifier.notify(job.id),
        () => undefined,
      );
  }

  /** Ends `job` when its row became final elsewhere (a cancel on another server) or went. */
  private async watch(job: Job): Promise<void> {
    if (!job.running || job.abort.signal.aborted) return;
    const b = await this.d.store.getBuild(job.id).catch(() => undefined);
    if (b === undefined) return;
    if (!b || FINAL_BUILD_STATES.includes(b.state)) job.abort.abort(new BuildAborted('gone'));
  }

  /** A queued job that will not run: its context closed, its row (unless final already) ended `error` with `message`. */
  private async dropQueued(job: Job, message?: string): Promise<void> {
    this.jobs.delete(job.id);
    await job.context?.close().catch(() => undefined);
    if (message)
      await this.d.store
        .updateBuild(job.id, {
          state: 'error',
          finishedAt: this.d.clock.now(),
          error: failureOf(new SandboxdError('unavailable', message)),
          plan: null,
          holder: null,
          expectStates: ['queued'],
        })
        .catch(() => undefined);
    await this.d.store.releaseLease(buildLease(job.id), this.d.presence.id).catch(() => undefined);
    this.notifier.notify(job.id);
    job.finish();
  }

  // --- recovery helpers

  /** Whether a server that still runs holds build `b` (its lease or, for a reservation, the row). */
  private async heldElsewhere(b: StoredBuild): Promise<boolean> {
    if (b.holder === this.d.presence.id) return false;
    const lease = buildLease(b.id);
    const got = await this.d.store.acquireLease(lease, this.d.presence.id, 1, this.d.clock.now());
    if (!got.held && (await this.d.presence.alive(got.holder))) return true;
    if (!got.held) await this.d.store.releaseLease(lease, got.holder).catch(() => undefined);
    else await this.d.store.releaseLease(lease, this.d.presence.id).catch(() => undefined);
    return b.holder !== null && (await this.d.presence.alive(b.holder));
  }

  /** Ends a build whose server is gone: `error` with `message`, its step sandboxes deleted. */
  private async endLost(b: StoredBuild, message: string): Promise<void> {
    await this.d.store
      .updateBuild(b.id, {
        state: 'error',
        finishedAt: this.d.clock.now(),
        error: failureOf(new SandboxdError('unavailable', message)),
        plan: null,
        holder: null,
        expectStates: ['queued', 'building'],
      })
      .catch(() => undefined);
    await this.d.store
      .appendBuildLogs(b.id, [{ time: this.d.clock.now(), stream: 'system', text: `ERROR: ${message}` }], BUILD_LOG_CAP)
      .catch(() => undefined);
    await this.deleteStepSandboxes(b.accountId, b.id);
    this.notifier.notify(b.id);
  }

  /** Deletes every sandbox a build made (metadata `sandboxd.build=<id>`) that is still recorded. */
  async deleteStepSandboxes(accountId: string, buildId: string): Promise<number> {
    let n = 0;
    for (let round = 0; round < 10; round++) {
      const page = await this.d.sandboxList.list(accountId, {
        limit: 100,
        'metadata.sandboxd.build': buildId,
      } as never);
      if (!page.items.length) break;
      for (const r of page.items) {
        await this.d.sandboxes.delete(accountId, r.id).then(
          () => n++,
          (err) => this.d.log.warn({ err, sandboxId: r.id, buildId }, 'deleting a step sandbox of a lost build failed'),
        );
      }
      if (!page.nextCursor) break;
    }
    return n;
  }

  // --- checks

  private assertOpen(): void {
    if (this.closing) throw new SandboxdError('unavailable', 'The server is shutting down');
  }

  private checkOptions(o: BuildOptions): {
    name: string;
    tag: string;
    extraTags: string[];
    allowDomains: string[];
    noCache: boolean;
  } {
    const tag = o.tag || DEFAULT_TEMPLATE_TAG;
    const problems: string[] = [];
    if (!NAME_RE.test(o.name)) problems.push(`name "${o.name}" must match ${TEMPLATE_NAME_PATTERN}`);
    for (const t of [tag, ...(o.extraTags ?? [])])
      if (!TAG_RE.test(t)) problems.push(`tag "${t}" must match ${TEMPLATE_TAG_PATTERN}`);
    if ((o.extraTags?.length ?? 0) > 32) problems.push('at most 32 tags');
    if (problems.length) throw new SandboxdError('validation', problems.join('; '), { problems });
    return {
      name: o.name,
      tag,
      extraTags: [...new Set(o.extraTags ?? [])].filter((t) => t !== tag),
      allowDomains: (o.allowDomains ?? []).map((d) => d.trim()).filter(Boolean),
      noCache: o.noCache ?? false,
    };
  }

  /** The egress of a build's RUN steps: its allow list (checked, bounded by the plan), else none. */
  private egressOf(account: AccountRecord, domains: string[] | undefined): Egress {
    if (!domains?.length) return 'none';
    if (domains.length > MAX_EGRESS_RULES)
      throw new SandboxdError('validation', `allowDomains: at most ${MAX_EGRESS_RULES} rules`, {
        max: MAX_EGRESS_RULES,
      });
    const asked = checkEgress({ allow: domains }, '/allowDomains');
    const plan = planOf(this.d.config, account.plan);
    try {
      return decideEgress(asked, this.d.config.egress, plan.egress ?? 'internet');
    } catch (e) {
      // A build's allow list is one of its arguments: beyond the plan, it is a bad request.
      if (e instanceof SandboxdError && e.kind === 'quota')
        throw new SandboxdError('validation', `allowDomains: ${e.message}`, [
          { in: 'query', path: '/allowDomains', message: e.message, ...(e.details as object) },
        ]);
      throw e;
    }
  }

  /** `quota` when the account has {@link MAX_PENDING_BUILDS} builds queued or running. */
  private async pendingRoom(account: AccountRecord): Promise<void> {
    const n =
      (await this.d.store.countBuilds(account.id, ['queued', 'building'])) + (this.receiving.get(account.id) ?? 0);
    if (n >= MAX_PENDING_BUILDS)
      throw new SandboxdError('quota', `Too many builds queued or running: the account has ${n}`, {
        quota: 'builds',
        limit: MAX_PENDING_BUILDS,
      });
  }

  /**
   * Checks what a plan names before anything runs: every base and `COPY --from` image
   * resolves for the account (`template_not_found` naming the line), stages only refer to
   * earlier ones, `FROM scratch` is refused, context sources exist, uploads are there.
   */
  private async checkPlan(account: AccountRecord, plan: BuildPlan, ctx: CopyContext | null): Promise<void> {
    if (!plan.stages.length || plan.target < 0 || plan.target >= plan.stages.length)
      throw new SandboxdError('validation', 'The build plan has no target stage');
    for (const [i, stage] of plan.stages.entries()) {
      const base = stage.base;
      if (base.kind === 'stage') {
        if (base.stage < 0 || base.stage >= i)
          throw lineError(stage.line, 'FROM', 'names a stage that is not built before it');
      } else await this.checkImage(account, base.ref, stage.line, `FROM ${base.ref}`);
      for (const step of stage.steps) {
        if (step.kind !== 'copy') continue;
        const from = step.from;
        if (from.kind === 'stage' && (from.stage < 0 || from.stage >= i))
          throw lineError(step.line, step.text, 'COPY --from names a stage that is not built before it');
        if (from.kind === 'image') await this.checkImage(account, from.ref, step.line, step.text);
        if (from.kind === 'upload' && !(await this.hasUpload(account.id, from.hash)))
          throw lineError(step.line, step.text, `no files were uploaded for hash ${from.hash}`);
        if (from.kind === 'context') {
          if (!ctx) throw lineError(step.line, step.text, 'the build has no context to copy from');
          try {
            await ctx.select(step.sources, step.dest, { chmod: step.chmod, add: step.add });
          } catch (e) {
            if (e instanceof SandboxdError && e.kind === 'validation') throw lineError(step.line, step.text, e.message);
            throw e;
          }
        }
      }
    }
  }

  private async checkImage(account: AccountRecord, ref: string, line: number, instruction: string): Promise<void> {
    if (ref === 'scratch')
      throw lineError(
        line,
        instruction,
        'FROM scratch is not supported: start from an image such as local/busybox:latest',
      );
    try {
      await this.resolveFor(account, ref);
    } catch (e) {
      if (e instanceof SandboxdError && ['template_not_found', 'validation'].includes(e.kind))
        throw new SandboxdError(e.kind, `Dockerfile line ${line}: ${instruction}: ${e.message}`, {
          line,
          instruction,
          image: ref,
        });
      throw e;
    }
  }

  /** The runtime's image of `ref` as the account names it (its snapshots and templates; never the runtime's own namespace). */
  private async resolveFor(account: AccountRecord, ref: string) {
    const driverRef = await this.d.sandboxes.driverImage(account.id, ref);
    return this.d.driver.resolveImage(driverRef);
  }

  /** The Dockerfile at `path` of the context (`validation` naming it when missing, not a file, or over 1 MiB). */
  private async readDockerfile(ctx: BuildContext, path: string): Promise<string> {
    const clean = path.replace(/^(\.\/|\/)+/, '');
    return (await ctx.readFile(clean, MAX_DOCKERFILE_READ)).toString('utf8');
  }

  private async owned(accountId: string, buildId: string): Promise<StoredBuild> {
    const b = await this.d.store.getBuild(buildId);
    if (!b || b.accountId !== accountId) throw new SandboxdError('not_found', 'Build not found');
    return b;
  }

  /** `<dataDir>/builds/<...parts>`, made when missing. */
  private async dir(...parts: string[]): Promise<string> {
    const d = join(this.d.config.dataDir, 'builds', ...parts);
    await mkdir(d, { recursive: true, mode: 0o700 });
    return d;
  }

  /** Fits the account's cache to its plan's quota (errors logged). */
  private async collect(accountId: string): Promise<void> {
    try {
      const account = await this.d.store.getAccount(accountId);
      if (!account) return;
      await this.cache.collect(accountId, buildLimits(planOf(this.d.config, account.plan)).buildCacheBytes);
    } catch (err) {
      this.d.log.warn({ err, accountId }, 'build cache collection failed');
    }
  }
}

/** Steps of a plan as its build counts them (each FROM is one). */
function stepsOf(plan: BuildPlan): number {
  return plan.stages.reduce((n, s) => n + 1 + s.steps.length, 0);
}

function lineError(line: number, instruction: string, what: string): SandboxdError {
  return new SandboxdError('validation', `Dockerfile line ${line}: ${instruction}: ${what}`, { line, instruction });
}

function abortReason(job: Job): BuildAborted['reason'] {
  const r = job.abort.signal.reason;
  return r instanceof BuildAborted ? r.reason : 'cancel';
}

/** Waits for `p`, at most `ms`. */
async function bounded(p: Promise<unknown>, ms: number): Promise<void> {
  let t: NodeJS.Timeout | undefined;
  await Promise.race([
    p.catch(() => undefined),
    new Promise<void>((r) => {
      t = setTimeout(r, ms);
    }),
  ]);
  clearTimeout(t);
}
