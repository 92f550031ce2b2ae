import { posix } from 'node:path';
import { SandboxdError, SHELLS, type Shell, type TerminalCreate } from '@sandboxd/protocol';
import type { SandboxRecord } from '../domain/sandbox.js';
import {
  clientsFull,
  type DriverTerminals,
  type TerminalAttachment,
  type TerminalClient,
  type TerminalSpec,
  type TerminalState,
} from '../runtime/terminals/types.js';
import type { ServiceDeps } from './context.js';
import { resolveLogin } from './login.js';
import type { SandboxService } from './sandboxes.js';
import type { StorageGuard } from './storage.js';
import { resolveLaunch } from './terminal-probe.js';

export { MAX_TERMINALS_PER_SANDBOX } from '../runtime/terminals/types.js';

/** Environment every terminal's shell gets on top of the sandbox env. */
const TERMINAL_ENV = { TERM: 'xterm-256color' };

/**
 * A terminal as a caller of {@link TerminalService} sees it: its state when it was read,
 * and what may be done with it (each a call to wherever its PTY runs).
 */
export interface Terminal extends TerminalState {
  /** Input from a caller that is no client (E2B's SendInput); resolves once the PTY took it. */
  write(data: Uint8Array | string): Promise<void>;
  resize(cols: number, rows: number): Promise<void>;
  signal(signal: NodeJS.Signals): Promise<void>;
  /** Adds a client (a WebSocket, an E2B stream): see {@link DriverTerminals.attach}. */
  attach(client: TerminalClient, opts?: { replay?: boolean }): Promise<TerminalAttachment>;
}

/**
 * Interactive terminals as accounts see them. The PTYs, their clients, limits and idle
 * cleanup live with the runtime (`terminals`: in this process with `SANDBOXD_ROLE=all`, on
 * the runner with `api`), so every API replica sees the same terminals; this service adds
 * what needs the records: ownership (another account's sandbox or terminal is
 * `not_found`), the sandbox's state (`conflict` unless started), the free-space guard, and
 * what a new terminal runs (defaults probed in the sandbox, E2B's logins). When a sandbox
 * stops or is deleted its terminals are ended.
 */
export class TerminalService {
  constructor(
    private readonly d: ServiceDeps & { storage: StorageGuard },
    private readonly sandboxes: Pick<SandboxService, 'get' | 'onGone'>,
    private readonly terminals: DriverTerminals,
  ) {
    sandboxes.onGone((sandboxId) => {
      terminals.closeSandbox(sandboxId, 'sandbox stopped').catch((err) => {
        this.d.log.warn({ err, sandboxId }, 'ending the terminals of a stopped sandbox failed');
      });
    });
  }

  /**
   * Starts a shell on a new PTY (defaults: see terminal-probe.ts; 80 x 24) and resolves once
   * it runs. Throws `not_found`, `conflict` (sandbox not started, or the sandbox already
   * holds its share of terminals, 32 by default, none of which can be evicted),
   * `validation` (shell or cwd missing in the image), `insufficient_storage` (the data dir
   * is nearly full).
   */
  async create(accountId: string, sandboxId: string, req: TerminalCreate): Promise<Terminal> {
    return this.open(accountId, sandboxId, async (id) => {
      const runtime = await this.d.driver.inspect(id);
      const launch = await resolveLaunch(this.d.driver, id, {
        shell: req.shell,
        cwd: req.cwd,
        imageWorkingDir: runtime?.workingDir,
      });
      return {
        tty: {
          argv: [launch.shellPath],
          env: TERMINAL_ENV,
          cwd: launch.cwd,
          cols: req.cols ?? 80,
          rows: req.rows ?? 24,
        },
        shell: launch.shell,
        env: TERMINAL_ENV,
        cwd: launch.cwd,
        tag: null,
        keepWhileIdle: false,
        timeoutMs: 0,
      };
    });
  }

  /**
   * Starts a given program on a new PTY (E2B's PTYs): `argv` as it is (a missing program
   * or cwd is `validation`, from the runtime), as `user`; with `login`, as a login of the
   * user would start (see {@link resolveLogin}). It is listed with the shell named by
   * argv[0] (`sh` for a program that is no known shell). Throws like {@link create}.
   */
  async start(accountId: string, sandboxId: string, p: TerminalProgram): Promise<Terminal> {
    if (!p.argv.length || !p.argv[0])
      throw new SandboxdError('validation', 'The command is empty', [
        { in: 'body', path: '/argv/0', message: 'must be a non-empty string' },
      ]);
    return this.open(accountId, sandboxId, async (id) => {
      const login = p.login ? await resolveLogin(this.d.driver, id, { user: p.user, cwd: p.cwd }) : null;
      const name = posix.basename(p.argv[0]);
      const cwd = login ? login.cwd : p.cwd;
      return {
        tty: {
          argv: p.argv,
          env: login ? { ...login.env, ...p.env } : (p.env ?? {}),
          cwd,
          user: login ? login.user : p.user,
          cols: p.cols,
          rows: p.rows,
        },
        shell: (SHELLS as readonly string[]).includes(name) ? (name as Shell) : 'sh',
        env: p.env ?? {},
        cwd: cwd ?? (await this.d.driver.inspect(id))?.workingDir ?? '/',
        tag: p.tag ?? null,
        keepWhileIdle: p.keepWhileIdle ?? false,
        timeoutMs: p.timeoutMs ?? 0,
      };
    });
  }

  /** The active terminal whose program has in-sandbox pid `pid`, or undefined. Throws `not_found` for the sandbox. */
  async byPid(accountId: string, sandboxId: string, pid: number): Promise<Terminal | undefined> {
    return (await this.list(accountId, sandboxId)).find((t) => t.pid === pid);
  }

  /** Checks, decides what runs (`plan`), starts it, and checks the sandbox did not stop meanwhile. */
  private async open(
    accountId: string,
    sandboxId: string,
    plan: (sandboxId: string) => Promise<Omit<TerminalSpec, 'createdAt' | 'idleMs'>>,
  ): Promise<Terminal> {
    const sb = await this.startedSandbox(accountId, sandboxId);
    await this.d.storage.check();
    const spec = await plan(sb.id);
    const t = await this.terminals.create(sb.id, {
      ...spec,
      createdAt: this.d.clock.now(),
      idleMs: this.d.config.terminalIdleMs,
    });
    // The sandbox may have stopped while the shell started; its onGone may have passed us by.
    const drop = (reason: string) => this.terminals.delete(sb.id, t.id, reason).catch(() => undefined);
    const still = await this.d.store.getSandbox(sb.id).catch(async (e) => {
      await drop('create failed');
      throw e;
    });
    if (still?.state !== 'started') {
      await drop('sandbox stopped');
      throw notStarted(still?.state ?? 'stopped');
    }
    return this.handle(t);
  }

  /** The active terminals of a sandbox, oldest first. Throws `not_found`. */
  async list(accountId: string, sandboxId: string): Promise<Terminal[]> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    return (await this.terminals.list(sb.id)).filter((t) => t.status === 'active').map((t) => this.handle(t));
  }

  /** One terminal, active or exited. Throws `not_found`. */
  async get(accountId: string, sandboxId: string, terminalId: string): Promise<Terminal> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    return this.find(sb.id, terminalId);
  }

  /** Hangs the shell up (clients get `exit`, then close 1000) and forgets the terminal. Throws `not_found`. */
  async delete(accountId: string, sandboxId: string, terminalId: string): Promise<void> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    await this.terminals.delete(sb.id, terminalId, 'terminal deleted');
  }

  /**
   * The terminal a WebSocket may attach to: `not_found` for an unknown (or another
   * account's) sandbox or terminal, `conflict` when the sandbox is not `started`,
   * `rate_limited` when it already has its share of clients (`clientsPerTerminal`; the
   * holder checks again at the attach itself).
   */
  async forAttach(accountId: string, sandboxId: string, terminalId: string): Promise<Terminal> {
    const sb = await this.startedSandbox(accountId, sandboxId);
    const t = await this.find(sb.id, terminalId);
    const max = this.d.config.fairShare.clientsPerTerminal;
    if (t.status === 'active' && t.clientCount >= max) throw clientsFull(max);
    return t;
  }

  private async startedSandbox(accountId: string, sandboxId: string): Promise<SandboxRecord> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    if (sb.state !== 'started' || sb.stopAt <= this.d.clock.now())
      throw notStarted(sb.state === 'started' ? 'stopping' : sb.state);
    return sb;
  }

  private async find(sandboxId: string, terminalId: string): Promise<Terminal> {
    const t = await this.terminals.get(sandboxId, terminalId);
    if (!t) throw new SandboxdError('not_found', 'Terminal not found');
    return this.handle(t);
  }

  private handle(t: TerminalState): Terminal {
    const h = this.terminals;
    const { sandboxId, id } = t;
    return {
      ...t,
      write: (data) => h.input(sandboxId, id, typeof data === 'string' ? Buffer.from(data) : data),
      resize: (cols, rows) => h.resize(sandboxId, id, cols, rows),
      signal: (signal) => h.signal(sandboxId, id, signal),
      attach: (client, opts) => h.attach(sandboxId, id, client, opts),
    };
  }
}

/** A program to start on a PTY ({@link TerminalService.start}). */
export interface TerminalProgram {
  argv: string[];
  /** On top of the sandbox's environment (and of the login's variables). */
  env?: Record<string, string>;
  cwd?: string;
  /** `root`, a name, a numeric `uid[:gid]`; default the image's user. */
  user?: string;
  /** Start as a login of the user: HOME, USER, LOGNAME set, `cwd` relative to the home (default it). */
  login?: boolean;
  cols: number;
  rows: number;
  tag?: string;
  /** Killed (SIGKILL) when it still runs after this long; 0 or none: never. */
  timeoutMs?: number;
  /** Not cleaned up while it runs without a client. */
  keepWhileIdle?: boolean;
}

function notStarted(state: string): SandboxdError {
  return new SandboxdError('conflict', `Sandbox is ${state}, not started`, { state });
}
