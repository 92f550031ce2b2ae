/** A process started in a sandbox with its output streamed: how it starts ({@link SpawnOptions}), the process ({@link StreamedProcess}), how it ends ({@link ProcessExit}). */

/** Options of `RuntimeDriver.spawn`. */
export interface SpawnOptions {
  /** Merged over the sandbox env. */
  env?: Record<string, string>;
  /** Working directory inside the sandbox; default the image's WorkingDir, else `/`. */
  cwd?: string;
  /** `root`, a numeric `uid` or `uid:gid`, or a name from the sandbox's /etc/passwd; default the image's user. */
  user?: string;
  /** On expiry the process tree is killed and exitCode is 124. Default 0: none. */
  timeoutMs?: number;
  /** stdin is a pipe fed by `write` (else /dev/null). */
  stdin?: boolean;
}

/** How a streamed process ended. */
export interface ProcessExit {
  /** Exit code; 128 + n when killed by signal n; 124 on timeout. */
  exitCode: number;
  /** Name of the signal that killed it (`SIGKILL`), or null. */
  signal: string | null;
  timedOut: boolean;
  /**
   * No exit status came: the sandbox's agent went while the process ran (the sandbox was
   * killed or stopped), and the process is reported killed (137, SIGKILL) without it.
   */
  agentGone?: boolean;
}

/**
 * A process inside a sandbox whose output is delivered as it comes. Flow-controlled both
 * ways: while paused, the process is slowed once a small window of its output is in
 * flight (never buffered without bound); `write` returns false once a window of stdin is
 * in flight (wait for `onDrain`).
 */
export interface StreamedProcess {
  /** Pid of the process as seen inside the sandbox. */
  readonly pid: number;
  /** Output, in order; one listener. Output that came before the listener is kept for it. */
  onData(listener: (stream: 'stdout' | 'stderr', chunk: Buffer) => void): void;
  /** Called once, after all output was delivered. */
  onExit(listener: (exit: ProcessExit) => void): void;
  pause(): void;
  resume(): void;
  /** Appends to stdin; false once input is queued (wait for `onDrain`) or stdin is closed. */
  write(data: Uint8Array): boolean;
  onDrain(listener: () => void): void;
  /** The process reads EOF once what was written reached it. */
  closeStdin(): void;
  /** False when started without stdin, once closed, or once the process closed it or exited. */
  readonly stdinOpen: boolean;
  /** Sends a signal to the process's group (default SIGKILL). */
  kill(signal?: NodeJS.Signals): void;
}
