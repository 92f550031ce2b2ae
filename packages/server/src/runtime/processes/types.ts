import type { ProcessExit, SpawnOptions } from '../spawn.js';

/** Processes one sandbox may run through the API at once by default (starts in flight count; `SANDBOXD_FAIR_SHARE_RUNNING_PROCESSES_PER_SANDBOX`). */
export const MAX_RUNNING_PROCESSES = 64;
/** Exited processes kept per sandbox by default (listed, output replayable); the oldest goes first (`_EXITED_PROCESSES_PER_SANDBOX`). */
export const MAX_EXITED_PROCESSES = 16;
/** Live readers of one process by default (`SANDBOXD_FAIR_SHARE_FOLLOWERS_PER_PROCESS`). */
export const MAX_FOLLOWERS_PER_PROCESS = 16;
/** Live readers of all the processes of one sandbox by default (`SANDBOXD_FAIR_SHARE_FOLLOWERS_PER_SANDBOX`). */
export const MAX_FOLLOWERS_PER_SANDBOX = 128;

/** The per-sandbox shares a process holder enforces (see config-fair-share.ts). */
export interface ProcessShares {
  runningProcessesPerSandbox: number;
  exitedProcessesPerSandbox: number;
  followersPerProcess: number;
  followersPerSandbox: number;
}
/**
 * How long a held process (see {@link ProcessSpec.held}) waits for its first reader before
 * it runs anyway: a streamed exec whose API replica died between starting it and reading
 * it is not left paused for good.
 */
export const HOLD_MAX_MS = 10_000;

/** What a new tracked process runs and how it is listed; decided by the caller (defaults, login). */
export interface ProcessSpec {
  /** What runs (argv[0] an absolute path, or a name looked up in the sandbox's PATH). */
  argv: string[];
  /** How it runs: the environment on top of the sandbox's (a login's variables included), cwd, user, timeout, stdin. */
  run: SpawnOptions;
  /** The environment it is listed with (as asked for: without a login's variables). */
  env: Record<string, string>;
  /** A caller's label (E2B's tag), or null. */
  tag: string | null;
  /** Start time it is listed with (ms since the epoch, the caller's clock). */
  startedAt: number;
  /** Paused until its first reader attaches (a streamed exec: its client misses nothing), at most {@link HOLD_MAX_MS}. */
  held: boolean;
}

/** A tracked process as its holder sees it now (plain data: it crosses the runner protocol as JSON). */
export interface ProcessState {
  /** Pid inside the sandbox. */
  pid: number;
  /** What it runs, as listed: the command of `/bin/sh -c command`, else the argv joined. */
  command: string;
  argv: string[];
  /** The environment it was asked to run with (listed; a login's variables left out). */
  env: Record<string, string>;
  tag: string | null;
  /** The working directory it runs in (the image's when none was asked for). */
  cwd: string;
  startedAt: number;
  /** How it ended; null while it runs. */
  exit: ProcessExit | null;
  /** Its stdin takes writes (started with stdin, not closed, not exited). */
  stdinOpen: boolean;
}

/**
 * The `start` event of a reader; `replayFrom` counts the bytes per stream before the replay:
 * on a reconnect always, else only when output was dropped before the reader came (a gap).
 */
export type StartEvent = { type: 'start'; pid: number; replayFrom?: { stdout: number; stderr: number } };

/** One chunk of a process's output, as the process wrote it. */
export interface OutputChunk {
  stream: 'stdout' | 'stderr';
  chunk: Buffer;
}

/** What a reader of a process gets: `start`, output chunks as the process wrote them, then `exit`. */
export type FollowEvent = StartEvent | ({ type: 'output' } & OutputChunk) | { type: 'exit'; exit: ProcessExit };

/** A reader of a process's output (an NDJSON response, an E2B stream, a runner socket); transport-agnostic. */
export interface ProcessFollower {
  /** One event; false when the reader is not keeping up (then call {@link ProcessFollowing.drained} once it is). */
  send(event: FollowEvent): boolean;
  /** No more events: after `exit`, or without `follow` after the replay. */
  end(): void;
  /**
   * No more events, and no `exit` seen: the holder can no longer be reached (the link to a
   * runner broke). The process may still run there: a reader reconnects through any replica.
   */
  lost(reason: string): void;
}

/** What `follow` gives a reader: its way to say it keeps up again, and to leave. */
export interface ProcessFollowing {
  /** The reader keeps up again after `send` answered false. */
  drained(): void;
  /** Stops following (the client went); the process goes on. */
  detach(): void;
}

/** How a reader follows: see {@link DriverProcesses.follow}. */
export interface FollowOptions {
  /** Say in `start` how many bytes per stream came before what is replayed (`replayFrom`). */
  reconnect: boolean;
  /** Live output until exit after the replay; else the reader ends after what is kept. */
  follow: boolean;
  /** Replay the kept output first (default true). */
  replay?: boolean;
}

/**
 * The processes started through the API (background and streamed execs, E2B's commands),
 * held where the runtime runs (in the process that runs sandboxes: with `SANDBOXD_ROLE=all`
 * the server itself, else the runner), so that any API replica lists, follows, feeds and
 * signals any of them, and they stay tracked whatever happens to the replicas. Every call
 * names the sandbox first, so a driver of several runners routes it by sandbox id.
 *
 * The holder keeps per process the last 1 MiB of output (stdout and stderr interleaved as
 * they came) and its readers; while a reader is not keeping up the process is paused (its
 * output stops being acknowledged, so it is slowed inside the sandbox); with no reader it
 * runs freely and only the ring keeps its output. At most {@link MAX_RUNNING_PROCESSES}
 * run per sandbox; the {@link MAX_EXITED_PROCESSES} most recent exited ones stay; at most
 * {@link MAX_FOLLOWERS_PER_PROCESS} live readers per process and
 * {@link MAX_FOLLOWERS_PER_SANDBOX} per sandbox (each holds up to 1 MiB of replay in its
 * transport's buffers); each of these is the holder's configured share. They live
 * in the holder's memory: a restart of it forgets them (the processes themselves go on).
 * Ownership and sandbox states are the caller's. Errors: `not_found` (a pid not tracked in
 * that sandbox), `conflict` (the running limit; stdin not open; a signal to an exited
 * process), `rate_limited` (the readers' limits: a follow, or the start of a held process
 * while the sandbox has its readers' share), the driver's own for `spawn`.
 */
export interface DriverProcesses {
  /** Starts `spec.argv` in the sandbox and tracks it; resolves once it runs. */
  start(sandboxId: string, spec: ProcessSpec): Promise<ProcessState>;
  /** The sandbox's tracked processes, running and recently exited, oldest first. */
  list(sandboxId: string): Promise<ProcessState[]>;
  /** One tracked process, or null. */
  get(sandboxId: string, pid: number): Promise<ProcessState | null>;
  /**
   * Adds a reader: `start` (with `replayFrom` for a `reconnect`, or when the kept output no
   * longer begins at the first byte), the kept output (unless `replay: false`), then with
   * `follow` live output until `exit`, else `end` after what is kept (with `exit` when it
   * has exited). The first reader of a held process lets it run. `not_found`.
   */
  follow(sandboxId: string, pid: number, follower: ProcessFollower, o: FollowOptions): Promise<ProcessFollowing>;
  /**
   * Appends `body` to the process's stdin as fast as the process reads it; resolves once
   * every byte was handed to it. `not_found`; `conflict` when its stdin is not open
   * (exited, closed, or started without stdin), also midway.
   */
  writeStdin(sandboxId: string, pid: number, body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>): Promise<void>;
  /** The process reads EOF. `not_found`; `conflict` when its stdin is not open. */
  closeStdin(sandboxId: string, pid: number): Promise<void>;
  /** Sends a signal to the process's group. `not_found`; `conflict` once it exited. */
  signal(sandboxId: string, pid: number, signal: NodeJS.Signals): Promise<void>;
  /** Kills (SIGKILL) the sandbox's running tracked processes and forgets them all (it stopped or is gone). */
  closeSandbox(sandboxId: string): Promise<void>;
}
