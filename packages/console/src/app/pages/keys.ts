/** API keys: create (named, shown once), list (prefix, created, last used) and revoke. */
import type { ApiKeyInfo } from '@sandboxd/sdk';
import { client, errorText } from '../api.js';
import { codeBlock, field, formatDate, h, notice, setChildren, setFieldError } from '../dom.js';
import type { Page } from '../main.js';

/** The API keys page. */
export const renderKeys: Page = async (main) => {
  const name = h('input', { type: 'text', maxlength: 100, placeholder: 'laptop, ci, ...', autocomplete: 'off' });
  const created = h('div', { 'aria-live': 'polite' });
  const tableWrap = h('div');
  const submit = h('button', { type: 'submit', class: 'btn primary' }, 'Create key');
  const form = h(
    'form',
    { class: 'card inline-form', 'aria-labelledby': 'new-key' },
    h('h2', { id: 'new-key' }, 'New API key'),
    h(
      'div',
      { class: 'row' },
      field('key-name', 'Name', name, 'A label to recognise it by.'),
      h('div', { class: 'row-end' }, submit),
    ),
    created,
  );
  setChildren(
    main,
    h(
      'div',
      { class: 'page-head' },
      h(
        'div',
        {},
        h('h1', {}, 'API keys'),
        h(
          'p',
          { class: 'sub' },
          'Keys authenticate the SDK, the CLI and the HTTP API as your account. They are stored hashed and shown only once.',
        ),
      ),
    ),
    form,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'keys-title' },
      h('h2', { id: 'keys-title' }, 'Your keys'),
      tableWrap,
    ),
  );

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    setFieldError('key-name', null);
    if (!name.value.trim()) return setFieldError('key-name', 'Give the key a name.');
    submit.disabled = true;
    try {
      const k = await client.keys.create(name.value.trim());
      name.value = '';
      setChildren(
        created,
        notice('success', `Key "${k.name}" created. Copy it now: it will not be shown again.`),
        codeBlock(k.key, { label: 'new API key', secret: true }),
      );
      await load();
    } catch (e) {
      setFieldError('key-name', errorText(e));
    } finally {
      submit.disabled = false;
    }
  });

  function row(k: ApiKeyInfo): HTMLElement {
    const revoke = h(
      'button',
      { type: 'button', class: 'btn danger small', 'aria-label': `Revoke key ${k.name}` },
      'Revoke',
    );
    let armed = false;
    revoke.addEventListener('click', async () => {
      if (!armed) {
        armed = true;
        revoke.textContent = 'Confirm revoke';
        revoke.setAttribute('aria-label', `Confirm: revoke key ${k.name}`);
        return;
      }
      revoke.disabled = true;
      try {
        await client.keys.revoke(k.id);
        await load();
      } catch (e) {
        setChildren(created, notice('error', errorText(e)));
        revoke.disabled = false;
      }
    });
    return h(
      'tr',
      { 'data-key-id': k.id },
      h('td', { 'data-label': 'Name' }, k.name),
      h('td', { 'data-label': 'Prefix' }, h('code', {}, `${k.prefix}…`)),
      h('td', { 'data-label': 'Created' }, formatDate(k.createdAt)),
      h('td', { 'data-label': 'Last used' }, formatDate(k.lastUsedAt)),
      h('td', { class: 'end' }, revoke),
    );
  }

  async function load(): Promise<void> {
    try {
      const keys = await client.keys.list();
      if (keys.length === 0) return setChildren(tableWrap, h('p', { class: 'empty' }, 'No keys yet.'));
      setChildren(
        tableWrap,
        h(
          'table',
          { class: 'list' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ...['Name', 'Prefix', 'Created', 'Last used'].map((t) => h('th', { scope: 'col' }, t)),
              h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Actions')),
            ),
          ),
          h('tbody', {}, ...keys.map(row)),
        ),
      );
    } catch (e) {
      setChildren(tableWrap, notice('error', errorText(e)));
    }
  }
  await load();
};
