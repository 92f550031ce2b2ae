/**
 * Secrets: values the egress proxy puts into a sandbox's requests to the domains its rules
 * name (the sandbox holds a placeholder). Add or update one (the value in a password field,
 * cleared the moment it is read, never shown or kept), delete one (two clicks), list them
 * (name, description, version, updated: never a value) and read the audit trail of
 * injections, filtered by sandbox and by secret, page by page.
 */
import type { SecretInfo, SecretInjectionInfo } from '@sandboxd/sdk';
import { client, errorText } from '../api.js';
import { field, formatDate, h, notice, setChildren, setFieldError } from '../dom.js';
import type { Page } from '../main.js';

/** The pattern of a secret's name (protocol SECRET_NAME_PATTERN). */
const NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_\\-]{0,63}$';
/** Injections per page of the audit table. */
const AUDIT_PAGE = 50;

/** Why `value` cannot be a secret's value (never repeating it), or null: the server's rule. */
function valueProblem(value: string): string | null {
  if (value.length === 0) return 'Type or paste the value.';
  if (/[^\x20-\x7e]/.test(value))
    return 'A value is printable ASCII only (no line breaks, tabs or non-ASCII characters): it goes into HTTP request headers.';
  if (value.length > 8192) return 'A value is at most 8192 characters.';
  return null;
}

/** The Secrets page. */
export const renderSecrets: Page = async (main) => {
  const name = h('input', {
    type: 'text',
    maxlength: 64,
    pattern: NAME_PATTERN,
    placeholder: 'OPENAI_API_KEY',
    autocomplete: 'off',
    spellcheck: 'false',
  });
  const value = h('input', {
    type: 'password',
    maxlength: 8192,
    autocomplete: 'new-password',
    spellcheck: 'false',
    placeholder: 'never shown again',
  });
  const description = h('input', { type: 'text', maxlength: 1024, autocomplete: 'off', placeholder: 'optional' });
  const saved = h('div', { 'aria-live': 'polite' });
  const submit = h('button', { type: 'submit', class: 'btn primary' }, 'Save secret');
  const form = h(
    'form',
    // novalidate: the page's own messages, at the field, rather than the browser's bubbles.
    { class: 'card inline-form', 'aria-labelledby': 'new-secret', autocomplete: 'off', novalidate: true },
    h('h2', { id: 'new-secret' }, 'Add or update a secret'),
    h(
      'div',
      { class: 'row' },
      field('secret-name', 'Name', name, 'Letters, digits, _ and -; the sandbox sees it as an environment variable.'),
      field('secret-value', 'Value', value, 'Write-only: it is never shown, here or anywhere.'),
      field('secret-description', 'Description', description),
      h('div', { class: 'row-end' }, submit),
    ),
    saved,
  );
  const tableWrap = h('div');
  const auditSandbox = h('input', { type: 'text', placeholder: 'sbx_…', autocomplete: 'off', spellcheck: 'false' });
  const auditSecret = h('select', {}, h('option', { value: '' }, 'All secrets'));
  const auditWrap = h('div');
  const auditMoreButton = h('button', { type: 'button', class: 'btn small' }, 'Older injections');
  // The wrapper is what hides: a .btn's own display would override `hidden`.
  const auditMore = h('div', { class: 'more', hidden: true }, auditMoreButton);
  const auditForm = h(
    'form',
    { class: 'inline-form', 'aria-label': 'Filter injections' },
    h(
      'div',
      { class: 'row' },
      field('audit-sandbox', 'Sandbox', auditSandbox, 'A sandbox id; empty: every sandbox.'),
      field('audit-secret', 'Secret', auditSecret),
      h('div', { class: 'row-end' }, h('button', { type: 'submit', class: 'btn' }, 'Filter')),
    ),
  );

  setChildren(
    main,
    h(
      'div',
      { class: 'page-head' },
      h(
        'div',
        {},
        h('h1', {}, 'Secrets'),
        h(
          'p',
          { class: 'sub' },
          "Values sandboxd's egress proxy puts into your sandboxes' requests to the domains their rules name. A sandbox only holds a placeholder, so the value never enters it. Values are encrypted at rest and never shown.",
        ),
      ),
    ),
    form,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'secrets-title' },
      h('h2', { id: 'secrets-title' }, 'Your secrets'),
      tableWrap,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'audit-title' },
      h('h2', { id: 'audit-title' }, 'Injections'),
      h(
        'p',
        { class: 'sub' },
        'Each request the egress proxy put a secret into, newest first: the upstream status, or why no answer came.',
      ),
      auditForm,
      auditWrap,
      auditMore,
    ),
  );

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    setFieldError('secret-name', null);
    setFieldError('secret-value', null);
    const n = name.value.trim();
    // The value leaves the field at once, whatever happens next: nothing on the page keeps it.
    const v = value.value;
    value.value = '';
    if (!new RegExp(NAME_PATTERN).test(n))
      return setFieldError('secret-name', 'A letter or _, then letters, digits, _ or -; at most 64.');
    const problem = valueProblem(v);
    if (problem) return setFieldError('secret-value', problem);
    submit.disabled = true;
    try {
      const d = description.value.trim();
      const r = await client.secrets.put(n, { value: v, ...(d ? { description: d } : {}) });
      name.value = '';
      description.value = '';
      setChildren(
        saved,
        notice(
          'success',
          `Secret "${r.secret.name}" ${r.created ? 'created' : `updated to version ${r.secret.version}`}. Sandboxes whose rules name it use the new value now.`,
        ),
      );
      await load();
    } catch (e) {
      setFieldError('secret-value', `${errorText(e)} Type the value again.`);
    } finally {
      submit.disabled = false;
    }
  });

  function row(s: SecretInfo): HTMLElement {
    const update = h(
      'button',
      { type: 'button', class: 'btn small', 'aria-label': `Update secret ${s.name}` },
      'Update',
    );
    update.addEventListener('click', () => {
      name.value = s.name;
      description.value = s.description;
      setChildren(saved);
      value.focus();
    });
    const del = h(
      'button',
      { type: 'button', class: 'btn danger small', 'aria-label': `Delete secret ${s.name}` },
      'Delete',
    );
    let armed = false;
    del.addEventListener('click', async () => {
      if (!armed) {
        armed = true;
        del.textContent = 'Confirm delete';
        del.setAttribute('aria-label', `Confirm: delete secret ${s.name}`);
        return;
      }
      del.disabled = true;
      try {
        await client.secrets.delete(s.name);
        setChildren(
          saved,
          notice('success', `Secret "${s.name}" deleted. Sandboxes whose rules name it stopped injecting it.`),
        );
        await load();
      } catch (e) {
        setChildren(saved, notice('error', errorText(e)));
        del.disabled = false;
      }
    });
    return h(
      'tr',
      { 'data-secret': s.name },
      h('td', { 'data-label': 'Name' }, h('code', {}, s.name)),
      h('td', { 'data-label': 'Description' }, s.description),
      h('td', { 'data-label': 'Version' }, String(s.version)),
      h('td', { 'data-label': 'Updated' }, formatDate(s.updatedAt)),
      h('td', { class: 'end' }, update, ' ', del),
    );
  }

  async function load(): Promise<void> {
    try {
      const secrets = await client.secrets.list();
      const chosen = auditSecret.value;
      setChildren(
        auditSecret,
        h('option', { value: '' }, 'All secrets'),
        ...secrets.map((s) => h('option', { value: s.name, selected: s.name === chosen }, s.name)),
      );
      if (secrets.length === 0) return setChildren(tableWrap, h('p', { class: 'empty' }, 'No secrets yet.'));
      setChildren(
        tableWrap,
        h(
          'table',
          { class: 'list', 'aria-label': 'Secrets' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ...['Name', 'Description', 'Version', 'Updated'].map((t) => h('th', { scope: 'col' }, t)),
              h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Actions')),
            ),
          ),
          h('tbody', {}, ...secrets.map(row)),
        ),
      );
    } catch (e) {
      setChildren(tableWrap, notice('error', errorText(e)));
    }
  }

  function injectionRow(i: SecretInjectionInfo): HTMLElement {
    return h(
      'tr',
      { 'data-injection': i.id },
      h('td', { 'data-label': 'Time' }, h('time', { datetime: i.at }, formatDate(i.at))),
      h('td', { 'data-label': 'Sandbox' }, h('a', { href: `/sandboxes/${i.sandboxId}` }, i.sandboxId)),
      h('td', { 'data-label': 'Secret' }, h('code', {}, i.secret)),
      h('td', { 'data-label': 'Request' }, `${i.method} ${i.destination}`),
      h(
        'td',
        { 'data-label': 'Status' },
        i.status === null
          ? h('span', { class: 'injection-failed' }, `no answer: ${i.error ?? 'unknown'}`)
          : String(i.status),
      ),
    );
  }

  /** The audit table: the first page of the filter (`before` undefined) or the next one appended. */
  let next: string | undefined;
  async function loadAudit(more = false): Promise<void> {
    const sandboxId = auditSandbox.value.trim() || undefined;
    const secret = auditSecret.value || undefined;
    try {
      const page = await client.secrets.injections({
        sandboxId,
        secret,
        limit: AUDIT_PAGE,
        before: more ? next : undefined,
      });
      next = page.next;
      auditMore.hidden = !next;
      const body = more ? auditWrap.querySelector('tbody') : null;
      if (body) return void body.append(...page.injections.map(injectionRow));
      if (page.injections.length === 0)
        return setChildren(
          auditWrap,
          h('p', { class: 'empty' }, sandboxId || secret ? 'No injections match.' : 'No injections yet.'),
        );
      setChildren(
        auditWrap,
        h(
          'table',
          { class: 'list', 'aria-label': 'Injections' },
          h(
            'thead',
            {},
            h('tr', {}, ...['Time', 'Sandbox', 'Secret', 'Request', 'Status'].map((t) => h('th', { scope: 'col' }, t))),
          ),
          h('tbody', {}, ...page.injections.map(injectionRow)),
        ),
      );
    } catch (e) {
      auditMore.hidden = true;
      setChildren(auditWrap, notice('error', errorText(e)));
    }
  }
  auditForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    void loadAudit();
  });
  auditMoreButton.addEventListener('click', () => void loadAudit(true));

  await Promise.all([load(), loadAudit()]);
};
