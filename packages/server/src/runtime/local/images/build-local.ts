/**
 * The images this host builds offline, by name, and the dispatch to their builders.
 */
import { buildBusyboxLayout } from './build-busybox.js';
import { buildCodeInterpreterLayout } from './build-code-interpreter.js';
import { buildDebianLayout } from './build-debian.js';
import type { WrittenImage } from './oci-write.js';

/** The images this host can build offline (canonical refs). */
export const LOCAL_IMAGES = ['local/debian:bookworm', 'local/busybox:latest', 'local/code-interpreter:latest'] as const;
export type LocalImageRef = (typeof LOCAL_IMAGES)[number];

export function isLocalImage(canonical: string): canonical is LocalImageRef {
  return (LOCAL_IMAGES as readonly string[]).includes(canonical);
}

export interface LocalBuildOptions {
  timeoutMs: number;
  /** apt sources for Debian (see DebianBuildOptions.mirrors). */
  debianMirrors?: string[];
  log?: (msg: string) => void;
  /** The OCI layout of the previous build of this image, if kept (parts of it may be reused). */
  previousLayout?: string | null;
}

/**
 * Builds local image `ref` into OCI layout `layout`, tagged with the ref's tag, using the
 * empty dir `scratch` (the caller removes it). Throws ToolError when a tool fails.
 */
export async function buildLocalLayout(
  ref: LocalImageRef,
  layout: string,
  scratch: string,
  opts: LocalBuildOptions,
): Promise<WrittenImage> {
  const tag = ref.slice(ref.lastIndexOf(':') + 1);
  if (ref === 'local/debian:bookworm') {
    const onLog = (l: string) => opts.log?.(`build ${ref}: ${l}`);
    return buildDebianLayout(layout, tag, scratch, {
      suite: 'bookworm',
      timeoutMs: opts.timeoutMs,
      mirrors: opts.debianMirrors,
      onLog,
    });
  }
  if (ref === 'local/code-interpreter:latest') {
    return buildCodeInterpreterLayout(layout, tag, scratch, {
      suite: 'bookworm',
      timeoutMs: opts.timeoutMs,
      mirrors: opts.debianMirrors,
      previousLayout: opts.previousLayout,
      onLog: (l: string) => opts.log?.(`build ${ref}: ${l}`),
    });
  }
  return buildBusyboxLayout(layout, tag, scratch, { timeoutMs: opts.timeoutMs });
}
