/** A PTY of a sandbox: what starts one ({@link TtyOptions}) and the process on it ({@link PtyProcess}). */

export interface TtyOptions {
  /** argv of the process, e.g. `['/bin/bash', '-l']`. */
  argv: string[];
  env?: Record<string, string>;
  cwd?: string;
  /**
   * `root`, a numeric `uid` or `uid:gid`, or a name from the sandbox's /etc/passwd (its
   * uid and gid; no supplementary groups); default the image's user. Throws `validation`
   * for an unknown name.
   */
  user?: string;
  cols: number;
  rows: number;
}

/**
 * A process running on a PTY inside a sandbox, inside its isolation (same namespaces,
 * seccomp, capabilities and cgroup as every other sandbox process).
 */
export interface PtyProcess {
  /** Pid of the process as seen inside the sandbox. */
  readonly pid: number;
  /**
   * Keyboard input. Returns false once input is queued because the program is not reading
   * it (as a stream's write does): callers stop sending until `onDrain`.
   */
  write(data: string | Uint8Array): boolean;
  /** Called whenever queued input has been handed on (after `write` returned false). */
  onDrain(listener: () => void): void;
  resize(cols: number, rows: number): void;
  /** Output bytes; called in order. Pausing lets callers apply backpressure. */
  onData(listener: (chunk: Buffer) => void): void;
  /** Called once when the process has exited and all output has been delivered. */
  onExit(listener: (exit: { exitCode: number; signal: string | null }) => void): void;
  pause(): void;
  resume(): void;
  /** Sends a signal to the process (default SIGKILL). */
  kill(signal?: NodeJS.Signals): void;
}
