/**
 * Image builds and templates (docs/templates.md) through the SDK (`client.builds`,
 * `client.templates`, with the session cookie), plus the one call the page makes itself: a
 * build's log stream, opened from an offset, which `build-log.ts` follows through dropped
 * connections while telling the page how it goes.
 */
import type { Build, TemplateInfo } from '@sandboxd/sdk';
import { client } from './api.js';
import { ndjson } from './build-log.js';

export type { Build, TemplateInfo as Template };

/** How long sending a context may take (a large folder over a slow link); leaving the page still ends it. */
const UPLOAD_TIMEOUT_MS = 3600_000;

/** Starts a build of `context` (a tar holding the Dockerfile): resolves with the `queued` build. */
export function createBuild(
  q: { name: string; tag?: string; buildArgs?: Record<string, string>; allowDomains?: string[]; noCache?: boolean },
  context: Blob,
  signal?: AbortSignal,
): Promise<Build> {
  return client.builds.create({
    name: q.name,
    tag: q.tag,
    context,
    buildArgs: q.buildArgs && Object.keys(q.buildArgs).length ? q.buildArgs : undefined,
    allowDomains: q.allowDomains?.length ? q.allowDomains : undefined,
    noCache: q.noCache || undefined,
    timeoutMs: UPLOAD_TIMEOUT_MS,
    signal,
  });
}

/** The account's builds, newest first. */
export const listBuilds = (): Promise<Build[]> => client.builds.list();
export const getBuild = (id: string): Promise<Build> => client.builds.get(id);
/** Stops a queued or running build; 409 once it is over. */
export const cancelBuild = (id: string): Promise<Build> => client.builds.cancel(id);
/** Forgets a build and its log (its template stays). */
export const deleteBuild = (id: string): Promise<void> => client.builds.delete(id);
/** The account's ready templates. */
export const listTemplates = (): Promise<TemplateInfo[]> => client.templates.list();
/** Deletes one tag of a template. */
export const deleteTemplate = (name: string, tag: string): Promise<void> => client.templates.delete(name, tag);

/** The log from `offset`, followed until the build ends: the parsed NDJSON lines. */
export async function openBuildLog(id: string, offset: number, signal: AbortSignal): Promise<AsyncIterable<unknown>> {
  const res = await client.http.open('GET', `/api/v1/images/builds/${encodeURIComponent(id)}/logs`, {
    query: { offset, follow: true },
    headers: { accept: 'application/x-ndjson' },
    signal,
  });
  if (!res.body) throw new Error('the log answer has no body');
  return ndjson(res.body);
}
