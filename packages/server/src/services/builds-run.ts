import { posix } from 'node:path';
import { createHash } from 'node:crypto';
import { type Egress, type ErrorKind, SandboxdError } from '@sandboxd/protocol';
import type { Logger } from 'pino';
import type { BuildPlan, CopyEntry, CopyStep, ImageConfig, RunStep, Stage, Step, WorkdirStep } from '../builds/plan.js';
import { DEFAULT_SHELL } from '../builds/plan.js';
import type { Config } from '../config.js';
import type { Clock } from '../domain/clock.js';
import { layerRef } from '../domain/snapshots.js';
import { decodeCopyStream, encodeCopyStream } from '../runtime/copy-stream.js';
import type { ImageConfigOverride, ImageInfo, ProcessExit, RuntimeDriver, StreamedProcess } from '../runtime/driver.js';
import { findUser, parsePasswd } from '../runtime/passwd.js';
import type { AccountRecord, LayerRecord, StoredBuild } from '../store/store.js';
import { planOf } from './context.js';
import type { BuildCache } from './builds-cache.js';
import { configKey, imageKey, stepKey } from '../builds/cache-key.js';
import { type BuildLogWriter, lastBytes } from './builds-log.js';
import { buildLimits } from '../config-plans.js';
import type { SandboxService } from './sandboxes.js';

/** The PATH a RUN's command is looked up in when the image sets none (Docker's). */
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** Largest /etc/passwd or /etc/group read to resolve a `--chown` or `USER` name. */
const MAX_ID_FILE_BYTES = 4 << 20;

/** What a COPY from a build context reads: the spooled context (builds/context.ts's BuildContext). */
export interface CopyContext {
  select(
    sources: string[],
    dest: string,
    o: { owner?: { uid: number; gid: number }; chmod?: number; add?: boolean },
  ): Selection | Promise<Selection>;
}

/** What a COPY from a context writes: entries relative to `dest`, and the content hash the cache keys on. */
interface Selection {
  dest: string;
  entries: CopyEntry[];
  hash: string;
  /** Mode and owner of `dest` when the copy makes it (Docker gives `--chown`/`--chmod` to made dirs). */
  destDir?: { mode: number; uid: number; gid: number };
}

/** Why a build stopped before its end without a failure of its own. */
export class BuildAborted extends Error {
  constructor(readonly reason: 'cancel' | 'shutdown' | 'gone') {
    super(`build aborted: ${reason}`);
  }
}

export interface RunDeps {
  driver: RuntimeDriver;
  clock: Clock;
  config: Readonly<Pick<Config, 'buildStepTimeoutMs' | 'plans' | 'defaultPlan'>>;
  log: Logger;
  sandboxes: Pick<SandboxService, 'create' | 'delete' | 'driverImage'>;
  cache: BuildCache;
  /** Opens an upload of the account as a context (E2B's copies); closed by the caller of {@link BuildRun.run}. */
  openUpload(accountId: string, hash: string): Promise<CopyContext & { close(): Promise<void> }>;
}

export interface RunInput {
  build: StoredBuild;
  account: AccountRecord;
  plan: BuildPlan;
  /** The build context of a Dockerfile build; null: none (E2B builds, inline Dockerfiles). */
  context: CopyContext | null;
  egress: Egress;
  noCache: boolean;
  signal: AbortSignal;
  log: BuildLogWriter;
  /** Called after each step with the counts so far. */
  progress(done: number, cached: number): void;
}

export interface RunResult {
  /** The runtime's image of the result (a layer). */
  driverRef: string;
  digest: string;
  /** Bytes of the layers this build made. */
  sizeBytes: number;
  /** Bytes of the layers the result is made of (its own layers over its base). */
  imageBytes: number;
}

/** The state of a stage between its steps. */
interface Cursor {
  /** Key of the chain so far: the base, then every step. */
  key: string;
  /** The image the next sandbox is made from: the last layer, or the base. */
  ref: string;
  /** Key of that layer; null when `ref` is the base image. */
  refKey: string | null;
  /** What step sandboxes of the stage record as their image (the stage's FROM, as written). */
  publicRef: string;
  cfg: ImageConfig;
  /** Fields the build set that the runtime's own record of the base would not give. */
  setCmd: boolean;
  setEntrypoint: boolean;
  /** Labels the build set (applied to the result only: step sandboxes never run a start or ready command the build sets). */
  labels: Record<string, string> | null;
  /** The base image's labels, when the runtime says (a result's labels are its whole label set). */
  baseLabels: Record<string, string> | undefined;
  /** The layers of the chain, base first. */
  layers: LayerRecord[];
}

/**
 * One build's run: every stage of the plan, step by step, as docs/templates.md ("How a build
 * runs") says. A file-changing step (RUN, COPY, WORKDIR) looks its key up in the cache; on a
 * miss it runs in a fresh sandbox of the account made from the previous layer, and the
 * sandbox's filesystem becomes the step's layer (`snapshot/<accountId>/_l.<key>`, with the
 * config so far); the sandbox is deleted whatever happens. Config steps only change the
 * config. The result is the target stage's last layer, or an image derived from it with the
 * final config. Errors are SandboxdErrors whose details name the step (`step`, `line`,
 * `instruction`; a failing RUN adds `exitCode` and `output`), or {@link BuildAborted}.
 */
export class BuildRun {
  private readonly total: number;
  private done = 0;
  private cached = 0;
  /** Step sandboxes alive now. */
  private readonly live = new Set<string>();
  private current: StreamedProcess | null = null;
  /** Layer images held against collection until the build ends. */
  private readonly held: string[] = [];
  private readonly newLayers: LayerRecord[] = [];
  private readonly uploads = new Map<string, Promise<CopyContext & { close(): Promise<void> }>>();
  private readonly quotaBytes: number;
  /** The current stage's FROM is counted as done, not yet as cached or not (see {@link settleFrom}). */
  private fromPending = false;

  constructor(
    private readonly d: RunDeps,
    private readonly i: RunInput,
  ) {
    this.total = i.plan.stages.reduce((n, s) => n + 1 + s.steps.length, 0);
    this.quotaBytes = buildLimits(planOf(d.config as Config, i.account.plan)).buildCacheBytes;
    i.signal.addEventListener('abort', () => this.onAbort(), { once: true });
  }

  /** Steps of the plan (each FROM counts as one). */
  get steps(): number {
    return this.total;
  }

  async run(): Promise<RunResult> {
    try {
      const results: Cursor[] = [];
      let n = 0;
      for (const stage of this.i.plan.stages) {
        n++;
        let cur = await this.from(stage, results, n);
        for (const step of stage.steps) {
          n++;
          cur = await this.step(step, cur, results, n);
        }
        results.push(cur);
      }
      return await this.finish(results[this.i.plan.target]);
    } finally {
      for (const u of this.uploads.values()) await u.then((c) => c.close()).catch(() => undefined);
      for (const ref of this.held) this.d.cache.release(ref);
    }
  }

  /** Layers this build made (removed by the caller when the build fails for the cache's quota). */
  get made(): readonly LayerRecord[] {
    return this.newLayers;
  }

  // --- stages and steps

  private async from(stage: Stage, results: Cursor[], n: number): Promise<Cursor> {
    this.throwIfAborted();
    const base = stage.base;
    const text =
      base.kind === 'image' ? `FROM ${base.ref}` : `FROM ${this.i.plan.stages[base.stage]?.name ?? base.stage}`;
    const at = { line: stage.line, text: `${text}${stage.name ? ` AS ${stage.name}` : ''}` };
    this.i.log.system(`Step ${n}/${this.total} : ${at.text}`, n);
    let cur: Cursor;
    if (base.kind === 'stage') {
      const src = results[base.stage];
      if (!src) throw stepError(new SandboxdError('validation', `Stage ${base.stage} is not built yet`), at, n);
      cur = { ...src, cfg: cloneConfig(src.cfg), labels: src.labels ? { ...src.labels } : null };
    } else {
      const { ref, info } = await this.resolve(base.ref).catch((e) => {
        throw stepError(e, at, n);
      });
      cur = {
        key: imageKey(info.digest),
        ref,
        refKey: null,
        publicRef: base.ref,
        cfg: configOf(info),
        setCmd: false,
        setEntrypoint: false,
        labels: null,
        baseLabels: info.labels,
        layers: [],
      };
    }
    // A base counts as cached when the step after it does (its result came from the cache).
    this.count(false);
    this.fromPending = true;
    return cur;
  }

  /** The runtime's ref and image of `ref` as the account names it (held while the build runs when it is a layer). */
  private async resolve(ref: string): Promise<{ ref: string; info: ImageInfo }> {
    if (ref === 'scratch')
      throw new SandboxdError(
        'validation',
        'FROM scratch is not supported: start from an image such as local/busybox:latest',
      );
    const driverRef = await this.d.sandboxes.driverImage(this.i.account.id, ref);
    const info = await this.d.driver.resolveImage(driverRef);
    this.hold(driverRef);
    return { ref: driverRef, info };
  }

  private async step(step: Step, cur: Cursor, results: Cursor[], n: number): Promise<Cursor> {
    this.throwIfAborted();
    this.i.log.system(`Step ${n}/${this.total} : ${step.text}`, n);
    try {
      switch (step.kind) {
        case 'config':
          return await this.configStep(step, cur);
        case 'run':
          return await this.fileStep(step, cur, n, '', (id) => this.runCommand(step, cur, id, n));
        case 'workdir':
          return await this.workdirStep(step, cur, n);
        case 'copy':
          return await this.copyStep(step, cur, results, n);
      }
    } catch (e) {
      throw stepError(e, step, n);
    }
  }

  /**
   * A config step changes the config only (no sandbox). The cache keeps a marker of each
   * (a row without an image): it counts as cached when the same config step on the same
   * chain was seen before, as Docker's builder says of its config-only layers.
   */
  private async configStep(step: Extract<Step, { kind: 'config' }>, cur: Cursor): Promise<Cursor> {
    const next = applyConfig(cur, step.set);
    next.key = stepKey(cur.key, step);
    const seen = await this.d.cache.mark(this.i.account.id, next.key);
    if (seen && !this.i.noCache) this.i.log.system(' ---> CACHED');
    this.count(seen && !this.i.noCache);
    return next;
  }

  private async workdirStep(step: WorkdirStep, cur: Cursor, n: number): Promise<Cursor> {
    const next = { ...cur, cfg: { ...cur.cfg, workingDir: step.path } };
    return this.fileStep(step, next, n, '', (id) => this.mkdirRoot(id, step.path), cur.key);
  }

  /**
   * A step that changes files: the cached layer of its key, or a run of `apply` in a sandbox
   * made from `cur.ref` whose filesystem then becomes the layer. `parentKey` is the chain's
   * key before the step (default `cur.key`).
   */
  private async fileStep(
    step: Step,
    cur: Cursor,
    n: number,
    extra: string,
    apply: (id: string) => Promise<void>,
    parentKey = cur.key,
  ): Promise<Cursor> {
    const key = stepKey(parentKey, step, extra);
    const accountId = this.i.account.id;
    const old = await this.d.cache.lookup(accountId, key);
    if (old && !this.i.noCache) {
      this.hold(old.layer.driverRef);
      this.i.log.system(' ---> CACHED');
      this.count(true);
      return { ...cur, key, ref: old.layer.driverRef, refKey: key, layers: [...cur.layers, old.layer] };
    }
    // With noCache the step runs again and its new layer replaces the cached one (under another name).
    const ref = layerRef(accountId, old ? sha256(`${key}\n${this.i.build.id}`) : key);
    const next: Cursor = { ...cur, key };
    let info: ImageInfo | undefined;
    await this.withSandbox(cur, n, async (id) => {
      await apply(id);
      this.throwIfAborted();
      info = await this.snapshot(id, ref, layerConfig(next));
    });
    const at = this.d.clock.now();
    const layer: LayerRecord = {
      accountId,
      key,
      driverRef: ref,
      parentKey: cur.refKey,
      sizeBytes: info!.sizeBytes,
      createdAt: at,
      lastUsedAt: at,
    };
    await this.d.cache.record(layer);
    this.hold(ref);
    this.newLayers.push(layer);
    if (old) await this.dropReplaced(old.layer);
    await this.d.cache.fit(accountId, this.quotaBytes);
    this.count(false);
    return { ...next, ref, refKey: key, layers: [...cur.layers, layer] };
  }

  // --- RUN

  private async runCommand(step: RunStep, cur: Cursor, id: string, n: number): Promise<void> {
    const cfg = cur.cfg;
    const cwd = cfg.workingDir || '/';
    await this.mkdirRoot(id, cwd);
    const user = await this.userOf(id, cfg.user);
    const argv = await this.lookPath(id, step.argv, cfg.env.PATH ?? DEFAULT_PATH);
    this.i.log.resetTail();
    let proc: StreamedProcess;
    try {
      proc = await this.d.driver.spawn(id, argv, {
        env: { ...step.args, ...cfg.env },
        cwd,
        user,
        timeoutMs: this.d.config.buildStepTimeoutMs,
      });
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'validation')
        throw new SandboxdError('validation', e.message, { exitCode: 127, output: e.message });
      throw e;
    }
    this.current = proc;
    const exit = await new Promise<ProcessExit>((resolve) => {
      proc.onData((stream, chunk) => this.i.log.output(stream, chunk, n));
      proc.onExit(resolve);
    });
    this.current = null;
    this.i.log.endOutput(n);
    this.throwIfAborted();
    if (exit.exitCode === 0) return;
    const output = lastBytes(this.i.log.outputTail());
    if (exit.timedOut)
      throw new SandboxdError(
        'validation',
        `The command ran longer than the step timeout (${this.d.config.buildStepTimeoutMs} ms) and was killed`,
        { exitCode: exit.exitCode, output, timedOut: true },
      );
    throw new SandboxdError('validation', `The command returned a non-zero code: ${exit.exitCode}`, {
      exitCode: exit.exitCode,
      output,
    });
  }

  /** `argv` with argv[0] looked up in `path` when it holds no `/` (as a shell would). */
  private async lookPath(id: string, argv: string[], path: string): Promise<string[]> {
    if (!argv.length) throw new SandboxdError('validation', 'RUN has no command');
    if (argv[0].includes('/')) return argv;
    for (const dir of path.split(':')) {
      if (!dir.startsWith('/')) continue;
      const p = posix.join(dir, argv[0]);
      try {
        const e = await this.d.driver.files.stat(id, p, { user: 'root' });
        if (e.type === 'file' || e.type === 'symlink') return [p, ...argv.slice(1)];
      } catch (err) {
        if (!(err instanceof SandboxdError && ['not_found', 'permission', 'validation'].includes(err.kind))) throw err;
      }
    }
    const message = `${argv[0]}: not found in PATH (${path})`;
    throw new SandboxdError('validation', message, { exitCode: 127, output: message });
  }

  // --- COPY

  private async copyStep(step: CopyStep, cur: Cursor, results: Cursor[], n: number): Promise<Cursor> {
    const from = step.from;
    if (from.kind === 'context' || from.kind === 'upload') {
      const ctx = from.kind === 'context' ? this.i.context : await this.upload(from.hash);
      if (!ctx) throw new SandboxdError('validation', 'This build has no context to copy from');
      const o = { chmod: step.chmod, add: step.add };
      const probe = await ctx.select(step.sources, step.dest, o);
      const extra = from.kind === 'upload' ? `${from.hash}\n${probe.hash}` : probe.hash;
      return this.fileStep(step, cur, n, extra, async (id) => {
        const owner = step.chown ? await this.ownerOf(id, step.chown) : undefined;
        const sel = owner ? await ctx.select(step.sources, step.dest, { ...o, owner }) : probe;
        await this.unpack(id, sel.dest, await this.withDestDir(id, sel));
      });
    }
    // From an earlier stage's result or an image: packed in a sandbox of it.
    let src: { ref: string; publicRef: string; key: string };
    if (from.kind === 'stage') {
      const r = results[from.stage];
      if (!r) throw new SandboxdError('validation', `Stage ${from.stage} is not built yet`);
      src = { ref: r.ref, publicRef: r.publicRef, key: r.key };
    } else {
      const { ref, info } = await this.resolve(from.ref);
      src = { ref, publicRef: from.ref, key: imageKey(info.digest) };
    }
    return this.fileStep(step, cur, n, src.key, (id) =>
      this.withSandbox({ ref: src.ref, publicRef: src.publicRef }, n, (srcId) => this.copyBetween(step, srcId, id)),
    );
  }

  /** COPY --from: each source path of sandbox `srcId` into `step.dest` of sandbox `id`, as Docker copies. */
  private async copyBetween(step: CopyStep, srcId: string, id: string): Promise<void> {
    const pack = this.d.driver.files.pack.bind(this.d.driver.files);
    const owner = step.chown ? await this.ownerOf(id, step.chown) : undefined;
    const many = step.sources.length > 1 || step.dest.endsWith('/');
    const destIsDir =
      many ||
      (await this.d.driver.files.stat(id, step.dest, { user: 'root' }).then(
        (e) => e.type === 'dir',
        () => false,
      ));
    for (const source of step.sources) {
      this.throwIfAborted();
      const stream = await pack(srcId, source, { follow: true });
      try {
        await this.copyPacked(stream, step, owner, destIsDir, id);
      } finally {
        stream.destroy();
      }
    }
  }

  private async copyPacked(
    stream: AsyncIterable<Uint8Array>,
    step: CopyStep,
    owner: { uid: number; gid: number } | undefined,
    destIsDir: boolean,
    id: string,
  ): Promise<void> {
    const entries = decodeCopyStream(stream);
    const it = entries[Symbol.asyncIterator]();
    const first = await it.next();
    if (first.done) return;
    const isDir = first.value.type === 'dir' && first.value.path === '';
    // A dir's content goes into dest; a file into dest (a dir) or as dest (a file path).
    const destDir = isDir || destIsDir ? step.dest : posix.dirname(step.dest);
    const rename = !isDir && !destIsDir ? posix.basename(step.dest) : null;
    const chmod = step.chmod;
    async function* all(): AsyncIterable<CopyEntry> {
      for (let r = first; !r.done; r = await it.next()) {
        const e = r.value;
        if (isDir && e.path === '') continue; // the dir itself is not copied, its content is
        const path = rename && e.path === first.value.path ? rename : e.path;
        yield {
          ...e,
          path,
          ...(owner ? { uid: owner.uid, gid: owner.gid } : {}),
          ...(chmod !== undefined && e.type !== 'symlink' ? { mode: chmod } : {}),
        };
      }
    }
    await this.unpack(id, destDir, all());
  }

  /** The entries of `sel`, led by `dest` itself with its mode and owner when the copy makes it. */
  private async withDestDir(id: string, sel: Selection): Promise<CopyEntry[]> {
    if (!sel.destDir || sel.entries[0]?.path === '') return sel.entries;
    const exists = await this.d.driver.files.stat(id, sel.dest, { user: 'root' }).then(
      () => true,
      () => false,
    );
    if (exists) return sel.entries;
    const { mode, uid, gid } = sel.destDir;
    return [{ path: '', type: 'dir', mode, uid, gid, size: 0 }, ...sel.entries];
  }

  private async unpack(
    id: string,
    dest: string,
    entries: Iterable<CopyEntry> | AsyncIterable<CopyEntry>,
  ): Promise<void> {
    const r = await this.d.driver.files.unpack(id, dest, encodeCopyStream(entries));
    this.i.log.system(` ---> ${r.entries} entries, ${r.bytes} bytes copied to ${dest}`);
  }

  private upload(hash: string): Promise<CopyContext & { close(): Promise<void> }> {
    let u = this.uploads.get(hash);
    if (!u) {
      u = this.d.openUpload(this.i.account.id, hash);
      this.uploads.set(hash, u);
    }
    return u;
  }

  // --- users and directories

  /** The numeric owner of `--chown=user[:group]`, names from the sandbox's own files; a user alone: its uid as gid too (Docker's). */
  private async ownerOf(id: string, chown: string): Promise<{ uid: number; gid: number }> {
    const [user, group] = chown.split(':', 2);
    const uid = /^\d+$/.test(user) ? Number(user) : await this.idOf(id, '/etc/passwd', user);
    const gid =
      group === undefined ? uid : /^\d+$/.test(group) ? Number(group) : await this.idOf(id, '/etc/group', group);
    return { uid, gid };
  }

  /** The id of `name` in the sandbox's /etc/passwd (uid) or /etc/group (gid); `validation` when it has none. */
  private async idOf(id: string, file: '/etc/passwd' | '/etc/group', name: string): Promise<number> {
    const text = await this.readSmall(id, file);
    if (file === '/etc/passwd') {
      const e = findUser(parsePasswd(text), name);
      if (e) return e.uid;
    } else {
      for (const line of text.split('\n')) {
        const f = line.split(':');
        if (f.length >= 3 && f[0] === name && /^\d+$/.test(f[2])) return Number(f[2]);
      }
    }
    if (name === 'root') return 0;
    throw new SandboxdError('validation', `Unknown ${file === '/etc/passwd' ? 'user' : 'group'}: ${name}`, { name });
  }

  /** What RUN runs as for `USER`'s value: the image's default when empty, `user:group` names made numeric. */
  private async userOf(id: string, user: string): Promise<string | undefined> {
    if (!user) return undefined;
    if (!user.includes(':') || /^\d+:\d+$/.test(user)) return user;
    const o = await this.ownerOf(id, user);
    return `${o.uid}:${o.gid}`;
  }

  private async readSmall(id: string, path: string): Promise<string> {
    let r: Awaited<ReturnType<RuntimeDriver['files']['read']>>;
    try {
      r = await this.d.driver.files.read(id, path, { user: 'root' });
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'not_found') return '';
      throw e;
    }
    if (r.unsatisfiable) return '';
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of r.body as AsyncIterable<Buffer>) {
      size += c.length;
      if (size > MAX_ID_FILE_BYTES) {
        r.body.destroy();
        throw new SandboxdError('validation', `${path} is larger than ${MAX_ID_FILE_BYTES} bytes`);
      }
      chunks.push(c);
    }
    return Buffer.concat(chunks).toString('utf8');
  }

  private async mkdirRoot(id: string, path: string): Promise<void> {
    if (path === '/' || path === '') return;
    try {
      await this.d.driver.files.mkdir(id, path, { user: 'root' });
    } catch (e) {
      if (!(e instanceof SandboxdError && e.kind === 'conflict')) throw e;
    }
  }

  // --- sandboxes and images

  /** Runs `fn` in a new sandbox of the account made from `from.ref`; the sandbox is deleted after, whatever happens. */
  private async withSandbox<T>(
    from: { ref: string; publicRef: string },
    n: number,
    fn: (id: string) => Promise<T>,
  ): Promise<T> {
    this.throwIfAborted();
    const rec = await this.createSandbox(from, n, this.live.size > 0);
    this.live.add(rec.id);
    try {
      this.throwIfAborted();
      return await fn(rec.id);
    } catch (e) {
      // A step cut short by a cancel fails for that reason, whatever its sandbox's going did to it.
      this.throwIfAborted();
      throw e;
    } finally {
      this.live.delete(rec.id);
      await this.dropSandbox(rec.id);
    }
  }

  /**
   * A step sandbox of the account. While the plan's concurrency is taken (by the account's
   * other sandboxes) or the host has no room, the step waits (saying so in the log) and
   * tries again every second, at most the step timeout; then it fails with that error.
   * A `second` one (COPY --from's source, beside the step's) on a plan of one sandbox at a
   * time could never come: refused at once.
   */
  private async createSandbox(from: { ref: string; publicRef: string }, n: number, second: boolean) {
    const plan = planOf(this.d.config as Config, this.i.account.plan);
    if (second && plan.concurrency < 2)
      throw new SandboxdError(
        'concurrency',
        `COPY --from needs two sandboxes at once (the source's and the step's); the plan allows ${plan.concurrency}`,
        { limit: plan.concurrency },
      );
    const req = {
      image: from.publicRef,
      timeoutMs: Math.min(this.d.config.buildStepTimeoutMs + 60_000, plan.maxLifetimeMs),
      metadata: { 'sandboxd.build': this.i.build.id, 'sandboxd.step': String(n) },
      network: { egress: this.i.egress },
      ports: { public: false },
    };
    const until = this.d.clock.now() + this.d.config.buildStepTimeoutMs;
    for (let said = ''; ; ) {
      try {
        return await this.d.sandboxes.create(this.i.account, req, { driverImage: from.ref, skipImageStart: true });
      } catch (e) {
        if (!(e instanceof SandboxdError && (e.kind === 'concurrency' || e.kind === 'capacity'))) throw e;
        if (this.d.clock.now() >= until) throw e;
        if (said !== e.kind) {
          said = e.kind;
          this.i.log.system(
            e.kind === 'concurrency'
              ? `Waiting for a sandbox: ${e.message} (the plan's concurrency limit; the build goes on when one ends)`
              : `Waiting for a sandbox: ${e.message}`,
            n,
          );
          await this.i.log.flush();
        }
        await abortableSleep(RETRY_MS, this.i.signal);
        this.throwIfAborted();
      }
    }
  }

  private async dropSandbox(id: string): Promise<void> {
    try {
      await this.d.sandboxes.delete(this.i.account.id, id);
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'not_found') return;
      this.d.log.warn({ err: e, sandboxId: id, buildId: this.i.build.id }, 'deleting a step sandbox failed');
    }
  }

  /** The sandbox's filesystem as layer `ref`; a layer another build of the account made under that name meanwhile is taken as is. */
  private async snapshot(id: string, ref: string, config: ImageConfigOverride): Promise<ImageInfo> {
    try {
      return await this.d.driver.snapshot(id, ref, { config });
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'conflict') return this.d.driver.resolveImage(ref);
      throw e;
    }
  }

  /** The image of the result: the target's last layer, or one derived from it with the final config. */
  private async finish(cur: Cursor): Promise<RunResult> {
    this.throwIfAborted();
    const config = finalConfig(cur);
    let ref = cur.ref;
    let info: ImageInfo | undefined;
    let layers = cur.layers;
    if (cur.refKey !== cur.key || cur.labels !== null) {
      // Config steps after the last layer, labels, or no layer at all: an image of its own.
      const key = configKey(cur.key, cur.cfg);
      const hit = this.i.noCache ? null : await this.d.cache.lookup(this.i.account.id, key);
      this.settleFrom(Boolean(hit));
      if (hit) {
        this.hold(hit.layer.driverRef);
        ({ info } = hit);
        ref = hit.layer.driverRef;
        layers = [...layers, hit.layer];
      } else {
        const old = await this.d.cache.lookup(this.i.account.id, key);
        ref = layerRef(this.i.account.id, old ? sha256(`${key}\n${this.i.build.id}`) : key);
        info = await this.derive(cur, ref, config);
        const at = this.d.clock.now();
        const layer: LayerRecord = {
          accountId: this.i.account.id,
          key,
          driverRef: ref,
          parentKey: cur.refKey,
          sizeBytes: info.sizeBytes,
          createdAt: at,
          lastUsedAt: at,
        };
        await this.d.cache.record(layer);
        this.hold(ref);
        this.newLayers.push(layer);
        if (old) await this.dropReplaced(old.layer);
        await this.d.cache.fit(this.i.account.id, this.quotaBytes);
        layers = [...layers, layer];
      }
    } else info = await this.d.driver.resolveImage(ref);
    return {
      driverRef: ref,
      digest: info.digest,
      sizeBytes: this.newLayers.reduce((s, l) => s + l.sizeBytes, 0),
      imageBytes: layers.reduce((s, l) => s + l.sizeBytes, 0),
    };
  }

  /** Image `to` with the files of `cur.ref` and `config` (one made under that name meanwhile is taken as is). */
  private async derive(cur: Cursor, to: string, config: ImageConfigOverride): Promise<ImageInfo> {
    const { account } = this.i;
    try {
      return await this.d.driver.deriveImage(cur.ref, to, config, {
        pullAs: { accountId: account.id, admin: account.admin },
      });
    } catch (e) {
      if (e instanceof SandboxdError && e.kind === 'conflict') return this.d.driver.resolveImage(to);
      throw e;
    }
  }

  /** The image a new layer of the same key replaced (noCache), unless it is still in use. */
  private async dropReplaced(old: LayerRecord): Promise<void> {
    await this.d.cache
      .discard(old)
      .catch((err) => this.d.log.warn({ err, image: old.driverRef }, 'removing a replaced build layer failed'));
  }

  // --- bookkeeping

  private hold(ref: string): void {
    this.d.cache.hold(ref);
    this.held.push(ref);
  }

  private count(cached: boolean): void {
    this.done++;
    if (cached) this.cached++;
    this.settleFrom(cached);
    this.i.progress(this.done, this.cached);
  }

  /** The stage's FROM counts as cached when the first step after it (or its result) came from the cache. */
  private settleFrom(cached: boolean): void {
    if (!this.fromPending) return;
    this.fromPending = false;
    if (cached && !this.i.noCache) this.cached++;
  }

  private throwIfAborted(): void {
    if (this.i.signal.aborted)
      throw this.i.signal.reason instanceof BuildAborted ? this.i.signal.reason : new BuildAborted('cancel');
  }

  /** A cancel or a shutdown: the running process is killed and every step sandbox goes. */
  private onAbort(): void {
    this.current?.kill('SIGKILL');
    for (const id of this.live) void this.dropSandbox(id);
  }
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/** How often a step waiting for a sandbox (the plan's concurrency, a full host) tries again. */
const RETRY_MS = 1000;

/** Resolves after `ms`, or at once when `signal` aborts. */
function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** The config of a base image as the runtime describes it. */
function configOf(info: ImageInfo): ImageConfig {
  return {
    env: { ...info.env },
    workingDir: info.workingDir || '/',
    user: info.user ?? '',
    entrypoint: info.entrypoint ?? null,
    cmd: info.cmd ?? null,
    labels: { ...info.labels },
    exposedPorts: [],
    shell: [...DEFAULT_SHELL],
  };
}

function cloneConfig(c: ImageConfig): ImageConfig {
  return { ...c, env: { ...c.env }, labels: { ...c.labels }, exposedPorts: [...c.exposedPorts], shell: [...c.shell] };
}

/** `cur` after a config step: env and labels merged by key, exposed ports added, every other field replaced. */
function applyConfig(cur: Cursor, set: Partial<ImageConfig>): Cursor {
  const cfg = cloneConfig(cur.cfg);
  let labels = cur.labels;
  if (set.env) Object.assign(cfg.env, set.env);
  if (set.labels) {
    labels = { ...(labels ?? {}), ...set.labels };
    Object.assign(cfg.labels, set.labels);
  }
  if (set.exposedPorts) cfg.exposedPorts = [...new Set([...cfg.exposedPorts, ...set.exposedPorts])].sort();
  if (set.workingDir !== undefined) cfg.workingDir = set.workingDir;
  if (set.user !== undefined) cfg.user = set.user;
  if (set.shell !== undefined) cfg.shell = [...set.shell];
  if (set.cmd !== undefined) cfg.cmd = set.cmd;
  if (set.entrypoint !== undefined) cfg.entrypoint = set.entrypoint;
  return {
    ...cur,
    cfg,
    labels,
    setCmd: cur.setCmd || set.cmd !== undefined,
    setEntrypoint: cur.setEntrypoint || set.entrypoint !== undefined,
  };
}

/** The config of a step's layer: everything but the labels the build set (those wait for the result). */
function layerConfig(c: Cursor): ImageConfigOverride {
  return {
    env: { ...c.cfg.env },
    ...(c.cfg.workingDir ? { workingDir: c.cfg.workingDir } : {}),
    ...(c.cfg.user ? { user: c.cfg.user } : {}),
    ...(c.setCmd ? { cmd: c.cfg.cmd } : {}),
    ...(c.setEntrypoint ? { entrypoint: c.cfg.entrypoint } : {}),
  };
}

/** The config of the result: the layers' and the labels the build set, over the base's. */
function finalConfig(c: Cursor): ImageConfigOverride {
  return { ...layerConfig(c), ...(c.labels ? { labels: { ...(c.baseLabels ?? {}), ...c.labels } } : {}) };
}

/** `e` as the failure of step `n` (`step`: a plan step or a stage's FROM). */
function stepError(e: unknown, step: { line: number; text?: string }, n: number): unknown {
  if (e instanceof BuildAborted) return e;
  const instruction = step.text ?? '';
  const base = e instanceof SandboxdError ? e : null;
  const kind: ErrorKind = base?.kind ?? 'internal';
  const message = base ? base.message : 'The step failed in the runtime';
  const details = {
    ...(base?.details && typeof base.details === 'object' && !Array.isArray(base.details)
      ? (base.details as Record<string, unknown>)
      : {}),
    step: n,
    line: step.line,
    instruction,
  };
  const out = new SandboxdError(kind, `Step ${n} (line ${step.line}) failed: ${instruction}: ${message}`, details);
  if (!base) out.cause = e;
  return out;
}
