/**
 * The image store of the local runtime driver: resolves image references to read-only
 * rootfs dirs on this host, pulling (skopeo), importing archives or building the two local
 * images as needed, unpacking each image once (umoci) into a dir shared by all sandboxes.
 * Layout on disk: see catalog.ts.
 */
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve as resolvePath } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import type { ImageInfo } from '../../driver.js';
import { buildLocalLayout, isLocalImage, type LocalImageRef } from './build-local.js';
import { Catalog, type RefEntry, type RefOrigin } from './catalog.js';
import { NoSuchImage, selectImage } from './oci-read.js';
import { pullToLayout, type Progress } from './pull.js';
import { parseRef, type ImageRef } from './ref.js';
import { canIsolatePulls, isNotFound, type NetnsExit } from './skopeo.js';
import { checkHost, DialGuard, systemLookup, type Lookup } from './dial-guard.js';
import {
  OPERATOR,
  PullPolicy,
  refusedAddress,
  registryEndpoint,
  type Puller,
  type RegistryCredentials,
} from './pull-policy.js';
import { fromArchive, fromLayoutDir, type PreparedSource } from './source.js';
import { ToolError } from './run.js';
import { removeTree, TempArea } from './tmp.js';
import { Installer } from './installer.js';
import { SnapshotStore } from './snapshots.js';
import { type ImageRecord, stringLabels } from './unpack.js';

export type { Progress } from './pull.js';
export type { Puller } from './pull-policy.js';
export { LOCAL_IMAGES, type LocalImageRef } from './build-local.js';

export interface ImageStoreOptions {
  /** Cache root, e.g. `<dataDir>/images`; created if missing. */
  dir: string;
  /**
   * Registry credentials by host[:port] (`docker.io` for Docker Hub); they serve the admin's
   * pulls, and tenants' only as their `accounts` says (see pull-policy.ts).
   */
  credentials?: Record<string, RegistryCredentials>;
  /**
   * Registries tenants may pull from (`*`: any); default DEFAULT_REGISTRIES_ALLOWED. A
   * registry named here may also be at a loopback or private address (see pull-policy.ts).
   */
  registriesAllowed?: readonly string[];
  /** Name resolution of the pulls' connections (tests); default the system's. */
  lookup?: Lookup;
  /** host:port reached over plain http / without TLS verification. */
  insecureRegistries?: string[];
  /** Time limits in ms (defaults: pull 20 min, import 20 min, unpack 20 min, build 30 min). */
  timeouts?: { pullMs?: number; importMs?: number; unpackMs?: number; buildMs?: number };
  /** apt sources for the Debian build (see DebianBuildOptions.mirrors); default deb.debian.org. */
  debianMirrors?: string[];
  /** Diagnostics (stale temp dirs, build steps at `info`; what an operator should act on at `warn`). */
  log?: (msg: string, level?: 'info' | 'warn') => void;
}

/** An image ready to run: its config and the shared read-only rootfs. */
export interface StoredImage extends ImageInfo {
  /** Unpacked rootfs. Shared by every sandbox and every ref of this digest: never write to it. */
  rootfsDir: string;
  /** Normalised reference (`debian` -> `docker.io/library/debian:latest`). */
  canonicalRef: string;
  /** Manifest the rootfs came from (`digest` is the config digest, docker's image id). */
  manifestDigest: string;
  entrypoint: string[];
  cmd: string[];
  /** The config's `Labels` (see ../service.ts for those sandboxd reads). */
  labels: Record<string, string>;
}

export type OnProgress = (p: Progress) => void;

/** What the driver reports of a stored image (its config included, not its rootfs). */
export function imageInfoOf(i: StoredImage): ImageInfo {
  return {
    ref: i.ref,
    digest: i.digest,
    env: i.env,
    workingDir: i.workingDir,
    user: i.user,
    sizeBytes: i.sizeBytes,
    entrypoint: i.entrypoint,
    cmd: i.cmd,
    labels: i.labels,
  };
}

/** Whose pull this is; default {@link OPERATOR} (the host's own config, admin routes). */
export interface PullAs {
  puller?: Puller;
}

const MIN = 60_000;

/**
 * What a namespaced pull from the operator's registry at a loopback address needs: skopeo
 * (Go) dials such a registry directly, never through a proxy, so inside the namespace its
 * address and port are listened on and tunnelled to it through the guard.
 */
function loopbackListeners(ep: { host: string; port: number }): NetnsExit['listeners'] {
  const h = ep.host.toLowerCase();
  const binds = h === 'localhost' ? ['127.0.0.1', '::1'] : /^127\.|^::1$|^::ffff:127\./.test(h) ? [h] : [];
  const target = h.includes(':') ? `[${h}]:${ep.port}` : `${h}:${ep.port}`;
  return binds.map((bind) => ({ bind, port: ep.port, target }));
}

function notFound(ref: string, cause?: unknown): SandboxdError {
  const e = new SandboxdError('template_not_found', 'Template not found', { image: ref });
  if (cause !== undefined) (e as Error).cause = cause;
  return e;
}

export class ImageStore {
  private readonly cat: Catalog;
  private readonly tmp: TempArea;
  private readonly installer: Installer;
  private readonly jobs = new Map<string, Promise<ImageRecord>>();
  /** The last write of each ref's entry after a pull (they are made one at a time per ref). */
  private readonly refWrites = new Map<string, Promise<unknown>>();
  private readonly policy: PullPolicy;
  private warnedIsolation = false;
  private readonly counts = { pulls: 0, imports: 0, builds: 0 };
  /** Labels of local builds whose records lack them, read from their layouts, by digest. */
  private readonly layoutLabels = new Map<string, Record<string, string>>();
  /** Images made from sandboxes (`snapshot/<owner>/<name>`, never pulled): see snapshots.ts. */
  readonly snapshots: SnapshotStore;

  /** Work done by this instance (for tests and metrics). */
  get stats(): { pulls: number; imports: number; builds: number; unpacks: number } {
    return { ...this.counts, unpacks: this.installer.unpacks };
  }

  /** Creates the dirs and deletes work dirs left by dead processes (synchronous). */
  constructor(private readonly opts: ImageStoreOptions) {
    this.cat = new Catalog(resolvePath(opts.dir));
    this.tmp = new TempArea(join(this.cat.root, 'tmp'));
    this.installer = new Installer(this.cat, opts.timeouts?.unpackMs ?? 20 * MIN);
    this.snapshots = new SnapshotStore(this.cat, this.tmp);
    this.policy = new PullPolicy({ registriesAllowed: opts.registriesAllowed, credentials: opts.credentials });
    const removed = this.tmp.cleanStale(opts.log);
    if (removed.length) opts.log?.(`image store: removed ${removed.length} stale work dir(s)`);
  }

  /**
   * The image for `ref`: from the cache, else built (`local/debian:bookworm`,
   * `local/busybox:latest`), else pulled; a `snapshot/...` ref only from the cache.
   * Concurrent calls for one ref share the work.
   * A cached tag is not re-checked against its registry (use {@link pull} to refresh).
   * A registry image follows the pull policy for `opts.puller` (pull-policy.ts), cached or
   * not: refused when `puller` may not pull from its registry; when it was pulled with the
   * server's credentials and those do not serve `puller`, not cached for `puller`, who
   * makes its own pull (see {@link cachedFor}).
   * Throws `validation` (bad ref, or a pull the policy refuses), `template_not_found`
   * (unknown image, tag, registry, or other `local/` name), `internal`.
   */
  async resolve(ref: string, opts: PullAs = {}): Promise<StoredImage> {
    const r = parseRef(ref);
    const puller = opts.puller ?? OPERATOR;
    if (!r.local) this.policy.check(r.domain, puller, ref);
    const hit = await this.cachedFor(r, puller);
    if (hit) return this.view(await this.withLabels(hit, r), ref, r.canonical);
    const rec = await this.once(this.jobKey(r, puller), async () => {
      const again = await this.cachedFor(r, puller);
      if (again) return again;
      if (!r.local) return this.doPull(r, ref, puller);
      if (r.snapshot) throw notFound(ref);
      if (!isLocalImage(r.canonical)) throw notFound(ref);
      return this.doBuild(r.canonical);
    });
    return this.view(await this.withLabels(rec, r), ref, r.canonical);
  }

  /**
   * `rec` with its labels: a record written before labels were kept has none, except a
   * local build's, whose labels are read from its kept layout (when it is that image).
   */
  private async withLabels(rec: ImageRecord, r: ImageRef): Promise<ImageRecord> {
    if (rec.labels !== undefined || !r.local || r.snapshot) return rec;
    let labels = this.layoutLabels.get(rec.digest);
    if (!labels) {
      labels = {};
      const layout = this.cat.layoutDir(r.canonical);
      const tag = r.canonical.slice(r.canonical.lastIndexOf(':') + 1);
      const image = await selectImage(layout, tag).catch(() => null);
      if (image?.configDigest === rec.digest) labels = stringLabels(image.config.config?.Labels);
      this.layoutLabels.set(rec.digest, labels);
    }
    return { ...rec, labels };
  }

  /** Pulls `ref` from its registry even if cached (a moved tag is followed), as `opts.puller` (see {@link resolve}). */
  async pull(ref: string, opts: { onProgress?: OnProgress } & PullAs = {}): Promise<StoredImage> {
    const r = parseRef(ref);
    if (r.local)
      throw new SandboxdError(
        'validation',
        `${r.snapshot ? 'snapshot/ images are made from sandboxes' : 'local/ images are built on this host'}, not pulled`,
        { image: ref },
      );
    const puller = opts.puller ?? OPERATOR;
    this.policy.check(r.domain, puller, ref);
    const rec = await this.once(this.jobKey(r, puller), () => this.doPull(r, ref, puller, opts.onProgress));
    return this.view(rec, ref, r.canonical);
  }

  /**
   * Imports an OCI layout dir, an OCI archive tar or a `docker save` tar and names it `ref`
   * (default: the name the archive records). With several images inside, `ref` (or its tag)
   * picks one. Throws `validation` for anything unreadable or ambiguous.
   */
  async importArchive(path: string, ref?: string): Promise<StoredImage> {
    const want = ref === undefined ? undefined : parseRef(ref);
    const abs = resolvePath(path);
    const st = await stat(abs).catch(() => undefined);
    if (!st) throw new SandboxdError('validation', 'Cannot import image: no such file or directory', { path });
    this.counts.imports++;
    return this.tmp.with('import', async (work) => {
      let src: PreparedSource;
      try {
        src = st.isDirectory()
          ? await fromLayoutDir(abs, want?.canonical, work)
          : await fromArchive(abs, want?.canonical, work, this.opts.timeouts?.importMs ?? 20 * MIN);
      } catch (e) {
        if (e instanceof ToolError || e instanceof NoSuchImage) {
          throw new SandboxdError('validation', `Cannot import image: ${e.message}`, { path });
        }
        throw e;
      }
      const canonical = want?.canonical ?? src.ownName;
      if (canonical?.startsWith('snapshot/'))
        throw new SandboxdError('validation', 'Cannot import image: snapshot/ names are for snapshots', { path });
      if (!canonical)
        throw new SandboxdError('validation', 'Cannot import image: the archive does not name it; pass a ref', {
          path,
        });
      const rec = await this.installer.install(src, work);
      await this.cat.setRef(canonical, rec.digest, 'import');
      return this.view(rec, ref ?? canonical, canonical);
    });
  }

  /**
   * (Re)builds one of the local images offline as an OCI layout (kept, see
   * {@link builtLayout}), then unpacks it like any other image. Debian takes minutes.
   */
  async build(ref: LocalImageRef, opts: { onProgress?: OnProgress } = {}): Promise<StoredImage> {
    const r = parseRef(ref);
    if (!isLocalImage(r.canonical)) throw notFound(ref);
    const rec = await this.once(r.canonical, () => this.doBuild(r.canonical as LocalImageRef, opts.onProgress));
    return this.view(rec, ref, r.canonical);
  }

  /** Whether `ref` is cached (no pull, no build). Throws `validation` for a bad ref. */
  async has(ref: string): Promise<boolean> {
    return (await this.cat.lookup(parseRef(ref).canonical)) !== undefined;
  }

  /** Every cached ref, by canonical ref (`ref` is the canonical ref here). */
  async list(): Promise<StoredImage[]> {
    const out: StoredImage[] = [];
    for (const e of await this.cat.allRefs()) {
      const rec = await this.cat.image(e.digest);
      if (rec) out.push(this.view(rec, e.ref, e.ref));
    }
    return out;
  }

  /**
   * Forgets `ref`; deletes its rootfs when no other ref names that digest. The caller must
   * make sure no sandbox still uses that rootfs. Throws `template_not_found` if not cached.
   */
  async remove(ref: string): Promise<void> {
    const r = parseRef(ref);
    const entry = await this.cat.ref(r.canonical);
    if (!entry || !(await this.cat.deleteRef(r.canonical))) throw notFound(ref);
    const still = (await this.cat.allRefs()).some((e) => e.digest === entry.digest);
    if (!still) await this.dropDigest(entry.digest);
  }

  /**
   * Deletes unpacked images no ref names, except digests in `inUse` and images unpacked in
   * the last `minAgeMs` (default a minute: their ref may be about to be written).
   * Returns the digests deleted.
   */
  async prune(inUse: Iterable<string> = [], { minAgeMs = MIN } = {}): Promise<string[]> {
    const keep = new Set([...inUse, ...(await this.cat.allRefs()).map((e) => e.digest)]);
    const gone: string[] = [];
    for (const d of await this.cat.allDigests()) {
      if (keep.has(d) || this.installer.busy(d)) continue;
      const age = await stat(join(this.cat.imageDir(d), 'image.json')).then(
        (st) => Date.now() - st.mtimeMs,
        () => Infinity,
      );
      if (age < minAgeMs) continue;
      await this.dropDigest(d);
      gone.push(d);
    }
    return gone;
  }

  /** The record and rootfs dir of the unpacked image of config digest `digest`, or undefined. */
  async byDigest(digest: string): Promise<{ record: ImageRecord; rootfsDir: string } | undefined> {
    const record = await this.cat.image(digest).catch(() => undefined);
    return record && { record, rootfsDir: this.cat.rootfsDir(record.digest) };
  }

  /**
   * `rec` (an image of the catalog, as {@link byDigest} gives it) with its labels, when it
   * was recorded before labels were kept and `ref` is the local build it came from.
   */
  async withLabelsOf(rec: ImageRecord, ref: string): Promise<ImageRecord> {
    return this.withLabels(rec, parseRef(ref));
  }

  /** The store's view of a record (an image of the catalog) under `ref`. */
  viewOf(rec: ImageRecord, ref: string): StoredImage {
    return this.view(rec, ref, ref);
  }

  /** OCI layout dir of a local image built here (tag = the ref's tag), or null. */
  async builtLayout(ref: LocalImageRef): Promise<string | null> {
    const dir = this.cat.layoutDir(parseRef(ref).canonical);
    return (await stat(join(dir, 'index.json')).catch(() => null)) ? dir : null;
  }

  /**
   * The cached image of `r` if it may be served to `puller`: any `local/` or `snapshot/`
   * one; a registry image unless it was pulled with the server's credentials and those do
   * not serve `puller` ({@link pulledWithCredentials}).
   */
  private async cachedFor(r: ImageRef, puller: Puller): Promise<ImageRecord | undefined> {
    const hit = await this.cat.lookup(r.canonical);
    if (!hit) return undefined;
    if (r.local || !this.pulledWithCredentials(r, hit.entry)) return hit.record;
    return this.policy.servesCredentialed(r.domain, puller) ? hit.record : undefined;
  }

  /**
   * Whether the cache entry `e` of `r` holds an image pulled with the server's credentials.
   * An entry that does not say (written before this was recorded) counts as one when the
   * server has credentials for that registry: they may well have been used.
   */
  private pulledWithCredentials(r: ImageRef, e: RefEntry): boolean {
    return e.origin === undefined ? this.policy.hasCredentials(r.domain) : e.origin === 'credentials';
  }

  /**
   * Records that `puller`'s pull of `r` (with the server's credentials or not: `origin`)
   * found image `digest`. The entry of a pull with credentials is never taken from the pulls
   * they serve by another's pull: a pull without them replaces it only when it found the
   * same image (which is then known to be anyone's), or when `puller` is served that entry
   * anyway. A pull with credentials that finds the image a pull without them found leaves it
   * anyone's. Writes of one ref are made one at a time.
   */
  private recordPull(r: ImageRef, digest: string, origin: RefOrigin, puller: Puller): Promise<void> {
    const write = async () => {
      const prev = await this.cat.ref(r.canonical);
      const same = prev?.digest === digest;
      const closed = prev !== undefined && this.pulledWithCredentials(r, prev);
      if (origin === 'credentials') {
        await this.cat.setRef(r.canonical, digest, same && !closed ? (prev.origin ?? 'anonymous') : 'credentials');
        return;
      }
      if (closed && !same && !this.policy.servesCredentialed(r.domain, puller)) return;
      await this.cat.setRef(r.canonical, digest, origin);
    };
    const done = (this.refWrites.get(r.canonical) ?? Promise.resolve()).then(write, write);
    const tail = done.catch(() => {});
    this.refWrites.set(r.canonical, tail);
    void tail.then(() => {
      if (this.refWrites.get(r.canonical) === tail) this.refWrites.delete(r.canonical);
    });
    return done;
  }

  /**
   * Resolves and pulls of one ref share the work only when they would use the same
   * credentials and be served the same cache entries (a job may end in a cache hit).
   */
  private jobKey(r: ImageRef, puller: Puller): string {
    if (r.local) return r.canonical;
    const creds = this.policy.credentialsFor(r.domain, puller) ? 'credentials' : 'anonymous';
    const served = this.policy.servesCredentialed(r.domain, puller) ? '+cached' : '';
    return `${r.canonical}\0${creds}${served}`;
  }

  private once(key: string, fn: () => Promise<ImageRecord>): Promise<ImageRecord> {
    const cur = this.jobs.get(key);
    if (cur) return cur;
    const p = fn().finally(() => this.jobs.delete(key));
    this.jobs.set(key, p);
    return p;
  }

  private view(rec: ImageRecord, ref: string, canonical: string): StoredImage {
    return {
      ref,
      canonicalRef: canonical,
      digest: rec.digest,
      manifestDigest: rec.manifestDigest,
      env: { ...rec.env },
      workingDir: rec.workingDir,
      user: rec.user,
      sizeBytes: rec.sizeBytes,
      entrypoint: [...rec.entrypoint],
      cmd: [...rec.cmd],
      labels: { ...(rec.labels ?? {}) },
      rootfsDir: this.cat.rootfsDir(rec.digest),
    };
  }

  /**
   * Pulls through a {@link DialGuard}: every connection skopeo makes is checked there. The
   * registry's own name is checked here first, as skopeo (Go) skips a proxy for `localhost`
   * and literal loopback addresses.
   */
  private async doPull(r: ImageRef, given: string, puller: Puller, onProgress?: OnProgress): Promise<ImageRecord> {
    const insecure = (this.opts.insecureRegistries ?? []).includes(r.domain);
    const ep = registryEndpoint(r.domain, insecure);
    const listed = this.policy.listed(r.domain);
    const lookup = this.opts.lookup ?? systemLookup;
    const first = await checkHost(ep.host, listed, lookup);
    if (!first.ok && first.refused) throw refusedAddress(given, r.domain, { ...ep, own: true }, first.address);
    if (!first.ok) throw notFound(given, new Error(first.error));
    this.counts.pulls++;
    const exempt = (host: string, port: number) => listed && host === ep.host.toLowerCase() && port === ep.port;
    return this.tmp.with('pull', async (work) => {
      let src: PreparedSource;
      // In a network namespace of its own, skopeo's only way out is the guard's socket.
      const isolated = await canIsolatePulls();
      if (!isolated && !this.warnedIsolation) {
        this.warnedIsolation = true;
        this.opts.log?.(
          'image store: pulls run without a network namespace (needs root and unshare): a registry redirect to a literal loopback address is not stopped',
          'warn',
        );
      }
      const credentials = this.policy.credentialsFor(r.domain, puller);
      const sockDir = !isolated ? undefined : work.length < 90 ? work : await mkdtemp(join(tmpdir(), 'sbx-pull-'));
      const socketPath = sockDir && join(sockDir, 'guard.sock');
      const guard = await DialGuard.start({ exempt, lookup, socketPath });
      try {
        src = await pullToLayout(r, work, {
          credentials,
          insecure,
          env: socketPath ? undefined : guard.env(),
          netns: socketPath
            ? { socket: socketPath, token: guard.token, listeners: listed ? loopbackListeners(ep) : [] }
            : undefined,
          timeoutMs: this.opts.timeouts?.pullMs ?? 20 * MIN,
          onProgress,
        });
      } catch (e) {
        const refusal = guard.refusal;
        if (refusal) {
          const own = refusal.host.toLowerCase() === ep.host.toLowerCase() && refusal.port === ep.port;
          throw refusedAddress(given, r.domain, { host: refusal.host, port: refusal.port, own }, refusal.detail);
        }
        if (e instanceof NoSuchImage || isNotFound(e) || (guard.events.length > 0 && !(e as ToolError).timedOut))
          throw notFound(given, e);
        if (e instanceof ToolError && e.timedOut)
          throw new SandboxdError('internal', 'Image pull timed out', { image: given });
        throw new SandboxdError('internal', `Image pull failed: ${(e as Error).message}`, { image: given });
      } finally {
        await guard.close();
        if (sockDir && sockDir !== work) await rm(sockDir, { recursive: true, force: true });
      }
      onProgress?.({ phase: 'unpacking' });
      const rec = await this.installer.install(src, work);
      await this.recordPull(r, rec.digest, credentials ? 'credentials' : 'anonymous', puller);
      onProgress?.({ phase: 'done', bytes: rec.sizeBytes });
      return rec;
    });
  }

  private async doBuild(canonical: LocalImageRef, onProgress?: OnProgress): Promise<ImageRecord> {
    this.counts.builds++;
    const tag = canonical.slice(canonical.lastIndexOf(':') + 1);
    return this.tmp.with('build', async (work) => {
      const layout = join(work, 'layout');
      const scratch = await this.tmp.make('scratch');
      onProgress?.({ phase: 'bootstrapping' });
      try {
        const { debianMirrors, log } = this.opts;
        await buildLocalLayout(canonical, layout, scratch, {
          timeoutMs: this.opts.timeouts?.buildMs ?? 30 * MIN,
          debianMirrors,
          log,
          previousLayout: await this.builtLayout(canonical),
        });
      } catch (e) {
        if (e instanceof ToolError)
          throw new SandboxdError('internal', `Building ${canonical} failed: ${e.message}`, { image: canonical });
        throw e;
      } finally {
        await removeTree(scratch);
      }
      onProgress?.({ phase: 'unpacking' });
      const rec = await this.installer.install({ layout, tag, image: await selectImage(layout, tag) }, work);
      await this.tmp.replaceDir(layout, this.cat.layoutDir(canonical));
      await this.cat.setRef(canonical, rec.digest);
      onProgress?.({ phase: 'done', bytes: rec.sizeBytes });
      return rec;
    });
  }

  private async dropDigest(digest: string): Promise<void> {
    if (!(await this.tmp.discard(this.cat.imageDir(digest)))) {
      this.opts.log?.(`image store: ${digest} has mounts inside; moved to tmp/ but not deleted`, 'warn');
    }
  }
}
