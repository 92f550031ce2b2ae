import {
  DEFAULT_TEMPLATE_TAG,
  LIMITS,
  SNAPSHOT_IMAGE_PREFIX,
  SNAPSHOT_NAME_PATTERN,
  TEMPLATE_IMAGE_PREFIX,
  TEMPLATE_NAME_PATTERN,
  TEMPLATE_TAG_PATTERN,
  type ValidationProblem,
} from '@sandboxd/protocol';

/** The runtime's namespace of snapshot images: `snapshot/<accountId>/<name>`, never reachable by name through the API. */
export const DRIVER_SNAPSHOT_PREFIX = 'snapshot/';

const NAME_RE = new RegExp(SNAPSHOT_NAME_PATTERN);

/** The runtime's reference of snapshot `name` of an account. */
export function snapshotRef(accountId: string, name: string): string {
  return `${DRIVER_SNAPSHOT_PREFIX}${accountId}/${name}`;
}

/** The public image reference of snapshot `name`: `snapshots/<name>`. */
export function snapshotImage(name: string): string {
  return `${SNAPSHOT_IMAGE_PREFIX}${name}`;
}

/**
 * Names of image builds' cache layers in the runtime's snapshot namespace:
 * `snapshot/<accountId>/_l.<64 hex>`. A snapshot name never starts with `_`, so the two
 * never meet; the builds service owns every image of this form.
 */
const LAYER_PREFIX = '_l.';
const LAYER_RE = /^snapshot\/([a-z0-9_]{1,64})\/_l\.([a-f0-9]{64})$/;

/** The runtime's reference of the cache layer `key` (64 hex) of an account. */
export function layerRef(accountId: string, key: string): string {
  return `${DRIVER_SNAPSHOT_PREFIX}${accountId}/${LAYER_PREFIX}${key}`;
}

/** The account and key of a layer reference (see {@link layerRef}), or null for any other reference. */
export function parseLayerRef(ref: string): { accountId: string; key: string } | null {
  const m = LAYER_RE.exec(ref);
  return m ? { accountId: m[1], key: m[2] } : null;
}

/** Whether `ref` is in the layer namespace of the runtime's snapshots (`snapshot/<owner>/_l.*`), well formed or not. */
export function isLayerNamespace(ref: string): boolean {
  if (!ref.startsWith(DRIVER_SNAPSHOT_PREFIX)) return false;
  const name = ref.slice(DRIVER_SNAPSHOT_PREFIX.length).split('/')[1] ?? '';
  return name.startsWith(LAYER_PREFIX);
}

const TEMPLATE_NAME_RE = new RegExp(TEMPLATE_NAME_PATTERN);
const TEMPLATE_TAG_RE = new RegExp(TEMPLATE_TAG_PATTERN);

/** The public image reference of a template: `templates/<name>:<tag>`. */
export function templateImage(name: string, tag: string): string {
  return `${TEMPLATE_IMAGE_PREFIX}${name}:${tag}`;
}

/**
 * Name and tag of `templates/<name>[:<tag>]` (tag default `latest`); null when `image` is
 * not in the templates namespace; `{invalid: true}` when it is but the name or tag breaks
 * their rules.
 */
export function parseTemplateImage(image: string): { name: string; tag: string } | { invalid: true } | null {
  if (!image.startsWith(TEMPLATE_IMAGE_PREFIX)) return null;
  const rest = image.slice(TEMPLATE_IMAGE_PREFIX.length);
  const colon = rest.indexOf(':');
  const name = colon < 0 ? rest : rest.slice(0, colon);
  const tag = colon < 0 ? DEFAULT_TEMPLATE_TAG : rest.slice(colon + 1);
  return TEMPLATE_NAME_RE.test(name) && TEMPLATE_TAG_RE.test(tag) ? { name, tag } : { invalid: true };
}

/** How an account's own images are found: its snapshots by name, its templates by name and tag. */
export interface AccountImages {
  snapshot(name: string): Promise<{ state: string } | null>;
  template(name: string, tag: string): Promise<{ driverRef: string } | null>;
}

/**
 * The runtime's reference for a create's `image`, as an account may name it: its own
 * ready snapshot for `snapshots/<name>`, its own template for `templates/<name>[:<tag>]`
 * (the image of the layer the template names), any other image as is; null when it names
 * no snapshot or template of the account, or the runtime's own snapshot namespace.
 */
export async function driverImageOf(image: string, find: AccountImages, accountId: string): Promise<string | null> {
  if (image.startsWith(DRIVER_SNAPSHOT_PREFIX)) return null;
  const t = parseTemplateImage(image);
  if (t) {
    if ('invalid' in t) return null;
    return (await find.template(t.name, t.tag))?.driverRef ?? null;
  }
  if (!image.startsWith(SNAPSHOT_IMAGE_PREFIX)) return image;
  const name = image.slice(SNAPSHOT_IMAGE_PREFIX.length);
  if (!NAME_RE.test(name)) return null;
  const snap = await find.snapshot(name);
  return snap?.state === 'ready' ? snapshotRef(accountId, name) : null;
}

/** What is wrong with a sandbox's `metadata` beyond its schema: the byte total (keys and values, UTF-8). */
export function metadataProblems(m: Record<string, string> | undefined, base: string): ValidationProblem[] {
  if (!m) return [];
  const bytes = Object.entries(m).reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v), 0);
  return bytes > LIMITS.maxMetadataBytes
    ? [{ in: 'body', path: base, message: `is ${bytes} bytes (keys and values); at most ${LIMITS.maxMetadataBytes}` }]
    : [];
}
