/**
 * Writes OCI image layouts (https://github.com/opencontainers/image-spec/blob/main/image-layout.md)
 * from plain tar files: used by the local builds and by tests that craft layers by hand.
 * The result is a real layout that skopeo can push and umoci can unpack.
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { copyFile, link, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { hostArch, MT, type Descriptor, type OciIndex } from './oci-read.js';

/** The runtime part of an image config (OCI `config` object). */
export interface ImageConfigInput {
  env?: string[];
  workingDir?: string;
  user?: string;
  cmd?: string[];
  entrypoint?: string[];
  labels?: Record<string, string>;
  /** `port/proto` entries (`8080/tcp`). */
  exposedPorts?: string[];
}

export interface WriteImageOptions {
  /** Tag stored as `org.opencontainers.image.ref.name` in index.json (replaces an older one). */
  tag: string;
  /**
   * Uncompressed tar files, lowest layer first; or a layer blob that already exists
   * elsewhere (linked or copied in as it is, with its descriptor and diff id).
   */
  layers: (string | ExistingLayer)[];
  config: ImageConfigInput;
  /** gzip the layers (default true). */
  gzip?: boolean;
  /** RFC 3339 creation time; default now. Fix it for reproducible digests. */
  created?: string;
  /** Default: the host architecture. */
  architecture?: string;
}

/** A layer blob kept from an earlier image: `path` holds the bytes `desc` describes. */
export interface ExistingLayer {
  path: string;
  desc: Descriptor;
  diffId: string;
}

export interface WrittenImage {
  manifestDigest: string;
  configDigest: string;
  /** Sum of compressed layer sizes. */
  layersBytes: number;
}

function hashTap(h: ReturnType<typeof createHash>, count: { n: number }): Transform {
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      h.update(chunk);
      count.n += chunk.length;
      cb(null, chunk);
    },
  });
}

/** Stores `bytes` as a blob; returns its descriptor (without mediaType). */
export async function writeBlob(layout: string, bytes: Buffer): Promise<{ digest: string; size: number }> {
  const hex = createHash('sha256').update(bytes).digest('hex');
  const dir = join(layout, 'blobs', 'sha256');
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.tmp-${hex}-${process.pid}`);
  await writeFile(tmp, bytes);
  await rename(tmp, join(dir, hex));
  return { digest: `sha256:${hex}`, size: bytes.length };
}

/** Stores a tar file as a layer blob, optionally gzipped; returns descriptor and diff id. */
export async function writeLayer(
  layout: string,
  tarPath: string,
  gzip: boolean,
): Promise<{ desc: Descriptor; diffId: string }> {
  const dir = join(layout, 'blobs', 'sha256');
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.tmp-layer-${process.pid}-${Math.random().toString(36).slice(2)}`);
  const raw = createHash('sha256');
  const out = createHash('sha256');
  const rawN = { n: 0 };
  const outN = { n: 0 };
  try {
    const stages: NodeJS.ReadWriteStream[] = [hashTap(raw, rawN)];
    if (gzip) stages.push(createGzip({ level: 6 }));
    stages.push(hashTap(out, outN));
    await pipeline([createReadStream(tarPath), ...stages, createWriteStream(tmp)]);
    const hex = out.digest('hex');
    await rename(tmp, join(dir, hex));
    return {
      desc: {
        mediaType: gzip ? MT.layerGzip : MT.layerTar,
        digest: `sha256:${hex}`,
        size: outN.n,
      },
      diffId: `sha256:${raw.digest('hex')}`,
    };
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
}

/** Puts an existing layer blob into `layout` (a hard link, else a copy). */
async function linkLayer(layout: string, l: ExistingLayer): Promise<{ desc: Descriptor; diffId: string }> {
  const dir = join(layout, 'blobs', 'sha256');
  await mkdir(dir, { recursive: true });
  const dst = join(dir, l.desc.digest.replace(/^sha256:/, ''));
  await link(l.path, dst).catch(async (e: NodeJS.ErrnoException) => {
    if (e.code === 'EEXIST') return;
    await copyFile(l.path, dst);
  });
  return { desc: { mediaType: l.desc.mediaType, digest: l.desc.digest, size: l.desc.size }, diffId: l.diffId };
}

/** Adds (or replaces) `desc` under `tag` in the layout's index.json, atomically. */
export async function tagManifest(layout: string, tag: string, desc: Descriptor): Promise<void> {
  await mkdir(layout, { recursive: true });
  await writeFile(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  let index: OciIndex = { schemaVersion: 2, mediaType: MT.index, manifests: [] };
  try {
    index = JSON.parse(await readFile(join(layout, 'index.json'), 'utf8')) as OciIndex;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  index.manifests = index.manifests.filter((m) => m.annotations?.[MT.refName] !== tag);
  index.manifests.push({ ...desc, annotations: { ...desc.annotations, [MT.refName]: tag } });
  const tmp = join(layout, `.index.json.${process.pid}`);
  await writeFile(tmp, JSON.stringify(index));
  await rename(tmp, join(layout, 'index.json'));
}

/**
 * Writes a single-platform image made of `opts.layers` into the OCI layout `layout`
 * (created if missing; other tags in it are kept) and tags it `opts.tag`.
 */
export async function writeOciImage(layout: string, opts: WriteImageOptions): Promise<WrittenImage> {
  const gzip = opts.gzip ?? true;
  const layers: Descriptor[] = [];
  const diffIds: string[] = [];
  for (const l of opts.layers) {
    const { desc, diffId } = typeof l === 'string' ? await writeLayer(layout, l, gzip) : await linkLayer(layout, l);
    layers.push(desc);
    diffIds.push(diffId);
  }
  const c = opts.config;
  const created = opts.created ?? new Date().toISOString();
  const config = {
    created,
    architecture: opts.architecture ?? hostArch(),
    os: 'linux',
    config: {
      ...(c.user !== undefined ? { User: c.user } : {}),
      ...(c.env ? { Env: c.env } : {}),
      ...(c.entrypoint ? { Entrypoint: c.entrypoint } : {}),
      ...(c.cmd ? { Cmd: c.cmd } : {}),
      ...(c.exposedPorts ? { ExposedPorts: Object.fromEntries(c.exposedPorts.map((p) => [p, {}])) } : {}),
      ...(c.workingDir !== undefined ? { WorkingDir: c.workingDir } : {}),
      ...(c.labels ? { Labels: c.labels } : {}),
    },
    rootfs: { type: 'layers', diff_ids: diffIds },
    history: layers.map(() => ({ created, created_by: 'sandboxd image builder' })),
  };
  const cfg = await writeBlob(layout, Buffer.from(JSON.stringify(config)));
  const manifest = {
    schemaVersion: 2,
    mediaType: MT.manifest,
    config: { mediaType: MT.config, ...cfg },
    layers,
  };
  const man = await writeBlob(layout, Buffer.from(JSON.stringify(manifest)));
  await tagManifest(layout, opts.tag, { mediaType: MT.manifest, ...man });
  return {
    manifestDigest: man.digest,
    configDigest: cfg.digest,
    layersBytes: layers.reduce((a, l) => a + l.size, 0),
  };
}
