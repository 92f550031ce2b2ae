/** Small DOM helpers: element building, formatting, copy buttons, the live countdowns. */

type Child = Node | string | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

/** Creates an element: `h('button', { class: 'x', onclick: fn }, 'Text')`. `on*` attributes become listeners. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, ...children);
  return el;
}

/** Appends children, skipping empty ones. */
export function append(el: Element, ...children: Child[]): void {
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
}

/** Replaces an element's children. */
export function setChildren(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, ...children);
}

/** `3 min 05 s`, `1 h 02 min`, or `due` once past. */
export function formatRemaining(ms: number): string {
  if (ms <= 0) return 'due';
  const s = Math.floor(ms / 1000);
  const hh = Math.floor(s / 3600);
  const mm = Math.floor((s % 3600) / 60);
  const ss = s % 60;
  if (hh > 0) return `${hh} h ${String(mm).padStart(2, '0')} min`;
  return `${mm} min ${String(ss).padStart(2, '0')} s`;
}

/** A short local date and time. */
export function formatDate(iso: string | null | undefined): string {
  if (!iso) return 'never';
  return new Date(iso).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
}

/** A `<time>` that counts down to `stopAt`; every one on the page is updated once a second. */
export function countdown(stopAt: string, opts: { prefix?: string } = {}): HTMLElement {
  const el = h('time', {
    datetime: stopAt,
    class: 'countdown',
    'data-stop-at': stopAt,
    'data-prefix': opts.prefix ?? '',
  });
  tick(el);
  return el;
}

function tick(el: HTMLElement): void {
  const left = Date.parse(el.dataset.stopAt ?? '') - Date.now();
  el.textContent = `${el.dataset.prefix ?? ''}${formatRemaining(left)}`;
  el.classList.toggle('soon', left < 60_000);
}

setInterval(() => document.querySelectorAll<HTMLElement>('time.countdown').forEach(tick), 1000);

/** A block of code with a Copy button. */
export function codeBlock(text: string, opts: { label?: string; secret?: boolean } = {}): HTMLElement {
  const code = h('code', {}, text);
  return h(
    'div',
    { class: `code${opts.secret ? ' secret' : ''}` },
    h('pre', { tabindex: 0, 'aria-label': opts.label ?? 'Code' }, code),
    copyButton(text, opts.label),
  );
}

/** A button that copies `text` and says so (falls back to selecting it when the clipboard is not allowed). */
export function copyButton(text: string, label = 'text'): HTMLButtonElement {
  const b = h('button', { type: 'button', class: 'btn small copy', 'aria-label': `Copy ${label}` }, 'Copy');
  b.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text);
      b.textContent = 'Copied';
    } catch {
      const pre = b.parentElement?.querySelector('pre');
      if (pre) getSelection()?.selectAllChildren(pre);
      b.textContent = 'Selected: press Ctrl+C';
    }
    setTimeout(() => (b.textContent = 'Copy'), 2000);
  });
  return b;
}

/** A polite live region for status messages. */
export function notice(kind: 'info' | 'error' | 'success', text: string): HTMLElement {
  return h('p', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

/** A labelled form field; the hint and the error are announced with the input. */
export function field(
  id: string,
  label: string,
  input: HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement,
  hint?: string,
): HTMLElement {
  input.id = id;
  const err = h('p', { class: 'field-error', id: `${id}-error`, hidden: true });
  const described = [hint ? `${id}-hint` : '', `${id}-error`].filter(Boolean).join(' ');
  input.setAttribute('aria-describedby', described);
  return h(
    'div',
    { class: 'field', 'data-field': id },
    h('label', { for: id }, label),
    input,
    hint ? h('p', { class: 'hint', id: `${id}-hint` }, hint) : null,
    err,
  );
}

/** Shows (or clears, with null) the error of a field made by {@link field}. */
export function setFieldError(id: string, message: string | null): void {
  const err = document.getElementById(`${id}-error`);
  const input = document.getElementById(id);
  if (!err || !input) return;
  err.textContent = message ?? '';
  err.hidden = !message;
  if (message) input.setAttribute('aria-invalid', 'true');
  else input.removeAttribute('aria-invalid');
}
