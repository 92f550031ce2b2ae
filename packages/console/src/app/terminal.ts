/**
 * Web terminals of one sandbox: xterm.js tabs over the terminal WebSocket (the session
 * cookie authenticates it, same origin). Fits the window, reconnects after a network drop
 * (redrawing from the server's replay buffer) and shows the exit code when the shell ends.
 */
import { FitAddon } from '@xterm/addon-fit';
import { Terminal as XTerm } from '@xterm/xterm';
import { AuthenticationError, ConflictError, NotFoundError, type Sandbox, type Terminal } from '@sandboxd/sdk';
import { errorText } from './api.js';
import { h, setChildren } from './dom.js';

interface Tab {
  id: string;
  n: number;
  xterm: XTerm;
  fit: FitAddon;
  conn: Terminal | null;
  state: 'connecting' | 'connected' | 'reconnecting' | 'exited' | 'closed';
  tab: HTMLButtonElement;
  item: HTMLElement;
  panel: HTMLElement;
  status: HTMLElement;
}

const THEME = { background: '#0b1020', foreground: '#e2e8f0', cursor: '#a5b4fc', selectionBackground: '#334155' };

/** The terminal tabs of a sandbox's detail page. */
export class TerminalTabs {
  readonly el: HTMLElement;
  private readonly tabs: Tab[] = [];
  private readonly list = h('div', { role: 'tablist', class: 'tablist', 'aria-label': 'Terminals' });
  private readonly panels = h('div', { class: 'term-panels' });
  private readonly message = h('div', { class: 'term-message', 'aria-live': 'polite' });
  private active: Tab | null = null;
  private count = 0;
  private disposed = false;
  private readonly observer = new ResizeObserver(() => this.fitActive());
  private readonly onOnline = () => {
    for (const t of this.tabs) if (t.state === 'reconnecting') void this.reconnect(t, 0);
  };

  constructor(private readonly sandbox: Sandbox) {
    const add = h(
      'button',
      { type: 'button', class: 'btn small new-term', onclick: () => void this.add() },
      '+ New terminal',
    );
    this.el = h(
      'section',
      { class: 'card terminals', 'aria-labelledby': 'term-title' },
      h('div', { class: 'term-head' }, h('h2', { id: 'term-title' }, 'Terminal'), add),
      h('div', { class: 'tabbar' }, this.list),
      this.message,
      this.panels,
      h('p', { class: 'hint' }, 'F6 moves focus from the terminal back to its tab.'),
    );
    this.observer.observe(this.panels);
    window.addEventListener('online', this.onOnline);
  }

  /** Attaches to the sandbox's active terminals (their recent output replayed), or opens one when there is none. */
  async init(): Promise<void> {
    const existing = await this.sandbox.terminals.list().catch(() => []);
    for (const t of existing) {
      if (t.status !== 'active') continue;
      const tab = this.newTab(t.id);
      await this.attach(tab, true).catch((e) => this.setState(tab, 'closed', `Terminal closed: ${errorText(e)}`));
    }
    if (this.tabs.length === 0) await this.add(false);
    else this.select(this.tabs[0], false);
  }

  /** Opens a new shell in a new tab, sized to the tab. */
  async add(focus = true): Promise<void> {
    const tab = this.newTab('');
    if (focus) tab.xterm.focus();
    try {
      const conn = await this.sandbox.terminals.create({ cols: tab.xterm.cols, rows: tab.xterm.rows });
      tab.id = conn.id;
      tab.panel.dataset.terminalId = conn.id;
      this.wire(tab, conn);
    } catch (e) {
      this.setState(tab, 'closed', `Could not open a terminal: ${errorText(e)}`);
    }
  }

  /** Leaves the page: disconnects every tab (the shells keep running and are re-attached on return). */
  dispose(): void {
    this.disposed = true;
    this.observer.disconnect();
    window.removeEventListener('online', this.onOnline);
    for (const t of this.tabs) {
      t.conn?.disconnect();
      t.xterm.dispose();
    }
  }

  /** The sandbox is gone: no more reconnecting. Tabs still connected get their exit from the server. */
  sandboxGone(): void {
    for (const t of this.tabs)
      if (t.state === 'reconnecting' || t.state === 'connecting')
        this.setState(t, 'closed', 'Sandbox deleted; terminal closed.');
  }

  private newTab(id: string): Tab {
    const n = ++this.count;
    const tabId = `term-tab-${n}`;
    const panelId = `term-panel-${n}`;
    const tabBtn = h(
      'button',
      { type: 'button', role: 'tab', id: tabId, 'aria-controls': panelId, class: 'tab' },
      `Shell ${n}`,
      h('span', { class: 'dot', 'aria-hidden': 'true' }),
    );
    const close = h('button', { type: 'button', class: 'tab-close', 'aria-label': `Close shell ${n}` }, '×');
    const item = h('div', { class: 'tab-item' }, tabBtn, close);
    const status = h('p', { class: 'term-status', role: 'status' });
    const screen = h('div', { class: 'term-screen' });
    const panel = h(
      'div',
      { role: 'tabpanel', id: panelId, 'aria-labelledby': tabId, class: 'term-panel', 'data-terminal-id': id },
      screen,
      status,
    );
    const xterm = new XTerm({
      cursorBlink: true,
      fontSize: 14,
      fontFamily: 'ui-monospace, "SF Mono", Menlo, Consolas, "DejaVu Sans Mono", monospace',
      theme: THEME,
      scrollback: 5000,
    });
    const fit = new FitAddon();
    xterm.loadAddon(fit);
    const tab: Tab = { id, n, xterm, fit, conn: null, state: 'connecting', tab: tabBtn, item, panel, status };
    this.list.append(item);
    this.panels.append(panel);
    this.tabs.push(tab);
    tabBtn.addEventListener('click', () => this.select(tab));
    tabBtn.addEventListener('keydown', (ev) => this.arrowKeys(ev, tab));
    close.addEventListener('click', () => void this.close(tab));
    this.select(tab, false);
    xterm.open(screen);
    this.fitActive();
    // The terminal takes Tab and Escape; F6 hands focus back to the page (no keyboard trap).
    xterm.attachCustomKeyEventHandler((ev) => {
      if (ev.key !== 'F6') return true;
      if (ev.type === 'keydown') {
        ev.preventDefault();
        tabBtn.focus();
      }
      return false;
    });
    xterm.onData((d) => {
      if (tab.state === 'connected') tab.conn?.write(d);
    });
    xterm.onResize(({ cols, rows }) => {
      panel.dataset.cols = String(cols);
      panel.dataset.rows = String(rows);
      if (tab.state === 'connected') tab.conn?.resize(cols, rows);
    });
    panel.dataset.cols = String(xterm.cols);
    panel.dataset.rows = String(xterm.rows);
    setChildren(this.message);
    return tab;
  }

  private select(tab: Tab, focus = true): void {
    this.active = tab;
    for (const t of this.tabs) {
      const on = t === tab;
      t.tab.setAttribute('aria-selected', String(on));
      t.tab.tabIndex = on ? 0 : -1;
      t.item.classList.toggle('active', on);
      t.panel.hidden = !on;
    }
    this.fitActive();
    if (focus) tab.xterm.focus();
  }

  private arrowKeys(ev: KeyboardEvent, tab: Tab): void {
    const i = this.tabs.indexOf(tab);
    const to = ev.key === 'ArrowRight' ? i + 1 : ev.key === 'ArrowLeft' ? i - 1 : -2;
    if (to === -2) return;
    const next = this.tabs[(to + this.tabs.length) % this.tabs.length];
    ev.preventDefault();
    this.select(next);
    next.tab.focus();
  }

  private fitActive(): void {
    const t = this.active;
    if (!t || t.panel.hidden || this.disposed) return;
    try {
      t.fit.fit();
    } catch {
      /* not laid out yet */
    }
  }

  private async attach(tab: Tab, replay: boolean): Promise<void> {
    const conn = await this.sandbox.terminals.connect(tab.id, { replay });
    tab.panel.dataset.terminalId = tab.id;
    if (replay) tab.xterm.reset();
    this.wire(tab, conn);
  }

  private wire(tab: Tab, conn: Terminal): void {
    if (this.disposed) {
      conn.disconnect();
      return;
    }
    tab.conn = conn;
    conn.onData((bytes) => tab.xterm.write(bytes));
    conn.onExit(({ exitCode, signal }) => {
      const why = `Shell exited with code ${exitCode}${signal ? ` (${signal})` : ''}.`;
      tab.xterm.write(`\r\n\x1b[2m[${why}]\x1b[0m\r\n`);
      this.setState(tab, 'exited', why);
    });
    if (conn.exit) return;
    this.setState(tab, 'connected', '');
    // The PTY follows this tab's size, also after a reconnect.
    try {
      conn.resize(tab.xterm.cols, tab.xterm.rows);
    } catch {
      /* closed meanwhile: wait() below notices */
    }
    conn.wait().catch(() => {
      if (!this.disposed && tab.state === 'connected') void this.reconnect(tab, 1);
    });
  }

  private async reconnect(tab: Tab, attempt: number): Promise<void> {
    if (this.disposed || tab.state === 'exited' || tab.state === 'closed') return;
    this.setState(tab, 'reconnecting', 'Connection lost. Reconnecting…');
    const delay = Math.min(500 * 2 ** attempt, 10_000);
    await new Promise((r) => setTimeout(r, attempt === 0 ? 0 : delay));
    if (this.disposed || tab.state !== 'reconnecting') return;
    try {
      await this.attach(tab, true);
    } catch (e) {
      if (e instanceof NotFoundError || e instanceof ConflictError || e instanceof AuthenticationError) {
        this.setState(tab, 'closed', `Terminal closed: ${errorText(e)}`);
        return;
      }
      void this.reconnect(tab, attempt + 1);
    }
  }

  private async close(tab: Tab): Promise<void> {
    const i = this.tabs.indexOf(tab);
    this.tabs.splice(i, 1);
    tab.item.remove();
    tab.panel.remove();
    tab.xterm.dispose();
    const conn = tab.conn;
    tab.state = 'closed';
    if (conn) await conn.close().catch(() => {});
    const next = this.tabs[Math.max(0, i - 1)];
    if (next) {
      this.select(next);
      next.tab.focus();
    } else {
      setChildren(this.message, h('p', { class: 'empty' }, 'No terminal open.'));
    }
  }

  private setState(tab: Tab, state: Tab['state'], text: string): void {
    tab.state = state;
    tab.item.dataset.state = state;
    tab.panel.dataset.state = state;
    tab.status.textContent = text;
    tab.status.hidden = text === '';
  }
}
