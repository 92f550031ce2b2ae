/**
 * The console's one connection to the server: the SDK with the session cookie (no API key),
 * plus the few session calls the SDK has no method for, sent through its HTTP client.
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

/** A message for any error the SDK throws. */
export function errorText(e: unknown): string {
  if (e instanceof SandboxdApiError) return e.message;
  return e instanceof Error ? e.message : String(e);
}
