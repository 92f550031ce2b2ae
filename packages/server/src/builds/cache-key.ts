import { createHash } from 'node:crypto';
import type { ImageConfig, Step } from './plan.js';

/**
 * Keys of the build cache: a layer is found again when the same step runs on the same parent.
 * Every key is the sha256 (hex) of a canonical JSON (object keys sorted) behind a versioned
 * prefix, so it is the same in every process and release until the prefix changes.
 *
 * The chain (services/builds.ts): `imageKey(base digest)`, then for each file-changing step
 * `stepKey(parent, step, extra, config)` with `extra` the COPY's `Selection.hash` (context or
 * upload), or the source stage's key (`COPY --from=<stage>`) or the source image's digest
 * (`COPY --from=<image>`), and `config` the image config the step runs with (env, user,
 * working dir: what RUN sees); a final config that differs from the last layer's: `configKey`.
 */

/** JSON with object keys sorted and `undefined` members dropped: equal values, equal text. */
export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : canonicalJson(x))).join(',')}]`;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o)
    .filter((k) => o[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
}

const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');

/** The key of a base image, from its config digest (`sha256:...`, or what the runtime names it by). */
export function imageKey(digest: string): string {
  return sha256(`sandboxd-build-image-v1\n${digest}`);
}

/**
 * What a step means for the cache: everything but where it was written (`line`, `text`), and
 * for `COPY --from=<stage>` not the stage's index (the source stage's key, given as `extra`,
 * says what it holds).
 */
function meaning(step: Step): unknown {
  const { line: _line, text: _text, ...rest } = step;
  if (rest.kind === 'copy' && rest.from.kind === 'stage') return { ...rest, from: { kind: 'stage' } };
  return rest;
}

/**
 * The key of `step` run on the layer `parent` (a key from this file): changes when the step's
 * meaning, `extra` (what it copies) or `config` (what it runs with) changes.
 */
export function stepKey(parent: string, step: Step, extra?: string, config?: ImageConfig): string {
  return sha256(
    `sandboxd-build-step-v1\n${parent}\n${canonicalJson(meaning(step))}\n${extra ?? ''}\n${config ? canonicalJson(config) : ''}`,
  );
}

/** The key of layer `parent` with its config replaced by `config` (the final config of an image). */
export function configKey(parent: string, config: ImageConfig): string {
  return sha256(`sandboxd-build-config-v1\n${parent}\n${canonicalJson(config)}`);
}
