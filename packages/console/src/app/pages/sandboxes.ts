/** Sandboxes: the list (state, image, live countdown to stopAt) and the create form. */
import {
  ConcurrencyLimitError,
  InsufficientTokensError,
  type Isolation,
  QuotaExceededError,
  TemplateNotFoundError,
  ValidationError,
  type AccountInfo,
  type Sandbox,
  type SandboxCreateParams,
} from '@sandboxd/sdk';
import { client, errorText } from '../api.js';
import { countdown, field, formatDate, h, notice, setChildren, setFieldError } from '../dom.js';
import type { Page } from '../main.js';

const FIELDS = ['image', 'isolation', 'env', 'volumes', 'timeoutMs'] as const;
type FieldName = (typeof FIELDS)[number];

/** Plan, token balance and concurrency use of the account, as a row of figures. */
export function accountSummary(acc: AccountInfo): HTMLElement {
  const fig = (label: string, value: string, extra?: string) =>
    h(
      'div',
      { class: 'figure' },
      h('dt', {}, label),
      h('dd', {}, value, extra ? h('span', { class: 'extra' }, extra) : null),
    );
  return h(
    'dl',
    { class: 'figures', 'aria-label': 'Account' },
    fig('Plan', acc.plan),
    fig('Token balance', acc.balance.toLocaleString(), ' sandbox-minutes'),
    fig('Running sandboxes', `${acc.usage.startedSandboxes} / ${acc.limits.concurrency}`),
    fig('Longest lifetime', `${Math.round(acc.limits.maxLifetimeMs / 60_000)} min`),
  );
}

/** A state badge. */
export function stateBadge(state: string): HTMLElement {
  return h('span', { class: `badge state-${state}` }, state);
}

/** Reads the create form into a request, or names the field that cannot be read. */
function readForm(
  f: Record<FieldName, HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement>,
): SandboxCreateParams | { field: FieldName; message: string } {
  const params: SandboxCreateParams = { image: f.image.value.trim() };
  const tier = f.isolation.value;
  if (tier === 'container' || tier === 'gvisor') params.isolation = tier;
  const lines = (s: string) =>
    s
      .split('\n')
      .map((l) => l.trim())
      .map((l, i) => [l, i + 1] as const)
      .filter(([l]) => l !== '');
  const env: Record<string, string> = {};
  for (const [l, n] of lines(f.env.value)) {
    const i = l.indexOf('=');
    if (i <= 0) return { field: 'env', message: `Line ${n}: write NAME=value.` };
    env[l.slice(0, i)] = l.slice(i + 1);
  }
  if (Object.keys(env).length) params.env = env;
  const volumes: NonNullable<SandboxCreateParams['volumes']> = {};
  for (const [l, n] of lines(f.volumes.value)) {
    const m = /^(\S+?)=([^:\s]+)(?::(\d+))?$/.exec(l);
    if (!m)
      return {
        field: 'volumes',
        message: `Line ${n}: write /mount/path=volume_name or /mount/path=volume_name:sizeGb.`,
      };
    volumes[m[1]] = m[3] ? { name: m[2], sizeGb: Number(m[3]) } : m[2];
  }
  if (Object.keys(volumes).length) params.volumes = volumes;
  const minutes = f.timeoutMs.value.trim();
  if (minutes !== '') {
    const v = Number(minutes);
    if (!Number.isFinite(v) || v < 0) return { field: 'timeoutMs', message: 'Enter a number of minutes (0 or more).' };
    params.timeoutMs = Math.round(v * 60_000);
  }
  return params;
}

/** The field a 400 problem's JSON-pointer path is about (`/volumes/~1data/name` -> volumes). */
function fieldOf(path: string): FieldName | null {
  const top = path.split('/')[1] ?? '';
  return (FIELDS as readonly string[]).includes(top) ? (top as FieldName) : null;
}

/** What the isolation tiers are, for the create form. */
const TIER_LABELS: Record<Isolation, string> = {
  container: 'Container (namespaces, seccomp, cgroups: fastest)',
  gvisor: 'gVisor (a user-space kernel: stronger isolation, pause to disk, fork)',
};

/**
 * The tier select: the tiers the plan allows, its default chosen; a tier this host does not
 * offer (`/healthz`) is shown disabled.
 */
function isolationSelect(acc: AccountInfo | null, offered: readonly string[] | null): HTMLSelectElement {
  const allowed = acc?.limits.isolations ?? ['container'];
  const dflt = acc?.limits.defaultIsolation ?? 'container';
  return h(
    'select',
    {},
    ...allowed.map((t) => {
      const off = offered !== null && !offered.includes(t);
      return h(
        'option',
        { value: t, ...(t === dflt && !off ? { selected: true } : {}), ...(off ? { disabled: true } : {}) },
        off ? `${TIER_LABELS[t]} — not offered on this host` : TIER_LABELS[t],
      );
    }),
  );
}

/** The tiers the host offers (`/healthz`), or null when it cannot be asked. */
async function offeredTiers(): Promise<string[] | null> {
  try {
    const r = await fetch('/healthz', { credentials: 'omit' });
    const b = (await r.json()) as { isolations?: Array<{ isolation: string }> };
    return b.isolations ? b.isolations.map((t) => t.isolation) : null;
  } catch {
    return null;
  }
}

function createForm(
  onCreated: (sb: Sandbox) => void,
  acc: AccountInfo | null,
  offered: readonly string[] | null,
): HTMLFormElement {
  const inputs = {
    image: h('input', {
      type: 'text',
      // `?image=` (the snapshots page's "New sandbox" link) fills it in.
      value: new URLSearchParams(location.search).get('image') || 'local/debian:bookworm',
      required: true,
      autocomplete: 'off',
      spellcheck: 'false',
    }),
    env: h('textarea', { rows: 3, placeholder: 'NAME=value', spellcheck: 'false' }),
    volumes: h('textarea', { rows: 2, placeholder: '/data=my_volume:1', spellcheck: 'false' }),
    timeoutMs: h('input', { type: 'number', min: 0, step: 1, value: 10, inputmode: 'numeric' }),
    isolation: isolationSelect(acc, offered),
  };
  const status = h('div', { 'aria-live': 'polite' });
  const submit = h('button', { type: 'submit', class: 'btn primary' }, 'Create sandbox');
  const form = h(
    'form',
    { class: 'card create-form', 'aria-labelledby': 'create-title', novalidate: true },
    h('h2', { id: 'create-title' }, 'New sandbox'),
    h(
      'div',
      { class: 'grid2' },
      field('image', 'Image', inputs.image, 'An OCI image reference, e.g. local/debian:bookworm.'),
      field('timeoutMs', 'Lifetime (minutes)', inputs.timeoutMs, 'Stops by itself after this long; extend it later.'),
      field(
        'isolation',
        'Isolation',
        inputs.isolation,
        'The tiers your plan allows. gVisor sandboxes can pause to disk and fork.',
      ),
      field('env', 'Environment variables', inputs.env, 'One NAME=value per line.'),
      field('volumes', 'Volumes', inputs.volumes, 'One /mount/path=name[:sizeGb] per line; created if missing.'),
    ),
    status,
    h('div', { class: 'actions' }, h('a', { class: 'btn', href: '/sandboxes' }, 'Cancel'), submit),
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    for (const f of FIELDS) setFieldError(f, null);
    setChildren(status);
    const params = readForm(inputs);
    if ('field' in params) {
      setFieldError(params.field, params.message);
      return inputs[params.field].focus();
    }
    submit.disabled = true;
    submit.textContent = 'Creating…';
    try {
      onCreated(await client.sandboxes.create(params));
    } catch (e) {
      let first: FieldName | null = null;
      if (e instanceof ValidationError && e.problems.length) {
        const byField = new Map<FieldName, string[]>();
        for (const p of e.problems) {
          const f = fieldOf(p.path);
          if (f) byField.set(f, [...(byField.get(f) ?? []), p.message]);
          else status.append(notice('error', p.path ? `${p.path}: ${p.message}` : p.message));
        }
        for (const [f, msgs] of byField) setFieldError(f, msgs.join('; '));
        first = [...byField.keys()][0] ?? null;
      } else if (
        e instanceof QuotaExceededError &&
        (e.details as { quota?: string } | undefined)?.quota === 'isolation'
      ) {
        setFieldError('isolation', e.message);
        first = 'isolation';
      } else if (e instanceof TemplateNotFoundError) {
        setFieldError('image', e.message);
        first = 'image';
      } else {
        const hint =
          e instanceof InsufficientTokensError
            ? ' Shorten the lifetime or ask for more tokens.'
            : e instanceof ConcurrencyLimitError
              ? ' Delete a running sandbox first.'
              : '';
        status.append(notice('error', errorText(e) + hint));
      }
      if (first) inputs[first].focus();
    } finally {
      submit.disabled = false;
      submit.textContent = 'Create sandbox';
    }
  });
  return form;
}

/** The sandboxes page (`/sandboxes`, and `/sandboxes/new` with the create form open). */
export const renderSandboxes: Page = async (main, ctx) => {
  const creating = location.pathname.startsWith('/sandboxes/new');
  const summary = h('div');
  const listWrap = h('div', { 'aria-live': 'polite' });
  setChildren(
    main,
    h(
      'div',
      { class: 'page-head' },
      h(
        'div',
        {},
        h('h1', {}, 'Sandboxes'),
        h('p', { class: 'sub' }, 'Isolated Linux machines from container images, each with a lifetime.'),
      ),
      creating ? null : h('a', { class: 'btn primary', href: '/sandboxes/new' }, 'New sandbox'),
    ),
    summary,
    creating
      ? createForm(
          (sb) => ctx.navigate(`/sandboxes/${sb.id}`),
          await ctx.refreshAccount().catch(() => null),
          await offeredTiers(),
        )
      : null,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'list-title' },
      h('h2', { id: 'list-title' }, 'All sandboxes'),
      listWrap,
    ),
  );
  if (creating) main.querySelector<HTMLInputElement>('#image')?.focus();

  async function load(): Promise<void> {
    const [acc, sandboxes] = await Promise.all([ctx.refreshAccount(), client.sandboxes.list()]);
    setChildren(summary, accountSummary(acc));
    if (sandboxes.length === 0) {
      return setChildren(
        listWrap,
        h(
          'p',
          { class: 'empty' },
          'No sandboxes yet. ',
          creating ? null : h('a', { href: '/sandboxes/new' }, 'Create your first one.'),
        ),
      );
    }
    setChildren(
      listWrap,
      h(
        'table',
        { class: 'list sandboxes' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ...['Name', 'State', 'Isolation', 'Image', 'Stops in', 'Created'].map((t) => h('th', { scope: 'col' }, t)),
          ),
        ),
        h(
          'tbody',
          {},
          ...sandboxes.map((sb) =>
            h(
              'tr',
              { 'data-sandbox-id': sb.id },
              h(
                'td',
                { 'data-label': 'Name' },
                h(
                  'div',
                  { class: 'cell' },
                  h('a', { href: `/sandboxes/${sb.id}` }, sb.name),
                  h('div', { class: 'mono dim' }, sb.id),
                ),
              ),
              h('td', { 'data-label': 'State' }, stateBadge(sb.state)),
              h('td', { 'data-label': 'Isolation' }, sb.isolation === 'gvisor' ? 'gVisor' : 'container'),
              h('td', { 'data-label': 'Image', class: 'mono' }, sb.image),
              h(
                'td',
                { 'data-label': 'Stops in' },
                sb.state === 'started' ? countdown(sb.info.stopAt) : h('span', { class: 'dim' }, '—'),
              ),
              h('td', { 'data-label': 'Created' }, formatDate(sb.info.createdAt)),
            ),
          ),
        ),
      ),
    );
  }
  await load();
  const timer = setInterval(() => void load().catch(() => {}), 10_000);
  return () => clearInterval(timer);
};
