/**
 * The pure parts of envd's `process.Process` as sandboxd serves it: how an exit reads on
 * the wire, which process a selector names, what the request headers ask for.
 */
import { Code, ConnectError } from '@connectrpc/connect';
import { type ProcessSelector, Signal } from './gen/process_pb.js';

/** envd's keep-alive interval when a stream does not ask for one (`Keepalive-Ping-Interval`). */
export const DEFAULT_KEEPALIVE_MS = 90_000;

/** How a process or PTY ended, as sandboxd's services report it. */
export interface Exit {
  exitCode: number;
  /** Name of the signal that killed it (`SIGKILL`), or null. */
  signal: string | null;
  /** Killed at its deadline. */
  timedOut?: boolean;
}

/** The `end` event of a process: what envd reports (Go's `ProcessState`). */
export interface EndEvent {
  exitCode: number;
  exited: boolean;
  status: string;
  error?: string;
}

/** How Go's `syscall.Signal.String()` names the signals a process dies of. */
const SIGNAL_TEXT: Record<string, string> = {
  SIGHUP: 'hangup',
  SIGINT: 'interrupt',
  SIGQUIT: 'quit',
  SIGILL: 'illegal instruction',
  SIGTRAP: 'trace/breakpoint trap',
  SIGABRT: 'aborted',
  SIGBUS: 'bus error',
  SIGFPE: 'floating point exception',
  SIGKILL: 'killed',
  SIGUSR1: 'user defined signal 1',
  SIGSEGV: 'segmentation fault',
  SIGUSR2: 'user defined signal 2',
  SIGPIPE: 'broken pipe',
  SIGALRM: 'alarm clock',
  SIGTERM: 'terminated',
  SIGXCPU: 'CPU time limit exceeded',
  SIGXFSZ: 'file size limit exceeded',
};

/**
 * The `end` event of an exit, as envd words it: an exit is `exited: true` with its code and
 * status `exit status <n>` (also the `error` when n is not 0); death by a signal (a kill,
 * the deadline) is `exited: false`, exit code -1, status and error `signal: killed`.
 */
export function endEvent(e: Exit): EndEvent {
  const signal = e.timedOut ? 'SIGKILL' : e.signal;
  if (signal) {
    const status = `signal: ${SIGNAL_TEXT[signal] ?? signal}`;
    return { exitCode: -1, exited: false, status, error: status };
  }
  const status = `exit status ${e.exitCode}`;
  return e.exitCode === 0
    ? { exitCode: 0, exited: true, status }
    : { exitCode: e.exitCode, exited: true, status, error: status };
}

/** The signal of a SendSignal request: SIGKILL or SIGTERM (all envd sends); others are `InvalidArgument`. */
export function signalOf(s: Signal): 'SIGKILL' | 'SIGTERM' {
  if (s === Signal.SIGKILL) return 'SIGKILL';
  if (s === Signal.SIGTERM) return 'SIGTERM';
  throw new ConnectError(`Unsupported signal ${s}: only SIGKILL (9) and SIGTERM (15) are sent`, Code.InvalidArgument);
}

/** What a selector names: a pid or a tag. `InvalidArgument` when it names neither. */
export function selectorOf(s: ProcessSelector | undefined): { pid: number } | { tag: string } {
  const sel = s?.selector;
  if (sel?.case === 'pid' && sel.value > 0) return { pid: sel.value };
  if (sel?.case === 'tag' && sel.value !== '') return { tag: sel.value };
  throw new ConnectError('A process selector (a pid above 0, or a tag) is required', Code.InvalidArgument);
}

/** How a selector reads in an error message. */
export function describeSelector(s: { pid: number } | { tag: string }): string {
  return 'pid' in s ? `process with pid ${s.pid}` : `process with tag ${JSON.stringify(s.tag)}`;
}

/** The keep-alive interval a stream asks for (`Keepalive-Ping-Interval`, seconds); envd's default otherwise. */
export function keepAliveMs(header: string | null): number {
  if (header === null || !/^\s*\d{1,9}\s*$/.test(header)) return DEFAULT_KEEPALIVE_MS;
  const s = Number(header);
  return s > 0 ? Math.min(s * 1000, MAX_DEADLINE_MS) : DEFAULT_KEEPALIVE_MS;
}

/** The longest deadline a timer holds (about 24.8 days); longer ones are capped to it. */
export const MAX_DEADLINE_MS = 2 ** 31 - 1;

/**
 * The deadline of a Start (`Connect-Timeout-Ms`, the SDK's `timeoutMs`): envd kills the
 * process when it passes, whether or not the client is still there. 0: none (the SDK's
 * `timeoutMs: 0` sends no header). Capped at {@link MAX_DEADLINE_MS}.
 */
export function startDeadlineMs(header: string | null): number {
  if (header === null || !/^\d{1,10}$/.test(header)) return 0;
  return Math.min(Number(header), MAX_DEADLINE_MS);
}
