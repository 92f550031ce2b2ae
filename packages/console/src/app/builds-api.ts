/**
 * Image builds and templates (docs/templates.md), through the SDK's HTTP client with the
 * session cookie: start a build from a tar of its context, list, read, cancel and delete
 * builds, follow a build's log, list and delete templates.
 */
import type { Build, BuildCreateQuery, Template } from '@sandboxd/protocol';
import { client } from './api.js';
import { ndjson } from './build-log.js';

export type { Build, Template };

const BUILDS = '/api/v1/images/builds';
const one = (id: string, rest = '') => `${BUILDS}/${encodeURIComponent(id)}${rest}`;

/** How long sending a context may take (a large folder over a slow link); the page's own Cancel still ends it. */
const UPLOAD_TIMEOUT_MS = 3600_000;

/** Starts a build of `context` (a tar holding the Dockerfile): resolves with the `queued` build. */
export async function createBuild(
  q: Omit<BuildCreateQuery, 'buildArgs' | 'allowDomains'> & {
    buildArgs?: Record<string, string>;
    allowDomains?: string[];
  },
  context: Blob,
  signal?: AbortSignal,
): Promise<Build> {
  const r = await client.http.request<{ build: Build }>('POST', BUILDS, {
    query: {
      name: q.name,
      tag: q.tag,
      dockerfile: q.dockerfile,
      buildArgs: q.buildArgs && Object.keys(q.buildArgs).length ? JSON.stringify(q.buildArgs) : undefined,
      allowDomains: q.allowDomains?.length ? q.allowDomains.join(',') : undefined,
      noCache: q.noCache ? true : undefined,
    },
    body: context,
    contentType: 'application/x-tar',
    timeoutMs: UPLOAD_TIMEOUT_MS,
    signal,
  });
  return r.build;
}

/** The account's builds, newest first. */
export async function listBuilds(): Promise<Build[]> {
  return (await client.http.request<{ builds: Build[] }>('GET', BUILDS)).builds;
}

export async function getBuild(id: string): Promise<Build> {
  return (await client.http.request<{ build: Build }>('GET', one(id))).build;
}

/** Stops a queued or running build; 409 once it is over. */
export async function cancelBuild(id: string): Promise<Build> {
  return (await client.http.request<{ build: Build }>('POST', one(id, '/cancel'))).build;
}

/** Forgets a build and its log (its template stays). */
export async function deleteBuild(id: string): Promise<void> {
  await client.http.request('DELETE', one(id));
}

/** The log from `offset`, followed until the build ends: the parsed NDJSON lines. */
export async function openBuildLog(id: string, offset: number, signal: AbortSignal): Promise<AsyncIterable<unknown>> {
  const res = await client.http.open('GET', one(id, '/logs'), {
    query: { offset, follow: true },
    headers: { accept: 'application/x-ndjson' },
    signal,
  });
  if (!res.body) throw new Error('the log answer has no body');
  return ndjson(res.body);
}

/** The account's ready templates. */
export async function listTemplates(): Promise<Template[]> {
  return (await client.http.request<{ templates: Template[] }>('GET', '/api/v1/templates')).templates;
}

/** Deletes one tag of a template. */
export async function deleteTemplate(name: string, tag: string): Promise<void> {
  await client.http.request('DELETE', `/api/v1/templates/${encodeURIComponent(name)}`, { query: { tag } });
}
