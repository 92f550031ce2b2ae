/**
 * The on-disk catalog of the image store:
 *
 *   <dir>/by-digest/<config hex>/rootfs/      unpacked image, read-only by contract
 *   <dir>/by-digest/<config hex>/image.json   its ImageRecord
 *   <dir>/refs/<sha256 of canonical ref>.json { ref, digest, updatedAt, origin? }: several refs may share a digest
 *   <dir>/layouts/<name>/                     OCI layouts of images built here
 *   <dir>/tmp/                                work dirs (see tmp.ts)
 *
 * A by-digest dir only ever appears by an atomic rename of a complete one, and a ref file
 * only after its image, so whatever is found here is whole.
 */
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync } from 'node:fs';
import { link, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ImageRecord } from './unpack.js';

/**
 * How a ref's image came into the cache: pulled with the server's registry credentials,
 * pulled without any, or imported by the operator. The store serves a `credentials` one
 * from the cache only to pullers those credentials serve (store.ts).
 */
export type RefOrigin = 'credentials' | 'anonymous' | 'import';

export interface RefEntry {
  /** Canonical reference. */
  ref: string;
  /** Config digest of the image it names. */
  digest: string;
  updatedAt: string;
  /**
   * Absent on builds (`local/`), snapshots, and on every ref written before it was recorded
   * (the store then decides by the registry's credentials, see store.ts).
   */
  origin?: RefOrigin;
}

export class Catalog {
  readonly byDigest: string;
  readonly refs: string;
  readonly layouts: string;

  constructor(readonly root: string) {
    this.byDigest = join(root, 'by-digest');
    this.refs = join(root, 'refs');
    this.layouts = join(root, 'layouts');
    for (const d of [root, this.byDigest, this.refs, this.layouts]) mkdirSync(d, { recursive: true });
    // Images are unpacked as real root, exactly as their layers say: setuid-root binaries and
    // device nodes of any image anyone asked for lie below by-digest/. Nobody but root may
    // reach them (sandboxes see images only through idmapped nodev mounts that root makes,
    // and run with no_new_privs). The folder is always ours, never a shared one like /tmp;
    // without root the driver refuses to start anyway (init says why).
    if (process.getuid?.() === 0) chmodSync(this.byDigest, 0o700);
  }

  imageDir(digest: string): string {
    const hex = digest.replace(/^sha256:/, '');
    if (!/^[a-f0-9]{64}$/.test(hex)) throw new Error(`bad image digest ${digest}`);
    return join(this.byDigest, hex);
  }

  rootfsDir(digest: string): string {
    return join(this.imageDir(digest), 'rootfs');
  }

  private refFile(canonical: string): string {
    return join(this.refs, `${createHash('sha256').update(canonical).digest('hex')}.json`);
  }

  /** Record of an unpacked image, or undefined. */
  async image(digest: string): Promise<ImageRecord | undefined> {
    return readSmallJson<ImageRecord>(join(this.imageDir(digest), 'image.json'));
  }

  async ref(canonical: string): Promise<RefEntry | undefined> {
    const e = readSmallJson<RefEntry>(this.refFile(canonical));
    return e && e.ref === canonical ? e : undefined;
  }

  /** The image a ref names, if both exist. */
  async lookup(canonical: string): Promise<{ entry: RefEntry; record: ImageRecord } | undefined> {
    const entry = await this.ref(canonical);
    const record = entry && (await this.image(entry.digest));
    return entry && record ? { entry, record } : undefined;
  }

  /** Points `canonical` at `digest`, recording its `origin` if given (atomic replace). */
  async setRef(canonical: string, digest: string, origin?: RefOrigin): Promise<void> {
    const file = this.refFile(canonical);
    // Its own temp file: two writes of one ref at once must not rename each other's.
    const tmp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
    const entry: RefEntry = { ref: canonical, digest, updatedAt: new Date().toISOString(), ...(origin && { origin }) };
    await writeFile(tmp, JSON.stringify(entry));
    await rename(tmp, file);
  }

  /** Creates ref `canonical` -> `digest` unless the ref exists (then false): atomic, one creator wins. */
  async createRef(canonical: string, digest: string): Promise<boolean> {
    const file = this.refFile(canonical);
    const tmp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
    const entry: RefEntry = { ref: canonical, digest, updatedAt: new Date().toISOString() };
    await writeFile(tmp, JSON.stringify(entry));
    try {
      await link(tmp, file);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw e;
    } finally {
      await rm(tmp, { force: true });
    }
  }

  /** Deletes a ref; false if it did not exist. */
  async deleteRef(canonical: string): Promise<boolean> {
    if (!(await this.ref(canonical))) return false;
    await rm(this.refFile(canonical), { force: true });
    return true;
  }

  async allRefs(): Promise<RefEntry[]> {
    const out: RefEntry[] = [];
    for (const f of await readdir(this.refs)) {
      if (!f.endsWith('.json')) continue;
      let e: RefEntry | undefined;
      try {
        e = readSmallJson<RefEntry>(join(this.refs, f));
      } catch {
        e = undefined;
      }
      if (e?.ref && e.digest) out.push(e);
    }
    return out.sort((a, b) => a.ref.localeCompare(b.ref));
  }

  /** Digests that have an unpacked dir. */
  async allDigests(): Promise<string[]> {
    return (await readdir(this.byDigest)).filter((h) => /^[a-f0-9]{64}$/.test(h)).map((h) => `sha256:${h}`);
  }

  /** Dir of the kept OCI layout of a locally built image (`local/debian:bookworm` -> `debian_bookworm`). */
  layoutDir(canonical: string): string {
    return join(this.layouts, canonical.replace(/^local\//, '').replace(/[^a-z0-9._-]/g, '_'));
  }
}

/**
 * A small JSON file (a ref, an image record), or undefined when there is none. Read
 * synchronously: every create resolves its image, and two files through the thread pool
 * take ~0.5 ms of waiting where reading them here takes ~30 microseconds.
 */
function readSmallJson<T>(path: string): T | undefined {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as T;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}
