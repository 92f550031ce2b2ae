/**
 * Pulls one image from a registry into a work layout with skopeo, reporting bytes
 * downloaded so far (skopeo has no machine-readable progress, so the layout is measured).
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { selectImage } from './oci-read.js';
import { skopeoSource, type ImageRef } from './ref.js';
import { skopeoCopy, type Credentials, type NetnsExit } from './skopeo.js';
import { WORK_TAG, type PreparedSource } from './source.js';

/** Progress of a pull or build. `bytes` counts what was downloaded or written so far. */
export interface Progress {
  phase: 'pulling' | 'bootstrapping' | 'packing' | 'unpacking' | 'done';
  bytes?: number;
  totalBytes?: number;
}

export interface PullOptions {
  credentials?: Credentials;
  insecure: boolean;
  timeoutMs: number;
  /** Extra environment of skopeo: the pull's proxy (dial-guard.ts). */
  env?: NodeJS.ProcessEnv;
  /** Run skopeo in a network namespace whose only way out is the pull's guard. */
  netns?: NetnsExit;
  onProgress?: (p: Progress) => void;
}

async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  for (const ent of await readdir(dir, { withFileTypes: true, recursive: true }).catch(() => [])) {
    if (!ent.isFile()) continue;
    total += await stat(join(ent.parentPath, ent.name)).then(
      (s) => s.size,
      () => 0,
    );
  }
  return total;
}

/** Copies `ref` (a remote reference) into `work/layout`. Throws ToolError on failure. */
export async function pullToLayout(ref: ImageRef, work: string, opts: PullOptions): Promise<PreparedSource> {
  const layout = join(work, 'layout');
  let last = -1;
  const tick = async () => {
    const bytes = await dirBytes(join(layout, 'blobs'));
    if (bytes !== last) opts.onProgress?.({ phase: 'pulling', bytes });
    last = bytes;
  };
  opts.onProgress?.({ phase: 'pulling', bytes: 0 });
  const timer = opts.onProgress ? setInterval(() => void tick(), 500) : undefined;
  try {
    await skopeoCopy(skopeoSource(ref), `oci:${layout}:${WORK_TAG}`, {
      work,
      timeoutMs: opts.timeoutMs,
      insecure: opts.insecure,
      env: opts.env,
      netns: opts.netns,
      credentials: opts.credentials ? { registry: ref.domain, creds: opts.credentials } : undefined,
    });
  } finally {
    if (timer) clearInterval(timer);
  }
  if (opts.onProgress) await tick();
  return { layout, tag: WORK_TAG, image: await selectImage(layout, WORK_TAG) };
}
