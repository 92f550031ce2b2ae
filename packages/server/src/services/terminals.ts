import { posix } from 'node:path';
import { SandboxdError, SHELLS, type Shell, type TerminalCreate } from '@sandboxd/protocol';
import { newTerminalId } from '../domain/ids.js';
import type { SandboxRecord } from '../domain/sandbox.js';
import type { ServiceDeps } from './context.js';
import { resolveLogin } from './login.js';
import type { SandboxService } from './sandboxes.js';
import type { StorageGuard } from './storage.js';
import { resolveLaunch } from './terminal-probe.js';
import { CLOSE, type TerminalInfo, TerminalSession } from './terminal-session.js';

/** Terminals one sandbox may hold (active and exited); the oldest exited one is evicted first. */
export const MAX_TERMINALS_PER_SANDBOX = 32;
/** Environment every terminal's shell gets on top of the sandbox env. */
const TERMINAL_ENV = { TERM: 'xterm-256color' };

/**
 * Interactive terminals: one real PTY per terminal, started with `driver.execTty` inside
 * the sandbox's isolation. Terminals live in memory only (they do not survive a server
 * restart). Another account's sandbox or terminal is `not_found`. A terminal with no
 * client for `config.terminalIdleMs` is deleted; never while a client is connected. When
 * the sandbox stops or is deleted, every terminal gets `exit` and is closed.
 */
export class TerminalService {
  private readonly terminals = new Map<string, TerminalSession>();
  private readonly idleTimers = new Map<string, NodeJS.Timeout>();
  /** Creates in flight per sandbox, counted against the per-sandbox limit. */
  private readonly pending = new Map<string, number>();

  constructor(
    private readonly d: ServiceDeps & { storage: StorageGuard },
    private readonly sandboxes: Pick<SandboxService, 'get' | 'onGone'>,
  ) {
    sandboxes.onGone((sandboxId) => this.closeSandbox(sandboxId, 'sandbox stopped'));
  }

  /**
   * Starts a shell on a new PTY (defaults: see terminal-probe.ts; 80 x 24) and resolves once
   * it runs. Throws `not_found`, `conflict` (sandbox not started, or the sandbox already
   * holds {@link MAX_TERMINALS_PER_SANDBOX} terminals none of which can be evicted),
   * `validation` (shell or cwd missing in the image), `insufficient_storage` (the data dir
   * is nearly full).
   */
  async create(accountId: string, sandboxId: string, req: TerminalCreate): Promise<TerminalSession> {
    return this.open(accountId, sandboxId, async (id) => {
      const runtime = await this.d.driver.inspect(id);
      const launch = await resolveLaunch(this.d.driver, id, {
        shell: req.shell,
        cwd: req.cwd,
        imageWorkingDir: runtime?.workingDir,
      });
      return {
        argv: [launch.shellPath],
        env: TERMINAL_ENV,
        cwd: launch.cwd,
        cols: req.cols ?? 80,
        rows: req.rows ?? 24,
        shell: launch.shell,
      };
    });
  }

  /**
   * Starts a given program on a new PTY (E2B's PTYs): `argv` as it is (a missing program
   * or cwd is `validation`, from the runtime), as `user`; with `login`, as a login of the
   * user would start (see {@link resolveLogin}). It is listed with the shell named by
   * argv[0] (`sh` for a program that is no known shell). Throws like {@link create}.
   */
  async start(accountId: string, sandboxId: string, p: TerminalProgram): Promise<TerminalSession> {
    if (!p.argv.length || !p.argv[0])
      throw new SandboxdError('validation', 'The command is empty', [
        { in: 'body', path: '/argv/0', message: 'must be a non-empty string' },
      ]);
    return this.open(accountId, sandboxId, async (id) => {
      const login = p.login ? await resolveLogin(this.d.driver, id, { user: p.user, cwd: p.cwd }) : null;
      const name = posix.basename(p.argv[0]);
      return {
        argv: p.argv,
        env: login ? { ...login.env, ...p.env } : (p.env ?? {}),
        askedEnv: p.env ?? {},
        cwd: login ? login.cwd : p.cwd,
        user: login ? login.user : p.user,
        cols: p.cols,
        rows: p.rows,
        shell: (SHELLS as readonly string[]).includes(name) ? (name as Shell) : 'sh',
        tag: p.tag,
        timeoutMs: p.timeoutMs,
        keepWhileIdle: p.keepWhileIdle,
      };
    });
  }

  /** The active terminal whose program has in-sandbox pid `pid`, or undefined. Throws `not_found` for the sandbox. */
  async byPid(accountId: string, sandboxId: string, pid: number): Promise<TerminalSession | undefined> {
    return (await this.list(accountId, sandboxId)).find((t) => t.pid === pid);
  }

  /** Reserves a slot, starts what `plan` decides on a PTY, and holds the terminal. */
  private async open(
    accountId: string,
    sandboxId: string,
    plan: (sandboxId: string) => Promise<PtyPlan>,
  ): Promise<TerminalSession> {
    const sb = await this.startedSandbox(accountId, sandboxId);
    await this.d.storage.check();
    this.reserveSlot(sb.id);
    try {
      const launch = await plan(sb.id);
      const pty = await this.d.driver.execTty(sb.id, {
        argv: launch.argv,
        env: launch.env,
        cwd: launch.cwd,
        user: launch.user,
        cols: launch.cols,
        rows: launch.rows,
      });
      const id = newTerminalId();
      const log = this.d.log.child({ sandboxId: sb.id, terminalId: id });
      const info: TerminalInfo = {
        id,
        sandboxId: sb.id,
        accountId,
        shell: launch.shell,
        createdAt: this.d.clock.now(),
        argv: launch.argv,
        env: launch.askedEnv ?? launch.env,
        cwd: launch.cwd ?? (await this.d.driver.inspect(sb.id))?.workingDir ?? '/',
        tag: launch.tag ?? null,
        keepWhileIdle: launch.keepWhileIdle ?? false,
      };
      const session = new TerminalSession(info, pty, log, (s) => this.clientsChanged(s), {
        timeoutMs: launch.timeoutMs,
      });
      // The sandbox may have stopped while the shell started; its onGone has passed us by.
      const still = await this.d.store.getSandbox(sb.id).catch((e) => {
        session.terminate('create failed');
        throw e;
      });
      if (still?.state !== 'started') {
        session.terminate('sandbox stopped');
        throw notStarted(still?.state ?? 'stopped');
      }
      this.terminals.set(id, session);
      this.clientsChanged(session);
      log.info({ shell: launch.shell, cwd: info.cwd, pid: pty.pid }, 'terminal created');
      return session;
    } finally {
      const left = (this.pending.get(sb.id) ?? 1) - 1;
      if (left > 0) this.pending.set(sb.id, left);
      else this.pending.delete(sb.id);
    }
  }

  /** The active terminals of a sandbox, oldest first. Throws `not_found`. */
  async list(accountId: string, sandboxId: string): Promise<TerminalSession[]> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    return this.ofSandbox(sb.id).filter((t) => t.status === 'active');
  }

  /** One terminal, active or exited. Throws `not_found`. */
  async get(accountId: string, sandboxId: string, terminalId: string): Promise<TerminalSession> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    return this.find(sb.id, terminalId);
  }

  /** Kills the shell (clients get `exit`, then close 1000) and forgets the terminal. Throws `not_found`. */
  async delete(accountId: string, sandboxId: string, terminalId: string): Promise<void> {
    const t = await this.get(accountId, sandboxId, terminalId);
    this.remove(t, 'terminal deleted');
  }

  /**
   * The terminal a WebSocket may attach to: `not_found` for an unknown (or another
   * account's) sandbox or terminal, `conflict` when the sandbox is not `started`.
   */
  async forAttach(accountId: string, sandboxId: string, terminalId: string): Promise<TerminalSession> {
    const sb = await this.startedSandbox(accountId, sandboxId);
    return this.find(sb.id, terminalId);
  }

  /** Ends every terminal (server shutdown): clients are closed with 1001, shells killed. */
  closeAll(reason = 'server shutting down'): void {
    for (const t of [...this.terminals.values()]) this.remove(t, reason, CLOSE.goingAway);
  }

  /** Terminals currently held (active and exited), for metrics and tests. */
  get size(): number {
    return this.terminals.size;
  }

  private async startedSandbox(accountId: string, sandboxId: string): Promise<SandboxRecord> {
    const sb = await this.sandboxes.get(accountId, sandboxId);
    if (sb.state !== 'started' || sb.stopAt <= this.d.clock.now())
      throw notStarted(sb.state === 'started' ? 'stopping' : sb.state);
    return sb;
  }

  private find(sandboxId: string, terminalId: string): TerminalSession {
    const t = this.terminals.get(terminalId);
    if (!t || t.info.sandboxId !== sandboxId) throw new SandboxdError('not_found', 'Terminal not found');
    return t;
  }

  private ofSandbox(sandboxId: string): TerminalSession[] {
    return [...this.terminals.values()].filter((t) => t.info.sandboxId === sandboxId);
  }

  /** Counts a create against the limit, evicting the oldest idle exited terminal when full. */
  private reserveSlot(sandboxId: string): void {
    const held = this.ofSandbox(sandboxId);
    const pending = this.pending.get(sandboxId) ?? 0;
    if (held.length + pending >= MAX_TERMINALS_PER_SANDBOX) {
      const victim = held.find((t) => t.status === 'exited' && t.clientCount === 0);
      if (!victim) {
        throw new SandboxdError(
          'conflict',
          `A sandbox holds at most ${MAX_TERMINALS_PER_SANDBOX} terminals; delete one first`,
          { limit: MAX_TERMINALS_PER_SANDBOX },
        );
      }
      this.remove(victim, 'evicted');
    }
    this.pending.set(sandboxId, pending + 1);
  }

  private closeSandbox(sandboxId: string, reason: string): void {
    for (const t of this.ofSandbox(sandboxId)) this.remove(t, reason);
  }

  private remove(t: TerminalSession, reason: string, code: number = CLOSE.normal): void {
    this.terminals.delete(t.info.id);
    this.clearIdle(t.info.id);
    t.terminate(reason, code);
  }

  /** The idle clock runs exactly while a held terminal has no client. */
  private clientsChanged(t: TerminalSession): void {
    const id = t.info.id;
    if (!this.terminals.has(id)) {
      this.clearIdle(id);
      return;
    }
    if (t.clientCount > 0 || (t.status === 'active' && t.info.keepWhileIdle)) {
      this.clearIdle(id);
      return;
    }
    if (this.idleTimers.has(id)) return;
    const timer = setTimeout(() => {
      this.idleTimers.delete(id);
      if (this.terminals.get(id) === t && t.clientCount === 0) {
        this.d.log.info({ sandboxId: t.info.sandboxId, terminalId: id }, 'terminal idle: cleaned up');
        this.remove(t, 'idle');
      }
    }, this.d.config.terminalIdleMs);
    timer.unref();
    this.idleTimers.set(id, timer);
  }

  private clearIdle(id: string): void {
    const timer = this.idleTimers.get(id);
    if (timer) clearTimeout(timer);
    this.idleTimers.delete(id);
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

/** What a new terminal runs, decided before its PTY exists. */
interface PtyPlan {
  argv: string[];
  env: Record<string, string>;
  /** The environment as asked for (listed), when `env` has more (a login's variables). */
  askedEnv?: Record<string, string>;
  cwd?: string;
  user?: string;
  cols: number;
  rows: number;
  shell: Shell;
  tag?: string;
  timeoutMs?: number;
  keepWhileIdle?: boolean;
}

function notStarted(state: string): SandboxdError {
  return new SandboxdError('conflict', `Sandbox is ${state}, not started`, { state });
}
