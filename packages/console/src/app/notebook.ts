/**
 * The notebook panel of a started sandbox's page: cells of code run one after another in a
 * code context (a kernel) of the sandbox's code interpreter, through the code routes
 * (notebook-api.ts), with their outputs drawn as they stream in (notebook-output.ts).
 *
 * - The notebook has one language (python, javascript, typescript, bash, r); it makes its
 *   own context per language on its first run, so its variables are its own. A context the
 *   server no longer knows (404: the sandbox was stopped and started, say) is replaced by a
 *   new one, with a note that earlier state is gone.
 * - Run (or Shift+Enter, which then moves to the next cell; Ctrl+Enter stays) queues a cell;
 *   queued cells run in order, and an error or an interrupt drops the rest of the queue, as
 *   Jupyter does. Interrupt aborts the run's request, which interrupts it in the sandbox.
 * - A sandbox without a code interpreter answers 409: the panel shows the server's message
 *   and a link to create a sandbox of the image it names.
 * - The cells (code, last execution count, outputs) are kept per sandbox in sessionStorage
 *   (without the outputs when they do not fit), so the page can be drawn again or reloaded.
 */
import { ConflictError, NotFoundError } from '@sandboxd/sdk';
import { errorText } from './api.js';
import { h, notice, setChildren } from './dom.js';
import { createContext, execute, restartContext } from './notebook-api.js';
import { OutputArea } from './notebook-output.js';
import {
  type CellOutput,
  forgetNotebooks,
  type KeyValueStore,
  LANGUAGES,
  type Language,
  loadNotebook,
  type StoredCell,
  type StoredNotebook,
  saveNotebook,
} from './notebook-util.js';

const LABELS: Record<Language, string> = {
  python: 'Python',
  javascript: 'JavaScript',
  typescript: 'TypeScript',
  bash: 'Bash',
  r: 'R',
};
const PLACEHOLDER: Record<Language, string> = {
  python: 'x = 21',
  javascript: 'const x = 21',
  typescript: 'const x: number = 21',
  bash: 'echo hello',
  r: 'x <- 21',
};

interface Cell {
  stored: StoredCell;
  el: HTMLElement;
  code: HTMLTextAreaElement;
  label: HTMLLabelElement;
  count: HTMLElement;
  out: OutputArea;
  run: HTMLButtonElement;
  stop: HTMLButtonElement;
  del: HTMLButtonElement;
  state: 'idle' | 'queued' | 'running';
  ctrl: AbortController | null;
}

/** Where notebooks are kept when sessionStorage cannot be used (private modes, disabled storage). */
const memory = new Map<string, string>();
const memoryStore: KeyValueStore = {
  getItem: (k) => memory.get(k) ?? null,
  setItem: (k, v) => void memory.set(k, v),
};

function pageStore(): KeyValueStore {
  try {
    const s = window.sessionStorage;
    s.getItem('');
    return s;
  } catch {
    return memoryStore;
  }
}

/** The notebooks on the page now (one, on a sandbox's page). */
const live = new Set<Notebook>();

/**
 * Forgets every notebook kept in this tab (sign-out): notebook-util.ts `forgetNotebooks`.
 * The notebooks on the page keep nothing more (not even when the page is left).
 */
export function forgetStoredNotebooks(): void {
  for (const n of live) n.forget();
  memory.clear();
  try {
    forgetNotebooks(window.sessionStorage);
  } catch {
    // No sessionStorage: nothing was kept there.
  }
}

let ids = 0;

/** The notebook panel of one sandbox. */
export class Notebook {
  readonly el: HTMLElement;
  private readonly nb: StoredNotebook;
  private readonly cells: Cell[] = [];
  private readonly queue: Cell[] = [];
  private running: Cell | null = null;
  private gone = false;
  private disposed = false;
  private forgotten = false;
  private readonly list = h('div', { class: 'nb-cells' });
  private readonly status = h('div', { class: 'nb-status', 'aria-live': 'polite' });
  private readonly language: HTMLSelectElement;
  private readonly store: KeyValueStore;
  private saveTimer: ReturnType<typeof setTimeout> | null = null;
  /** A reload or a closed tab does not wait for the typing pause. */
  private readonly onPageHide = () => {
    if (this.saveTimer !== null) this.save();
  };

  constructor(
    private readonly sandboxId: string,
    store?: KeyValueStore,
  ) {
    this.store = store ?? pageStore();
    this.nb = loadNotebook(this.store, sandboxId);
    this.language = h(
      'select',
      { id: 'nb-language', class: 'nb-language' },
      ...LANGUAGES.map((l) => h('option', { value: l, selected: l === this.nb.language }, LABELS[l])),
    );
    this.language.addEventListener('change', () => {
      this.nb.language = this.language.value as Language;
      for (const c of this.cells) c.code.placeholder = PLACEHOLDER[this.nb.language];
      this.save();
    });
    this.el = h(
      'section',
      { class: 'card notebook', 'aria-labelledby': 'nb-title' },
      h(
        'div',
        { class: 'nb-head' },
        h('h2', { id: 'nb-title' }, 'Notebook'),
        h(
          'div',
          { class: 'nb-tools' },
          h('label', { for: 'nb-language' }, 'Language'),
          this.language,
          h('button', { type: 'button', class: 'btn small primary', onclick: () => this.runAll() }, 'Run all'),
          h('button', { type: 'button', class: 'btn small', onclick: () => void this.restart() }, 'Restart kernel'),
        ),
      ),
      this.status,
      this.list,
      h(
        'div',
        { class: 'nb-foot' },
        h('button', { type: 'button', class: 'btn small nb-add', onclick: () => this.addCell(true) }, '+ Add cell'),
        h(
          'p',
          { class: 'hint' },
          'Shift+Enter runs a cell and moves to the next; Ctrl+Enter runs it and stays. ' +
            'HTML results are shown in an isolated frame without scripts.',
        ),
      ),
    );
    for (const c of this.nb.cells) this.drawCell(c);
    window.addEventListener('pagehide', this.onPageHide);
    live.add(this);
  }

  /** Keeps nothing from now on (sign-out). */
  forget(): void {
    this.forgotten = true;
    if (this.saveTimer !== null) clearTimeout(this.saveTimer);
    this.saveTimer = null;
  }

  /** Leaves the page: a running cell's request is closed (interrupting it) and the notebook is kept. */
  dispose(): void {
    this.disposed = true;
    window.removeEventListener('pagehide', this.onPageHide);
    this.stopAll();
    this.save();
    live.delete(this);
  }

  /** The sandbox is gone: runs end and every control is disabled. */
  sandboxGone(): void {
    this.gone = true;
    this.stopAll();
    this.el.classList.add('gone');
    for (const c of this.el.querySelectorAll<HTMLButtonElement | HTMLTextAreaElement | HTMLSelectElement>(
      'button, textarea, select',
    ))
      c.disabled = true;
  }

  /** Adds an empty cell at the end; `focus` moves the keyboard to it. */
  addCell(focus = false): Cell {
    const stored: StoredCell = { code: '', count: null, outputs: [] };
    this.nb.cells.push(stored);
    const cell = this.drawCell(stored);
    this.save();
    if (focus) cell.code.focus();
    return cell;
  }

  /** Queues every cell, in order. */
  runAll(): void {
    for (const c of this.cells) this.enqueue(c);
  }

  private drawCell(stored: StoredCell): Cell {
    const id = `nb-code-${++ids}`;
    const code = h('textarea', {
      id,
      class: 'nb-code mono',
      spellcheck: 'false',
      autocomplete: 'off',
      autocapitalize: 'off',
      placeholder: PLACEHOLDER[this.nb.language],
    });
    code.value = stored.code;
    const label = h('label', { for: id, class: 'sr-only' });
    const count = h('span', { class: 'nb-count mono' });
    const out = new OutputArea('Output');
    const run = h('button', { type: 'button', class: 'btn small' }, 'Run');
    const stop = h('button', { type: 'button', class: 'btn small', disabled: true }, 'Interrupt');
    const del = h('button', { type: 'button', class: 'btn small danger' }, 'Delete');
    const el = h(
      'div',
      { class: 'nb-cell', 'data-state': 'idle' },
      h(
        'div',
        { class: 'nb-in' },
        count,
        h('div', { class: 'nb-editor' }, label, code),
        h('div', { class: 'nb-cell-tools' }, run, stop, del),
      ),
      out.el,
    );
    const cell: Cell = { stored, el, code, label, count, out, run, stop, del, state: 'idle', ctrl: null };
    code.addEventListener('input', () => {
      stored.code = code.value;
      fitRows(code);
      this.saveSoon();
    });
    code.addEventListener('keydown', (ev) => {
      if (ev.key !== 'Enter' || !(ev.shiftKey || ev.ctrlKey || ev.metaKey)) return;
      ev.preventDefault();
      this.enqueue(cell);
      if (ev.shiftKey) {
        const next = this.cells[this.cells.indexOf(cell) + 1] ?? this.addCell();
        next.code.focus();
      }
    });
    run.addEventListener('click', () => this.enqueue(cell));
    stop.addEventListener('click', () => this.interrupt(cell));
    del.addEventListener('click', () => this.deleteCell(cell));
    for (const o of stored.outputs) out.add(o);
    fitRows(code);
    this.cells.push(cell);
    this.list.append(el);
    this.showCell(cell);
    this.renumber();
    return cell;
  }

  /** Labels follow the cells' positions: "Cell 2", "Run cell 2", ... */
  private renumber(): void {
    this.cells.forEach((c, i) => {
      const n = i + 1;
      c.el.dataset.cell = String(n);
      c.el.setAttribute('role', 'group');
      c.el.setAttribute('aria-label', `Cell ${n}`);
      c.label.textContent = `Code of cell ${n}`;
      c.run.setAttribute('aria-label', `Run cell ${n}`);
      c.stop.setAttribute('aria-label', `Interrupt cell ${n}`);
      c.del.setAttribute('aria-label', `Delete cell ${n}`);
      c.out.el.setAttribute('aria-label', `Output of cell ${n}`);
    });
  }

  /** Shows a cell's state: its execution count (`[n]`, `[*]` while queued or running) and buttons. */
  private showCell(c: Cell): void {
    c.el.dataset.state = c.state;
    const busy = c.state !== 'idle';
    c.count.textContent = busy ? '[*]' : `[${c.stored.count ?? ' '}]`;
    c.el.setAttribute('aria-busy', String(c.state === 'running'));
    c.run.disabled = busy || this.gone;
    c.stop.disabled = !busy || this.gone;
  }

  private enqueue(c: Cell): void {
    if (this.gone || this.disposed || c.state !== 'idle' || !this.cells.includes(c)) return;
    c.state = 'queued';
    this.queue.push(c);
    this.showCell(c);
    void this.pump();
  }

  /** Runs queued cells one at a time; an error or an interrupt drops the rest of the queue. */
  private async pump(): Promise<void> {
    if (this.running) return;
    for (let c = this.queue.shift(); c; c = this.queue.shift()) {
      this.running = c;
      const ok = await this.runCell(c).catch(() => false);
      this.running = null;
      c.state = 'idle';
      c.ctrl = null;
      this.showCell(c);
      this.save();
      if (!ok) this.dropQueue();
      if (this.disposed) return;
    }
  }

  private dropQueue(): void {
    for (const q of this.queue.splice(0)) {
      q.state = 'idle';
      this.showCell(q);
    }
  }

  private interrupt(c: Cell): void {
    if (c.state === 'queued') {
      this.queue.splice(this.queue.indexOf(c), 1);
      c.state = 'idle';
      this.showCell(c);
      return;
    }
    this.dropQueue();
    c.ctrl?.abort(new DOMException('Interrupted by the user', 'AbortError'));
  }

  private stopAll(): void {
    this.dropQueue();
    this.running?.ctrl?.abort(new DOMException('Left the page', 'AbortError'));
  }

  private deleteCell(c: Cell): void {
    const i = this.cells.indexOf(c);
    if (i < 0) return;
    this.interrupt(c);
    this.cells.splice(i, 1);
    this.nb.cells.splice(this.nb.cells.indexOf(c.stored), 1);
    c.el.remove();
    if (this.cells.length === 0) this.addCell();
    this.renumber();
    this.save();
    (this.cells[Math.max(0, i - 1)]?.code ?? this.el).focus();
  }

  /** The notebook's context for its language, made on first use. Throws the server's refusal. */
  private async contextId(): Promise<string> {
    const lang = this.nb.language;
    const known = this.nb.contexts[lang];
    if (known) return known;
    const ctx = await createContext(this.sandboxId, lang);
    this.nb.contexts[lang] = ctx.id;
    this.save();
    return ctx.id;
  }

  /** Runs one cell, drawing its outputs as they come. Resolves to whether it ran to its end without an error. */
  private async runCell(c: Cell): Promise<boolean> {
    c.state = 'running';
    c.ctrl = new AbortController();
    const signal = c.ctrl.signal;
    this.showCell(c);
    c.out.clear();
    c.stored.outputs = [];
    const add = (o: CellOutput) => {
      c.stored.outputs.push(o);
      c.out.add(o);
    };
    for (let attempt = 0; attempt < 2; attempt++) {
      let ended = false;
      let failed = false;
      try {
        const contextId = await this.contextId();
        for await (const e of execute(this.sandboxId, { code: c.code.value, contextId }, signal)) {
          if (e.type === 'executionCount') {
            c.stored.count = e.count;
          } else if (e.type === 'end') {
            ended = true;
          } else {
            if (e.type === 'error') failed = true;
            add(e);
          }
        }
        setChildren(this.status);
        if (ended) return !failed;
        if (signal.aborted) throw signal.reason;
        add({ type: 'note', tone: 'error', text: 'The connection ended before the run did.' });
        return false;
      } catch (e) {
        if (signal.aborted) {
          add({ type: 'note', tone: 'info', text: 'Interrupted.' });
          return false;
        }
        if (e instanceof NotFoundError && attempt === 0 && this.nb.contexts[this.nb.language]) {
          // The server no longer knows the context: make a new one and run there.
          delete this.nb.contexts[this.nb.language];
          add({
            type: 'note',
            tone: 'info',
            text: 'The kernel of this notebook was gone; a new one was started (earlier variables are not defined).',
          });
          continue;
        }
        if (e instanceof ConflictError) this.unavailable(e);
        add({ type: 'note', tone: 'error', text: `Could not run the cell: ${errorText(e)}` });
        return false;
      }
    }
    return false;
  }

  /** The sandbox has no code interpreter (or cannot run code now): says so, with a link to the image the server names. */
  private unavailable(e: ConflictError): void {
    const d = (e.details ?? {}) as { image?: unknown };
    const image =
      typeof d.image === 'string' ? d.image : (/\blocal\/code-interpreter(?::[\w.-]+)?/.exec(e.message)?.[0] ?? null);
    setChildren(
      this.status,
      h(
        'div',
        { class: 'notice error nb-unavailable', role: 'alert' },
        h('p', {}, e.message),
        image
          ? h(
              'p',
              {},
              'Create a sandbox from ',
              h('code', {}, image),
              ' to use the notebook: ',
              h('a', { href: `/sandboxes/new?image=${encodeURIComponent(image)}` }, 'New sandbox'),
            )
          : null,
      ),
    );
  }

  /** Restarts the notebook's kernel of its language: its variables are lost. */
  private async restart(): Promise<void> {
    const lang = this.nb.language;
    this.stopAll();
    const id = this.nb.contexts[lang];
    if (!id) {
      setChildren(this.status, notice('info', 'No kernel started yet: the first run starts one.'));
      return;
    }
    try {
      await restartContext(this.sandboxId, id);
      setChildren(this.status, notice('success', `${LABELS[lang]} kernel restarted.`));
    } catch (e) {
      if (e instanceof NotFoundError) {
        delete this.nb.contexts[lang];
        this.save();
        setChildren(this.status, notice('info', 'The kernel was gone; the next run starts a new one.'));
      } else if (e instanceof ConflictError) this.unavailable(e);
      else setChildren(this.status, notice('error', `Could not restart the kernel: ${errorText(e)}`));
    }
  }

  /** Saves after typing pauses: the notebook's outputs (images) can be megabytes of JSON. */
  private saveSoon(): void {
    if (this.saveTimer !== null) return;
    this.saveTimer = setTimeout(() => this.save(), 400);
  }

  private save(): void {
    if (this.saveTimer !== null) clearTimeout(this.saveTimer);
    this.saveTimer = null;
    if (this.forgotten) return;
    const kept = saveNotebook(this.store, this.sandboxId, this.nb);
    this.el.dataset.saved = kept;
  }
}

/** A code box as tall as its lines (2 to 24). */
function fitRows(t: HTMLTextAreaElement): void {
  t.rows = Math.min(24, Math.max(2, t.value.split('\n').length));
}
