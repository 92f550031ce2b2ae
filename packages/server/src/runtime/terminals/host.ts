import { SandboxdError } from '@sandboxd/protocol';
import type { Logger } from 'pino';
import { newTerminalId } from '../../domain/ids.js';
import type { PtyProcess, TtyOptions } from '../pty.js';
import { StartsInFlight } from '../starts-in-flight.js';
import { TerminalSession } from './session.js';
import {
  CLOSE,
  clientsFull,
  type DriverTerminals,
  MAX_CLIENTS_PER_TERMINAL,
  MAX_TERMINALS_PER_SANDBOX,
  type TerminalAttachment,
  type TerminalClient,
  type TerminalSpec,
  type TerminalState,
} from './types.js';

/** What a {@link TerminalHost} needs. */
export interface TerminalHostOptions {
  /** Starts a process on a new PTY in a sandbox (the runtime's `execTty`). */
  execTty(sandboxId: string, o: TtyOptions): Promise<PtyProcess>;
  log: Logger;
  /** Per-sandbox shares (default {@link MAX_TERMINALS_PER_SANDBOX} terminals, {@link MAX_CLIENTS_PER_TERMINAL} clients each). */
  shares?: { terminalsPerSandbox: number; clientsPerTerminal: number };
}

/** A held terminal and how long it may stay without a client. */
interface Held {
  session: TerminalSession;
  idleMs: number;
  idleTimer: NodeJS.Timeout | null;
}

/**
 * The terminals of the PTYs this process runs ({@link DriverTerminals}): in the server with
 * `SANDBOXD_ROLE=all`, in the runner with `runner` (API replicas reach it over the runner
 * protocol). Terminals live in memory: they end with this process (their shells get SIGHUP).
 */
export class TerminalHost implements DriverTerminals {
  /** Held terminals by sandbox, then by terminal id (insertion order: oldest first). */
  private readonly bySandbox = new Map<string, Map<string, Held>>();
  /** Creates in flight, counted against the per-sandbox limit; ended at once when their sandbox closes meanwhile. */
  private readonly starting = new StartsInFlight();

  private readonly maxTerminals: number;
  private readonly maxClients: number;

  constructor(private readonly o: TerminalHostOptions) {
    this.maxTerminals = o.shares?.terminalsPerSandbox ?? MAX_TERMINALS_PER_SANDBOX;
    this.maxClients = o.shares?.clientsPerTerminal ?? MAX_CLIENTS_PER_TERMINAL;
  }

  async create(sandboxId: string, spec: TerminalSpec): Promise<TerminalState> {
    const ticket = this.reserveSlot(sandboxId);
    try {
      const pty = await this.o.execTty(sandboxId, spec.tty);
      const id = newTerminalId();
      const log = this.o.log.child({ sandboxId, terminalId: id });
      const session = new TerminalSession(
        {
          id,
          sandboxId,
          shell: spec.shell,
          createdAt: spec.createdAt,
          argv: spec.tty.argv,
          env: spec.env,
          cwd: spec.cwd,
          tag: spec.tag,
          keepWhileIdle: spec.keepWhileIdle,
        },
        pty,
        log,
        (s) => this.clientsChanged(s),
        { timeoutMs: spec.timeoutMs },
      );
      if (this.starting.closedSince(sandboxId, ticket)) {
        session.terminate('sandbox stopped');
        throw new SandboxdError('conflict', 'The sandbox stopped while the terminal started', { state: 'stopped' });
      }
      const held = this.bySandbox.get(sandboxId) ?? new Map<string, Held>();
      this.bySandbox.set(sandboxId, held);
      held.set(id, { session, idleMs: spec.idleMs, idleTimer: null });
      this.clientsChanged(session);
      log.info({ shell: spec.shell, cwd: spec.cwd, pid: pty.pid }, 'terminal created');
      return session.state();
    } finally {
      this.starting.end(sandboxId);
    }
  }

  async list(sandboxId: string): Promise<TerminalState[]> {
    return [...(this.bySandbox.get(sandboxId)?.values() ?? [])].map((h) => h.session.state());
  }

  async get(sandboxId: string, terminalId: string): Promise<TerminalState | null> {
    return this.bySandbox.get(sandboxId)?.get(terminalId)?.session.state() ?? null;
  }

  async delete(sandboxId: string, terminalId: string, reason = 'terminal deleted'): Promise<void> {
    this.remove(this.find(sandboxId, terminalId), reason);
  }

  input(sandboxId: string, terminalId: string, data: Uint8Array): Promise<void> {
    try {
      return this.find(sandboxId, terminalId).session.write(data);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  async resize(sandboxId: string, terminalId: string, cols: number, rows: number): Promise<void> {
    this.find(sandboxId, terminalId).session.resize(cols, rows);
  }

  async signal(sandboxId: string, terminalId: string, signal: NodeJS.Signals): Promise<void> {
    this.find(sandboxId, terminalId).session.signal(signal);
  }

  async attach(
    sandboxId: string,
    terminalId: string,
    client: TerminalClient,
    opts: { replay?: boolean } = {},
  ): Promise<TerminalAttachment> {
    this.admitClient(sandboxId, terminalId);
    return this.find(sandboxId, terminalId).session.attach(client, opts);
  }

  /**
   * Throws what {@link attach} would now: `not_found`, or `rate_limited` when the terminal
   * has its share of clients (a runner answers it before the client's socket is accepted).
   */
  admitClient(sandboxId: string, terminalId: string): void {
    const { session } = this.find(sandboxId, terminalId);
    // Clients of an exited terminal get `exit` and are closed at once: never counted.
    if (session.status === 'active' && session.clientCount >= this.maxClients) throw clientsFull(this.maxClients);
  }

  async closeSandbox(sandboxId: string, reason: string): Promise<void> {
    this.starting.close(sandboxId);
    for (const h of [...(this.bySandbox.get(sandboxId)?.values() ?? [])]) this.remove(h, reason);
  }

  /** Ends every terminal (this process shuts down): clients get `exit` and `code` (1001), shells are hung up. */
  closeAll(reason = 'server shutting down', code: number = CLOSE.goingAway): void {
    for (const [sandboxId, held] of [...this.bySandbox]) {
      this.starting.close(sandboxId);
      for (const h of [...held.values()]) this.remove(h, reason, code);
    }
  }

  /** Terminals held (active and exited), for tests. */
  get size(): number {
    let n = 0;
    for (const held of this.bySandbox.values()) n += held.size;
    return n;
  }

  private find(sandboxId: string, terminalId: string): Held {
    const h = this.bySandbox.get(sandboxId)?.get(terminalId);
    if (!h) throw new SandboxdError('not_found', 'Terminal not found');
    return h;
  }

  /**
   * Counts a create against the limit, evicting the oldest exited terminal without a client
   * when full; returns the create's {@link StartsInFlight} ticket.
   */
  private reserveSlot(sandboxId: string): number {
    const held = [...(this.bySandbox.get(sandboxId)?.values() ?? [])];
    if (held.length + this.starting.count(sandboxId) >= this.maxTerminals) {
      const victim = held.find((h) => h.session.status === 'exited' && h.session.clientCount === 0);
      if (!victim) {
        throw new SandboxdError(
          'conflict',
          `A sandbox holds at most ${this.maxTerminals} terminals; delete one first`,
          {
            limit: this.maxTerminals,
          },
        );
      }
      this.remove(victim, 'evicted');
    }
    return this.starting.begin(sandboxId);
  }

  private remove(h: Held, reason: string, code: number = CLOSE.normal): void {
    const { sandboxId, id } = h.session.info;
    const held = this.bySandbox.get(sandboxId);
    if (held?.get(id) === h) {
      held.delete(id);
      if (!held.size) this.bySandbox.delete(sandboxId);
    }
    if (h.idleTimer) clearTimeout(h.idleTimer);
    h.idleTimer = null;
    h.session.terminate(reason, code);
  }

  /** The idle clock runs exactly while a held terminal has no client (and is not kept while it runs). */
  private clientsChanged(s: TerminalSession): void {
    const h = this.bySandbox.get(s.info.sandboxId)?.get(s.info.id);
    if (!h || h.session !== s) return;
    if (s.clientCount > 0 || (s.status === 'active' && s.info.keepWhileIdle)) {
      if (h.idleTimer) clearTimeout(h.idleTimer);
      h.idleTimer = null;
      return;
    }
    if (h.idleTimer) return;
    h.idleTimer = setTimeout(() => {
      h.idleTimer = null;
      if (this.bySandbox.get(s.info.sandboxId)?.get(s.info.id) === h && s.clientCount === 0) {
        this.o.log.info({ sandboxId: s.info.sandboxId, terminalId: s.info.id }, 'terminal idle: cleaned up');
        this.remove(h, 'idle');
      }
    }, h.idleMs);
    h.idleTimer.unref();
  }
}
