/**
 * What the file browser shows of a folder: its breadcrumbs, and its listing as a table with a
 * row per entry (a folder or link opens, a file downloads by a plain same-origin link, any
 * entry deletes in two clicks).
 */
import { deletePath, errorText, fileContentUrl, type FileEntry } from './api.js';
import { formatDate, h, notice, setChildren } from './dom.js';
import { breadcrumbs, formatSize, parentPath, sortEntries } from './files-util.js';

/** What the breadcrumbs and the rows of a listing act on: the files panel that shows them. */
export interface ListingHost {
  readonly sandboxId: string;
  /** The panel's messages: what a delete came to is shown there. */
  readonly status: HTMLElement;
  /** Shows another folder. */
  open(path: string): Promise<unknown>;
  /** Lists the folder shown again, keeping the messages shown. */
  refresh(): Promise<unknown>;
}

/** Puts the breadcrumbs of the folder `path` in `nav`: each but the last opens its folder. */
export function showCrumbs(nav: HTMLElement, path: string, host: ListingHost): void {
  const parts = breadcrumbs(path);
  setChildren(
    nav,
    h(
      'ol',
      {},
      ...parts.map((c, i) =>
        h(
          'li',
          {},
          i === parts.length - 1
            ? h('span', { 'aria-current': 'location', class: 'mono' }, c.name)
            : h('button', { type: 'button', class: 'linklike mono', onclick: () => void host.open(c.path) }, c.name),
        ),
      ),
    ),
  );
}

/**
 * Puts the listing of the folder `dir` in `list`: a `..` row (but at `/`), then folders first
 * and by name; says when the folder is empty, or when the server cut the list (`truncated`).
 */
export function showListing(
  list: HTMLElement,
  dir: string,
  entries: FileEntry[],
  truncated: boolean,
  host: ListingHost,
): void {
  const up =
    dir === '/'
      ? null
      : h(
          'tr',
          { class: 'up' },
          h(
            'td',
            { 'data-label': 'Name', colspan: 4 },
            h(
              'button',
              {
                type: 'button',
                class: 'linklike mono',
                'aria-label': 'Parent folder',
                title: parentPath(dir),
                onclick: () => void host.open(parentPath(dir)),
              },
              '..',
            ),
          ),
        );
  setChildren(
    list,
    h(
      'table',
      { class: 'list files-table', 'aria-label': `Contents of ${dir}` },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ...['Name', 'Size', 'Modified'].map((t) => h('th', { scope: 'col' }, t)),
          h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Actions')),
        ),
      ),
      h('tbody', {}, up, ...sortEntries(entries).map((e) => entryRow(e, host))),
    ),
    entries.length === 0 ? h('p', { class: 'empty' }, 'This folder is empty.') : null,
    truncated
      ? notice('info', `Only the first ${entries.length.toLocaleString()} entries are shown: the folder has more.`)
      : null,
  );
}

/** The row of one entry: name (a button for folders and links), size, modified time, actions. */
function entryRow(e: FileEntry, host: ListingHost): HTMLElement {
  let name: HTMLElement;
  if (e.type === 'dir' || e.type === 'symlink') {
    // A symlink may lead to a folder: opening it lists the target (or says it is no folder).
    name = h(
      'button',
      { type: 'button', class: 'linklike mono', onclick: () => void host.open(e.path) },
      h('span', { class: 'sr-only' }, e.type === 'dir' ? 'Folder ' : 'Link '),
      e.name,
      e.type === 'dir' ? h('span', { class: 'dim', 'aria-hidden': 'true' }, '/') : null,
    );
  } else {
    name = h('span', { class: 'mono' }, e.name);
  }
  const target =
    e.type === 'symlink' && e.symlinkTarget !== undefined
      ? h('span', { class: 'dim mono link-target' }, ` → ${e.symlinkTarget}`)
      : null;
  return h(
    'tr',
    { 'data-path': e.path, 'data-type': e.type },
    h('td', { 'data-label': 'Name' }, h('div', { class: 'cell entry' }, name, target)),
    h(
      'td',
      { 'data-label': 'Size', class: 'size' },
      e.type === 'file' ? h('span', { title: `${e.size.toLocaleString()} bytes` }, formatSize(e.size)) : '—',
    ),
    h(
      'td',
      { 'data-label': 'Modified', class: 'modified' },
      h('time', { datetime: e.modifiedAt, title: e.modifiedAt }, formatDate(e.modifiedAt)),
    ),
    h(
      'td',
      { class: 'end' },
      h(
        'div',
        { class: 'entry-actions' },
        // Files and links to them; a fifo or a device could block a reader.
        e.type === 'file' || e.type === 'symlink'
          ? h(
              'a',
              {
                class: 'btn small',
                href: fileContentUrl(host.sandboxId, e.path),
                download: e.name,
                'aria-label': `Download ${e.name}`,
              },
              'Download',
            )
          : null,
        deleteButton(e, host),
      ),
    ),
  );
}

/** Delete in two clicks, as API keys are revoked; leaving the button disarms it. */
function deleteButton(e: FileEntry, host: ListingHost): HTMLButtonElement {
  const label = `Delete ${e.name}`;
  const b = h('button', { type: 'button', class: 'btn small danger', 'aria-label': label }, 'Delete');
  let armed = false;
  b.addEventListener('blur', () => {
    if (!armed || b.disabled) return;
    armed = false;
    b.textContent = 'Delete';
    b.setAttribute('aria-label', label);
  });
  b.addEventListener('click', async () => {
    if (!armed) {
      armed = true;
      b.textContent = 'Confirm delete';
      b.setAttribute('aria-label', `Confirm: delete ${e.name}${e.type === 'dir' ? ' and everything in it' : ''}`);
      return;
    }
    b.disabled = true;
    setChildren(host.status);
    try {
      await deletePath(host.sandboxId, e.path);
      host.status.append(notice('success', `Deleted ${e.path}.`));
    } catch (err) {
      host.status.append(notice('error', `Could not delete ${e.path}: ${errorText(err)}`));
    }
    await host.refresh();
  });
  return b;
}
