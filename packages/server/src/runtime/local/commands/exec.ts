import type { Socket } from 'node:net';
import { join } from 'node:path';
import { SandboxdError } from '@sandboxd/protocol';
import type { ExecOptions, ExecResult, SpawnOptions, StreamedProcess } from '../../driver.js';
import { AgentGoneError, AgentSpawnError, ExecAgent } from './exec-agent.js';
import { nsPid, type OciRuntime } from './oci-runtime.js';
import { mergeEnvList } from '../sandbox-checks.js';
import { simpleWords } from './simple-command.js';

const NO_AGENT = () =>
  new SandboxdError('internal', 'The sandbox cannot run processes (its exec agent does not start)');

/** What running a command needs to know of a sandbox (a driver record has it). */
export interface CommandTarget {
  /** The sandbox's container id in the runtime (its own id, or a warm-pooled one's). */
  cid: string;
  /** numeric `uid:gid` */
  user: string;
  /** the sandbox's environment, KEY=VALUE */
  env: string[];
  workingDir: string;
}

/**
 * Runs commands in sandboxes: through each sandbox's exec agent (PID 1, or one started with
 * `<runtime> exec --detach` when PID 1 lost its channel, say after a restart), else with a
 * `<runtime> exec` per command. Owns the agents' channels: `adopt` one made at create,
 * `drop` it when the sandbox goes.
 */
export class SandboxCommands {
  private readonly agents = new Map<string, Promise<ExecAgent>>();
  /** Containers whose current agent is a second one (`<runtime> exec`), not their PID 1. */
  private readonly second = new Set<string>();

  constructor(
    private readonly o: {
      /** The runtime of container `cid` (its sandbox's tier's). */
      runtime: (cid: string) => OciRuntime;
      /** pid files of the fallback path go to `<runDir>/exec` (tmpfs: a full data dir must not fail a command) */
      runDir: string;
      /** false: every command through the runtime's own exec */
      useAgent: boolean;
      /** host pids in a sandbox's cgroup, to kill a fallback command's tree on timeout */
      cgroupProcs: (id: string) => number[];
    },
  ) {}

  /** Takes the channel of an agent started with container `id` (its PID 1). */
  adopt(id: string, agent: Promise<ExecAgent>): void {
    agent.catch(() => undefined); // a dead channel is found (and replaced) at the next exec
    this.agents.set(id, agent);
    this.second.delete(id);
  }

  /**
   * The `onChannel` of a `runsc restore` of container `id`: the restored agent (PID 1), idle in
   * its read when saved, serves the new channel without a new hello. None when its PID 1 had
   * lost its channel when saved (`unserved`): it reads none, and the first command starts a
   * second agent.
   */
  restoredChannel(id: string, unserved: boolean): ((channel: Socket) => void) | undefined {
    if (unserved) return undefined;
    return (channel) => this.adopt(id, Promise.resolve(ExecAgent.adopted(channel, channel)));
  }

  /**
   * Whether container `id`'s PID 1 serves its channel: it was adopted and no second agent
   * took over since (after a restart PID 1's channel is gone; a second agent serves then).
   */
  servedByInit(id: string): boolean {
    return this.agents.has(id) && !this.second.has(id);
  }

  /** Closes the channel to container `id`'s agent, if any. */
  drop(id: string): void {
    const a = this.agents.get(id);
    this.agents.delete(id);
    this.second.delete(id);
    void a?.then(
      (x) => x.close(),
      () => undefined,
    );
  }

  dropAll(): void {
    for (const id of [...this.agents.keys()]) this.drop(id);
  }

  /** `/bin/sh -c command` in the foreground; see RuntimeDriver.exec. */
  async exec(t: CommandTarget, command: string, options: ExecOptions = {}): Promise<ExecResult> {
    const env = mergeEnvList(t.env, options.env);
    const cwd = options.cwd ?? t.workingDir;
    const timeoutMs = options.timeoutMs ?? 60_000;
    const maxOutputBytes = options.maxOutputBytes ?? 1024 * 1024;
    const argv = ['/bin/sh', '-c', command];
    const simple = simpleWords(command, env);
    for (let attempt = 0; ; attempt++) {
      const agent = await this.agent(t);
      if (!agent) break;
      try {
        return await agent.exec(argv, { user: t.user, env, cwd, timeoutMs, maxOutputBytes, simpleWords: simple });
      } catch (e) {
        if (!(e instanceof AgentGoneError)) throw e;
        // The agent was gone before the command said a word: once more with a new one. Twice
        // in a row means the command itself kills its agent: it ran, and was killed with it.
        if (attempt > 0)
          return {
            stdout: '',
            stderr: 'sandboxd: the exec agent died with the command\n',
            exitCode: 137,
            truncated: false,
            timedOut: false,
          };
      }
    }
    const id = t.cid;
    const gone = await this.notRunning(id);
    if (gone) throw gone;
    return this.o.runtime(id).exec(id, argv, {
      env,
      cwd,
      user: t.user,
      timeoutMs,
      maxOutputBytes,
      pidFile: join(this.o.runDir, 'exec', `${id}-${process.hrtime.bigint()}.pid`),
      cgroupProcs: () => this.o.cgroupProcs(id),
    });
  }

  /** `/bin/sh -c command` detached; resolves to its in-sandbox pid. */
  async execBackground(
    t: CommandTarget,
    command: string,
    options: Omit<ExecOptions, 'timeoutMs' | 'maxOutputBytes'> = {},
  ): Promise<{ pid: number }> {
    const env = mergeEnvList(t.env, options.env);
    const cwd = options.cwd ?? t.workingDir;
    const argv = ['/bin/sh', '-c', command];
    for (let attempt = 0; ; attempt++) {
      const agent = await this.agent(t);
      if (!agent) break;
      try {
        return { pid: await agent.execBackground(argv, { user: t.user, env, cwd }) };
      } catch (e) {
        if (!(e instanceof AgentGoneError) || attempt > 0) throw e;
      }
    }
    const id = t.cid;
    const gone = await this.notRunning(id);
    if (gone) throw gone;
    const hostPid = await this.o.runtime(id).execDetached(id, argv, {
      env,
      cwd,
      user: t.user,
      pidFile: join(this.o.runDir, 'exec', `${id}-bg-${process.hrtime.bigint()}.pid`),
    });
    try {
      return { pid: nsPid(hostPid) };
    } catch {
      return { pid: 0 }; /* already exited */
    }
  }

  /**
   * Starts argv itself (no shell) detached, through the sandbox's agent: stdio on /dev/null,
   * its own session, reparented to the sandbox's init when the agent's request ends.
   * Resolves with its pid in the sandbox; rejects when it cannot start (AgentSpawnError:
   * not found, not executable) or the sandbox's agent does not start.
   */
  async startDetached(
    t: CommandTarget,
    argv: string[],
    o: { user: string; env: string[]; cwd: string },
  ): Promise<number> {
    for (let attempt = 0; ; attempt++) {
      const agent = await this.agent(t);
      if (!agent) throw (await this.notRunning(t.cid)) ?? NO_AGENT();
      try {
        return await agent.execBackground(argv, o);
      } catch (e) {
        if (!(e instanceof AgentGoneError) || attempt > 0) throw e;
      }
    }
  }

  /**
   * Starts argv with its output streamed, through the sandbox's agent (there is no fallback:
   * a sandbox whose agent cannot start cannot run anything). `user` other than numeric
   * `uid:gid` is looked up in the sandbox's /etc/passwd by the agent.
   */
  async spawn(t: CommandTarget, argv: string[], options: SpawnOptions = {}): Promise<StreamedProcess> {
    const o = {
      user: options.user === undefined ? t.user : options.user === 'root' ? '0:0' : options.user,
      env: mergeEnvList(t.env, options.env),
      cwd: options.cwd ?? t.workingDir,
      cwdIsDefault: options.cwd === undefined,
      timeoutMs: options.timeoutMs ?? 0,
      stdin: options.stdin ?? false,
    };
    for (let attempt = 0; ; attempt++) {
      const agent = await this.agent(t);
      if (!agent) throw (await this.notRunning(t.cid)) ?? NO_AGENT();
      try {
        return await agent.spawn(argv, o);
      } catch (e) {
        if (e instanceof AgentSpawnError) {
          const unknownUser = /^unknown user/.test(e.message);
          const m = unknownUser
            ? `Unknown user in the sandbox: ${options.user}`
            : `Cannot start ${argv[0]} in the sandbox: ${e.message}`;
          throw new SandboxdError('validation', m, {
            argv0: argv[0],
            user: options.user,
            ...(unknownUser ? { unknownUser: true } : {}),
          });
        }
        if (!(e instanceof AgentGoneError) || attempt > 0) throw e;
      }
    }
  }

  /**
   * The live exec agent of the sandbox, starting one when there is none or the last one
   * died (killed from inside, say). Null when none can start; the caller then uses the
   * runtime's own exec, which also reports why the sandbox cannot run anything.
   */
  /**
   * Why a sandbox whose agent does not start cannot run a command, when the reason is that its
   * container is not running in the runtime (gone, stopped, not adopted yet after a restart):
   * 409, never a runtime failure passed off as the command's result (the fallback's `crun
   * exec` answered exit 1 with crun's own "error opening file .../status") or as a 500. Null
   * when the container runs (or the agent is not used: the runtime's exec is the only path).
   */
  private async notRunning(id: string): Promise<SandboxdError | null> {
    if (!this.o.useAgent) return null;
    const s = await this.o.runtime(id).state(id);
    if (s?.status === 'running') return null;
    return new SandboxdError('conflict', 'Sandbox is not running', { runtime: s?.status ?? 'gone' });
  }

  private async agent(t: CommandTarget): Promise<ExecAgent | null> {
    if (!this.o.useAgent) return null;
    const id = t.cid;
    const current = this.agents.get(id);
    if (current) {
      const a = await current.catch(() => null);
      if (a?.alive) return a;
      if (this.agents.get(id) !== current) return this.agent(t);
      this.agents.delete(id);
    }
    // As the sandbox's root (like PID 1), so a command may run as any of its users.
    const started = ExecAgent.start(this.o.runtime(id).argv, id, { user: '0:0', env: t.env });
    this.agents.set(id, started);
    this.second.add(id);
    try {
      return await started;
    } catch {
      if (this.agents.get(id) === started) {
        this.agents.delete(id);
        this.second.delete(id);
      }
      return null;
    }
  }
}
