import { SandboxdError, type ServerControlMessage, type Shell } from '@sandboxd/protocol';
import type { TtyOptions } from '../pty.js';

/**
 * Terminals one sandbox may hold (active and exited) by default; the oldest exited one
 * without a client is evicted first (`SANDBOXD_FAIR_SHARE_TERMINALS_PER_SANDBOX`).
 */
export const MAX_TERMINALS_PER_SANDBOX = 32;
/** Clients attached to one terminal at once by default (`SANDBOXD_FAIR_SHARE_CLIENTS_PER_TERMINAL`). */
export const MAX_CLIENTS_PER_TERMINAL = 16;
/** Terminal sizes accepted by create and resize. */
export const MAX_TERMINAL_SIZE = 1000;
/** Close codes a terminal's clients get. */
export const CLOSE = { normal: 1000, goingAway: 1001, lostRunner: 1011, tooSlow: 1013 } as const;

/** What a new terminal runs and how it is listed; decided by the caller (defaults, login) before the PTY exists. */
export interface TerminalSpec {
  /** What runs on the PTY (argv, env on top of the sandbox's, cwd, user, size). */
  tty: TtyOptions;
  /** The shell it is listed with. */
  shell: Shell;
  /** The environment it is listed with (as asked for: without a login's variables). */
  env: Record<string, string>;
  /** The working directory it is listed with. */
  cwd: string;
  /** A caller's label (E2B's process tag), or null. */
  tag: string | null;
  /** Creation time it is listed with (ms since the epoch, the caller's clock). */
  createdAt: number;
  /** Deleted after this long without a client (the clock starts at creation and when the last client leaves). */
  idleMs: number;
  /** Not cleaned up while it runs without a client (it ends by itself, a kill or its deadline). */
  keepWhileIdle: boolean;
  /** Killed (SIGKILL) when it still runs after this long; 0: never. */
  timeoutMs: number;
}

/** A terminal as its holder sees it now (plain data: it crosses the runner protocol as JSON). */
export interface TerminalState {
  id: string;
  sandboxId: string;
  shell: Shell;
  status: 'active' | 'exited';
  /** How the program ended, once `exited`. */
  exit: { exitCode: number; signal: string | null } | null;
  /** Pid of the program inside the sandbox. */
  pid: number;
  /** Clients attached now, wherever they are (every API replica's sockets and streams). */
  clientCount: number;
  createdAt: number;
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  tag: string | null;
  keepWhileIdle: boolean;
}

/** One connected viewer of a terminal (a WebSocket, an E2B stream, a runner socket); transport-agnostic. */
export interface TerminalClient {
  /** Terminal output bytes (a binary frame). */
  sendOutput(chunk: Buffer): void;
  /** A control message (a text frame). */
  sendControl(msg: ServerControlMessage): void;
  /** Bytes sent to this client and not yet handed to its network (so far behind it is). */
  readonly bufferedBytes: number;
  /** Ends the connection; the client's `detach` follows. */
  close(code: number, reason: string): void;
  /**
   * Stop reading this client's input (the program is not reading what was typed), and go
   * on. Without them input from a client is taken however much piles up.
   */
  pauseInput?(): void;
  resumeInput?(): void;
}

/** What `attach` gives a client: its way to type, resize, report progress and leave. */
export interface TerminalAttachment {
  input(data: Buffer | string): void;
  /** Ignores sizes outside 1..1000 (never throws). */
  resize(cols: number, rows: number): void;
  /** Call after output was handed to the network (`bufferedBytes` went down), so a paused PTY can resume. */
  written(): void;
  detach(): void;
}

/**
 * The terminals of a runtime: PTYs and their clients, held where the PTYs run (in the
 * process that runs sandboxes: with `SANDBOXD_ROLE=all` the server itself, else the
 * runner), so that any API replica can list and attach any terminal, and a terminal lives
 * as long as that process, whatever happens to the replicas. Every call names the sandbox
 * first, so a driver of several runners routes it by sandbox id like any other call.
 *
 * The holder keeps at most {@link MAX_TERMINALS_PER_SANDBOX} per sandbox (its configured
 * share) and {@link MAX_CLIENTS_PER_TERMINAL} clients per terminal, fans output out
 * to every client (and a 64 KiB replay ring), applies backpressure (the PTY pauses only
 * while every client is behind; a client more than 4 MiB behind while another keeps up is
 * closed with 1013), deletes a terminal after `idleMs` without a client, and ends a
 * sandbox's terminals when it stops or is deleted. Ownership, sandbox states and defaults
 * are the caller's. Errors: `not_found` (unknown terminal, or one of another sandbox),
 * `conflict` (the sandbox holds its maximum), `rate_limited` (an attach to a terminal with
 * its maximum of clients), the driver's own for `execTty`.
 */
export interface DriverTerminals {
  /** Starts `spec.tty` on a new PTY in the sandbox and holds it; resolves once it runs. */
  create(sandboxId: string, spec: TerminalSpec): Promise<TerminalState>;
  /** The sandbox's terminals, active and exited, oldest first. */
  list(sandboxId: string): Promise<TerminalState[]>;
  /** One terminal, or null. */
  get(sandboxId: string, terminalId: string): Promise<TerminalState | null>;
  /**
   * Hangs the terminal up (SIGHUP, SIGKILL 2 s later; every client gets `exit` 129
   * `SIGHUP` and close 1000 with `reason`) and forgets it. `not_found`.
   */
  delete(sandboxId: string, terminalId: string, reason?: string): Promise<void>;
  /** Input from a caller that is no client; resolves once the PTY took it (or the program ended). `not_found`. */
  input(sandboxId: string, terminalId: string, data: Uint8Array): Promise<void>;
  /** Resizes the PTY; sizes outside 1..1000 are ignored. `not_found`. */
  resize(sandboxId: string, terminalId: string, cols: number, rows: number): Promise<void>;
  /** Sends a signal to the program (no-op once it exited). `not_found`. */
  signal(sandboxId: string, terminalId: string, signal: NodeJS.Signals): Promise<void>;
  /**
   * Adds a client: it gets `ready` (or, for an exited terminal, `exit` and close 1000),
   * the ring when `replay` is set or when it is the first client ever, then live output.
   * `not_found`.
   */
  attach(
    sandboxId: string,
    terminalId: string,
    client: TerminalClient,
    opts?: { replay?: boolean },
  ): Promise<TerminalAttachment>;
  /** Ends and forgets every terminal of the sandbox (it stopped or is gone): clients get `exit`, close 1000. */
  closeSandbox(sandboxId: string, reason: string): Promise<void>;
}

/** The `rate_limited` of a terminal that has its share of clients attached. */
export function clientsFull(max: number): SandboxdError {
  return new SandboxdError('rate_limited', `This terminal already has ${max} clients attached; close one first`, {
    limit: 'clientsPerTerminal',
    max,
  });
}
