/**
 * The lifecycle bar of a sandbox's page: Pause (and Pause to disk, for gVisor sandboxes), Resume, Stop, Start and Snapshot, each enabled
 * in the states the server accepts it in, and the snapshot name form. A transition that
 * succeeds hands the page the sandbox in its new state; a failure shows the server's
 * message (after a 409 the page reloads the sandbox: its state changed elsewhere).
 */
import { ConflictError, type Sandbox, type SandboxState, ValidationError } from '@sandboxd/sdk';
import { errorText } from './api.js';
import { field, h, notice, setFieldError } from './dom.js';

type Action = 'pause' | 'pauseDisk' | 'resume' | 'stop' | 'start' | 'snapshot';

/** Which actions each state allows (the server's rules; anything else is a 409). `pauseDisk`: gVisor sandboxes only. */
export const ALLOWED: Record<SandboxState, readonly Action[]> = {
  started: ['pause', 'pauseDisk', 'stop', 'snapshot'],
  paused: ['resume', 'stop', 'snapshot'],
  stopped: ['start', 'snapshot'],
  error: [],
};

const LABELS: Record<Action, string> = {
  pause: 'Pause',
  pauseDisk: 'Pause to disk',
  resume: 'Resume',
  stop: 'Stop',
  start: 'Start',
  snapshot: 'Snapshot…',
};

const DOING: Record<Exclude<Action, 'snapshot'>, string> = {
  pause: 'Pausing…',
  pauseDisk: 'Saving its memory to disk…',
  resume: 'Resuming…',
  stop: 'Stopping…',
  start: 'Starting…',
};

const DONE: Record<Exclude<Action, 'snapshot'>, string> = {
  pause: 'Sandbox paused: its processes and memory are kept until you resume it.',
  pauseDisk: 'Sandbox paused to disk: its processes and memory are saved, it holds no RAM; Resume restores it.',
  resume: 'Sandbox resumed where it was.',
  stop: 'Sandbox stopped: its processes ended; its files are kept for Start.',
  start: 'Sandbox started again from its kept files.',
};

/** What the bar tells the page. */
export interface LifecycleHooks {
  /** The state changed (the sandbox object holds the new one); `message` says what happened. */
  changed(message: HTMLElement): void;
  /** Something to show in the page's status area. */
  status(message: HTMLElement): void;
}

/** The bar and its snapshot form, for `sb` in its current state. */
export function lifecycleBar(sb: Sandbox, hooks: LifecycleHooks): HTMLElement {
  const allowed = ALLOWED[sb.state as SandboxState] ?? [];
  const buttons = new Map<Action, HTMLButtonElement>();
  const snapSubmit = h('button', { type: 'submit', class: 'btn primary' }, 'Take snapshot');
  const busy = (on: boolean) => {
    for (const [a, b] of buttons) b.disabled = on || !allowed.includes(a);
    snapSubmit.disabled = on;
  };

  const nameInput = h('input', {
    type: 'text',
    maxlength: 63,
    autocomplete: 'off',
    spellcheck: 'false',
    pattern: '[a-z0-9][a-z0-9_.\\-]{0,62}',
    placeholder: `${sb.name}-1`,
  });
  const snapForm = h(
    'form',
    {
      id: 'snapshot-form',
      class: 'inline-form snapshot-form',
      'aria-label': 'Snapshot',
      hidden: true,
      novalidate: true,
    },
    h(
      'div',
      { class: 'row' },
      field(
        'snapshot-name',
        'Snapshot name',
        nameInput,
        'Lowercase letters, digits, _ . - (up to 63). New sandboxes can start from the image snapshots/<name>.',
      ),
      h(
        'div',
        { class: 'row-end' },
        snapSubmit,
        h('button', { type: 'button', class: 'btn', onclick: () => showForm(false) }, 'Cancel'),
      ),
    ),
  );
  const showForm = (on: boolean) => {
    snapForm.hidden = !on;
    buttons.get('snapshot')?.setAttribute('aria-expanded', String(on));
    setFieldError('snapshot-name', null);
    if (on) nameInput.focus();
  };
  snapForm.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') showForm(false);
  });
  snapForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const name = nameInput.value.trim();
    setFieldError('snapshot-name', null);
    if (!name) return setFieldError('snapshot-name', 'Give the snapshot a name.');
    busy(true);
    try {
      const s = await sb.snapshot(name);
      showForm(false);
      nameInput.value = '';
      hooks.status(
        h(
          'p',
          { class: 'notice success', role: 'status' },
          `Snapshot ${s.name} saved as image `,
          h('code', {}, s.image),
          '. ',
          h('a', { href: '/snapshots' }, 'See snapshots'),
        ),
      );
    } catch (e) {
      if (e instanceof ValidationError && e.problems.length)
        setFieldError('snapshot-name', e.problems.map((p) => p.message).join(' '));
      else if (e instanceof ConflictError) return void (await conflict(e));
      else setFieldError('snapshot-name', errorText(e));
    } finally {
      busy(false);
    }
  });

  /** The state changed behind the page's back: reload it and show why the action failed. */
  const conflict = async (e: ConflictError) => {
    const message = notice('error', errorText(e));
    try {
      await sb.refresh();
    } catch {
      return hooks.status(message);
    }
    hooks.changed(message);
  };

  const run = async (action: Exclude<Action, 'snapshot'>) => {
    busy(true);
    hooks.status(notice('info', DOING[action]));
    try {
      if (action === 'pauseDisk') await sb.pause({ memory: 'disk' });
      else await sb[action]();
      hooks.changed(notice('success', DONE[action]));
    } catch (e) {
      if (e instanceof ConflictError) return void (await conflict(e));
      hooks.status(notice('error', errorText(e)));
    } finally {
      busy(false);
    }
  };

  // Pause to disk: gVisor sandboxes only (a container's memory stays in RAM).
  const actions = (['pause', 'pauseDisk', 'resume', 'stop', 'start', 'snapshot'] as const).filter(
    (a) => a !== 'pauseDisk' || sb.isolation === 'gvisor',
  );
  for (const action of actions) {
    const b = h('button', { type: 'button', class: `btn lifecycle-${action}`, 'data-action': action }, LABELS[action]);
    if (action === 'snapshot') {
      b.setAttribute('aria-expanded', 'false');
      b.setAttribute('aria-controls', 'snapshot-form');
      b.addEventListener('click', () => showForm(snapForm.hidden));
    } else b.addEventListener('click', () => void run(action));
    buttons.set(action, b);
  }
  busy(false);
  const bar = h('div', { class: 'lifecycle', role: 'group', 'aria-label': 'Lifecycle' }, ...buttons.values());
  const wrap = h('div', { class: 'lifecycle-wrap' }, bar, snapForm);
  if (allowed.length === 0) wrap.append(h('p', { class: 'hint' }, 'A sandbox in error can only be deleted.'));
  return wrap;
}
