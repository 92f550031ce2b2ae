import type { Readable, Writable } from 'node:stream';
import { nativeBin } from '../native.js';
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
}

export interface AgentExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  truncated: boolean;
  timedOut: boolean;
}

const PROTOCOL_VERSION = 1;
/** Largest frame accepted from an agent: a chunk of output is at most 64 KiB. */
const MAX_FRAME = 1 << 20;
const T_EXEC = 1;
const R_HELLO = 0,
  R_STARTED = 1,
  R_STDOUT = 2,
  R_STDERR = 3,
  R_EXIT = 4,
  R_FAILED = 5;

interface Pending {
  background: boolean;
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
  resolve: (v: AgentExecResult | number) => void;
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
    for (const e of o.env) args.push('--env', e);
    args.push(id, AGENT_PATH);
    let agent: Promise<ExecAgent> | undefined;
    const ran = HostSpawner.shared().run(bin, args, {
      channel: (s) => {
        agent = ExecAgent.attach(s, s, o.timeoutMs);
      },
      timeoutMs: o.timeoutMs ?? 10_000,
    });
    // The runtime exits once the agent runs; the channel is handed over by then.
    return ran
      .then((r) => {
        if (r.code !== 0) throw new Error(`${bin} exec --detach (agent) exited ${r.timedOut ? 'on timeout' : r.code}`);
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

  /** Closes the channel; the agent exits, commands it started go on. */
  close(): void {
    this.fail(new AgentGoneError('exec agent closed'));
    this.input.destroy();
    this.output.destroy();
  }

  private request(argv: string[], o: AgentExecOptions, background: boolean): Promise<AgentExecResult | number> {
    if (this.gone) return Promise.reject(this.gone);
    const id = this.nextId++;
    const [uid, gid] = o.user.split(':').map(Number);
    const strings = cStrings([o.cwd, ...argv, ...o.env]);
    const frame = encodeFrame(
      T_EXEC,
      id,
      [u32(o.timeoutMs), u32(o.maxOutputBytes), background ? 1 : 0, uid >>> 0, gid >>> 0, argv.length, o.env.length],
      strings,
    );
    return new Promise((resolve, reject) => {
      this.pending.set(id, {
        background,
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
    const p = this.pending.get(id);
    if (!p) return;
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

  private fail(e: Error): void {
    if (this.gone) return;
    this.gone = e;
    this.onGone?.(e);
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
