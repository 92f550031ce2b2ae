/**
 * Onboarding: eight steps from welcome to running a first script, written so that a user
 * with only the server's address can follow them literally (test/e2e/onboarding.test.ts
 * does), in JavaScript or in Python (a tab above the steps; the choice is kept in this
 * browser). Each step is tracked (`onboarding.step_N_...`, with the language) when first
 * reached; progress is derived from the stored events, so a reload resumes at the furthest
 * step reached.
 */
import type { EventKind } from '@sandboxd/sdk';
import { client, errorText, listEvents, track } from '../api.js';
import { codeBlock, h, notice, setChildren } from '../dom.js';
import type { Page } from '../main.js';

/** The SDK languages onboarding offers. */
type Language = 'javascript' | 'python';

interface Step {
  event: EventKind;
  title: string | ((s: StepState) => string);
  body: (s: StepState) => Array<Node | string | null>;
}

interface StepState {
  key: string | null;
  origin: string;
  lang: Language;
  /** The path of the Python wheel this server hands out (`/sdk/sandboxd-<v>-py3-none-any.whl`), or why it is unknown. */
  wheel: { path: string } | { error: string };
  createKey: () => Promise<void>;
  keyStatus: HTMLElement;
}

/** Where the server serves the SDK package (packages/server/src/http/routes/sdk.ts). */
const SDK_TARBALL_PATH = '/sdk/sandboxd-sdk.tgz';
/** A stable path that redirects to the current Python wheel (the same routes). */
const PYTHON_WHEEL_LATEST_PATH = '/sdk/python';

/** The examples without their leading comment (how to run them, which the steps say). */
const HELLO_MJS = __HELLO_MJS__.replace(/^(\/\/.*\n)+\n?/, '');
const HELLO_PY = __HELLO_PY__.replace(/^(#.*\n)+\n?/, '');

const LANGUAGES: Array<{ id: Language; label: string }> = [
  { id: 'javascript', label: 'JavaScript' },
  { id: 'python', label: 'Python' },
];
const LANG_KEY = 'sandboxd.onboarding.language';

/** The language chosen before in this browser (JavaScript when none). */
function savedLanguage(): Language {
  try {
    return localStorage.getItem(LANG_KEY) === 'python' ? 'python' : 'javascript';
  } catch {
    return 'javascript';
  }
}

/**
 * The path of the wheel the server hands out now: `/sdk/python` redirects to it, and the
 * URL the redirect ends at names it (pip needs that name in the URL it is given).
 */
async function currentWheel(): Promise<StepState['wheel']> {
  try {
    const r = await fetch(PYTHON_WHEEL_LATEST_PATH, { method: 'HEAD', credentials: 'omit' });
    const path = new URL(r.url).pathname;
    if (r.ok && /^\/sdk\/[^/]+-py3-none-any\.whl$/.test(path)) return { path };
    return { error: `the server answered ${r.status} for ${PYTHON_WHEEL_LATEST_PATH}` };
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
}

const EXPECTED_OUTPUT =
  'created sbx_3kq7m2x5c4v6b7n8a9d2 (quiet-river-4821) from local/debian:bookworm\nHello from sandboxd!\nexit code 0\ndeleted sbx_3kq7m2x5c4v6b7n8a9d2';

const STEPS: Step[] = [
  {
    event: 'onboarding.step_1_welcome',
    title: 'Welcome',
    body: () => [
      h(
        'p',
        {},
        'sandboxd runs isolated Linux sandboxes from container images on this server. In a few steps you will create an API key, install the SDK for JavaScript (TypeScript) or Python and run a script that starts a sandbox and runs a command in it. Choose your language above; you can switch at any step.',
      ),
      h(
        'ul',
        { class: 'ticks' },
        h('li', {}, 'Create, list and delete sandboxes'),
        h('li', {}, 'Run commands and open terminals'),
        h('li', {}, 'Persist files in named volumes'),
      ),
    ],
  },
  {
    event: 'onboarding.step_2_setup_workspace',
    title: 'Set up a workspace',
    body: (s) =>
      s.lang === 'python'
        ? [
            h(
              'p',
              {},
              'In a terminal, make a folder for your first project with a Python virtual environment in it, and activate the environment:',
            ),
            codeBlock(
              'mkdir sandboxd-hello && cd sandboxd-hello\npython3 -m venv --system-site-packages .venv\n. .venv/bin/activate',
              { label: 'workspace commands' },
            ),
            h(
              'p',
              { class: 'hint' },
              'With --system-site-packages the environment can use httpx and websockets when your system has them (on Debian: ',
              h('code', {}, 'apt install python3-venv python3-httpx python3-websockets'),
              '); otherwise pip downloads them in step 6.',
            ),
          ]
        : [
            h('p', {}, 'In a terminal, make a folder for your first project and declare it an ES module project:'),
            codeBlock('mkdir sandboxd-hello && cd sandboxd-hello\nnpm init -y\nnpm pkg set type=module', {
              label: 'workspace commands',
            }),
          ],
  },
  {
    event: 'onboarding.step_3_verify_nodejs',
    title: (s) => (s.lang === 'python' ? 'Verify Python' : 'Verify Node.js'),
    body: (s) =>
      s.lang === 'python'
        ? [
            h('p', {}, 'The SDK needs Python 3.10 or newer. Check the version of the environment:'),
            codeBlock('python --version', { label: 'Python version command' }),
            h(
              'p',
              { class: 'hint' },
              'It should print Python 3.10.0 or higher. If not, make the environment with a newer python3.',
            ),
          ]
        : [
            h('p', {}, 'The SDK needs Node.js 20 or newer. Check your version:'),
            codeBlock('node --version', { label: 'Node.js version command' }),
            h(
              'p',
              { class: 'hint' },
              'It should print v20.0.0 or higher. If not, install a current Node.js LTS first.',
            ),
          ],
  },
  {
    event: 'onboarding.step_4_create_token',
    title: 'Create an API key',
    body: (s) => [
      h(
        'p',
        {},
        'Scripts authenticate with an API key. Create one now: it is shown only once, so copy it somewhere safe.',
      ),
      s.key
        ? codeBlock(s.key, { label: 'API key', secret: true })
        : h('button', { type: 'button', class: 'btn primary', onclick: () => void s.createKey() }, 'Create API key'),
      s.keyStatus,
    ],
  },
  {
    event: 'onboarding.step_5_export_token',
    title: 'Export the key',
    body: (s) => [
      h('p', {}, 'The SDK reads the key and the server address from the environment:'),
      codeBlock(`export SANDBOX_API_KEY=${s.key ?? '<your API key>'}\nexport SANDBOX_API_URL=${s.origin}`, {
        label: 'export commands',
        secret: !!s.key,
      }),
      s.key
        ? null
        : h(
            'p',
            { class: 'hint' },
            'Use the key you created in the previous step, or create another one under API keys.',
          ),
    ],
  },
  {
    event: 'onboarding.step_6_install_sdk',
    title: 'Install the SDK',
    body: (s) =>
      s.lang === 'python'
        ? [
            h('p', {}, 'Install the Python SDK into the environment. This server hands it out as a wheel:'),
            'path' in s.wheel
              ? codeBlock(`pip install ${s.origin}${s.wheel.path}`, { label: 'install command' })
              : notice(
                  'error',
                  `Could not ask the server for its Python wheel: ${s.wheel.error}. Reload the page to try again.`,
                ),
            h(
              'p',
              { class: 'hint' },
              'It needs httpx 0.23 or newer and websockets 10.4 or newer, which pip downloads unless the environment has them already.',
            ),
          ]
        : [
            h('p', {}, 'Install the TypeScript SDK into your workspace. This server hands it out as an npm package:'),
            codeBlock(`npm install ${s.origin}${SDK_TARBALL_PATH}`, { label: 'install command' }),
            h(
              'p',
              { class: 'hint' },
              'The package has no dependencies. Terminals on Node.js 20 also need the ws package (',
              h('code', {}, 'npm install ws'),
              '); Node.js 22 and newer have WebSocket built in.',
            ),
          ],
  },
  {
    event: 'onboarding.step_7_create_script',
    title: 'Create a script',
    body: (s) => {
      const file = s.lang === 'python' ? 'hello.py' : 'hello.mjs';
      return [
        h(
          'p',
          {},
          `Save this as ${file} in the workspace folder. It creates a sandbox, runs a command in it and deletes it:`,
        ),
        codeBlock(s.lang === 'python' ? HELLO_PY : HELLO_MJS, { label: file }),
      ];
    },
  },
  {
    event: 'onboarding.step_8_run_script',
    title: 'Run it',
    body: (s) => [
      h(
        'p',
        {},
        s.lang === 'python'
          ? 'In the same terminal (where the key is exported and the environment active), run the script:'
          : 'In the same terminal (where the key is exported), run the script:',
      ),
      codeBlock(s.lang === 'python' ? 'python hello.py' : 'node hello.mjs', { label: 'run command' }),
      h('p', {}, 'You should see:'),
      h('pre', { class: 'output', tabindex: 0, 'aria-label': 'Expected output' }, EXPECTED_OUTPUT),
    ],
  },
];

/** The furthest step reached (0-based) and whether onboarding was finished or skipped. */
export function progressFrom(events: Array<{ event: string }>): { step: number; started: boolean; done: boolean } {
  const seen = new Set(events.map((e) => e.event));
  let step = 0;
  STEPS.forEach((s, i) => {
    if (seen.has(s.event)) step = i;
  });
  return {
    step,
    started: seen.has('onboarding.started'),
    done: seen.has('onboarding.completed') || seen.has('onboarding.skipped'),
  };
}

/** The onboarding page. */
export const renderOnboarding: Page = async (main, ctx) => {
  const events = await listEvents();
  const reached = new Set(events.map((e) => e.event));
  const progress = progressFrom(events);
  const status = h('div', { class: 'track-status', 'aria-live': 'polite' });
  // One event at a time, so they are stored in the order the user reached them.
  let queue: Promise<void> = Promise.resolve();
  const report = (event: EventKind, metadata: Record<string, unknown> = {}) => {
    if (reached.has(event)) return queue;
    reached.add(event);
    queue = queue
      .then(() => track(event, metadata))
      .catch((e) => {
        reached.delete(event);
        setChildren(status, notice('error', `Could not record progress: ${errorText(e)}`));
      });
    return queue;
  };
  if (!progress.started) await report('onboarding.started');

  let current = progress.step;
  const state: StepState = {
    key: null,
    origin: location.origin,
    lang: savedLanguage(),
    wheel: await currentWheel(),
    keyStatus: h('div', { 'aria-live': 'polite' }),
    createKey: async () => {
      try {
        const k = await client.keys.create(`onboarding ${new Date().toISOString().slice(0, 10)}`);
        state.key = k.key;
        show(current, false);
        setChildren(
          state.keyStatus,
          notice('success', `Key "${k.name}" created. Copy it now: it will not be shown again.`),
        );
        state.keyStatus.querySelector<HTMLElement>('.notice')?.focus();
      } catch (e) {
        setChildren(state.keyStatus, notice('error', errorText(e)));
      }
    },
  };

  const list = h('ol', { class: 'steps' });
  const panel = h('section', {
    class: 'card step-panel',
    id: 'onboarding-step',
    role: 'tabpanel',
    'aria-live': 'polite',
  });
  const tabs = LANGUAGES.map((l) =>
    h(
      'button',
      {
        type: 'button',
        role: 'tab',
        class: 'lang-tab',
        id: `onboarding-lang-${l.id}`,
        'aria-controls': 'onboarding-step',
        onclick: () => choose(l.id, false),
        onkeydown: (e: Event) => {
          const k = (e as KeyboardEvent).key;
          if (k !== 'ArrowLeft' && k !== 'ArrowRight') return;
          e.preventDefault();
          choose(LANGUAGES[(LANGUAGES.findIndex((x) => x.id === l.id) + 1) % LANGUAGES.length].id, true);
        },
      },
      l.label,
    ),
  );
  const languages = h('div', { class: 'lang-tabs', role: 'tablist', 'aria-label': 'SDK language' }, ...tabs);
  /** Shows the steps in `lang` (kept in this browser); `focus` moves the focus to its tab (keyboard). */
  function choose(lang: Language, focus: boolean): void {
    state.lang = lang;
    try {
      localStorage.setItem(LANG_KEY, lang);
    } catch {
      /* storage refused: the choice lasts as long as the page */
    }
    show(current, false);
    if (focus) document.getElementById(`onboarding-lang-${lang}`)?.focus();
  }
  const markTabs = () => {
    for (const [i, t] of tabs.entries()) {
      const selected = LANGUAGES[i].id === state.lang;
      t.setAttribute('aria-selected', String(selected));
      t.tabIndex = selected ? 0 : -1;
    }
    panel.setAttribute('aria-labelledby', `onboarding-lang-${state.lang}`);
  };
  const head = h(
    'div',
    { class: 'page-head' },
    h(
      'div',
      {},
      h('h1', {}, 'Get started'),
      h(
        'p',
        { class: 'sub' },
        progress.done
          ? 'You have finished onboarding. The steps stay here for reference.'
          : 'Eight short steps to your first sandbox.',
      ),
    ),
    h(
      'button',
      {
        type: 'button',
        class: 'btn ghost',
        onclick: async () => {
          if (!progress.done) await report('onboarding.skipped', { atStep: current + 1 });
          ctx.navigate('/sandboxes');
        },
      },
      progress.done ? 'Go to sandboxes' : 'Skip onboarding',
    ),
  );
  setChildren(
    main,
    head,
    status,
    languages,
    h('div', { class: 'onboarding' }, h('nav', { 'aria-label': 'Onboarding steps' }, list), panel),
  );

  const titleOf = (s: Step) => (typeof s.title === 'function' ? s.title(state) : s.title);

  function show(i: number, focus = true): void {
    current = i;
    markTabs();
    void report(STEPS[i].event, { step: i + 1, language: state.lang });
    setChildren(
      list,
      ...STEPS.map((s, j) =>
        h(
          'li',
          { class: j < i || reached.has(s.event) ? 'done' : '' },
          h(
            'button',
            {
              type: 'button',
              class: 'step-link',
              'aria-current': j === i ? 'step' : null,
              disabled: j > progressMax() && !reached.has(s.event),
              onclick: () => show(j),
            },
            h('span', { class: 'num', 'aria-hidden': 'true' }, String(j + 1)),
            titleOf(s),
          ),
        ),
      ),
    );
    const last = i === STEPS.length - 1;
    const back = h('button', { type: 'button', class: 'btn', disabled: i === 0, onclick: () => show(i - 1) }, 'Back');
    const next = last
      ? h(
          'button',
          {
            type: 'button',
            class: 'btn primary',
            onclick: async () => {
              await report('onboarding.completed', { steps: STEPS.length });
              ctx.navigate('/sandboxes');
            },
          },
          'Finish',
        )
      : h('button', { type: 'button', class: 'btn primary', onclick: () => show(i + 1) }, 'Continue');
    setChildren(
      panel,
      h('p', { class: 'eyebrow' }, `Step ${i + 1} of ${STEPS.length}`),
      h('h2', { id: 'step-title', tabindex: -1 }, titleOf(STEPS[i])),
      ...STEPS[i].body(state),
      h('div', { class: 'actions' }, back, next),
    );
    if (focus) panel.querySelector<HTMLElement>('#step-title')?.focus();
  }
  const progressMax = () => Math.max(current, ...STEPS.map((s, j) => (reached.has(s.event) ? j : 0)));
  show(current, false);
};
