/**
 * `sbx` at the closed end of a pipe. When the reader of our output goes away
 * (`sbx ls | head -1`), `sbx` ends the way `ls` does in that pipeline: silently, with exit
 * status 141 (128 + SIGPIPE, what the shell reports for a program a closed pipe stopped).
 * Node ignores SIGPIPE, so the write fails with EPIPE instead, as an 'error' event on
 * process.stdout (or stderr) that would otherwise end the process with a stack trace.
 * Installed once for the process by main(); a command that has something to stop first
 * (`sbx exec` stops its remote command) says so with onReaderGone().
 */

/** The exit status when our reader went away: 128 + SIGPIPE (13), as the shell reports `ls` in `ls | head`. */
export const CLOSED_PIPE_EXIT = 141;

/** How long the clean-ups of onReaderGone() may take before we leave anyway. */
const CLEANUP_MS = 5_000;

const cleanups = new Set<() => unknown>();
let leaving = false;
let installed = false;

/**
 * True once stdout or stderr failed and the process is on its way out: print nothing more.
 * Also true (and the way out starts) when stdout has failed with EPIPE but its 'error'
 * event is still to come: an action that piped into stdout may be rejected first.
 */
export function readerGone(): boolean {
  if (!leaving && (process.stdout.errored as NodeJS.ErrnoException | null)?.code === 'EPIPE') leave(CLOSED_PIPE_EXIT);
  return leaving;
}

/** Runs `fn` (awaited, at most 5 s) before the process leaves for a closed pipe; returns the way to take it back. */
export function onReaderGone(fn: () => unknown): () => void {
  cleanups.add(fn);
  return () => cleanups.delete(fn);
}

/** Leaves with `code` once the clean-ups are done (bounded); only the first call counts. */
function leave(code: number): void {
  if (leaving) return;
  leaving = true;
  setTimeout(() => process.exit(code), CLEANUP_MS);
  void Promise.allSettled([...cleanups].map(async (fn) => fn())).then(() => process.exit(code));
}

/**
 * Makes a closed stdout or stderr end the process quietly with CLOSED_PIPE_EXIT. Any other
 * failure to write stdout (a full disk behind `> file`) is one `error:` line and exit 1.
 * Idempotent.
 */
export function endQuietlyOnClosedPipe(): void {
  if (installed) return;
  installed = true;
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') return leave(CLOSED_PIPE_EXIT);
    if (!leaving) process.stderr.write(`error: cannot write the output: ${e.message}\n`);
    leave(1);
  });
  // Nowhere is left to report a failing stderr: leave without a word.
  process.stderr.on('error', (e: NodeJS.ErrnoException) => leave(e.code === 'EPIPE' ? CLOSED_PIPE_EXIT : 1));
}
