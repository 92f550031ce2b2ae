/**
 * Draws a cell's outputs with DOM APIs only (never `innerHTML` of anything a kernel sent):
 * stdout and stderr as text (stderr styled), images as `<img>` of data: URLs (SVG too, so
 * its scripts never run), DataFrames as real tables built cell by cell, errors with their
 * traceback, and HTML in a frame with an empty `sandbox` attribute: no scripts, an opaque
 * origin, no navigation of the console, no forms or pop-ups. The frame's `srcdoc` document
 * also inherits the console's Content-Security-Policy, so it loads nothing from elsewhere.
 */
import { h } from './dom.js';
import {
  type CellOutput,
  type CodeResult,
  isDataFrameHtml,
  MAX_TABLE_COLUMNS,
  MAX_TABLE_ROWS,
  pickRepresentation,
  stripAnsi,
  type TableData,
  tableFromData,
  withoutInlineStyles,
} from './notebook-util.js';

/** Characters of stdout and stderr shown per cell; the rest is counted, not drawn. */
export const MAX_STREAM_CHARS = 200_000;

/** Appends outputs to one cell's output area; consecutive text of the same stream joins one block. */
export class OutputArea {
  readonly el = h('div', { class: 'nb-out' });
  private last: { type: 'stdout' | 'stderr'; pre: HTMLElement } | null = null;
  private streamed = 0;
  private cut: HTMLElement | null = null;

  constructor(label: string) {
    this.el.setAttribute('aria-label', label);
  }

  /** Removes every output. */
  clear(): void {
    this.el.replaceChildren();
    this.last = null;
    this.streamed = 0;
    this.cut = null;
  }

  /** Draws one output after the others. */
  add(o: CellOutput): void {
    switch (o.type) {
      case 'stdout':
      case 'stderr':
        this.stream(o.type, o.text);
        return;
      case 'result':
        this.last = null;
        this.el.append(resultEl(o.result));
        return;
      case 'error':
        this.last = null;
        this.el.append(errorEl(o.name, o.value, o.traceback));
        return;
      case 'note':
        this.last = null;
        this.el.append(h('p', { class: `nb-note ${o.tone}`, role: o.tone === 'error' ? 'alert' : 'status' }, o.text));
    }
  }

  private stream(type: 'stdout' | 'stderr', raw: string): void {
    let text = stripAnsi(raw);
    const room = MAX_STREAM_CHARS - this.streamed;
    if (room <= 0 || text.length > room) {
      text = text.slice(0, Math.max(0, room));
      if (!this.cut) {
        this.cut = h('p', { class: 'nb-note info', role: 'status' });
        this.el.append(this.cut);
      }
    }
    this.streamed += text.length;
    if (this.cut) this.cut.textContent = `Output cut after ${MAX_STREAM_CHARS.toLocaleString()} characters.`;
    if (!text) return;
    if (!this.last || this.last.type !== type) {
      const pre = h('pre', { class: `nb-stream ${type}`, 'data-stream': type });
      if (type === 'stderr') pre.setAttribute('aria-label', 'Error output');
      this.el.insertBefore(pre, this.cut);
      this.last = { type, pre };
    }
    this.last.pre.append(text);
  }
}

/** One result, in the richest representation this page shows safely. */
export function resultEl(r: CodeResult): HTMLElement {
  const rep = pickRepresentation(r);
  const wrap = h('div', { class: `nb-result${r.isMainResult ? ' main' : ''}`, 'data-kind': rep.kind });
  const alt = typeof r.text === 'string' && r.text ? stripAnsi(r.text) : 'Image output';
  switch (rep.kind) {
    case 'png':
    case 'jpeg':
    case 'svg':
      wrap.append(h('img', { src: rep.url, alt, class: 'nb-image', decoding: 'async' }));
      break;
    case 'table':
      wrap.append(tableEl(r));
      break;
    case 'html':
      wrap.append(htmlFrame(rep.html));
      break;
    case 'markdown':
    case 'latex':
    case 'json':
    case 'text':
      wrap.append(h('pre', { class: `nb-text ${rep.kind}` }, stripAnsi(rep.text)));
      break;
    case 'javascript':
      wrap.append(h('p', { class: 'nb-note info' }, 'JavaScript output is not run in the console.'));
      break;
    case 'pdf':
      wrap.append(h('a', { href: rep.url, download: 'result.pdf', class: 'btn small' }, 'Download PDF result'));
      break;
    case 'empty':
      wrap.append(h('p', { class: 'nb-note info' }, 'A result with no format the console shows.'));
      break;
  }
  return wrap;
}

/** An error: its name and value, then the traceback without ANSI colours. */
export function errorEl(name: string, value: string, traceback: string): HTMLElement {
  const tb = stripAnsi(traceback).trimEnd();
  return h(
    'div',
    { class: 'nb-error', role: 'alert' },
    h(
      'p',
      { class: 'nb-error-head' },
      h('strong', { class: 'nb-error-name' }, name || 'Error'),
      value ? `: ${value}` : '',
    ),
    tb ? h('pre', { class: 'nb-traceback', 'aria-label': 'Traceback' }, tb) : null,
  );
}

/**
 * An HTML result in an isolated frame: `sandbox=""` (no scripts, no same origin, no
 * top navigation, no forms, no pop-ups) and the document given as `srcdoc`.
 */
export function htmlFrame(html: string): HTMLElement {
  const frame = h('iframe', {
    class: 'nb-html',
    sandbox: '',
    title: 'HTML output (isolated)',
    referrerpolicy: 'no-referrer',
  });
  frame.srcdoc = withoutInlineStyles(html);
  return h('div', { class: 'nb-html-wrap' }, frame);
}

/** A DataFrame as a `<table>`: from its `data`, else from the cells of its HTML (read inertly). */
function tableEl(r: CodeResult): HTMLElement {
  const data = tableFromData(r.data);
  if (data) return drawTable(data);
  const fromHtml = typeof r.html === 'string' && isDataFrameHtml(r.html) ? tableFromHtml(r.html) : null;
  return fromHtml ?? h('p', { class: 'nb-note info' }, 'An empty table.');
}

/** Draws table data: a header row and text cells. */
export function drawTable(t: TableData): HTMLElement {
  const table = h(
    'table',
    { class: 'nb-table' },
    h('thead', {}, h('tr', {}, ...t.columns.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, ...t.rows.map((row) => h('tr', {}, ...row.map((v) => h('td', {}, v))))),
  );
  return h(
    'div',
    { class: 'nb-table-wrap', tabindex: 0, role: 'region', 'aria-label': 'Table output' },
    table,
    more(t.moreRows, t.moreColumns),
  );
}

function more(rows: number, columns: number): HTMLElement | null {
  const parts = [rows > 0 ? `${rows} more rows` : '', columns > 0 ? `${columns} more columns` : ''].filter(Boolean);
  return parts.length ? h('p', { class: 'hint' }, `${parts.join(' and ')} not shown.`) : null;
}

const span = (v: string | null): number | null => {
  const n = Number(v);
  return Number.isInteger(n) && n > 1 && n <= 1000 ? n : null;
};

/**
 * Rebuilds the first `<table>` of a DataFrame's HTML as a new table of text cells (th or td,
 * with their row and column spans): the HTML is parsed by DOMParser into a document that
 * runs nothing and loads nothing, and only the cells' text is copied out. The pandas note
 * after the table ("5 rows × 3 columns") is kept as text.
 */
export function tableFromHtml(html: string): HTMLElement | null {
  const doc = new DOMParser().parseFromString(withoutInlineStyles(html), 'text/html');
  const src = doc.querySelector('table');
  if (!src) return null;
  const table = h('table', { class: 'nb-table' });
  const sections: Array<[HTMLTableSectionElement | null, 'thead' | 'tbody']> = [
    [src.tHead, 'thead'],
    ...[...src.tBodies].map((b) => [b, 'tbody'] as [HTMLTableSectionElement, 'tbody']),
  ];
  let rowsLeft = MAX_TABLE_ROWS;
  let moreRows = 0;
  for (const [section, tag] of sections) {
    if (!section) continue;
    const out = h(tag);
    for (const tr of section.rows) {
      if (tag === 'tbody' && rowsLeft-- <= 0) {
        moreRows++;
        continue;
      }
      const row = h('tr');
      for (const cell of [...tr.cells].slice(0, MAX_TABLE_COLUMNS)) {
        const isHead = cell.tagName === 'TH';
        const c = h(isHead ? 'th' : 'td', {}, (cell.textContent ?? '').trim());
        if (isHead) c.setAttribute('scope', tag === 'thead' ? 'col' : 'row');
        const cs = span(cell.getAttribute('colspan'));
        const rs = span(cell.getAttribute('rowspan'));
        if (cs) c.setAttribute('colspan', String(cs));
        if (rs) c.setAttribute('rowspan', String(rs));
        row.append(c);
      }
      out.append(row);
    }
    table.append(out);
  }
  const notes = [...doc.querySelectorAll('p')].map((p) => (p.textContent ?? '').trim()).filter(Boolean);
  return h(
    'div',
    { class: 'nb-table-wrap', tabindex: 0, role: 'region', 'aria-label': 'Table output' },
    table,
    more(moreRows, 0),
    ...notes.map((t) => h('p', { class: 'hint' }, t)),
  );
}
