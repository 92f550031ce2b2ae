/**
 * Starting a build from the browser (`/builds/new`): a name and tag, the Dockerfile typed
 * in, an optional context folder, build args, allowed domains and "no cache". The page
 * sends a tar of the context with the Dockerfile at its root (the route reads the
 * Dockerfile from the context), then opens the build's page.
 */
import { ValidationError } from '@sandboxd/sdk';
import { errorText } from '../api.js';
import { parseBuildArgs, parseDomains, TEMPLATE_NAME_RE, TEMPLATE_TAG_RE } from '../build-log.js';
import { createBuild } from '../builds-api.js';
import { field, h, notice, setChildren, setFieldError } from '../dom.js';
import { formatSize } from '../files-util.js';
import type { Page } from '../main.js';
import { tarBlob, tarPath, type TarFile } from '../tar.js';

const FIELDS = ['name', 'tag', 'dockerfile', 'context', 'buildArgs', 'allowDomains'] as const;
type FieldName = (typeof FIELDS)[number];

const EXAMPLE = `FROM local/debian:bookworm
WORKDIR /app
RUN echo "built at $(date)" > /app/built.txt
CMD ["cat", "/app/built.txt"]
`;

/** Where the Dockerfile goes in the context, and what the route reads by default. */
const DOCKERFILE = 'Dockerfile';

/** The files of a chosen folder, with paths relative to it (the folder's own name cut off). */
function contextFiles(list: FileList | null): { files: TarFile[] } | { error: string } {
  const files: TarFile[] = [];
  for (const f of Array.from(list ?? [])) {
    const rel = (f.webkitRelativePath || f.name)
      .split('/')
      .slice(f.webkitRelativePath ? 1 : 0)
      .join('/');
    const p = tarPath(rel);
    if (typeof p !== 'string') return { error: p.error };
    // The typed Dockerfile takes the root Dockerfile's place.
    if (p === DOCKERFILE) continue;
    files.push({ path: p, data: f, mtimeMs: f.lastModified });
  }
  return { files };
}

/** The field a 400's problem is about: its path (`/name`) for the query, the Dockerfile when it names a line. */
function fieldOfProblem(path: string): FieldName | null {
  const top = path.split('/')[1] ?? '';
  return (FIELDS as readonly string[]).includes(top) ? (top as FieldName) : null;
}

/** The build form page (`/builds/new`). */
export const renderBuildForm: Page = async (main, ctx) => {
  const q = new URLSearchParams(location.search);
  const inputs = {
    name: h('input', {
      type: 'text',
      required: true,
      autocomplete: 'off',
      spellcheck: 'false',
      maxlength: 63,
      value: q.get('name') ?? '',
      placeholder: 'my-app',
    }),
    tag: h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', value: q.get('tag') ?? 'latest' }),
    dockerfile: h('textarea', { rows: 12, spellcheck: 'false', class: 'dockerfile' }, EXAMPLE),
    context: h('input', { type: 'file', webkitdirectory: true, multiple: true }),
    buildArgs: h('textarea', { rows: 2, spellcheck: 'false', placeholder: 'VERSION=1.2' }),
    allowDomains: h('input', {
      type: 'text',
      autocomplete: 'off',
      spellcheck: 'false',
      placeholder: 'pypi.org, *.pythonhosted.org',
    }),
  };
  const noCache = h('input', { type: 'checkbox', id: 'noCache' });
  const contextInfo = h('p', { class: 'hint', 'aria-live': 'polite' });
  const status = h('div', { 'aria-live': 'polite' });
  const submit = h('button', { type: 'submit', class: 'btn primary' }, 'Start build');

  // A chosen folder with a Dockerfile at its root fills in the text area (to read and edit).
  inputs.context.addEventListener('change', async () => {
    setFieldError('context', null);
    const got = contextFiles(inputs.context.files);
    if ('error' in got) return setFieldError('context', got.error);
    const all = Array.from(inputs.context.files ?? []);
    const own = all.find((f) => f.webkitRelativePath.split('/').slice(1).join('/') === DOCKERFILE);
    if (own) {
      const before = inputs.dockerfile.value;
      const text = await own.text();
      // Unless the text was edited meanwhile.
      if (inputs.dockerfile.value === before) inputs.dockerfile.value = text;
    }
    const bytes = all.reduce((n, f) => n + f.size, 0);
    setChildren(
      contextInfo,
      all.length
        ? `${all.length} file${all.length === 1 ? '' : 's'}, ${formatSize(bytes)}${own ? '; its Dockerfile is in the text area, which is what is built' : ''}.`
        : '',
    );
  });

  const form = h(
    'form',
    { class: 'card build-form', 'aria-labelledby': 'build-title', novalidate: true },
    h('h2', { id: 'build-title' }, 'New build'),
    h(
      'div',
      { class: 'grid2' },
      field('name', 'Template name', inputs.name, 'Lowercase letters, digits, _ . - (up to 63).'),
      field('tag', 'Tag', inputs.tag, 'Default latest.'),
    ),
    field(
      'dockerfile',
      'Dockerfile',
      inputs.dockerfile,
      'FROM an image (local/debian:bookworm), snapshots/<name> or templates/<name>:<tag>; RUN, COPY, ENV, WORKDIR, USER, CMD…',
    ),
    h(
      'div',
      { class: 'grid2' },
      h(
        'div',
        {},
        field('context', 'Context folder (optional)', inputs.context, 'What COPY and ADD read; .dockerignore applies.'),
        contextInfo,
      ),
      field('buildArgs', 'Build args', inputs.buildArgs, 'One NAME=value per line, for ARG.'),
    ),
    field(
      'allowDomains',
      'Allowed domains',
      inputs.allowDomains,
      'What RUN steps may reach (comma-separated, *.example.com allowed); none by default, within your plan.',
    ),
    h('div', { class: 'check' }, noCache, h('label', { for: 'noCache' }, 'Run every step again (no cache)')),
    status,
    h('div', { class: 'actions' }, h('a', { class: 'btn', href: '/templates' }, 'Cancel'), submit),
  );

  let sending: AbortController | null = null;
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    for (const f of FIELDS) setFieldError(f, null);
    setChildren(status);
    const bad = (f: FieldName, message: string) => {
      setFieldError(f, message);
      inputs[f].focus();
    };
    const name = inputs.name.value.trim();
    const tag = inputs.tag.value.trim() || 'latest';
    if (!TEMPLATE_NAME_RE.test(name))
      return bad('name', 'Write 1 to 63 lowercase letters, digits, _ . or -, starting with a letter or digit.');
    if (!TEMPLATE_TAG_RE.test(tag))
      return bad('tag', 'Write 1 to 128 letters, digits, _ . or -, not starting with . or -.');
    const text = inputs.dockerfile.value;
    if (text.trim() === '') return bad('dockerfile', 'Write the Dockerfile: at least a FROM line.');
    const args = parseBuildArgs(inputs.buildArgs.value);
    if ('error' in args) return bad('buildArgs', args.error.message);
    const ctxFiles = contextFiles(inputs.context.files);
    if ('error' in ctxFiles) return bad('context', ctxFiles.error);
    let tar: Blob;
    try {
      tar = tarBlob([{ path: DOCKERFILE, data: new Blob([text]) }, ...ctxFiles.files]);
    } catch (e) {
      return bad('context', errorText(e));
    }
    submit.disabled = true;
    submit.textContent = ctxFiles.files.length ? `Sending ${formatSize(tar.size)}…` : 'Starting…';
    sending = new AbortController();
    try {
      const build = await createBuild(
        {
          name,
          tag,
          buildArgs: args.args,
          allowDomains: parseDomains(inputs.allowDomains.value),
          noCache: noCache.checked,
        },
        tar,
        sending.signal,
      );
      ctx.navigate(`/builds/${build.id}`);
    } catch (e) {
      if (sending.signal.aborted) return;
      let first: FieldName | null = null;
      const details = e instanceof ValidationError ? e.details : undefined;
      const line = (details as { line?: unknown } | null | undefined)?.line;
      if (e instanceof ValidationError && e.problems.length) {
        for (const p of e.problems) {
          const f = fieldOfProblem(p.path);
          if (f) {
            setFieldError(f, p.message);
            first ??= f;
          } else status.append(notice('error', p.path ? `${p.path}: ${p.message}` : p.message));
        }
      } else if (e instanceof ValidationError && typeof line === 'number') {
        // A Dockerfile problem names its line: shown at the Dockerfile.
        setFieldError('dockerfile', e.message);
        first = 'dockerfile';
      } else status.append(notice('error', errorText(e)));
      if (first) inputs[first].focus();
    } finally {
      sending = null;
      submit.disabled = false;
      submit.textContent = 'Start build';
    }
  });

  setChildren(
    main,
    h('p', { class: 'crumbs' }, h('a', { href: '/templates' }, 'Templates'), ' / New build'),
    h(
      'div',
      { class: 'page-head' },
      h(
        'div',
        {},
        h('h1', {}, 'Build a template'),
        h('p', { class: 'sub' }, 'Each step runs in a sandbox of your account; unchanged steps come from the cache.'),
      ),
    ),
    form,
  );
  inputs.name.focus();
  // Leaving the page while the context is being sent stops sending it.
  return () => sending?.abort();
};
