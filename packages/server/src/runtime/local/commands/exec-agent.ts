import { randomInt, randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { nativeBin } from '../native.js';
import { AgentProcess, type AgentLink, signalName } from './agent-process.js';
import { cStrings, encodeFrame, FrameReader, u32 } from './frames.js';
import { HostSpawner } from './spawner.js';

/** Where the agent binary is bind-mounted (read-only) inside every sandbox. */
export const AGENT_PATH = '/dev/sandboxd-agent';

/** Path of the compiled agent on the host (packages/server/native/exec-agent.c). */
export function agentBinary(): string {
  return nativeBin('exec-agent');
}

export interface AgentExecOptions {
  /** `uid:gid` (numeric) to run as. */
  user: string;
  env: string[];
  cwd: string;
  timeoutMs: number;
  maxOutputBytes: number;
  /**
   * argv is `/bin/sh -c command` and these are the words of a command the agent may run
   * without the shell (see simple-command.ts); it runs it with the shell otherwise.
   */
  simpleWords?: string[] | null;
}

export interface AgentExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  truncated: boolean;
  timedOut: boolean;
}

/** Options of {@link ExecAgent.spawn}. */
export interface AgentSpawnOptions {
  /** Numeric `uid:gid`, or a name / numeric uid looked up in the sandbox's /etc/passwd. */
  user: string;
  env: string[];
  cwd: string;
  /** `cwd` is a default: when the user cannot enter it, its home, else `/`. */
  cwdIsDefault?: boolean;
  /** 0: none. */
  timeoutMs: number;
  stdin: boolean;
}

/** The agent could not start a command (exit code 126, or 127 when argv[0] was not found). */
export class AgentSpawnError extends Error {
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}

/** Most output of a streamed command sent by the agent and not yet consumed here. */
export const OUTPUT_WINDOW = 512 * 1024;

const PROTOCOL_VERSION = 1;
/** Largest frame accepted from an agent: a chunk of output is at most 64 KiB. */
const MAX_FRAME = 1 << 20;
const T_EXEC = 1,
  T_ACK = 2,
  T_STDIN = 3,
  T_STDIN_CLOSE = 4,
  T_SIGNAL = 5;
const R_HELLO = 0,
  R_STARTED = 1,
  R_STDOUT = 2,
  R_STDERR = 3,
  R_EXIT = 4,
  R_FAILED = 5,
  R_STDIN_ACK = 6,
  R_STDIN_GONE = 7;
const F_BACKGROUND = 1,
  F_STREAM = 2,
  F_STDIN = 4,
  F_USER_NAME = 8,
  F_CWD_FALLBACK = 16,
  F_SIMPLE = 32;

interface Pending {
  background: boolean;
  /** A streamed command: resolves to its AgentProcess on STARTED. */
  stream?: { stdin: boolean; cwdIsDefault: boolean };
  /**
   * The agent said the command runs (STARTED, output or EXIT). Before that a broken channel
   * means it never ran, or died within its first 2 ms without a word: the caller retries.
   */
  started: boolean;
  maxOutputBytes: number;
  out: Buffer[];
  err: Buffer[];
  outLen: number;
  errLen: number;
  truncated: boolean;
  resolve: (v: AgentExecResult | number | AgentProcess) => void;
  reject: (e: Error) => void;
}

/** The agent died or its channel broke: the sandbox's processes were probably killed. */
export class AgentGoneError extends Error {}

/**
 * The server's end of one sandbox's exec agent (see native/exec-agent.c): many commands
 * over one channel, each a fork + execve inside the sandbox. Whatever the agent sends is
 * treated as untrusted (a sandbox's root can replace it): frames are bounded and each
 * stream is capped here too. Once the channel breaks, every pending and later call fails
 * with AgentGoneError; the caller starts a new agent.
 */
export class ExecAgent {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly procs = new Map<number, AgentProcess>();
  /** How streamed commands talk back to this agent. */
  private readonly link: AgentLink = {
    ack: (id, bytes) => this.send(encodeFrame(T_ACK, id, [u32(bytes)])),
    stdin: (id, data) => this.send(encodeFrame(T_STDIN, id, [], data)),
    closeStdin: (id) => this.send(encodeFrame(T_STDIN_CLOSE, id, [])),
    signal: (id, signo) => this.send(encodeFrame(T_SIGNAL, id, [u32(signo)])),
  };
  private readonly frames = new FrameReader(MAX_FRAME);
  private gone: Error | null = null;

  private constructor(
    private readonly input: Writable,
    private readonly output: Readable,
  ) {
    output.on('data', (d: Buffer) => this.onData(d));
    output.on('close', () => this.fail(new AgentGoneError('exec agent channel closed')));
    output.on('error', () => this.fail(new AgentGoneError('exec agent channel failed')));
    input.on('error', () => this.fail(new AgentGoneError('exec agent channel failed')));
  }

  /**
   * Starts an agent in running sandbox `id` through `runtimeArgv` (the OCI runtime and its
   * global flags) with `exec --detach`, as `user`, and waits for its hello. Rejects when the
   * runtime refuses (e.g. the sandbox is not running) or the agent does not answer in time.
   */
  static start(
    runtimeArgv: string[],
    id: string,
    o: { user: string; env: string[]; timeoutMs?: number },
  ): Promise<ExecAgent> {
    const [bin, ...pre] = runtimeArgv;
    const args = [...pre, 'exec', '--detach', '--cwd', '/', '--user', o.user];
    // runsc's `exec --detach` waits (10 s) for the pid file of the child it starts; without
    // one of ours it appends its own after the command, where the child never reads it.
    const pidFile = bin === 'runsc' ? join(tmpdir(), `sandboxd-agent-${process.pid}-${randomUUID()}.pid`) : undefined;
    if (pidFile) args.push('--pid-file', pidFile);
    for (const e of o.env) args.push('--env', e);
    args.push(id, AGENT_PATH);
    let agent: Promise<ExecAgent> | undefined;
    const ran = HostSpawner.shared().run(bin, args, {
      channel: (s) => {
        agent = ExecAgent.attach(s, s, o.timeoutMs);
        // The channel may break before the runtime exits (the sandbox deleted meanwhile):
        // the rejection is the caller's once `ran` settles, not an unhandled one that ends
        // the server's process before then.
        agent.catch(() => undefined);
      },
      timeoutMs: o.timeoutMs ?? 10_000,
    });
    // The runtime exits once the agent runs; the channel is handed over by then.
    if (pidFile) void ran.finally(() => rm(pidFile, { force: true }).catch(() => undefined)).catch(() => undefined);
    return ran
      .then((r) => {
        // runsc's `exec --detach` may exit non-zero (waiting for its child's pid file) while
        // the agent it started runs: its hello on the channel is what tells.
        if (r.code !== 0 && !(bin === 'runsc' && agent))
          throw new Error(`${bin} exec --detach (agent) exited ${r.timedOut ? 'on timeout' : r.code}`);
        if (!agent) throw new AgentGoneError('exec agent channel never arrived');
        return agent;
      })
      .catch((e: Error) => {
        void agent?.then(
          (a) => a.close(),
          () => undefined,
        );
        throw e;
      });
  }

  /**
   * The agent on the far end of `input`/`output` (an agent started as the sandbox's init
   * with this channel on its stdio, say), once it said hello; rejects when the channel
   * closes first or nothing comes within `timeoutMs` (default 10 s).
   */
  static attach(input: Writable, output: Readable, timeoutMs = 10_000): Promise<ExecAgent> {
    const agent = new ExecAgent(input, output);
    return new Promise<ExecAgent>((resolve, reject) => {
      const timer = setTimeout(() => {
        agent.close();
        reject(new AgentGoneError('exec agent did not say hello'));
      }, timeoutMs);
      agent.onHello = () => {
        clearTimeout(timer);
        resolve(agent);
      };
      agent.onGone = (e) => {
        clearTimeout(timer);
        reject(e);
      };
    });
  }

  /**
   * The agent on the far end of `input`/`output` that said hello on an earlier channel: a
   * gVisor sandbox restored from a checkpoint, whose PID 1 (idle in its read when saved)
   * finds the new channel on its stdio and goes on serving it without a new hello.
   */
  static adopted(input: Writable, output: Readable): ExecAgent {
    const a = new ExecAgent(input, output);
    // Commands in flight when it was saved go on, and their frames come on this channel with
    // the ids the earlier channel gave them (counted from 1): new ids start far from those, at
    // a random point, so a stale frame is dropped as unknown rather than taken as an answer.
    a.nextId = 0x4000_0000 + randomInt(0x3000_0000);
    return a;
  }

  private onHello: (() => void) | null = null;
  private onGone: ((e: Error) => void) | null = null;

  /** True until the channel breaks. */
  get alive(): boolean {
    return this.gone === null;
  }

  /** Runs argv in the foreground; output per stream capped at maxOutputBytes. */
  exec(argv: string[], o: AgentExecOptions): Promise<AgentExecResult> {
    return this.request(argv, o, false) as Promise<AgentExecResult>;
  }

  /** Starts argv detached (stdio on /dev/null); resolves to its in-sandbox pid. */
  execBackground(argv: string[], o: Pick<AgentExecOptions, 'user' | 'env' | 'cwd'>): Promise<number> {
    return this.request(argv, { ...o, timeoutMs: 0, maxOutputBytes: 0 }, true) as Promise<number>;
  }

  /**
   * Starts argv with its output streamed (see {@link AgentProcess}); rejects with
   * {@link AgentSpawnError} when it cannot start (unknown user, not executable, ...).
   */
  spawn(argv: string[], o: AgentSpawnOptions): Promise<AgentProcess> {
    return this.request(argv, { ...o, maxOutputBytes: OUTPUT_WINDOW }, false, {
      stdin: o.stdin,
      cwdIsDefault: o.cwdIsDefault ?? false,
    }) as Promise<AgentProcess>;
  }

  private send(frame: Buffer): void {
    if (!this.gone) this.input.write(frame);
  }

  /** Closes the channel; the agent exits, commands it started go on. */
  close(): void {
    this.fail(new AgentGoneError('exec agent closed'));
    this.input.destroy();
    this.output.destroy();
  }

  private request(
    argv: string[],
    o: AgentExecOptions,
    background: boolean,
    stream?: { stdin: boolean; cwdIsDefault: boolean },
  ): Promise<AgentExecResult | number | AgentProcess> {
    if (this.gone) return Promise.reject(this.gone);
    const id = this.nextId++;
    const numeric = /^\d+:\d+$/.test(o.user);
    const [uid, gid] = numeric ? o.user.split(':').map(Number) : [0, 0];
    const simple = o.simpleWords?.length && argv.length === 3 ? o.simpleWords : null;
    if (simple) argv = [...argv, ...simple];
    const strings = cStrings([o.cwd, ...argv, ...o.env, ...(numeric ? [] : [o.user])]);
    let flags = background ? F_BACKGROUND : 0;
    if (stream) flags |= F_STREAM | (stream.stdin ? F_STDIN : 0) | (stream.cwdIsDefault ? F_CWD_FALLBACK : 0);
    if (!numeric) flags |= F_USER_NAME;
    if (simple) flags |= F_SIMPLE;
    const frame = encodeFrame(
      T_EXEC,
      id,
      [u32(o.timeoutMs), u32(o.maxOutputBytes), flags, uid >>> 0, gid >>> 0, argv.length, o.env.length],
      strings,
    );
    return new Promise((resolve, reject) => {
      this.pending.set(id, {
        background,
        stream,
        started: false,
        maxOutputBytes: o.maxOutputBytes,
        out: [],
        err: [],
        outLen: 0,
        errLen: 0,
        truncated: false,
        resolve,
        reject,
      });
      this.input.write(frame);
    });
  }

  private onData(d: Buffer): void {
    const ok = this.frames.read(
      d,
      (f) => this.onFrame(f.type, f.id, f.payload),
      () => this.gone !== null,
    );
    if (!ok) this.close(); // not an agent's frames
  }

  private onFrame(type: number, id: number, payload: Buffer): void {
    if (type === R_HELLO) {
      if (payload.length >= 4 && payload.readUInt32LE(0) === PROTOCOL_VERSION) this.onHello?.();
      else this.close();
      return;
    }
    const proc = this.procs.get(id);
    if (proc) {
      this.onProcessFrame(proc, type, id, payload);
      return;
    }
    const p = this.pending.get(id);
    if (!p) return;
    if (p.stream) {
      this.pending.delete(id);
      if (type === R_STARTED && payload.length >= 4) {
        const ap = new AgentProcess(this.link, id, payload.readUInt32LE(0), p.stream.stdin);
        this.procs.set(id, ap);
        p.resolve(ap);
      } else if (type === R_FAILED && payload.length >= 4)
        p.reject(new AgentSpawnError(payload.readInt32LE(0), payload.subarray(4, 4 + 1024).toString('utf8')));
      else p.reject(new AgentGoneError('exec agent sent a bad answer'));
      return;
    }
    if (type === R_STARTED) {
      p.started = true;
      if (p.background) {
        this.pending.delete(id);
        p.resolve(payload.length >= 4 ? payload.readUInt32LE(0) : 0);
      }
    } else if (type === R_STDOUT || type === R_STDERR) {
      p.started = true;
      const out = type === R_STDOUT;
      const room = p.maxOutputBytes - (out ? p.outLen : p.errLen);
      const take = payload.subarray(0, Math.max(0, room));
      if (take.length < payload.length) p.truncated = true;
      // The payload is a view of the receive buffer: copy what is kept.
      if (take.length > 0) (out ? p.out : p.err).push(Buffer.from(take));
      if (out) p.outLen += take.length;
      else p.errLen += take.length;
    } else if (type === R_EXIT && payload.length >= 8) {
      this.pending.delete(id);
      const flags = payload.readUInt32LE(4);
      p.resolve({
        stdout: Buffer.concat(p.out).toString('utf8'),
        stderr: Buffer.concat(p.err).toString('utf8'),
        exitCode: payload.readInt32LE(0),
        truncated: p.truncated || (flags & 1) !== 0,
        timedOut: (flags & 2) !== 0,
      });
    } else if (type === R_FAILED && payload.length >= 4) {
      this.pending.delete(id);
      const message = `sandboxd: ${payload.subarray(4, 4 + 1024).toString('utf8')}\n`;
      if (p.background) p.reject(new Error(message.trim()));
      else
        p.resolve({ stdout: '', stderr: message, exitCode: payload.readInt32LE(0), truncated: false, timedOut: false });
    }
  }

  private onProcessFrame(proc: AgentProcess, type: number, id: number, payload: Buffer): void {
    if (type === R_STDOUT || type === R_STDERR) proc.output(type === R_STDOUT ? 'stdout' : 'stderr', payload);
    else if (type === R_STDIN_ACK && payload.length >= 4) proc.stdinAcked(payload.readUInt32LE(0));
    else if (type === R_STDIN_GONE) proc.stdinGone();
    else if (type === R_EXIT && payload.length >= 8) {
      this.procs.delete(id);
      const code = payload.readInt32LE(0);
      const timedOut = (payload.readUInt32LE(4) & 2) !== 0;
      proc.exited({ exitCode: code, signal: !timedOut && code > 128 ? signalName(code - 128) : null, timedOut });
    }
  }

  private fail(e: Error): void {
    if (this.gone) return;
    this.gone = e;
    this.onGone?.(e);
    // Streamed commands lose their reader with the agent: they are reported killed.
    for (const proc of this.procs.values())
      proc.exited({ exitCode: 137, signal: 'SIGKILL', timedOut: false, agentGone: true });
    this.procs.clear();
    // A command that was running dies with the agent (the sandbox was killed, or the agent
    // was): report what it printed and SIGKILL's status, as `crun exec` would. A command
    // that never started is the caller's to retry.
    for (const p of this.pending.values()) {
      if (p.started && !p.background) {
        p.resolve({
          stdout: Buffer.concat(p.out).toString('utf8'),
          stderr: Buffer.concat(p.err).toString('utf8'),
          exitCode: 137,
          truncated: p.truncated,
          timedOut: false,
        });
      } else p.reject(e);
    }
    this.pending.clear();
  }
}
