/**
 * Templates: the account's images built from a Dockerfile (`templates/<name>:<tag>`), each
 * with a link to start a sandbox from it and delete; and its builds (state, steps, times),
 * with cancel and delete. The builds list is refreshed while a build is queued or running;
 * its rows are updated in place, so a Delete waiting for its confirmation stays armed.
 */
import { formatDuration, isFinal } from '../build-log.js';
import {
  cancelBuild,
  deleteBuild,
  deleteTemplate,
  listBuilds,
  listTemplates,
  type Build,
  type Template,
} from '../builds-api.js';
import { errorText } from '../api.js';
import { formatSize } from '../files-util.js';
import { formatDate, h, notice, setChildren } from '../dom.js';
import type { Page } from '../main.js';
import { stateBadge } from './sandboxes.js';

/** How often the builds list is read again while one of them is not over. */
const POLL_MS = 2_000;

/**
 * A button that asks to be clicked twice: the first click arms it (`Confirm …`), the second
 * runs `act`. Errors go to `fail`; the button is enabled again after one.
 */
export function twoClickButton(
  label: string,
  aria: string,
  act: () => Promise<void>,
  fail: (e: unknown) => void,
  cls = 'btn danger small',
): HTMLButtonElement {
  const b = h('button', { type: 'button', class: cls, 'aria-label': aria }, label);
  let armed = false;
  b.addEventListener('click', async () => {
    if (!armed) {
      armed = true;
      b.textContent = `Confirm ${label.toLowerCase()}`;
      b.setAttribute('aria-label', `Confirm: ${aria.charAt(0).toLowerCase()}${aria.slice(1)}`);
      return;
    }
    b.disabled = true;
    try {
      await act();
    } catch (e) {
      fail(e);
      b.disabled = false;
    }
  });
  return b;
}

/** Steps of a build as `3 / 7` with the cached count. */
export function stepsText(b: Build): string {
  const s = b.steps;
  if (s.total === 0) return b.state === 'queued' ? 'not started' : '—';
  return `${s.done} / ${s.total}${s.cached ? ` (${s.cached} cached)` : ''}`;
}

/** The templates page (`/templates`). */
export const renderTemplates: Page = async (main) => {
  const status = h('div', { 'aria-live': 'polite', class: 'page-status' });
  const templatesWrap = h('div');
  const buildsWrap = h('div');
  setChildren(
    main,
    h(
      'div',
      { class: 'page-head' },
      h(
        'div',
        {},
        h('h1', {}, 'Templates'),
        h(
          'p',
          { class: 'sub' },
          'Images built from a Dockerfile, private to your account: new sandboxes start from ',
          h('code', {}, 'templates/<name>:<tag>'),
          '.',
        ),
      ),
      h('a', { class: 'btn primary', href: '/builds/new' }, 'New build'),
    ),
    status,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'templates-title' },
      h('h2', { id: 'templates-title' }, 'Your templates'),
      templatesWrap,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'builds-title' },
      h('h2', { id: 'builds-title' }, 'Builds'),
      buildsWrap,
    ),
  );
  const say = (kind: 'success' | 'error', text: string) => setChildren(status, notice(kind, text));
  const fail = (e: unknown) => say('error', errorText(e));

  function templateRow(t: Template): HTMLElement {
    const ref = `${t.name}:${t.tag}`;
    const del = twoClickButton(
      'Delete',
      `Delete template ${ref}`,
      async () => {
        await deleteTemplate(t.name, t.tag);
        say('success', `Template ${ref} deleted.`);
        await loadTemplates();
      },
      fail,
    );
    return h(
      'tr',
      { 'data-template': ref },
      h('td', { 'data-label': 'Name' }, t.name),
      h('td', { 'data-label': 'Tag', class: 'mono' }, t.tag),
      h('td', { 'data-label': 'Image', class: 'mono' }, t.image),
      h('td', { 'data-label': 'Size' }, formatSize(t.sizeBytes)),
      h('td', { 'data-label': 'Created' }, formatDate(t.createdAt)),
      h('td', { 'data-label': 'Build', class: 'mono build-ref' }, h('a', { href: `/builds/${t.buildId}` }, t.buildId)),
      h(
        'td',
        { class: 'end' },
        h(
          'div',
          { class: 'row-actions' },
          h(
            'a',
            {
              class: 'btn small',
              href: `/sandboxes/new?image=${encodeURIComponent(t.image)}`,
              'aria-label': `New sandbox from ${t.image}`,
            },
            'New sandbox',
          ),
          del,
        ),
      ),
    );
  }

  async function loadTemplates(): Promise<void> {
    try {
      const list = await listTemplates();
      if (list.length === 0)
        return setChildren(
          templatesWrap,
          h(
            'p',
            { class: 'empty' },
            'No templates yet. ',
            h('a', { href: '/builds/new' }, 'Build one from a Dockerfile'),
            '.',
          ),
        );
      setChildren(
        templatesWrap,
        h(
          'table',
          { class: 'list templates' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ...['Name', 'Tag', 'Image', 'Size', 'Created', 'Build'].map((t) => h('th', { scope: 'col' }, t)),
              h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Actions')),
            ),
          ),
          h('tbody', {}, ...list.map(templateRow)),
        ),
      );
    } catch (e) {
      setChildren(templatesWrap, notice('error', errorText(e)));
    }
  }

  /** A build's row, updated in place by `update` when the list is read again. */
  interface BuildRow {
    el: HTMLElement;
    update(b: Build): void;
  }
  const rows = new Map<string, BuildRow>();

  function buildRow(first: Build): BuildRow {
    const state = h('td', { 'data-label': 'State' });
    const steps = h('td', { 'data-label': 'Steps' });
    const finished = h('td', { 'data-label': 'Finished' });
    const actions = h('div', { class: 'row-actions' });
    const ref = `${first.name}:${first.tag}`;
    const del = twoClickButton(
      'Delete',
      `Delete build ${first.id}`,
      async () => {
        await deleteBuild(first.id);
        say('success', `Build ${first.id} deleted.`);
        await loadBuilds();
      },
      fail,
    );
    const cancel = h(
      'button',
      { type: 'button', class: 'btn small', 'aria-label': `Cancel build ${first.id}` },
      'Cancel',
    );
    cancel.addEventListener('click', async () => {
      cancel.disabled = true;
      try {
        row.update(await cancelBuild(first.id));
        say('success', `Build ${first.id} cancelled.`);
      } catch (e) {
        fail(e);
        cancel.disabled = false;
        await loadBuilds();
      }
    });
    let last = '';
    const el = h(
      'tr',
      { 'data-build': first.id },
      h(
        'td',
        { 'data-label': 'Build' },
        h(
          'div',
          { class: 'cell' },
          h('a', { href: `/builds/${first.id}` }, ref),
          h('div', { class: 'mono dim' }, first.id),
        ),
      ),
      state,
      steps,
      h('td', { 'data-label': 'Created' }, formatDate(first.createdAt)),
      finished,
      h('td', { class: 'end' }, actions),
    );
    const row: BuildRow = {
      el,
      update(b) {
        const key = JSON.stringify([b.state, b.steps, b.finishedAt]);
        if (key === last) return;
        last = key;
        el.dataset.state = b.state;
        setChildren(state, stateBadge(b.state));
        setChildren(steps, stepsText(b));
        setChildren(
          finished,
          b.finishedAt
            ? h(
                'span',
                {},
                formatDate(b.finishedAt),
                h('span', { class: 'dim' }, ` (${formatDuration(b.startedAt ?? b.createdAt, b.finishedAt)})`),
              )
            : h('span', { class: 'dim' }, '—'),
        );
        setChildren(actions, isFinal(b.state) ? null : cancel, del);
      },
    };
    row.update(first);
    return row;
  }

  let anyRunning = false;
  let loaded = false;
  const lastState = new Map<string, string>();
  async function loadBuilds(): Promise<void> {
    let list: Build[];
    try {
      list = await listBuilds();
    } catch (e) {
      setChildren(buildsWrap, notice('error', errorText(e)));
      rows.clear();
      return;
    }
    anyRunning = list.some((b) => !isFinal(b.state));
    // A build that became ready since the last read made a template.
    const newlyReady = loaded && list.some((b) => b.state === 'ready' && lastState.get(b.id) !== 'ready');
    loaded = true;
    lastState.clear();
    for (const b of list) lastState.set(b.id, b.state);
    if (list.length === 0) {
      rows.clear();
      return setChildren(buildsWrap, h('p', { class: 'empty' }, 'No builds yet.'));
    }
    const seen = new Set<string>();
    const ordered = list.map((b) => {
      seen.add(b.id);
      const had = rows.get(b.id);
      if (had) {
        had.update(b);
        return had.el;
      }
      const r = buildRow(b);
      rows.set(b.id, r);
      return r.el;
    });
    for (const id of [...rows.keys()]) if (!seen.has(id)) rows.delete(id);
    let tbody = buildsWrap.querySelector('tbody');
    if (!tbody) {
      tbody = h('tbody');
      setChildren(
        buildsWrap,
        h(
          'table',
          { class: 'list builds' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ...['Build', 'State', 'Steps', 'Created', 'Finished'].map((t) => h('th', { scope: 'col' }, t)),
              h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Actions')),
            ),
          ),
          tbody,
        ),
      );
    }
    // Moves only what changed place, so focus and armed buttons survive a refresh.
    ordered.forEach((el, i) => {
      if (tbody.children[i] !== el) tbody.insertBefore(el, tbody.children[i] ?? null);
    });
    while (tbody.children.length > ordered.length) tbody.lastElementChild!.remove();
    if (newlyReady) await loadTemplates();
  }

  await Promise.all([loadTemplates(), loadBuilds()]);
  let busy = false;
  let ticks = 0;
  const timer = setInterval(() => {
    ticks++;
    // Every 2 s while a build runs, else every 10 s (a build started elsewhere shows up).
    if (busy || (!anyRunning && ticks % 5 !== 0)) return;
    busy = true;
    void loadBuilds().finally(() => (busy = false));
  }, POLL_MS);
  return () => clearInterval(timer);
};
