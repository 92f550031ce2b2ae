/**
 * Tool results as a model reads them: text first (what happened, the output, what to do
 * next), the same facts as `structuredContent` for programs, and every failure as an
 * `isError` result naming the API's `kind` and message, never a protocol error.
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { SandboxdApiError } from '@sandboxd/sdk';

/** Bounds on what a tool hands back, so one call never floods a model's context. */
export interface McpLimits {
  /** Characters kept of each of stdout and stderr (run_command, run_code): the first and the last half. */
  outputChars: number;
  /** Bytes read_file returns in one call (the rest is read with `offset`). */
  fileBytes: number;
  /** Entries list_directory shows. */
  listEntries: number;
  /** Sandboxes list_sandboxes shows (the newest). */
  listSandboxes: number;
  /** Characters of `content` write_file accepts. */
  writeChars: number;
  /**
   * Characters of output (stdout, stderr, results) run_code collects from one run before
   * it stops the run: what it holds in memory for one call.
   */
  codeCollectChars: number;
  /** Images run_code returns, and the largest one (base64 characters). */
  images: number;
  imageChars: number;
}

/** The bounds used unless `createMcpServer`'s options change them. */
export const DEFAULT_LIMITS: McpLimits = {
  outputChars: 32_000,
  fileBytes: 64 * 1024,
  listEntries: 500,
  listSandboxes: 100,
  writeChars: 4 * 1024 * 1024,
  codeCollectChars: 8 * 1024 * 1024,
  images: 4,
  imageChars: 4 * 1024 * 1024,
};

/** A successful result: `text` for the model, `data` as structured content. */
export function ok(text: string, data?: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text }], ...(data ? { structuredContent: data } : {}) };
}

/** What a failure carries, whatever threw it. */
export interface ToolFailure {
  kind: string;
  /** HTTP status of the API's answer; 0 when none came (connection, timeout). */
  code: number;
  message: string;
  details?: unknown;
}

/** Maps anything a tool's call threw to the API's error fields (kind, status, message, details). */
export function failureOf(e: unknown): ToolFailure {
  if (e instanceof SandboxdApiError)
    return {
      kind: e.kind,
      code: e.status,
      message: e.message,
      ...(e.details !== undefined ? { details: e.details } : {}),
    };
  if (e instanceof Error && (e.name === 'AbortError' || e.name === 'TimeoutError'))
    return { kind: 'cancelled', code: 0, message: 'The call was cancelled before it finished' };
  if (e instanceof RangeError || e instanceof TypeError) return { kind: 'validation', code: 0, message: e.message };
  return { kind: 'internal', code: 0, message: e instanceof Error ? e.message : String(e) };
}

/** What a model can do about each kind of failure (added to the message). */
const HINTS: Record<string, string> = {
  not_found: 'Check the id or path (list_sandboxes lists the sandboxes of this account).',
  template_not_found:
    'The image does not exist; local/debian:bookworm, local/busybox:latest and local/code-interpreter:latest are the built-in ones.',
  concurrency:
    'The plan allows no more started sandboxes: delete_sandbox or pause_sandbox one you no longer need, then retry.',
  tokens: 'The account has too few tokens for that lifetime: ask for a shorter lifetime_ms.',
  quota: 'A plan quota is reached (details.quota names it): delete what is no longer needed.',
  conflict: 'The sandbox is in the wrong state for this (details.state names it): resume_sandbox a paused one.',
  no_code_interpreter:
    'run_code needs a sandbox made from local/code-interpreter:latest: create one with create_sandbox and that image.',
  rate_limited: 'Too many requests: wait a moment (details.retryAfterMs) and retry.',
  capacity: 'The server has no room right now: retry later or delete unused sandboxes.',
  validation: 'Fix the argument the message names and call again.',
  timeout: 'The API did not answer in time; the operation may still finish. Check with list_sandboxes.',
  connection: 'The sandboxd server could not be reached.',
};

/** A failure as a tool result the model reads: `isError`, the kind and status, the API's message, details. */
export function toolError(e: unknown): CallToolResult {
  const f = failureOf(e);
  const details = f.details === undefined ? '' : `\ndetails: ${cut(JSON.stringify(f.details), 2000).text}`;
  const hint = HINTS[f.kind] ? `\n${HINTS[f.kind]}` : '';
  return {
    isError: true,
    content: [
      { type: 'text', text: `Error (${f.kind}${f.code ? `, HTTP ${f.code}` : ''}): ${f.message}${details}${hint}` },
    ],
    structuredContent: { error: f },
  };
}

/** Runs a tool's body and turns anything it throws into an `isError` result. */
export async function guarded(run: () => Promise<CallToolResult>): Promise<CallToolResult> {
  try {
    return await run();
  } catch (e) {
    return toolError(e);
  }
}

/** `text` cut to `max` characters, keeping the first and the last half, with how much was left out. */
export function cut(text: string, max: number): { text: string; omitted: number } {
  if (text.length <= max) return { text, omitted: 0 };
  const head = Math.ceil(max / 2);
  const tail = max - head;
  const omitted = text.length - max;
  return {
    text: `${text.slice(0, head)}\n[... ${omitted} characters cut here ...]\n${tail > 0 ? text.slice(-tail) : ''}`,
    omitted,
  };
}

/** Terminal colour and cursor sequences (tracebacks of kernels carry them). */
export function stripAnsi(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: ESC is what is matched
  return s.replace(/\u001b\[[0-9;?]*[ -/]*[@-~]/g, '');
}
