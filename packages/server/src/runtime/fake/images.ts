import { open } from 'node:fs/promises';
import { SandboxdError } from '@sandboxd/protocol';
import type { DriverImageStore, ImageInfo, ImageProgress } from '../driver.js';

/** Refs the fake "builds" offline, like the local driver's `local/` images. */
const BUILDABLE = ['local/busybox:latest', 'local/debian:bookworm'];

/** The fake config digest of a ref: stable, so tests can compare it. */
export function fakeDigest(ref: string): string {
  return `sha256:${Buffer.from(ref).toString('hex').padEnd(64, '0').slice(0, 64)}`;
}

/** The image record the fake driver answers for a known ref. */
export function fakeImage(ref: string): ImageInfo {
  return {
    ref,
    digest: fakeDigest(ref),
    env: { PATH: '/usr/bin:/bin' },
    workingDir: '/',
    user: '0:0',
    sizeBytes: 1,
    entrypoint: [],
    cmd: ['/bin/sh'],
    labels: {},
  };
}

/**
 * The fake driver's image management. Its "registry" holds every well-formed reference
 * except those whose text contains `notfound` (so tests can provoke 404); pulls, builds and
 * imports add the ref to `known` and report progress like the real store. Imports check
 * only that the file is a tar (ustar magic) and need a `ref`.
 */
export class FakeImageStore implements DriverImageStore {
  constructor(private readonly known: Set<string>) {}

  async pull(ref: string, opts: { onProgress?: (p: ImageProgress) => void } = {}): Promise<ImageInfo> {
    if (ref.startsWith('local/'))
      throw new SandboxdError('validation', 'local/ images are built on this host, not pulled', { image: ref });
    if (!/^[a-z0-9][a-z0-9._:/@-]*$/i.test(ref))
      throw new SandboxdError('validation', `Invalid image reference "${ref}"`, { image: ref });
    if (ref.includes('notfound')) throw new SandboxdError('template_not_found', 'Template not found', { image: ref });
    for (const bytes of [0, 512, 1024]) opts.onProgress?.({ phase: 'pulling', bytes, totalBytes: 1024 });
    return this.finish(ref, opts.onProgress);
  }

  async build(ref: string, opts: { onProgress?: (p: ImageProgress) => void } = {}): Promise<ImageInfo> {
    if (!BUILDABLE.includes(ref)) throw new SandboxdError('template_not_found', 'Template not found', { image: ref });
    opts.onProgress?.({ phase: 'bootstrapping' });
    return this.finish(ref, opts.onProgress);
  }

  async importArchive(path: string, ref?: string): Promise<ImageInfo> {
    const head = Buffer.alloc(512);
    const fh = await open(path, 'r').catch(() => null);
    if (!fh) throw new SandboxdError('validation', 'Cannot import image: no such file or directory', { path });
    try {
      await fh.read(head, 0, 512, 0);
    } finally {
      await fh.close();
    }
    if (head.subarray(257, 262).toString('latin1') !== 'ustar')
      throw new SandboxdError('validation', 'Cannot import image: not a tar archive');
    if (!ref) throw new SandboxdError('validation', 'Cannot import image: the archive does not name it; pass a ref');
    this.known.add(ref);
    return fakeImage(ref);
  }

  private finish(ref: string, onProgress?: (p: ImageProgress) => void): ImageInfo {
    onProgress?.({ phase: 'unpacking' });
    this.known.add(ref);
    onProgress?.({ phase: 'done', bytes: 1 });
    return fakeImage(ref);
  }
}
