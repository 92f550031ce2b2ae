/**
 * One build (`/builds/{id}`): its state and steps, its log followed live (reconnecting from
 * the last line after a dropped connection), the failure (step, Dockerfile line,
 * instruction, exit code, output) when it ends `error`, cancel and delete, and, once ready,
 * a sandbox from the template.
 */
import { AuthenticationError, NotFoundError, type BuildFailure } from '@sandboxd/sdk';
import { errorText } from '../api.js';
import { followBuildLog, formatDuration, isFinal, lineText, type LogEnd, type LogLine } from '../build-log.js';
import { cancelBuild, deleteBuild, getBuild, openBuildLog, type Build } from '../builds-api.js';
import { formatDate, h, notice, setChildren } from '../dom.js';
import { formatSize } from '../files-util.js';
import type { Page } from '../main.js';
import { stateBadge } from './sandboxes.js';
import { stepsText, twoClickButton } from './templates.js';

/** Lines kept in the log view; older ones are dropped from the page (the server keeps them). */
const MAX_LINES = 5_000;
/** How often the build is read again while it runs (its step counts). */
const POLL_MS = 2_000;

/** The failure of a build: which step and line, the instruction, the exit code and the end of its output. */
export function failureView(f: BuildFailure): HTMLElement {
  const d = f.details ?? {};
  const where = [
    d.step !== undefined ? `Step ${d.step}` : null,
    d.line !== undefined ? `Dockerfile line ${d.line}` : null,
    d.exitCode !== undefined ? `exit code ${d.exitCode}` : null,
  ].filter(Boolean);
  return h(
    'section',
    { class: 'card failure', role: 'alert', 'aria-labelledby': 'failure-title' },
    h('h2', { id: 'failure-title' }, 'Build failed', where.length ? `: ${where.join(', ')}` : ''),
    h('p', { class: 'failure-message' }, f.message),
    d.instruction ? h('pre', { class: 'output failure-instruction' }, d.instruction) : null,
    d.output
      ? h(
          'div',
          {},
          h('p', { class: 'hint' }, 'The end of its output:'),
          h('pre', { class: 'output failure-output', tabindex: 0 }, d.output),
        )
      : null,
  );
}

/** The build page. */
export const renderBuild: Page = async (main, ctx, params) => {
  let build = await getBuild(params.id);
  let left = false;
  const follow = new AbortController();

  const status = h('div', { 'aria-live': 'polite', class: 'page-status' });
  const stateEl = h('span');
  const headActions = h('div', { class: 'row-actions' });
  const props = h('dl', { class: 'props' });
  const progress = h('progress', { max: 1, value: 0, 'aria-label': 'Steps done' });
  const failure = h('div');
  const logStatus = h('p', { class: 'hint log-status', 'aria-live': 'polite' });
  const log = h('pre', { class: 'output build-log', tabindex: 0, 'aria-label': 'Build log' });
  let lines = 0;
  let dropped = 0;
  const droppedNote = h('div', { class: 'log-gap', hidden: true });
  log.append(droppedNote);

  const say = (kind: 'success' | 'error' | 'info', text: string) => setChildren(status, notice(kind, text));
  const fail = (e: unknown) => say('error', errorText(e));

  const cancel = h('button', { type: 'button', class: 'btn' }, 'Cancel build');
  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    try {
      show(await cancelBuild(build.id));
      say('success', 'Build cancelled.');
    } catch (e) {
      fail(e);
      cancel.disabled = false;
      show(await getBuild(build.id).catch(() => build));
    }
  });
  const del = twoClickButton(
    'Delete',
    `Delete build ${build.id}`,
    async () => {
      await deleteBuild(build.id);
      follow.abort();
      ctx.navigate('/templates');
    },
    fail,
    'btn danger',
  );

  let lastFailure = '';
  /** Draws what depends on the build record. */
  function show(b: Build): void {
    build = b;
    main.dataset.state = b.state;
    setChildren(stateEl, stateBadge(b.state));
    const final = isFinal(b.state);
    setChildren(
      headActions,
      b.state === 'ready'
        ? h(
            'a',
            { class: 'btn primary', href: `/sandboxes/new?image=${encodeURIComponent(b.image)}` },
            'New sandbox from this template',
          )
        : null,
      final ? null : cancel,
      del,
    );
    progress.max = Math.max(1, b.steps.total);
    progress.value = Math.min(b.steps.done, b.steps.total);
    const row = (k: string, v: Node | string) => [h('dt', {}, k), h('dd', {}, v)];
    setChildren(
      props,
      ...row('Image', h('span', { class: 'mono' }, b.image)),
      ...row('Steps', h('span', { class: 'steps' }, stepsText(b), ' ', progress)),
      ...row('Created', formatDate(b.createdAt)),
      ...(b.startedAt ? row('Started', formatDate(b.startedAt)) : []),
      ...(b.finishedAt
        ? row('Finished', `${formatDate(b.finishedAt)} (${formatDuration(b.startedAt ?? b.createdAt, b.finishedAt)})`)
        : []),
      ...(b.sizeBytes !== undefined ? row('Size', formatSize(b.sizeBytes)) : []),
      ...(b.digest ? row('Digest', h('span', { class: 'mono dim digest' }, b.digest)) : []),
    );
    const f = b.state === 'error' && b.error ? JSON.stringify(b.error) : '';
    if (f !== lastFailure) {
      lastFailure = f;
      setChildren(failure, b.state === 'error' && b.error ? failureView(b.error) : null);
    }
  }

  /**
   * Lines are appended in batches, once per frame (a long log read at once costs one layout,
   * not one per line), keeping the view at the bottom when it was there.
   */
  let pending: LogLine[] = [];
  let frame = 0;
  function addLine(l: LogLine): void {
    pending.push(l);
    if (pending.length > MAX_LINES) {
      pending.shift();
      dropped++;
    }
    frame ||= requestAnimationFrame(flush);
  }
  function flush(): void {
    if (frame) cancelAnimationFrame(frame);
    frame = 0;
    if (pending.length === 0) return;
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 24;
    const batch = pending;
    pending = [];
    log.append(
      ...batch.map((l) => h('div', { class: `log-line log-${l.stream}`, 'data-seq': l.seq }, lineText(l) || '\u200b')),
    );
    lines += batch.length;
    for (; lines > MAX_LINES; lines--) {
      droppedNote.nextElementSibling?.remove();
      dropped++;
    }
    if (dropped) {
      droppedNote.hidden = false;
      droppedNote.textContent = `${dropped} earlier line${dropped === 1 ? '' : 's'} not shown`;
    }
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  show(build);
  setChildren(
    main,
    h('p', { class: 'crumbs' }, h('a', { href: '/templates' }, 'Templates'), ' / ', `${build.name}:${build.tag}`),
    h(
      'div',
      { class: 'page-head' },
      h('div', {}, h('h1', {}, `${build.name}:${build.tag}`, ' ', stateEl), h('p', { class: 'sub mono' }, build.id)),
      headActions,
    ),
    status,
    h('section', { class: 'card', 'aria-labelledby': 'b-title' }, h('h2', { id: 'b-title' }, 'Build'), props),
    failure,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'log-title' },
      h('h2', { id: 'log-title' }, 'Log'),
      logStatus,
      log,
    ),
  );

  // The record is read again while the build runs (step counts) and once it ends.
  let reading = false;
  const refresh = async () => {
    if (reading || left) return;
    reading = true;
    try {
      const b = await getBuild(build.id);
      if (!left) show(b);
    } catch (e) {
      if (!left && e instanceof NotFoundError) {
        say('error', 'This build was deleted.');
        follow.abort();
      }
    } finally {
      reading = false;
    }
  };
  const poll = setInterval(() => {
    if (!isFinal(build.state)) void refresh();
  }, POLL_MS);

  setChildren(logStatus, isFinal(build.state) ? 'Loading the log…' : 'Following the log…');
  void followBuildLog({
    open: (offset, signal) => openBuildLog(build.id, offset, signal),
    signal: follow.signal,
    fatal: (e) => e instanceof NotFoundError || e instanceof AuthenticationError,
    onLine: addLine,
    onStatus: (s) => {
      if (left) return;
      if (s.state === 'connected')
        setChildren(logStatus, isFinal(build.state) ? 'Loading the log…' : 'Following the log…');
      else if (s.state === 'reconnecting')
        setChildren(
          logStatus,
          `Connection lost (${errorText(s.error)}); reconnecting in ${Math.ceil(s.waitMs / 1000)} s from line ${s.offset}…`,
        );
      else {
        const retry = h('button', { type: 'button', class: 'btn small' }, 'Reload');
        retry.addEventListener('click', () => ctx.navigate(location.pathname));
        setChildren(logStatus, `The log cannot be followed: ${errorText(s.error)} `, retry);
      }
    },
  }).then(async (end: LogEnd | null) => {
    if (!end || left) return;
    flush();
    const how = { ready: 'is ready', error: 'failed', cancelled: 'was cancelled' } as Record<string, string>;
    setChildren(logStatus, `End of the log: the build ${how[end.state] ?? `is ${end.state}`}.`);
    logStatus.dataset.end = end.state;
    await refresh();
    // The end line carries the failure too: shown even when the record was read before it.
    if (!left && end.state === 'error' && end.error && !build.error)
      show({ ...build, state: 'error', error: end.error });
    if (!left && end.state === 'ready') say('success', `Ready: new sandboxes can start from ${build.image}.`);
  });

  return () => {
    left = true;
    if (frame) cancelAnimationFrame(frame);
    follow.abort();
    clearInterval(poll);
  };
};
