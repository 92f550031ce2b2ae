import { type FileEntry, MAX_PATH_BYTES, SandboxdError } from '@sandboxd/protocol';
import type { FileList, FileMetadata, FileRead, FileUserInfo, FileWatch, ParentsAsRoot } from '../runtime/files.js';
import { DEFAULT_FAIR_SHARE, type FairShareConfig } from '../config-fair-share.js';
import type { ServiceDeps } from './context.js';
import type { SandboxService } from './sandboxes.js';
import { Slots } from './slots.js';
import { assertStarted, whileRunning } from './started.js';
import type { StorageGuard } from './storage.js';

/** Watches one sandbox may hold open at once, by default (`SANDBOXD_FAIR_SHARE_WATCHES_PER_SANDBOX`). */
export const MAX_WATCHES_PER_SANDBOX = DEFAULT_FAIR_SHARE.watchesPerSandbox;

/** The per-sandbox shares a {@link FileService} enforces. */
export type FileShares = Pick<FairShareConfig, 'watchesPerSandbox' | 'fileTransfersPerSandbox'>;

/** Where each path of a request came from, for error details (`{in: 'query', path: '/path'}`). */
type PathArgs = Record<string, { value: string; in: 'query' | 'body' }>;

/**
 * File operations on a started sandbox, done inside it by the driver (its agent), as the
 * sandbox's user or `user`. Checks ownership (`not_found`), state (`conflict`) and paths
 * (`validation`: absolute, no NUL, at most 4096 bytes) before anything runs. Watches and
 * transfers (reads, writes and listings, which hold a process in the sandbox and buffers
 * here) are counted per sandbox against `shares`, in this process: the native routes and
 * the E2B door share one count.
 */
export class FileService {
  private readonly watches = new Slots();
  private readonly transfers = new Slots();
  private readonly shares: FileShares;

  constructor(
    private readonly d: Pick<ServiceDeps, 'driver' | 'clock'> & { storage: StorageGuard; shares?: FileShares },
    private readonly sandboxes: Pick<SandboxService, 'get'>,
  ) {
    this.shares = d.shares ?? DEFAULT_FAIR_SHARE;
  }

  async stat(accountId: string, sandboxId: string, path: string, user?: string): Promise<FileEntry> {
    const id = await this.target(accountId, sandboxId, { path: { value: path, in: 'query' } });
    return whileRunning(() => this.d.driver.files.stat(id, path, { user }));
  }

  /** A listing may collect megabytes here (10,000 entries): it holds a transfer slot until it answers. */
  async list(
    accountId: string,
    sandboxId: string,
    path: string,
    o: { depth: number; user?: string },
  ): Promise<FileList> {
    const id = await this.target(accountId, sandboxId, { path: { value: path, in: 'query' } });
    const release = this.takeTransfer(id);
    try {
      return await whileRunning(() => this.d.driver.files.list(id, path, o));
    } finally {
      release();
    }
  }

  async mkdir(
    accountId: string,
    sandboxId: string,
    path: string,
    user?: string,
    o: ParentsAsRoot = {},
  ): Promise<FileEntry> {
    const id = await this.target(accountId, sandboxId, { path: { value: path, in: 'body' } });
    await this.d.storage.check();
    return whileRunning(() => this.d.driver.files.mkdir(id, path, { ...o, user }));
  }

  async move(accountId: string, sandboxId: string, from: string, to: string, user?: string): Promise<FileEntry> {
    const id = await this.target(accountId, sandboxId, {
      from: { value: from, in: 'body' },
      to: { value: to, in: 'body' },
    });
    await this.d.storage.check();
    return whileRunning(() => this.d.driver.files.move(id, from, to, { user }));
  }

  async remove(accountId: string, sandboxId: string, path: string, user?: string): Promise<void> {
    const id = await this.target(accountId, sandboxId, { path: { value: path, in: 'query' } });
    return whileRunning(() => this.d.driver.files.remove(id, path, { user }));
  }

  /** Opens a download; its transfer slot is held until the body ends, fails or is destroyed. */
  async read(
    accountId: string,
    sandboxId: string,
    path: string,
    o: { range?: string; user?: string } = {},
  ): Promise<FileRead> {
    const id = await this.target(accountId, sandboxId, { path: { value: path, in: 'query' } });
    const release = this.takeTransfer(id);
    try {
      const r = await whileRunning(() => this.d.driver.files.read(id, path, o));
      if (r.unsatisfiable) release();
      else {
        r.body.once('close', release);
        r.body.once('end', release);
        r.body.once('error', release);
        if (r.body.destroyed) release();
      }
      return r;
    } catch (e) {
      release();
      throw e;
    }
  }

  async write(
    accountId: string,
    sandboxId: string,
    path: string,
    body: AsyncIterable<Uint8Array>,
    o: ParentsAsRoot & {
      mode?: string;
      length?: number;
      user?: string;
      signal?: AbortSignal;
      metadata?: FileMetadata;
    } = {},
  ): Promise<FileEntry> {
    const id = await this.target(accountId, sandboxId, { path: { value: path, in: 'query' } });
    // The root layer and volumes are files on the data dir: refused when it is full.
    await this.d.storage.check();
    const release = this.takeTransfer(id);
    try {
      return await whileRunning(() => this.d.driver.files.write(id, path, body, o));
    } finally {
      release();
    }
  }

  /** A transfer slot of sandbox `id`, or `rate_limited` when it has its share in flight. */
  private takeTransfer(id: string): () => void {
    const max = this.shares.fileTransfersPerSandbox;
    return this.transfers.take(
      id,
      max,
      () =>
        new SandboxdError(
          'rate_limited',
          `The sandbox already has ${max} file transfers (uploads, downloads, listings) in flight; finish one first`,
          { limit: 'fileTransfersPerSandbox', max },
        ),
    );
  }

  /** Who file operations run as for `user` (its home, names); `validation` for an unknown user. */
  async whoami(accountId: string, sandboxId: string, user?: string): Promise<FileUserInfo> {
    const id = await this.target(accountId, sandboxId, {});
    return whileRunning(() => this.d.driver.files.whoami(id, { user }));
  }

  /** Starts a watch; throws `conflict` when the sandbox holds its share (`watchesPerSandbox`, default 16). */
  async watch(
    accountId: string,
    sandboxId: string,
    path: string,
    o: { recursive: boolean; user?: string },
  ): Promise<FileWatch> {
    const id = await this.target(accountId, sandboxId, { path: { value: path, in: 'query' } });
    const max = this.shares.watchesPerSandbox;
    const release = this.watches.take(
      id,
      max,
      (open) =>
        new SandboxdError('conflict', `The sandbox already has ${max} watches open; close one first`, {
          open,
          limit: 'watchesPerSandbox',
          max,
        }),
    );
    try {
      const w = await whileRunning(() => this.d.driver.files.watch(id, path, o));
      w.onEnd(release);
      return w;
    } catch (e) {
      release();
      throw e;
    }
  }

  /** The sandbox's id once it is the account's, started, and every path is acceptable. */
  private async target(accountId: string, sandboxId: string, paths: PathArgs): Promise<string> {
    const problems = Object.entries(paths).flatMap(([name, p]) => {
      const message = pathProblem(p.value);
      return message ? [{ in: p.in, path: `/${name}`, message }] : [];
    });
    const r = await this.sandboxes.get(accountId, sandboxId);
    if (problems.length)
      throw new SandboxdError(
        'validation',
        problems.map((p) => `${p.path.slice(1)}: ${p.message}`).join('; '),
        problems,
      );
    assertStarted(r, this.d.clock.now());
    return r.id;
  }
}

/** Why `p` is not an acceptable sandbox path, or null. */
export function pathProblem(p: string): string | null {
  if (!p.startsWith('/')) return 'must be an absolute path (start with /)';
  if (p.includes('\0')) return 'must not contain NUL bytes';
  const bytes = Buffer.byteLength(p);
  if (bytes > MAX_PATH_BYTES) return `is ${bytes} bytes; at most ${MAX_PATH_BYTES}`;
  return null;
}
