/**
 * One sandbox: details, lifecycle (pause, resume, stop, start, snapshot), lifetime (extend or
 * shorten), delete, public port links, the account's balance and concurrency, the web
 * terminals, the file browser and the notebook. The page is drawn for one state; when the state changes
 * (an action here, or the sandbox's own timeout seen by the poll) it is drawn again.
 */
import { NotFoundError, Sandbox, ValidationError } from '@sandboxd/sdk';
import { client, errorText } from '../api.js';
import { countdown, field, formatDate, h, notice, setChildren, setFieldError } from '../dom.js';
import { FileBrowser } from '../files.js';
import { lifecycleBar } from '../lifecycle.js';
import type { Page, PageContext } from '../main.js';
import { Notebook } from '../notebook.js';
import { TerminalTabs } from '../terminal.js';
import { accountSummary, stateBadge } from './sandboxes.js';

/** The sandbox detail page (`/sandboxes/:id`). */
export const renderSandbox: Page = async (main, ctx, params) => {
  const sb = await Sandbox.get(params.id, client);
  let dispose: () => void = () => {};
  let left = false;
  /** (Re)draws the page for the sandbox's current state, with `flash` in its status area. */
  const draw = async (flash?: HTMLElement): Promise<void> => {
    dispose();
    dispose = () => {};
    if (left) return;
    const d = await drawSandbox(main, ctx, sb, flash, (next) => void draw(next));
    if (left) d();
    else dispose = d;
  };
  await draw();
  return () => {
    left = true;
    dispose();
  };
};

/** Draws the page; resolves to its cleanup. `redraw` is called when the state changed. */
async function drawSandbox(
  main: HTMLElement,
  ctx: PageContext,
  sb: Sandbox,
  flash: HTMLElement | undefined,
  redraw: (flash?: HTMLElement) => void,
): Promise<() => void> {
  const acc = await ctx.refreshAccount();
  const status = h('div', { 'aria-live': 'polite', class: 'page-status' }, flash);
  const stopsIn = h('dd');
  const stateEl = h('span');
  const drawnState = sb.state;
  const showState = () => {
    setChildren(stateEl, stateBadge(sb.state));
    setChildren(
      stopsIn,
      sb.state === 'started'
        ? countdown(sb.info.stopAt, { prefix: sb.onTimeout === 'pause' ? 'pauses in ' : '' })
        : h('span', { class: 'dim' }, sb.state),
    );
  };
  showState();
  const metadata = Object.entries(sb.metadata ?? {});

  // Lifetime: "stop N minutes from now", plus quick +10 / -5 minutes.
  const minutes = h('input', {
    type: 'number',
    min: 0,
    step: 1,
    inputmode: 'numeric',
    value: Math.max(0, Math.round((sb.stopAt.getTime() - Date.now()) / 60_000)),
  });
  const setLifetime = async (ms: number) => {
    setFieldError('lifetime', null);
    try {
      await sb.setTimeout(Math.max(0, Math.round(ms)));
      await sb.refresh();
      minutes.value = String(Math.max(0, Math.round((sb.stopAt.getTime() - Date.now()) / 60_000)));
      showState();
      setChildren(status, notice('success', `Lifetime updated: stops at ${formatDate(sb.info.stopAt)}.`));
      setChildren(figures, accountSummary(await ctx.refreshAccount()));
    } catch (e) {
      setFieldError(
        'lifetime',
        e instanceof ValidationError ? e.problems.map((p) => p.message).join(' ') || e.message : errorText(e),
      );
    }
  };
  const remaining = () => sb.stopAt.getTime() - Date.now();
  const lifetime = h(
    'form',
    {
      class: 'lifetime',
      'aria-label': 'Lifetime',
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        void setLifetime(Number(minutes.value) * 60_000);
      },
    },
    field('lifetime', 'Stop in (minutes from now)', minutes),
    h(
      'div',
      { class: 'row' },
      h('button', { type: 'submit', class: 'btn' }, 'Set lifetime'),
      h(
        'button',
        { type: 'button', class: 'btn', onclick: () => void setLifetime(remaining() + 10 * 60_000) },
        '+10 min',
      ),
      h(
        'button',
        { type: 'button', class: 'btn', onclick: () => void setLifetime(remaining() - 5 * 60_000) },
        '−5 min',
      ),
    ),
  );

  // Public ports: the template with a port filled in.
  const port = h('input', { type: 'number', min: 1, max: 65535, value: 8000, inputmode: 'numeric' });
  const portLink = h('p', { class: 'port-link' });
  const showPort = () => {
    const p = Number(port.value);
    if (!Number.isInteger(p) || p < 1 || p > 65535)
      return setChildren(portLink, h('span', { class: 'dim' }, 'Enter a port from 1 to 65535.'));
    const url = `${location.protocol}//${sb.info.publicAccessUrlTemplate.replace('{{PORT}}', String(p))}`;
    setChildren(portLink, h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', class: 'mono' }, url));
  };
  port.addEventListener('input', showPort);
  showPort();

  const terminals = new TerminalTabs(sb);
  // The page knows no working directory of the sandbox (the API describes none): start at `/`.
  const files = new FileBrowser(sb.id, '/');
  const notebook = sb.state === 'started' ? new Notebook(sb.id) : null;
  const figures = h('div', {}, accountSummary(acc));
  const del = h('button', { type: 'button', class: 'btn danger' }, 'Delete sandbox');
  let armed = false;
  del.addEventListener('click', async () => {
    if (!armed) {
      armed = true;
      del.textContent = 'Confirm delete';
      return;
    }
    del.disabled = true;
    try {
      await sb.delete();
      terminals.sandboxGone();
      files.sandboxGone();
      notebook?.sandboxGone();
      main.classList.add('deleted');
      del.textContent = 'Deleted';
      for (const b of main.querySelectorAll<HTMLButtonElement>('.lifetime button, .new-term, .lifecycle-wrap button'))
        b.disabled = true;
      setChildren(stateEl, stateBadge('deleted'));
      setChildren(stopsIn, h('span', { class: 'dim' }, 'deleted'));
      setChildren(
        status,
        notice('success', 'Sandbox deleted. Its terminals are closed.'),
        h('p', {}, h('a', { href: '/sandboxes' }, 'Back to sandboxes')),
      );
      setChildren(figures, accountSummary(await ctx.refreshAccount()));
    } catch (e) {
      setChildren(status, notice('error', errorText(e)));
      del.disabled = false;
    }
  });

  const dl = (...rows: Array<[string, Node | string]>) =>
    h(
      'dl',
      { class: 'props' },
      ...rows.flatMap(([k, v]) => [
        h('dt', {}, k),
        v instanceof HTMLElement && v.tagName === 'DD' ? v : h('dd', {}, v),
      ]),
    );
  const bar = lifecycleBar(sb, {
    changed: (message) => redraw(message),
    status: (message) => setChildren(status, message),
  });
  main.classList.remove('deleted');
  setChildren(
    main,
    h('p', { class: 'crumbs' }, h('a', { href: '/sandboxes' }, 'Sandboxes'), ' / ', sb.name),
    h(
      'div',
      { class: 'page-head' },
      h('div', {}, h('h1', {}, sb.name, ' ', stateEl), h('p', { class: 'sub mono' }, sb.id)),
      del,
    ),
    bar,
    status,
    h(
      'div',
      { class: 'detail-grid' },
      h(
        'section',
        { class: 'card', 'aria-labelledby': 'd-title' },
        h('h2', { id: 'd-title' }, 'Details'),
        dl(
          ['Image', h('span', { class: 'mono' }, sb.image)],
          [
            'Isolation',
            h(
              'span',
              { class: 'isolation', 'data-isolation': sb.isolation },
              sb.isolation === 'gvisor' ? 'gVisor (a user-space kernel)' : 'container',
              ...(sb.state === 'paused'
                ? [
                    h(
                      'span',
                      { class: 'dim' },
                      ` · paused, memory ${sb.pausedMemory === 'disk' ? 'on disk' : 'in RAM'}`,
                    ),
                  ]
                : []),
            ),
          ],
          ['Region', sb.info.region],
          ['Created', formatDate(sb.info.createdAt)],
          ['Stops in', stopsIn],
          ['At the end of its lifetime', sb.onTimeout === 'pause' ? 'pauses' : 'stops'],
          ...(sb.state !== 'started' && sb.info.expiresAt
            ? [['Deleted in', countdown(sb.info.expiresAt)] as [string, Node]]
            : []),
          [
            'Metadata',
            metadata.length
              ? h('span', { class: 'mono' }, metadata.map(([k, v]) => `${k}=${v}`).join(', '))
              : h('span', { class: 'dim' }, 'none'),
          ],
        ),
        sb.state === 'started' ? lifetime : null,
      ),
      h(
        'section',
        { class: 'card', 'aria-labelledby': 'p-title' },
        h('h2', { id: 'p-title' }, 'Public ports'),
        h('p', { class: 'hint' }, 'A server listening on a port inside the sandbox is reachable at:'),
        field('port', 'Port', port),
        portLink,
        h('p', { class: 'hint' }, 'Template: ', h('code', {}, sb.info.publicAccessUrlTemplate)),
      ),
      h('section', { class: 'card', 'aria-labelledby': 'a-title' }, h('h2', { id: 'a-title' }, 'Account'), figures),
    ),
    sb.state === 'started'
      ? terminals.el
      : h(
          'section',
          { class: 'card' },
          h('h2', {}, 'Terminal'),
          h('p', { class: 'empty' }, `The sandbox is ${sb.state}; terminals need a started sandbox.`),
        ),
    sb.state === 'started'
      ? files.el
      : h(
          'section',
          { class: 'card' },
          h('h2', {}, 'Files'),
          h('p', { class: 'empty' }, `The sandbox is ${sb.state}; its files can be browsed while it is started.`),
        ),
    notebook
      ? notebook.el
      : h(
          'section',
          { class: 'card' },
          h('h2', {}, 'Notebook'),
          h('p', { class: 'empty' }, `The sandbox is ${sb.state}; code runs in it while it is started.`),
        ),
  );
  if (sb.state === 'started') await Promise.all([terminals.init(), files.init()]);
  // The state changes by itself at stopAt (or by another client): follow it, drawing the page
  // again for a new state.
  let gone = false;
  let disposed = false;
  const poll = setInterval(() => {
    if (gone || main.classList.contains('deleted')) return;
    sb.refresh().then(
      () => {
        if (disposed) return;
        if (sb.state === drawnState) showState();
        else redraw();
      },
      (e) => {
        if (disposed) return;
        if (!(e instanceof NotFoundError)) return;
        gone = true;
        terminals.sandboxGone();
        files.sandboxGone();
        notebook?.sandboxGone();
        setChildren(stateEl, stateBadge('deleted'));
        setChildren(stopsIn, h('span', { class: 'dim' }, 'deleted'));
      },
    );
  }, 10_000);
  return () => {
    disposed = true;
    clearInterval(poll);
    terminals.dispose();
    files.dispose();
    notebook?.dispose();
  };
}
