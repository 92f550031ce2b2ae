import type { ProcessInfo, ProcessSignal } from '@sandboxd/protocol';
import { processNotFound } from '../runtime/processes/host.js';
import type {
  DriverProcesses,
  FollowOptions,
  ProcessFollower,
  ProcessFollowing,
  ProcessState,
} from '../runtime/processes/types.js';
import type { ServiceDeps } from './context.js';
import type { SandboxService } from './sandboxes.js';

/**
 * A process started through the API as a caller of {@link ProcessService} sees it: its
 * state when it was read, and a way to read it (a call to wherever it is tracked).
 */
export interface LiveProcess extends ProcessState {
  /** Adds a reader: see {@link DriverProcesses.follow}. */
  follow(follower: ProcessFollower, o: FollowOptions): Promise<ProcessFollowing>;
}

/** What {@link ProcessService.start} runs. */
export interface StartRequest {
  env?: Record<string, string>;
  /** Variables under `env` (a login's HOME, USER, LOGNAME), not listed as asked for. */
  baseEnv?: Record<string, string>;
  cwd?: string;
  user?: string;
  timeoutMs?: number;
  stdin?: boolean;
  tag?: string;
  /** Paused until its first reader attaches (a streamed exec); else it runs at once. */
  held?: boolean;
}

/**
 * Processes started through the API (background and streamed execs, E2B's commands) as
 * accounts see them. The processes, their output rings, readers and limits are tracked
 * with the runtime (`processes`: in this process with `SANDBOXD_ROLE=all`, on the runner
 * with `api`), so every API replica lists, follows, feeds and signals the same ones; this
 * service adds ownership (another account's sandbox is `not_found`) and ends a sandbox's
 * processes when it stops or is deleted.
 */
export class ProcessService {
  constructor(
    private readonly d: Pick<ServiceDeps, 'clock' | 'log'>,
    private readonly sandboxes: Pick<SandboxService, 'get' | 'onGone'>,
    private readonly processes: DriverProcesses,
  ) {
    sandboxes.onGone((sandboxId) => {
      processes.closeSandbox(sandboxId).catch((err) => {
        this.d.log.debug({ err, sandboxId }, 'forgetting the processes of a stopped sandbox failed');
      });
    });
  }

  /**
   * Starts `argv` (`/bin/sh -c command` for a command) in sandbox `sandboxId` (already
   * checked started by the caller) and tracks it. Throws `conflict` when
   * 64 (`MAX_RUNNING_PROCESSES`) run, the runtime's errors for the start.
   */
  async start(sandboxId: string, argv: string[], o: StartRequest): Promise<LiveProcess> {
    const state = await this.processes.start(sandboxId, {
      argv,
      run: {
        env: o.baseEnv ? { ...o.baseEnv, ...o.env } : o.env,
        cwd: o.cwd,
        user: o.user,
        timeoutMs: o.timeoutMs,
        stdin: o.stdin,
      },
      env: o.env ?? {},
      tag: o.tag ?? null,
      startedAt: this.d.clock.now(),
      held: o.held ?? false,
    });
    return this.live(sandboxId, state);
  }

  async list(accountId: string, sandboxId: string): Promise<ProcessInfo[]> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    return (await this.processes.list(sb.id)).map(view);
  }

  /** The running processes of a sandbox, oldest first. Throws `not_found` for an unknown sandbox. */
  async running(accountId: string, sandboxId: string): Promise<LiveProcess[]> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    return (await this.processes.list(sb.id)).filter((p) => p.exit === null).map((p) => this.live(sb.id, p));
  }

  /** Throws `not_found` for an unknown sandbox or pid. */
  async get(accountId: string, sandboxId: string, pid: number): Promise<LiveProcess> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    const p = await this.processes.get(sb.id, pid);
    if (!p) throw processNotFound(pid);
    return this.live(sb.id, p);
  }

  /** Adds a reader of process `pid` (see {@link DriverProcesses.follow}). Throws `not_found`. */
  async follow(
    accountId: string,
    sandboxId: string,
    pid: number,
    follower: ProcessFollower,
    o: FollowOptions,
  ): Promise<ProcessFollowing> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    return this.processes.follow(sb.id, pid, follower, o);
  }

  /**
   * Appends `body` to the process's stdin, as fast as the process reads it. Throws
   * `conflict` when its stdin is not open (exited, closed, or started without `stdin`).
   */
  async writeStdin(
    accountId: string,
    sandboxId: string,
    pid: number,
    body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  ): Promise<void> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    await this.processes.writeStdin(sb.id, pid, body);
  }

  async closeStdin(accountId: string, sandboxId: string, pid: number): Promise<void> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    await this.processes.closeStdin(sb.id, pid);
  }

  /** Throws `not_found`, `conflict` once the process exited. */
  async signal(accountId: string, sandboxId: string, pid: number, signal: ProcessSignal): Promise<void> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    await this.processes.signal(sb.id, pid, signal);
  }

  private live(sandboxId: string, p: ProcessState): LiveProcess {
    return { ...p, follow: (f, o) => this.processes.follow(sandboxId, p.pid, f, o) };
  }
}

/** How the API lists a process. */
function view(p: ProcessState): ProcessInfo {
  return {
    pid: p.pid,
    command: p.command,
    tag: p.tag,
    cwd: p.cwd,
    startedAt: new Date(p.startedAt).toISOString(),
    running: p.exit === null,
    exitCode: p.exit?.exitCode ?? null,
  };
}
