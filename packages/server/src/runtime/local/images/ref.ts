/**
 * Image references, parsed and normalised the way docker does (`debian` ->
 * `docker.io/library/debian:latest`), plus sandboxd's own `local/...` namespace for images
 * built on this host, which is never pulled from anywhere, and `snapshot/<owner>/<name>`
 * for images made from sandboxes (see snapshots.ts), also never pulled.
 */
import { SandboxdError } from '@sandboxd/protocol';

/** A parsed, normalised image reference. */
export interface ImageRef {
  /** Canonical form, e.g. `docker.io/library/debian:latest`, `local/busybox:latest`. */
  canonical: string;
  /** True for `local/...` and `snapshot/...`: made on this host, never pulled. */
  local: boolean;
  /** True for `snapshot/<owner>/<name>`: made by a snapshot of a sandbox (canonical = the ref as given). */
  snapshot?: boolean;
  /** Registry host[:port] (`docker.io` for Docker Hub); `local` for local images. */
  domain: string;
  /** Repository path inside the registry, e.g. `library/debian`. */
  path: string;
  /** Tag; `latest` when neither tag nor digest was given. */
  tag?: string;
  /** `sha256:<hex>` when pinned by digest. */
  digest?: string;
}

const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const DOMAIN_COMPONENT = /^(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$/;
const MAX_NAME = 255;
/**
 * `snapshot/<owner>/<name>`: owner as a sandboxd account id, name as a snapshot name (what
 * the API takes), or an internal name starting with `_` (up to 128 characters; the API never
 * takes one): an image build's layers are `_l.<64 hex>`.
 */
export const SNAPSHOT_REF_RE = /^snapshot\/([a-z0-9_]{1,64})\/([a-z0-9][a-z0-9_.-]{0,62}|_[a-z0-9_.-]{1,127})$/;

/** True for refs in the `snapshot/` namespace (valid or not: an invalid one is a `validation` error). */
export function isSnapshotNamespace(ref: string): boolean {
  return typeof ref === 'string' && ref.startsWith('snapshot/');
}

function invalid(ref: string, problem: string): SandboxdError {
  return new SandboxdError('validation', `Invalid image reference: ${problem}`, { image: ref });
}

function validDomain(d: string): boolean {
  let host = d;
  let port: string | undefined;
  const v6 = /^\[([0-9a-fA-F:.]+)\](?::(\d+))?$/.exec(d);
  if (v6) return v6[2] === undefined || validPort(v6[2]);
  const i = d.lastIndexOf(':');
  if (i >= 0) {
    host = d.slice(0, i);
    port = d.slice(i + 1);
    if (!validPort(port)) return false;
  }
  return host.length > 0 && host.split('.').every((c) => DOMAIN_COMPONENT.test(c));
}

function validPort(p: string): boolean {
  return /^\d{1,5}$/.test(p) && Number(p) > 0 && Number(p) < 65536;
}

/**
 * Parses and normalises `ref`. Throws `validation` (details `{ image: ref }`, message naming
 * the problem) for anything docker would reject, and for digests on `local/` images.
 */
export function parseRef(ref: string): ImageRef {
  if (typeof ref !== 'string' || ref.length === 0) throw invalid(String(ref), 'empty reference');
  if (ref.length > 512) throw invalid(ref, 'reference too long');
  if (isSnapshotNamespace(ref)) {
    const m = SNAPSHOT_REF_RE.exec(ref);
    if (!m) throw invalid(ref, 'snapshot references are snapshot/<owner>/<name>');
    return { canonical: ref, local: true, snapshot: true, domain: 'snapshot', path: `${m[1]}/${m[2]}` };
  }
  if (/\s/.test(ref)) throw invalid(ref, 'reference contains whitespace');
  let rest = ref;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw invalid(ref, `bad digest "${digest}" (want sha256:<64 hex>)`);
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw invalid(ref, `bad tag "${tag}"`);
  }
  if (rest.length === 0) throw invalid(ref, 'missing repository name');
  const parts = rest.split('/');
  let domain = 'docker.io';
  const first = parts[0];
  const isDomain =
    parts.length > 1 &&
    (first.includes('.') || first.includes(':') || first === 'localhost' || first !== first.toLowerCase());
  if (isDomain) {
    domain = first === 'index.docker.io' ? 'docker.io' : first;
    parts.shift();
    if (!validDomain(domain)) throw invalid(ref, `bad registry host "${first}"`);
  }
  const local = !isDomain && parts.length > 1 && first === 'local';
  if (local) {
    domain = 'local';
    parts.shift();
    if (digest) throw invalid(ref, 'local images are referenced by tag, not digest');
  } else if (domain === 'docker.io' && parts.length === 1) {
    parts.unshift('library');
  }
  for (const p of parts) {
    if (p !== p.toLowerCase()) throw invalid(ref, 'repository name must be lowercase');
    if (!PATH_COMPONENT.test(p)) throw invalid(ref, `bad repository name component "${p}"`);
  }
  const path = parts.join('/');
  const name = `${domain}/${path}`;
  if (name.length > MAX_NAME) throw invalid(ref, 'repository name longer than 255 characters');
  if (!tag && !digest) tag = 'latest';
  const canonical = `${name}${tag ? `:${tag}` : ''}${digest ? `@${digest}` : ''}`;
  return { canonical, local, domain, path, tag, digest };
}

/** The `docker://` transport string skopeo wants for a remote reference. */
export function skopeoSource(r: ImageRef): string {
  if (r.local) throw new Error('local images have no registry source');
  // A digest pins the content; skopeo rejects tag+digest, so the digest wins.
  return `docker://${r.domain}/${r.path}${r.digest ? `@${r.digest}` : `:${r.tag}`}`;
}
