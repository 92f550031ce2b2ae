/** Snapshots: the account's snapshot images (newest first), a link to start a sandbox from each, delete. */
import type { SnapshotInfo } from '@sandboxd/sdk';
import { client, errorText } from '../api.js';
import { formatSize } from '../files-util.js';
import { formatDate, h, notice, setChildren } from '../dom.js';
import type { Page } from '../main.js';

/** The snapshots page (`/snapshots`). */
export const renderSnapshots: Page = async (main) => {
  const status = h('div', { 'aria-live': 'polite', class: 'page-status' });
  const listWrap = h('div');
  setChildren(
    main,
    h(
      'div',
      { class: 'page-head' },
      h(
        'div',
        {},
        h('h1', {}, 'Snapshots'),
        h(
          'p',
          { class: 'sub' },
          "Saved files of a sandbox, as an image of your account: new sandboxes can start from it. Take one from a sandbox's page.",
        ),
      ),
    ),
    status,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'snapshots-title' },
      h('h2', { id: 'snapshots-title' }, 'Your snapshots'),
      listWrap,
    ),
  );

  function row(s: SnapshotInfo): HTMLElement {
    const del = h(
      'button',
      { type: 'button', class: 'btn danger small', 'aria-label': `Delete snapshot ${s.name}` },
      'Delete',
    );
    let armed = false;
    del.addEventListener('click', async () => {
      if (!armed) {
        armed = true;
        del.textContent = 'Confirm delete';
        del.setAttribute('aria-label', `Confirm: delete snapshot ${s.name}`);
        return;
      }
      del.disabled = true;
      try {
        await client.snapshots.delete(s.name);
        setChildren(status, notice('success', `Snapshot ${s.name} deleted.`));
        await load();
      } catch (e) {
        setChildren(status, notice('error', errorText(e)));
        del.disabled = false;
      }
    });
    return h(
      'tr',
      { 'data-snapshot': s.name },
      h('td', { 'data-label': 'Name' }, s.name),
      h('td', { 'data-label': 'Image', class: 'mono' }, s.image),
      h('td', { 'data-label': 'Size' }, formatSize(s.sizeBytes)),
      h('td', { 'data-label': 'Base image', class: 'mono' }, s.baseImage),
      h('td', { 'data-label': 'From', class: 'mono dim' }, s.sandboxId),
      h('td', { 'data-label': 'Created' }, formatDate(s.createdAt)),
      h(
        'td',
        { class: 'end' },
        h(
          'div',
          { class: 'row-actions' },
          h('a', { class: 'btn small', href: `/sandboxes/new?image=${encodeURIComponent(s.image)}` }, 'New sandbox'),
          del,
        ),
      ),
    );
  }

  async function load(): Promise<void> {
    try {
      const list = await client.snapshots.list();
      if (list.length === 0)
        return setChildren(
          listWrap,
          h(
            'p',
            { class: 'empty' },
            'No snapshots yet. ',
            h('a', { href: '/sandboxes' }, 'Open a sandbox'),
            ' to take one.',
          ),
        );
      setChildren(
        listWrap,
        h(
          'table',
          { class: 'list snapshots' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ...['Name', 'Image', 'Size', 'Base image', 'From', 'Created'].map((t) => h('th', { scope: 'col' }, t)),
              h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Actions')),
            ),
          ),
          h('tbody', {}, ...list.map(row)),
        ),
      );
    } catch (e) {
      setChildren(listWrap, notice('error', errorText(e)));
    }
  }
  await load();
};
