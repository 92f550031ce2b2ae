/**
 * Turns whatever an image comes from (OCI layout dir, OCI archive tar, `docker save` tar)
 * into a clean single-image OCI layout in a work dir, tagged `img`, ready for unpacking.
 */
import { mkdir, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import { MT, NoSuchImage, readIndex, selectImage, type Descriptor, type SelectedImage } from './oci-read.js';
import { parseRef } from './ref.js';
import { runTool } from './run.js';
import { skopeoCopy } from './skopeo.js';

/** The tag every prepared work layout uses. */
export const WORK_TAG = 'img';

export interface PreparedSource {
  /** Layout to unpack from. */
  layout: string;
  /** Tag of the image in `layout` ({@link WORK_TAG} unless built here). */
  tag: string;
  image: SelectedImage;
  /** The image's own name, when the source records one (RepoTags, containerd annotation). */
  ownName?: string;
}

function bad(path: string, problem: string): SandboxdError {
  return new SandboxdError('validation', `Cannot import image: ${problem}`, { path });
}

/** Canonical form of a name, or undefined if it is not a full image reference. */
function canonical(name: string | undefined): string | undefined {
  if (!name || !/[/:]/.test(name)) return undefined;
  try {
    return parseRef(name).canonical;
  } catch {
    return undefined;
  }
}

/** Does index entry `d` carry the name `want` (canonical ref) or its tag? */
function entryMatches(d: Descriptor, want: string): boolean {
  const names = [d.annotations?.[MT.refName], d.annotations?.['io.containerd.image.name']];
  const tag = want.slice(want.lastIndexOf(':') + 1);
  return names.some((n) => n !== undefined && (canonical(n) === want || n === tag));
}

/**
 * Writes a one-entry layout in `work/layout` whose blobs are those of `src` (a symlink), so
 * umoci can unpack a chosen manifest without copying blobs.
 */
async function linkLayout(src: string, manifestDigest: string, work: string): Promise<string> {
  const layout = join(work, 'layout');
  await mkdir(layout);
  await writeFile(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  const size = (await stat(join(src, 'blobs', ...manifestDigest.split(':')))).size;
  const index = {
    schemaVersion: 2,
    manifests: [{ mediaType: MT.manifest, digest: manifestDigest, size, annotations: { [MT.refName]: WORK_TAG } }],
  };
  await writeFile(join(layout, 'index.json'), JSON.stringify(index));
  await symlink(resolve(src, 'blobs'), join(layout, 'blobs'));
  return layout;
}

/**
 * Prepares image `want` (canonical ref; optional when the layout holds one image) from the
 * OCI layout dir `src`, which is only read.
 */
export async function fromLayoutDir(src: string, want: string | undefined, work: string): Promise<PreparedSource> {
  let entries: Descriptor[];
  try {
    entries = (await readIndex(src)).manifests;
    await stat(join(src, 'oci-layout'));
  } catch {
    throw bad(src, 'not an OCI image layout (no oci-layout/index.json)');
  }
  const named = want ? entries.filter((d) => entryMatches(d, want)) : [];
  const tag = named.length > 0 ? named[0].annotations?.[MT.refName] : undefined;
  let image: SelectedImage;
  try {
    image = await selectImage(src, tag);
  } catch (e) {
    if (e instanceof NoSuchImage) throw bad(src, e.message);
    throw e;
  }
  const top = named[0] ?? (entries.length === 1 ? entries[0] : undefined);
  const ownName =
    canonical(top?.annotations?.['io.containerd.image.name']) ?? canonical(top?.annotations?.[MT.refName]);
  return { layout: await linkLayout(src, image.manifestDigest, work), tag: WORK_TAG, image, ownName };
}

/** Names of the members of a tar file (GNU tar reads gzip/zstd/xz transparently). */
async function tarMembers(file: string): Promise<Set<string>> {
  const out = await runTool('tar', ['-tf', file], { timeoutMs: 120_000 });
  return new Set(
    out
      .split('\n')
      .filter(Boolean)
      .map((n) => n.replace(/^\.\//, '')),
  );
}

async function tarRead(file: string, member: string, members: Set<string>): Promise<string> {
  const name = members.has(member) ? member : `./${member}`;
  // -O: to stdout only; nothing from the archive touches the file system here.
  return runTool('tar', ['-xOf', file, name], { timeoutMs: 120_000 });
}

interface DockerArchiveEntry {
  RepoTags?: string[] | null;
}

/**
 * Prepares image `want` (canonical ref; optional when the archive holds one image) from an
 * OCI archive or `docker save` tar, copying it with skopeo into `work/layout`.
 */
export async function fromArchive(
  file: string,
  want: string | undefined,
  work: string,
  timeoutMs: number,
): Promise<PreparedSource> {
  // skopeo transport strings are `type:path:ref`; a ':' in the path would be misread.
  if (file.includes(':')) throw bad(file, "archive path must not contain ':'");
  let members: Set<string>;
  try {
    members = await tarMembers(file);
  } catch {
    throw bad(file, 'not a tar archive');
  }
  let src: string;
  let ownName: string | undefined;
  if (members.has('manifest.json')) {
    let list: DockerArchiveEntry[];
    try {
      list = JSON.parse(await tarRead(file, 'manifest.json', members)) as DockerArchiveEntry[];
    } catch {
      throw bad(file, 'docker archive has an unreadable manifest.json');
    }
    const tags = list.map((e) => (e.RepoTags ?? []).map((t) => ({ t, c: canonical(t) })));
    let at = want ? tags.findIndex((ts) => ts.some((x) => x.c === want)) : -1;
    if (at < 0 && list.length === 1) at = 0;
    if (at < 0) throw bad(file, `archive holds ${list.length} images; none named ${want ?? '(no name given)'}`);
    ownName = tags[at].find((x) => x.c)?.c;
    src = `docker-archive:${file}:@${at}`;
  } else if (members.has('oci-layout') && members.has('index.json')) {
    const index = JSON.parse(await tarRead(file, 'index.json', members)) as { manifests: Descriptor[] };
    const named = want ? index.manifests.filter((d) => entryMatches(d, want)) : [];
    const top = named[0] ?? (index.manifests.length === 1 ? index.manifests[0] : undefined);
    if (!top)
      throw bad(file, `archive holds ${index.manifests.length} images; none named ${want ?? '(no name given)'}`);
    const tag = top.annotations?.[MT.refName];
    if (index.manifests.length > 1 && !tag) throw bad(file, 'archive entry has no ref.name to select it by');
    ownName = canonical(top.annotations?.['io.containerd.image.name']) ?? canonical(tag);
    src = `oci-archive:${file}${index.manifests.length > 1 ? `:${tag}` : ''}`;
  } else {
    throw bad(file, 'neither an OCI archive (oci-layout, index.json) nor a docker archive (manifest.json)');
  }
  const layout = join(work, 'layout');
  await skopeoCopy(src, `oci:${layout}:${WORK_TAG}`, { work, timeoutMs });
  return { layout, tag: WORK_TAG, image: await selectImage(layout, WORK_TAG), ownName };
}

/** Reads a small JSON file; undefined if it does not exist. */
export async function readJsonIfExists<T>(p: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(p, 'utf8')) as T;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}
