/**
 * Uploads of the file browser: the queue that sends dropped or picked files one at a time into
 * the folder shown when they came (the File is the fetch body, so the browser streams it from
 * disk), its progress line with a Cancel button, what a batch came to once the queue is empty,
 * and the drag and drop that feeds it.
 */
import { errorText, uploadFile } from './api.js';
import { append, h, notice, setChildren } from './dom.js';
import { childPath, formatSize } from './files-util.js';

interface Upload {
  file: File;
  /** The folder that was shown when the file was dropped or picked. */
  dir: string;
}

/** What the upload queue needs of the files panel it works for. */
export interface UploadHost {
  readonly sandboxId: string;
  /** The panel's messages: the problems and the outcome of a batch are shown there. */
  readonly status: HTMLElement;
  /** The folder shown; null until a listing succeeded. */
  folder(): string | null;
  /** Whether the sandbox is gone. */
  gone(): boolean;
  /** Whether the page was left. */
  disposed(): boolean;
  /** Lists the folder shown again, keeping the messages shown. */
  refresh(): Promise<unknown>;
}

/** Whether a drag carries files (not text or a link from the page). */
function hasFiles(ev: DragEvent): boolean {
  return ev.dataTransfer?.types.includes('Files') ?? false;
}

/**
 * Makes `panel` a drop target for files: while files are dragged over it, it has the class
 * `dragging` when `canDrop()`, and a drop of files goes to `onDrop`. Files dropped elsewhere
 * on the page are refused, or the browser would open them in place of the console. Returns
 * what removes that page-wide refusal (call it when the panel goes).
 */
export function acceptFileDrops(
  panel: HTMLElement,
  canDrop: () => boolean,
  onDrop: (dt: DataTransfer) => void,
): () => void {
  let dragDepth = 0;
  const endDrag = () => {
    dragDepth = 0;
    panel.classList.remove('dragging');
  };
  panel.addEventListener('dragenter', (ev) => {
    if (!hasFiles(ev)) return;
    ev.preventDefault();
    dragDepth++;
    panel.classList.toggle('dragging', canDrop());
  });
  panel.addEventListener('dragover', (ev) => {
    if (!hasFiles(ev)) return;
    ev.preventDefault();
    if (ev.dataTransfer) ev.dataTransfer.dropEffect = canDrop() ? 'copy' : 'none';
  });
  panel.addEventListener('dragleave', () => {
    if (--dragDepth <= 0) endDrag();
  });
  panel.addEventListener('drop', (ev) => {
    if (!hasFiles(ev)) return;
    ev.preventDefault();
    endDrag();
    onDrop(ev.dataTransfer!);
  });

  const onWindowDragOver = (ev: DragEvent) => {
    if (ev.defaultPrevented || !hasFiles(ev)) return;
    ev.preventDefault();
    if (ev.dataTransfer) ev.dataTransfer.dropEffect = 'none';
  };
  const onWindowDrop = (ev: DragEvent) => {
    if (!ev.defaultPrevented && hasFiles(ev)) ev.preventDefault();
  };
  window.addEventListener('dragover', onWindowDragOver);
  window.addEventListener('drop', onWindowDrop);
  return () => {
    window.removeEventListener('dragover', onWindowDragOver);
    window.removeEventListener('drop', onWindowDrop);
  };
}

/** The uploads of one files panel; they run one at a time. */
export class UploadQueue {
  /** Where the upload running now is shown, with its Cancel button. */
  readonly progress = h('div', { class: 'files-progress' });
  private readonly queue: Upload[] = [];
  private uploading: (Upload & { ctrl: AbortController }) | null = null;
  /** What the uploads since the queue was last empty came to, shown when it empties again. */
  private batch: { done: string[]; problems: HTMLElement[]; cancelled: boolean } | null = null;

  constructor(private readonly host: UploadHost) {}

  /** Whether files can be taken now: the sandbox is there and a folder is shown. */
  canUpload(): boolean {
    return !this.host.gone() && this.host.folder() !== null;
  }

  /** Takes the files of a drop; dropped folders are named and left out (only files are uploaded). */
  drop(dt: DataTransfer): void {
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
  enqueue(files: File[], problems: HTMLElement[] = []): void {
    const { status } = this.host;
    if (this.host.gone()) return;
    const cwd = this.host.folder();
    if (cwd === null && files.length) {
      setChildren(status, notice('error', 'Open a folder first: the files go into the folder shown.'));
      return;
    }
    if (files.length === 0) {
      if (problems.length) setChildren(status, ...problems);
      return;
    }
    if (!this.batch) {
      this.batch = { done: [], problems: [], cancelled: false };
      setChildren(status);
    }
    this.batch.problems.push(...problems);
    append(status, ...problems);
    const dir = cwd!;
    this.queue.push(...files.map((file) => ({ file, dir })));
    if (this.uploading) this.showProgress();
    else void this.drain();
  }

  /** Drops the uploads waiting and aborts the one running (its file is not written). */
  cancel(): void {
    this.queue.length = 0;
    this.uploading?.ctrl.abort(new DOMException('Upload cancelled', 'AbortError'));
  }

  private stopped(): boolean {
    return this.host.disposed() || this.host.gone();
  }

  private async drain(): Promise<void> {
    const { sandboxId, status } = this.host;
    const batch = this.batch!;
    while (this.queue.length && !this.stopped()) {
      const up = { ...this.queue.shift()!, ctrl: new AbortController() };
      this.uploading = up;
      this.showProgress();
      const target = childPath(up.dir, up.file.name);
      try {
        await uploadFile(sandboxId, target, up.file, up.ctrl.signal);
        batch.done.push(target);
        // More to come: show this one in the list meanwhile.
        if (this.queue.length && up.dir === this.host.folder()) await this.host.refresh();
      } catch (e) {
        if (up.ctrl.signal.aborted) {
          batch.cancelled = true;
          break;
        }
        const problem = notice('error', `Could not upload ${up.file.name} to ${up.dir}: ${errorText(e)}`);
        batch.problems.push(problem);
        status.append(problem);
      }
    }
    this.uploading = null;
    this.batch = null;
    this.queue.length = 0;
    setChildren(this.progress);
    if (this.stopped()) return;
    const { done, problems, cancelled } = batch;
    setChildren(
      status,
      done.length
        ? notice(
            'success',
            done.length === 1 ? `Uploaded ${done[0]}.` : `Uploaded ${done.length} files: ${done.join(', ')}.`,
          )
        : null,
      cancelled ? notice('info', 'Upload cancelled; the file being sent was not written.') : null,
      ...problems,
    );
    await this.host.refresh();
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
      h('button', { type: 'button', class: 'btn small', onclick: () => this.cancel() }, 'Cancel upload'),
    );
  }
}
