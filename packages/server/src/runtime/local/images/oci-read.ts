/**
 * Reads OCI image layouts: index.json, blobs, and the choice of one linux/<host arch>
 * image manifest out of tags and (nested) multi-arch indexes.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Media types and annotation keys used here. */
export const MT = {
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  layerTar: 'application/vnd.oci.image.layer.v1.tar',
  layerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  refName: 'org.opencontainers.image.ref.name',
} as const;

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: { architecture: string; os: string; variant?: string };
}

export interface OciIndex {
  schemaVersion: 2;
  mediaType?: string;
  manifests: Descriptor[];
}

export interface OciManifest {
  schemaVersion: 2;
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
}

/** The parts of an image config sandboxd reads. */
export interface OciConfig {
  architecture?: string;
  os?: string;
  config?: {
    Env?: string[] | null;
    WorkingDir?: string;
    User?: string;
    Cmd?: string[] | null;
    Entrypoint?: string[] | null;
    Labels?: Record<string, string> | null;
  };
  rootfs?: { diff_ids?: string[] };
}

/** The image picked out of a layout. */
export interface SelectedImage {
  /** Tag inside the layout (`org.opencontainers.image.ref.name`), if the top entry had one. */
  tag?: string;
  manifestDigest: string;
  configDigest: string;
  manifest: OciManifest;
  config: OciConfig;
}

/** The OCI name of this host's CPU architecture (`amd64`, `arm64`, ...). */
export function hostArch(): string {
  const map: Record<string, string> = {
    x64: 'amd64',
    arm64: 'arm64',
    arm: 'arm',
    ia32: '386',
    ppc64: 'ppc64le',
    s390x: 's390x',
    riscv64: 'riscv64',
  };
  return map[process.arch] ?? process.arch;
}

export async function readIndex(layout: string): Promise<OciIndex> {
  return JSON.parse(await readFile(join(layout, 'index.json'), 'utf8')) as OciIndex;
}

export function blobPath(layout: string, digest: string): string {
  const [alg, hex] = digest.split(':');
  if (!alg || !hex || !/^[a-z0-9]+$/.test(alg) || !/^[a-f0-9]+$/.test(hex)) throw new Error(`bad digest ${digest}`);
  return join(layout, 'blobs', alg, hex);
}

export async function readBlobJson<T>(layout: string, digest: string): Promise<T> {
  return JSON.parse(await readFile(blobPath(layout, digest), 'utf8')) as T;
}

const isIndex = (mt: string | undefined) => mt === MT.index || mt === MT.dockerList;

/**
 * Picks one image from the layout: the entry tagged `tag` if given, else the only entry
 * (or the only one for this platform); descends multi-arch indexes to linux/<host arch>.
 * Throws a plain Error whose message names the problem (callers map it to an error kind).
 */
export async function selectImage(layout: string, tag?: string): Promise<SelectedImage> {
  const index = await readIndex(layout);
  let entries = index.manifests;
  if (tag !== undefined) entries = entries.filter((m) => m.annotations?.[MT.refName] === tag);
  if (entries.length === 0) throw new NoSuchImage(tag ? `no image tagged "${tag}" in layout` : 'layout holds no image');
  const picked = entries.length === 1 ? entries[0] : pickPlatform(entries);
  if (!picked) {
    const names = entries.map((m) => m.annotations?.[MT.refName] ?? m.digest);
    throw new NoSuchImage(`layout holds several images (${names.join(', ')}); name one`);
  }
  let desc = picked;
  for (let depth = 0; isIndex(desc.mediaType); depth++) {
    if (depth > 4) throw new Error('image index nested too deeply');
    const inner = await readBlobJson<OciIndex>(layout, desc.digest);
    const next = pickPlatform(inner.manifests);
    if (!next) throw new NoSuchImage(`no linux/${hostArch()} image in multi-arch index`);
    desc = next;
  }
  const manifest = await readBlobJson<OciManifest>(layout, desc.digest);
  if (!manifest.config?.digest || !Array.isArray(manifest.layers)) throw new Error('not an image manifest');
  const config = await readBlobJson<OciConfig>(layout, manifest.config.digest);
  const arch = config.architecture ?? hostArch();
  if (arch !== hostArch())
    throw new NoSuchImage(`image is for ${config.os ?? 'linux'}/${arch}, host is linux/${hostArch()}`);
  return {
    tag: picked.annotations?.[MT.refName],
    manifestDigest: desc.digest,
    configDigest: manifest.config.digest,
    manifest,
    config,
  };
}

/** The entry for linux/<host arch> among several, or undefined if none or ambiguous. */
function pickPlatform(entries: Descriptor[]): Descriptor | undefined {
  const arch = hostArch();
  const fit = entries.filter((m) => m.platform && m.platform.os === 'linux' && m.platform.architecture === arch);
  if (fit.length === 0) return undefined;
  // e.g. arm64 v8 vs none: prefer the one without a variant, then the first.
  return fit.find((m) => !m.platform?.variant) ?? fit[0];
}

/** The layout has no image matching what was asked for. */
export class NoSuchImage extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NoSuchImage';
  }
}
