/**
 * The code-interpreter routes the notebook panel uses (docs/api.md, "Code interpreter"),
 * sent through the SDK's HTTP client with the session cookie: run code as an NDJSON stream,
 * and the code contexts (kernels) a notebook makes, restarts and finds gone.
 */
import { ndjsonLines } from '@sandboxd/sdk';
import { client } from './api.js';
import { type CodeEvent, type Language, parseEvent } from './notebook-util.js';

const codeUrl = (sandboxId: string, rest: string) => `/api/v1/sandboxes/${encodeURIComponent(sandboxId)}/code${rest}`;

/** A code context (one kernel) as the server describes it. */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
}

/** Starts a new context (kernel) of `language` (`POST .../code/contexts`). */
export async function createContext(sandboxId: string, language: Language): Promise<CodeContext> {
  return client.http.request<CodeContext>('POST', codeUrl(sandboxId, '/contexts'), { json: { language } });
}

/** Restarts a context: its state is lost, the context id stays (`POST .../contexts/{id}/restart`). */
export async function restartContext(sandboxId: string, contextId: string): Promise<void> {
  await client.http.request('POST', codeUrl(sandboxId, `/contexts/${encodeURIComponent(contextId)}/restart`));
}

/**
 * How long the server may take to answer a run with its status (before any output). The
 * run itself has no limit here: the user's Interrupt (or leaving the page) ends it.
 */
const ANSWER_TIMEOUT_MS = 10 * 60_000;

/**
 * The run's own limit, sent as `timeoutMs`: the server's largest (an hour) rather than its
 * 5-minute default, since a person watching the cell interrupts it when they want.
 */
const RUN_TIMEOUT_MS = 3_600_000;

/**
 * Runs `code` in the context and yields its events as they arrive (`POST .../code/execute`).
 * Aborting `signal` closes the request, which interrupts the run in the sandbox. Throws the
 * SDK's typed errors for an answer refused before streaming (400, 404, 409, ...).
 */
export async function* execute(
  sandboxId: string,
  body: { code: string; contextId: string },
  signal: AbortSignal,
): AsyncGenerator<CodeEvent, void, undefined> {
  const res = await client.http.open('POST', codeUrl(sandboxId, '/execute'), {
    json: { ...body, timeoutMs: RUN_TIMEOUT_MS },
    signal,
    timeoutMs: ANSWER_TIMEOUT_MS,
    headers: { accept: 'application/x-ndjson' },
  });
  if (!res.body) return;
  for await (const line of ndjsonLines(res.body)) {
    const e = parseEvent(line);
    if (e) yield e;
  }
}
