/**
 * The file browser of a sandbox's page, over the files routes (docs/files-and-processes.md):
 * a folder's listing with breadcrumbs and an editable path; upload by drag and drop or a
 * file picker (the File is the fetch body, so the browser streams it from disk); download by
 * a plain same-origin link (the session cookie is all the route needs); delete in two clicks;
 * new folder. This file holds the panel, its navigation and the new-folder form; the listing
 * and its rows are drawn by files-list.ts, the uploads run in files-upload.ts.
 */
import { errorText, listFiles, makeFolder } from './api.js';
import { field, h, notice, setChildren, setFieldError } from './dom.js';
import { showCrumbs, showListing, type ListingHost } from './files-list.js';
import { acceptFileDrops, UploadQueue, type UploadHost } from './files-upload.js';
import { normalizePath } from './files-util.js';

/** The files panel of one sandbox. */
export class FileBrowser {
  readonly el: HTMLElement;
  /** The folder shown; null until a listing succeeded. */
  private cwd: string | null = null;
  /** Number of the latest listing request: an older answer that arrives later is dropped. */
  private seq = 0;
  private gone = false;
  private disposed = false;
  /** What the listing (files-list.ts) and the uploads (files-upload.ts) need of this panel. */
  private readonly host: ListingHost & UploadHost;
  private readonly uploads: UploadQueue;
  /** Removes the page-wide refusal of dropped files. */
  private readonly stopDrops: () => void;

  private readonly status = h('div', { class: 'files-status', 'aria-live': 'polite' });
  private readonly crumbs = h('nav', { class: 'files-crumbs', 'aria-label': 'Current folder' });
  private readonly list = h('div', { class: 'files-list', tabindex: -1 });
  private readonly pathInput = h('input', {
    type: 'text',
    id: 'files-path',
    class: 'mono',
    autocomplete: 'off',
    spellcheck: 'false',
    value: '/',
  });
  private readonly picker = h('input', { type: 'file', multiple: true, hidden: true });
  private readonly folderInput = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false' });
  private readonly folderForm: HTMLFormElement;
  private readonly newFolder: HTMLButtonElement;

  constructor(
    private readonly sandboxId: string,
    private readonly start = '/',
  ) {
    this.host = {
      sandboxId,
      status: this.status,
      folder: () => this.cwd,
      gone: () => this.gone,
      disposed: () => this.disposed,
      open: (path) => this.open(path),
      refresh: () => this.refresh({ quiet: true }),
    };
    this.uploads = new UploadQueue(this.host);
    this.newFolder = h(
      'button',
      {
        type: 'button',
        class: 'btn small',
        'aria-expanded': 'false',
        'aria-controls': 'files-new-folder',
        onclick: () => this.showFolderForm(this.folderForm.hidden),
      },
      'New folder',
    );
    this.folderForm = h(
      'form',
      { id: 'files-new-folder', class: 'inline-form files-new-folder', 'aria-label': 'New folder', hidden: true },
      h(
        'div',
        { class: 'row' },
        field('new-folder', 'Folder name', this.folderInput, 'Made in the current folder, with any missing parents.'),
        h(
          'div',
          { class: 'row-end' },
          h('button', { type: 'submit', class: 'btn primary' }, 'Create folder'),
          h('button', { type: 'button', class: 'btn', onclick: () => this.showFolderForm(false) }, 'Cancel'),
        ),
      ),
    );
    this.folderForm.addEventListener('submit', (ev) => {
      ev.preventDefault();
      void this.createFolder();
    });
    this.folderForm.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape') this.showFolderForm(false);
    });

    const pathForm = h(
      'form',
      { class: 'files-path', 'aria-label': 'Go to a folder' },
      h('label', { for: 'files-path' }, 'Path'),
      this.pathInput,
      h('button', { type: 'submit', class: 'btn small' }, 'Go'),
    );
    pathForm.addEventListener('submit', (ev) => {
      ev.preventDefault();
      void this.open(this.pathInput.value);
    });

    this.picker.addEventListener('change', () => {
      this.uploads.enqueue([...(this.picker.files ?? [])]);
      this.picker.value = '';
    });

    this.el = h(
      'section',
      { class: 'card files', 'aria-labelledby': 'files-title' },
      h(
        'div',
        { class: 'files-head' },
        h('h2', { id: 'files-title' }, 'Files'),
        h(
          'div',
          { class: 'files-tools' },
          h('button', { type: 'button', class: 'btn small', onclick: () => void this.refresh() }, 'Refresh'),
          this.newFolder,
          h('button', { type: 'button', class: 'btn small', onclick: () => this.picker.click() }, 'Upload files'),
          this.picker,
        ),
      ),
      this.crumbs,
      pathForm,
      this.folderForm,
      this.uploads.progress,
      this.status,
      this.list,
      h(
        'p',
        { class: 'hint' },
        'Drop files on this panel to upload them to the folder shown; a file of the same name is replaced.',
      ),
    );
    this.stopDrops = acceptFileDrops(
      this.el,
      () => this.uploads.canUpload(),
      (dt) => this.uploads.drop(dt),
    );
  }

  /** Lists the first folder. Never throws: a failure is shown in the panel. */
  async init(): Promise<void> {
    await this.open(this.start);
  }

  /** Leaves the page: uploads still running are cancelled. */
  dispose(): void {
    this.disposed = true;
    this.uploads.cancel();
    this.stopDrops();
  }

  /** The sandbox is gone: uploads stop and every control is disabled. */
  sandboxGone(): void {
    this.gone = true;
    this.uploads.cancel();
    this.el.classList.add('gone');
    for (const c of this.el.querySelectorAll<HTMLButtonElement | HTMLInputElement>('button, input')) c.disabled = true;
    for (const a of this.el.querySelectorAll('a[href]')) {
      a.removeAttribute('href');
      a.setAttribute('aria-disabled', 'true');
    }
  }

  /**
   * Shows a folder: `input` is read like a shell's `cd` from the folder shown. A failure (no
   * such path, not a folder, ...) is shown in the panel and the last listing stays.
   * `quiet` keeps the messages already shown.
   */
  async open(input: string, opts: { quiet?: boolean } = {}): Promise<boolean> {
    if (this.gone) return false;
    const path = normalizePath(input, this.cwd ?? this.start);
    const seq = ++this.seq;
    if (!opts.quiet) setChildren(this.status);
    this.list.setAttribute('aria-busy', 'true');
    try {
      const { entries, truncated } = await listFiles(this.sandboxId, path);
      if (seq !== this.seq || this.disposed) return false;
      // The focused row (a folder's button) is about to go: start keyboard users at the new list.
      const refocus = this.list.contains(document.activeElement);
      this.cwd = path;
      this.pathInput.value = path;
      showCrumbs(this.crumbs, path, this.host);
      showListing(this.list, path, entries, truncated, this.host);
      if (refocus) this.list.focus({ preventScroll: true });
      return true;
    } catch (e) {
      if (seq !== this.seq || this.disposed) return false;
      this.status.append(notice('error', `Cannot open ${path}: ${errorText(e)}`));
      if (this.cwd === null) setChildren(this.list, h('p', { class: 'empty' }, 'No folder to show.'));
      return false;
    } finally {
      if (seq === this.seq) this.list.removeAttribute('aria-busy');
    }
  }

  /** Lists the folder shown again. */
  refresh(opts: { quiet?: boolean } = {}): Promise<boolean> {
    return this.open(this.cwd ?? this.start, opts);
  }

  private showFolderForm(show: boolean): void {
    this.folderForm.hidden = !show;
    this.newFolder.setAttribute('aria-expanded', String(show));
    setFieldError('new-folder', null);
    if (show) this.folderInput.focus();
    else {
      this.folderInput.value = '';
      this.newFolder.focus();
    }
  }

  private async createFolder(): Promise<void> {
    setFieldError('new-folder', null);
    const name = this.folderInput.value.trim();
    if (!name) return setFieldError('new-folder', 'Give the folder a name.');
    const path = normalizePath(name, this.cwd ?? this.start);
    if (path === '/') return setFieldError('new-folder', 'Give the folder a name.');
    const submit = this.folderForm.querySelector<HTMLButtonElement>('button[type="submit"]')!;
    submit.disabled = true;
    try {
      await makeFolder(this.sandboxId, path);
      this.showFolderForm(false);
      setChildren(this.status, notice('success', `Created folder ${path}.`));
      await this.refresh({ quiet: true });
    } catch (e) {
      setFieldError('new-folder', errorText(e));
      this.folderInput.focus();
    } finally {
      submit.disabled = this.gone;
    }
  }
}
