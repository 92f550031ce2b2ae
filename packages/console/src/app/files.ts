/**
 * The file browser of a sandbox's page, over the files routes (docs/files-and-processes.md):
 * a folder's listing with breadcrumbs and an editable path; upload by drag and drop or a
 * file picker (the File is the fetch body, so the browser streams it from disk); download by
 * a plain same-origin link (the session cookie is all the route needs); delete in two clicks;
 * new folder. The listing and its rows are drawn by files-list.ts.
 */
import { errorText, listFiles, makeFolder, uploadFile } from './api.js';
import { append, field, h, notice, setChildren, setFieldError } from './dom.js';
import { showCrumbs, showListing, type ListingHost } from './files-list.js';
import { childPath, formatSize, normalizePath } from './files-util.js';

interface Upload {
  file: File;
  /** The folder that was shown when the file was dropped or picked. */
  dir: string;
}

/** Whether a drag carries files (not text or a link from the page). */
function hasFiles(ev: DragEvent): boolean {
  return ev.dataTransfer?.types.includes('Files') ?? false;
}

/** The files panel of one sandbox. */
export class FileBrowser {
  readonly el: HTMLElement;
  /** The folder shown; null until a listing succeeded. */
  private cwd: string | null = null;
  /** Number of the latest listing request: an older answer that arrives later is dropped. */
  private seq = 0;
  private gone = false;
  private disposed = false;
  private readonly queue: Upload[] = [];
  private uploading: (Upload & { ctrl: AbortController }) | null = null;
  /** What the uploads since the queue was last empty came to, shown when it empties again. */
  private batch: { done: string[]; problems: HTMLElement[]; cancelled: boolean } | null = null;
  private dragDepth = 0;
  /** What the listing (files-list.ts) needs of this panel. */
  private readonly host: ListingHost;

  private readonly status = h('div', { class: 'files-status', 'aria-live': 'polite' });
  private readonly progress = h('div', { class: 'files-progress' });
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

  // A file dropped next to the panel would make the browser open it in place of the console.
  private readonly onWindowDragOver = (ev: DragEvent) => {
    if (ev.defaultPrevented || !hasFiles(ev)) return;
    ev.preventDefault();
    if (ev.dataTransfer) ev.dataTransfer.dropEffect = 'none';
  };
  private readonly onWindowDrop = (ev: DragEvent) => {
    if (!ev.defaultPrevented && hasFiles(ev)) ev.preventDefault();
  };

  constructor(
    private readonly sandboxId: string,
    private readonly start = '/',
  ) {
    this.host = {
      sandboxId,
      status: this.status,
      open: (path) => this.open(path),
      refresh: () => this.refresh({ quiet: true }),
    };
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
      this.enqueue([...(this.picker.files ?? [])]);
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
      this.progress,
      this.status,
      this.list,
      h(
        'p',
        { class: 'hint' },
        'Drop files on this panel to upload them to the folder shown; a file of the same name is replaced.',
      ),
    );
    this.el.addEventListener('dragenter', (ev) => {
      if (!hasFiles(ev)) return;
      ev.preventDefault();
      this.dragDepth++;
      this.el.classList.toggle('dragging', this.canUpload());
    });
    this.el.addEventListener('dragover', (ev) => {
      if (!hasFiles(ev)) return;
      ev.preventDefault();
      if (ev.dataTransfer) ev.dataTransfer.dropEffect = this.canUpload() ? 'copy' : 'none';
    });
    this.el.addEventListener('dragleave', () => {
      if (--this.dragDepth <= 0) this.endDrag();
    });
    this.el.addEventListener('drop', (ev) => {
      if (!hasFiles(ev)) return;
      ev.preventDefault();
      this.endDrag();
      this.drop(ev.dataTransfer!);
    });
    window.addEventListener('dragover', this.onWindowDragOver);
    window.addEventListener('drop', this.onWindowDrop);
  }

  /** Lists the first folder. Never throws: a failure is shown in the panel. */
  async init(): Promise<void> {
    await this.open(this.start);
  }

  /** Leaves the page: uploads still running are cancelled. */
  dispose(): void {
    this.disposed = true;
    this.cancelUploads();
    window.removeEventListener('dragover', this.onWindowDragOver);
    window.removeEventListener('drop', this.onWindowDrop);
  }

  /** The sandbox is gone: uploads stop and every control is disabled. */
  sandboxGone(): void {
    this.gone = true;
    this.cancelUploads();
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

  private canUpload(): boolean {
    return !this.gone && this.cwd !== null;
  }

  private endDrag(): void {
    this.dragDepth = 0;
    this.el.classList.remove('dragging');
  }

  /** Takes the files of a drop; dropped folders are named and left out (only files are uploaded). */
  private drop(dt: DataTransfer): void {
    const files: File[] = [];
    const folders: string[] = [];
    if (dt.items?.length) {
      for (const item of dt.items) {
        if (item.kind !== 'file') continue;
        const entry = item.webkitGetAsEntry?.();
        const file = item.getAsFile();
        if (entry?.isDirectory) folders.push(entry.name);
        else if (file) files.push(file);
      }
    } else {
      files.push(...dt.files);
    }
    this.enqueue(
      files,
      folders.length
        ? [notice('error', `Folders cannot be uploaded, only files: ${folders.join(', ')} left out.`)]
        : [],
    );
  }

  /** Queues uploads into the folder shown now; they run one at a time. `problems` are shown with them. */
  private enqueue(files: File[], problems: HTMLElement[] = []): void {
    if (this.gone) return;
    if (this.cwd === null && files.length) {
      setChildren(this.status, notice('error', 'Open a folder first: the files go into the folder shown.'));
      return;
    }
    if (files.length === 0) {
      if (problems.length) setChildren(this.status, ...problems);
      return;
    }
    if (!this.batch) {
      this.batch = { done: [], problems: [], cancelled: false };
      setChildren(this.status);
    }
    this.batch.problems.push(...problems);
    append(this.status, ...problems);
    const dir = this.cwd!;
    this.queue.push(...files.map((file) => ({ file, dir })));
    if (this.uploading) this.showProgress();
    else void this.drain();
  }

  private async drain(): Promise<void> {
    const batch = this.batch!;
    while (this.queue.length && !this.disposed && !this.gone) {
      const up = { ...this.queue.shift()!, ctrl: new AbortController() };
      this.uploading = up;
      this.showProgress();
      const target = childPath(up.dir, up.file.name);
      try {
        await uploadFile(this.sandboxId, target, up.file, up.ctrl.signal);
        batch.done.push(target);
        // More to come: show this one in the list meanwhile.
        if (this.queue.length && up.dir === this.cwd) await this.refresh({ quiet: true });
      } catch (e) {
        if (up.ctrl.signal.aborted) {
          batch.cancelled = true;
          break;
        }
        const problem = notice('error', `Could not upload ${up.file.name} to ${up.dir}: ${errorText(e)}`);
        batch.problems.push(problem);
        this.status.append(problem);
      }
    }
    this.uploading = null;
    this.batch = null;
    this.queue.length = 0;
    setChildren(this.progress);
    if (this.disposed || this.gone) return;
    const { done, problems, cancelled } = batch;
    setChildren(
      this.status,
      done.length
        ? notice(
            'success',
            done.length === 1 ? `Uploaded ${done[0]}.` : `Uploaded ${done.length} files: ${done.join(', ')}.`,
          )
        : null,
      cancelled ? notice('info', 'Upload cancelled; the file being sent was not written.') : null,
      ...problems,
    );
    await this.refresh({ quiet: true });
  }

  private showProgress(): void {
    const up = this.uploading;
    if (!up) return;
    const more = this.queue.length;
    setChildren(
      this.progress,
      h('progress', { 'aria-label': `Uploading ${up.file.name}` }),
      h(
        'span',
        { role: 'status' },
        `Uploading ${up.file.name} (${formatSize(up.file.size)}) to ${up.dir}…`,
        more ? ` ${more} more waiting.` : '',
      ),
      h('button', { type: 'button', class: 'btn small', onclick: () => this.cancelUploads() }, 'Cancel upload'),
    );
  }

  private cancelUploads(): void {
    this.queue.length = 0;
    this.uploading?.ctrl.abort(new DOMException('Upload cancelled', 'AbortError'));
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
