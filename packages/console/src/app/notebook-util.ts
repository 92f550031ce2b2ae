/**
 * The notebook panel's pure parts, free of the DOM so Node tests them: the events of
 * `POST /api/v1/sandboxes/{id}/code/execute` checked and typed, which representation of a
 * result is shown, a DataFrame's `data` as rows, ANSI escapes removed, data: URLs of images,
 * and the notebook kept per sandbox in sessionStorage.
 */

/** The languages the code interpreter runs (docs/code-interpreter.md). */
export const LANGUAGES = ['python', 'javascript', 'typescript', 'bash', 'r'] as const;
export type Language = (typeof LANGUAGES)[number];

/** One result of a run, as the relay sends it: every representation the kernel gave. */
export interface CodeResult {
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  png?: string;
  jpeg?: string;
  pdf?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
  data?: unknown;
  chart?: unknown;
  extra?: unknown;
  isMainResult?: boolean;
}

/**
 * What a cell shows, in order: the relay's events (`stdout`, `stderr`, `result`, `error`)
 * plus the panel's own notes (an interrupted run, a lost connection, a new kernel).
 */
export type CellOutput =
  | { type: 'stdout' | 'stderr'; text: string }
  | { type: 'result'; result: CodeResult }
  | { type: 'error'; name: string; value: string; traceback: string }
  | { type: 'note'; text: string; tone: 'info' | 'error' };

/** A line of the execute stream, checked: an output, the execution count, or the end. */
export type CodeEvent = CellOutput | { type: 'executionCount'; count: number } | { type: 'end' };

const str = (v: unknown): string => (typeof v === 'string' ? v : v === undefined || v === null ? '' : String(v));

/** A traceback as text: the relay sends a string (E2B's shape); a list of lines is joined. */
export function tracebackText(tb: unknown): string {
  if (Array.isArray(tb)) return tb.map(str).join('\n');
  return str(tb);
}

/**
 * Checks one parsed line of the execute stream. Returns null for a line of a type this page
 * does not know (a newer server may send more), so it is skipped rather than shown wrongly.
 */
export function parseEvent(raw: unknown): CodeEvent | null {
  if (!raw || typeof raw !== 'object') return null;
  const e = raw as Record<string, unknown>;
  switch (e.type) {
    case 'stdout':
    case 'stderr':
      return { type: e.type, text: str(e.text) };
    case 'result': {
      const r = e.result;
      return r && typeof r === 'object' ? { type: 'result', result: r as CodeResult } : null;
    }
    case 'error':
      return { type: 'error', name: str(e.name), value: str(e.value), traceback: tracebackText(e.traceback) };
    case 'executionCount':
      return typeof e.count === 'number' && Number.isFinite(e.count)
        ? { type: 'executionCount', count: e.count }
        : null;
    case 'end':
      return { type: 'end' };
    default:
      return null;
  }
}

/**
 * Removes ANSI escape sequences (colours of IPython's tracebacks, cursor moves) and the
 * other control characters but newline and tab, so text is shown as text.
 */
export function stripAnsi(s: string): string {
  return (
    s
      // CSI (ESC [ ... final byte), OSC (ESC ] ... BEL or ESC \), and two-byte escapes.
      // biome-ignore lint/suspicious/noControlCharactersInRegex: matching escapes is the point
      .replace(/\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]/g, '')
      // A lone carriage return (progress bars) becomes a line break rather than being dropped.
      .replace(/\r\n/g, '\n')
      .replace(/\r/g, '\n')
      // biome-ignore lint/suspicious/noControlCharactersInRegex: the remaining control characters
      .replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '')
  );
}

/** How a result is shown; the richest the page can show safely comes first. */
export type Representation =
  | { kind: 'png' | 'jpeg' | 'svg'; url: string }
  | { kind: 'table' }
  | { kind: 'html'; html: string }
  | { kind: 'markdown' | 'latex' | 'text' | 'json' | 'javascript'; text: string }
  | { kind: 'pdf'; url: string }
  | { kind: 'empty' };

const BASE64 = /^[A-Za-z0-9+/\s]*={0,2}\s*$/;

/** A data: URL of base64 image bytes; null when `b64` is not base64. */
export function imageUrl(mime: 'image/png' | 'image/jpeg' | 'application/pdf', b64: string): string | null {
  if (!BASE64.test(b64)) return null;
  return `data:${mime};base64,${b64.replace(/\s+/g, '')}`;
}

/** A data: URL of an SVG document, for an `<img>` (where its scripts never run). */
export function svgUrl(svg: string): string {
  return `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`;
}

/** Whether an HTML representation is a pandas DataFrame's table (shown as a table built from its cells). */
export function isDataFrameHtml(html: string): boolean {
  return /<table\b[^>]*\bclass\s*=\s*["'][^"']*\bdataframe\b/i.test(html);
}

/**
 * HTML without its `<style>` elements and `style` attributes. The console's policy refuses
 * inline styles in every document it makes (an inert parse, a `srcdoc` frame) and the
 * browser logs each refusal; they would not apply anyway, so they are taken out first. Only
 * for HTML that is then parsed inertly or shown in a sandboxed frame: this is no sanitizer.
 */
export function withoutInlineStyles(html: string): string {
  return html
    .replace(/<style\b[\s\S]*?<\/style\s*>/gi, '')
    .replace(/(<[a-z][^>]*?)\sstyle\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]+)/gi, '$1');
}

/**
 * The representation to show: an image (png, jpeg, svg), a table (a DataFrame: `data`, or
 * the HTML of one), HTML (in an isolated frame), then the text forms.
 */
export function pickRepresentation(r: CodeResult): Representation {
  if (typeof r.png === 'string') {
    const url = imageUrl('image/png', r.png);
    if (url) return { kind: 'png', url };
  }
  if (typeof r.jpeg === 'string') {
    const url = imageUrl('image/jpeg', r.jpeg);
    if (url) return { kind: 'jpeg', url };
  }
  if (typeof r.svg === 'string') return { kind: 'svg', url: svgUrl(r.svg) };
  if (tableFromData(r.data) || (typeof r.html === 'string' && isDataFrameHtml(r.html))) return { kind: 'table' };
  if (typeof r.html === 'string') return { kind: 'html', html: r.html };
  if (typeof r.markdown === 'string') return { kind: 'markdown', text: r.markdown };
  if (typeof r.latex === 'string') return { kind: 'latex', text: r.latex };
  if (r.json !== undefined && r.json !== null) return { kind: 'json', text: JSON.stringify(r.json, null, 2) };
  if (typeof r.text === 'string') return { kind: 'text', text: r.text };
  if (typeof r.javascript === 'string') return { kind: 'javascript', text: r.javascript };
  if (typeof r.pdf === 'string') {
    const url = imageUrl('application/pdf', r.pdf);
    if (url) return { kind: 'pdf', url };
  }
  return { kind: 'empty' };
}

/** Rows shown of a table; the rest is counted. */
export const MAX_TABLE_ROWS = 500;
/** Columns shown of a table. */
export const MAX_TABLE_COLUMNS = 100;

/** A table to draw: header cells, body rows (text), and how many rows and columns were left out. */
export interface TableData {
  columns: string[];
  rows: string[][];
  moreRows: number;
  moreColumns: number;
}

/** A cell's value as text: strings as they are, null as empty, the rest as JSON. */
export function cellText(v: unknown): string {
  if (typeof v === 'string') return v;
  if (v === null || v === undefined) return '';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

/**
 * A DataFrame's `data` as a table: E2B's form is `{column: [values...]}` (pandas'
 * `to_dict(orient="list")`); a list of row objects is read too. Null when it is neither.
 */
export function tableFromData(data: unknown): TableData | null {
  if (Array.isArray(data)) {
    if (data.length === 0 || !data.every((r) => r && typeof r === 'object' && !Array.isArray(r))) return null;
    const all: string[] = [];
    for (const r of data as Record<string, unknown>[])
      for (const k of Object.keys(r)) if (!all.includes(k)) all.push(k);
    const columns = all.slice(0, MAX_TABLE_COLUMNS);
    const rows = (data as Record<string, unknown>[])
      .slice(0, MAX_TABLE_ROWS)
      .map((r) => columns.map((c) => cellText(r[c])));
    return { columns, rows, moreRows: data.length - rows.length, moreColumns: all.length - columns.length };
  }
  if (!data || typeof data !== 'object') return null;
  const entries = Object.entries(data as Record<string, unknown>);
  if (entries.length === 0 || !entries.every(([, v]) => Array.isArray(v))) return null;
  const height = Math.max(...entries.map(([, v]) => (v as unknown[]).length));
  const shown = entries.slice(0, MAX_TABLE_COLUMNS);
  const rows: string[][] = [];
  for (let i = 0; i < Math.min(height, MAX_TABLE_ROWS); i++)
    rows.push(shown.map(([, v]) => cellText((v as unknown[])[i])));
  return {
    columns: shown.map(([k]) => k),
    rows,
    moreRows: height - rows.length,
    moreColumns: entries.length - shown.length,
  };
}

/** One cell of a stored notebook. */
export interface StoredCell {
  code: string;
  /** The execution count of its last run, if it ran. */
  count: number | null;
  outputs: CellOutput[];
}

/** A notebook as kept per sandbox: its language, the code contexts it made (per language) and its cells. */
export interface StoredNotebook {
  language: Language;
  contexts: Partial<Record<Language, string>>;
  cells: StoredCell[];
}

/** The storage the notebook is kept in (sessionStorage in the page, a Map in tests). */
export interface KeyValueStore {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

const PREFIX = 'sandboxd.notebook.';
const key = (sandboxId: string) => `${PREFIX}v1.${sandboxId}`;

/**
 * Removes every notebook kept in `store` (any version), and nothing else. Run at sign-out:
 * outputs may hold what the code printed (secrets, say), and sessionStorage outlives the
 * session in the tab, where the next person to sign in could read it.
 */
export function forgetNotebooks(store: Pick<Storage, 'length' | 'key' | 'removeItem'>): void {
  const mine: string[] = [];
  for (let i = 0; i < store.length; i++) {
    const k = store.key(i);
    if (k?.startsWith(PREFIX)) mine.push(k);
  }
  for (const k of mine) store.removeItem(k);
}

/** A new notebook: Python, one empty cell. */
export function emptyNotebook(): StoredNotebook {
  return { language: 'python', contexts: {}, cells: [{ code: '', count: null, outputs: [] }] };
}

function isLanguage(v: unknown): v is Language {
  return typeof v === 'string' && (LANGUAGES as readonly string[]).includes(v);
}

/** The notebook kept for a sandbox, or a new one when none is kept (or what is kept cannot be read). */
export function loadNotebook(store: KeyValueStore | null, sandboxId: string): StoredNotebook {
  let raw: string | null = null;
  try {
    raw = store?.getItem(key(sandboxId)) ?? null;
  } catch {
    raw = null;
  }
  if (!raw) return emptyNotebook();
  try {
    const v = JSON.parse(raw) as Partial<StoredNotebook>;
    const contexts: Partial<Record<Language, string>> = {};
    for (const [k, id] of Object.entries(v.contexts ?? {}))
      if (isLanguage(k) && typeof id === 'string') contexts[k] = id;
    const cells = (Array.isArray(v.cells) ? v.cells : [])
      .filter((c): c is StoredCell => !!c && typeof c.code === 'string')
      .map((c) => ({
        code: c.code,
        count: typeof c.count === 'number' ? c.count : null,
        outputs: (Array.isArray(c.outputs) ? c.outputs : [])
          .map((o) => (o && (o as CellOutput).type === 'note' ? (o as CellOutput) : parseEvent(o)))
          .filter((o): o is CellOutput => !!o && o.type !== 'executionCount' && o.type !== 'end'),
      }));
    return {
      language: isLanguage(v.language) ? v.language : 'python',
      contexts,
      cells: cells.length ? cells : emptyNotebook().cells,
    };
  } catch {
    return emptyNotebook();
  }
}

/**
 * Keeps the notebook for the sandbox. When the outputs do not fit (sessionStorage holds a
 * few MB; images are large) the code is kept without them; returns what was kept.
 */
export function saveNotebook(
  store: KeyValueStore | null,
  sandboxId: string,
  nb: StoredNotebook,
): 'all' | 'code' | 'none' {
  if (!store) return 'none';
  try {
    store.setItem(key(sandboxId), JSON.stringify(nb));
    return 'all';
  } catch {
    try {
      const cells = nb.cells.map((c) => ({ code: c.code, count: c.count, outputs: [] }));
      store.setItem(key(sandboxId), JSON.stringify({ ...nb, cells }));
      return 'code';
    } catch {
      return 'none';
    }
  }
}
