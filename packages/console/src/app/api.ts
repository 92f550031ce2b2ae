/**
 * The console's one connection to the server: the SDK with the session cookie (no API key),
 * plus the few calls the SDK has no method for (the session, a sandbox's files), sent
 * through its HTTP client.
 */
import { SandboxdApiError, SandboxdClient, type AccountInfo, type EventKind } from '@sandboxd/sdk';

/** The SDK client of this page: same origin, cookie session. */
export const client = new SandboxdClient({ timeoutMs: 120_000 });

/** A stored event as `GET /api/v1/events` lists it. */
export interface StoredEvent {
  event: string;
  metadata: Record<string, unknown>;
  createdAt: string;
}

/** Signs in with email and password; the server sets the session cookie. */
export async function signIn(email: string, password: string): Promise<AccountInfo> {
  await client.http.request('POST', '/api/v1/auth/login', { json: { email, password } });
  return client.account.get();
}

/** Creates an account on the server's default plan; the server sets the session cookie. */
export async function signUp(email: string, password: string): Promise<AccountInfo> {
  await client.http.request('POST', '/api/v1/auth/signup', { json: { email, password } });
  return client.account.get();
}

/** Ends the session. */
export async function signOut(): Promise<void> {
  await client.http.request('POST', '/api/v1/auth/logout');
}

/** The account's tracked events, oldest first. */
export async function listEvents(): Promise<StoredEvent[]> {
  return (await client.http.request<{ events: StoredEvent[] }>('GET', '/api/v1/events')).events;
}

/** Tracks an onboarding event; a failure is reported in the page, never thrown. */
export async function track(event: EventKind, metadata: Record<string, unknown> = {}): Promise<void> {
  await client.events.track(event, metadata);
}

/** A file, folder, symlink or other entry of a sandbox, as the files routes describe it (docs/files-and-processes.md). */
export interface FileEntry {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  /** Permission bits as a number (`0o644` = 420). */
  mode: number;
  owner: string;
  group: string;
  modifiedAt: string;
  symlinkTarget?: string;
}

/**
 * How long one upload may take. The client's usual 120 s would cut large files short; the
 * user's Cancel (or leaving the page) ends an upload instead. Below setTimeout's 2^31 ms cap.
 */
const UPLOAD_TIMEOUT_MS = 24 * 3600_000;

const filesUrl = (sandboxId: string, rest = '') => `/api/v1/sandboxes/${encodeURIComponent(sandboxId)}/files${rest}`;

/** The entries of a folder of a sandbox (`GET .../files?path=&depth=1`); `truncated` when the server cut the list. */
export async function listFiles(
  sandboxId: string,
  path: string,
): Promise<{ entries: FileEntry[]; truncated: boolean }> {
  const r = await client.http.request<{ entries: FileEntry[]; truncated?: boolean }>('GET', filesUrl(sandboxId), {
    query: { path, depth: 1 },
  });
  return { entries: r.entries ?? [], truncated: r.truncated === true };
}

/**
 * Writes `file` to `path` in the sandbox (`PUT .../files/content?path=`), replacing a file
 * there. The Blob is the fetch body, so the browser streams it from disk.
 */
export async function uploadFile(sandboxId: string, path: string, file: Blob, signal: AbortSignal): Promise<FileEntry> {
  const r = await client.http.request<{ entry: FileEntry }>('PUT', filesUrl(sandboxId, '/content'), {
    query: { path },
    body: file,
    contentType: 'application/octet-stream',
    timeoutMs: UPLOAD_TIMEOUT_MS,
    signal,
  });
  return r.entry;
}

/** The URL of a file's content (`GET .../files/content?path=`): same origin, so a plain link sends the session cookie. */
export function fileContentUrl(sandboxId: string, path: string): string {
  return client.http.url(filesUrl(sandboxId, '/content'), { path });
}

/** Removes a file, symlink or (recursively) a folder (`DELETE .../files?path=`). */
export async function deletePath(sandboxId: string, path: string): Promise<void> {
  await client.http.request('DELETE', filesUrl(sandboxId), { query: { path } });
}

/** Creates a folder and its missing parents (`POST .../files/mkdir`). */
export async function makeFolder(sandboxId: string, path: string): Promise<FileEntry> {
  return (await client.http.request<{ entry: FileEntry }>('POST', filesUrl(sandboxId, '/mkdir'), { json: { path } }))
    .entry;
}

/** A message for any error the SDK throws. */
export function errorText(e: unknown): string {
  if (e instanceof SandboxdApiError) return e.message;
  return e instanceof Error ? e.message : String(e);
}
