/**
 * The wire forms of builds and templates (packages/protocol/src/builds.ts) made from the
 * records the builds service keeps (types.ts). Pure: no I/O.
 */
import { TEMPLATE_IMAGE_PREFIX, type Build, type Template } from '@sandboxd/protocol';
import type { BuildRecord, TemplateRecord } from './types.js';

/** `templates/<name>:<tag>`: what a create names to use the template. */
export function templateImage(name: string, tag: string): string {
  return `${TEMPLATE_IMAGE_PREFIX}${name}:${tag}`;
}

const iso = (ms: number) => new Date(ms).toISOString();

/** A build as `GET /api/v1/images/builds/{id}` answers it. Optional fields appear only when set (null from a store counts as unset). */
export function toWireBuild(r: BuildRecord): Build {
  const out: Build = {
    id: r.id,
    name: r.name,
    tag: r.tag,
    image: templateImage(r.name, r.tag),
    state: r.state,
    createdAt: iso(r.createdAt),
    steps: { total: r.stepsTotal, done: r.stepsDone, cached: r.stepsCached },
  };
  if (r.startedAt != null) out.startedAt = iso(r.startedAt);
  if (r.finishedAt != null) out.finishedAt = iso(r.finishedAt);
  if (r.digest != null) out.digest = r.digest;
  if (r.sizeBytes != null) out.sizeBytes = r.sizeBytes;
  if (r.error != null) out.error = r.error;
  return out;
}

/** A ready template as `GET /api/v1/templates` lists it. */
export function toWireTemplate(t: TemplateRecord): Template {
  return {
    name: t.name,
    tag: t.tag,
    image: templateImage(t.name, t.tag),
    digest: t.digest,
    sizeBytes: t.sizeBytes,
    buildId: t.buildId,
    createdAt: iso(t.createdAt),
  };
}
