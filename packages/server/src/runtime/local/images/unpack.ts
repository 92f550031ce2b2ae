/**
 * Unpacks one image of an OCI layout into a rootfs with `umoci raw unpack` (run as real
 * root, not rootless: ownership, modes, setuid bits, whiteouts, hardlinks and xattrs come out
 * exactly as the layers say) and describes it as an {@link ImageRecord}.
 */
import { lstat, mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { hostArch, type OciConfig, type SelectedImage } from './oci-read.js';
import { runTool } from './run.js';

/** What the store keeps about one unpacked image (`image.json` beside its rootfs). */
export interface ImageRecord {
  /** Config digest (docker's "image id"): the key of the rootfs, shared by all refs. */
  digest: string;
  /** Digest of the manifest the rootfs was unpacked from. */
  manifestDigest: string;
  env: Record<string, string>;
  /** `WorkingDir`, default `/`. */
  workingDir: string;
  /** `User`, default `root`. */
  user: string;
  /** Apparent size of the unpacked rootfs (regular files, each inode once, plus symlinks). */
  sizeBytes: number;
  entrypoint: string[];
  cmd: string[];
  /**
   * The config's `Labels` (org.sandboxd.service.* declare a service: ../service.ts).
   * Absent in records written before labels were kept (read as none; local builds are
   * read again from their kept layout, see ImageStore).
   */
  labels?: Record<string, string>;
  architecture: string;
  /** When this host unpacked it (ISO 8601). */
  unpackedAt: string;
}

/** `["A=1", "B=x=y", "C"]` -> `{A: "1", B: "x=y"}`; entries without `=` are dropped, later wins. */
export function parseEnv(env: readonly string[] | null | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of env ?? []) {
    const i = e.indexOf('=');
    if (i > 0) out[e.slice(0, i)] = e.slice(i + 1);
  }
  return out;
}

/** The record fields that come from the image config. */
export function describeConfig(
  cfg: OciConfig,
): Pick<ImageRecord, 'env' | 'workingDir' | 'user' | 'entrypoint' | 'cmd' | 'labels' | 'architecture'> {
  const c = cfg.config ?? {};
  return {
    env: parseEnv(c.Env),
    workingDir: c.WorkingDir ? c.WorkingDir : '/',
    user: c.User ? c.User : 'root',
    entrypoint: c.Entrypoint ?? [],
    cmd: c.Cmd ?? [],
    labels: stringLabels(c.Labels),
    architecture: cfg.architecture ?? hostArch(),
  };
}

/** The string-valued entries of a config's `Labels` (anything else is dropped). */
export function stringLabels(labels: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (labels && typeof labels === 'object' && !Array.isArray(labels))
    for (const [k, v] of Object.entries(labels)) if (typeof v === 'string') out[k] = v;
  return out;
}

/** Apparent size of a tree: regular files counted once per inode, plus symlink lengths. */
export async function treeSize(root: string): Promise<number> {
  const seen = new Set<string>();
  let total = 0;
  const walk = async (dir: string): Promise<void> => {
    for (const ent of await readdir(dir, { withFileTypes: true })) {
      const p = join(dir, ent.name);
      if (ent.isDirectory()) {
        await walk(p);
      } else if (ent.isFile()) {
        const st = await lstat(p);
        if (st.nlink > 1) {
          const key = `${st.dev}:${st.ino}`;
          if (seen.has(key)) continue;
          seen.add(key);
        }
        total += st.size;
      } else if (ent.isSymbolicLink()) {
        total += (await lstat(p)).size;
      }
    }
  };
  await walk(root);
  return total;
}

/**
 * Unpacks image `tag` of `layout` into `<outDir>/rootfs` (which must not exist) and writes
 * `<outDir>/image.json`. `image` is what {@link selectImage} said about that tag.
 * Throws ToolError when umoci fails or runs past `timeoutMs`.
 */
export async function unpackLayout(
  layout: string,
  tag: string,
  image: SelectedImage,
  outDir: string,
  timeoutMs: number,
): Promise<ImageRecord> {
  const rootfs = join(outDir, 'rootfs');
  await mkdir(outDir, { mode: 0o755 });
  await runTool('umoci', ['raw', 'unpack', '--image', `${layout}:${tag}`, rootfs], { timeoutMs });
  const record: ImageRecord = {
    digest: image.configDigest,
    manifestDigest: image.manifestDigest,
    ...describeConfig(image.config),
    sizeBytes: await treeSize(rootfs),
    unpackedAt: new Date().toISOString(),
  };
  await writeFile(join(outDir, 'image.json'), JSON.stringify(record, null, 2));
  return record;
}
