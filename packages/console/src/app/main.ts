/**
 * The console's entry: the page frame (header, navigation, sign-out), the sign-in page and
 * a small History-API router. Pages render into `<main>` and return a cleanup function.
 */
import './csp.js';
import '@xterm/xterm/css/xterm.css';
import './styles.css';
import { AuthenticationError, type AccountInfo } from '@sandboxd/sdk';
import { bootSignedIn } from './csp.js';
import { client, errorText, listEvents, signOut } from './api.js';
import { h, notice, setChildren } from './dom.js';
import { forgetStoredNotebooks } from './notebook.js';
import { renderKeys } from './pages/keys.js';
import { renderLogin } from './pages/login.js';
import { renderOnboarding } from './pages/onboarding.js';
import { renderSandbox } from './pages/sandbox.js';
import { renderSandboxes } from './pages/sandboxes.js';
import { renderSecrets } from './pages/secrets.js';
import { renderSnapshots } from './pages/snapshots.js';
import { renderBuild } from './pages/build.js';
import { renderBuildForm } from './pages/build-new.js';
import { renderTemplates } from './pages/templates.js';

/** What every page gets: the account and navigation. */
export interface PageContext {
  account: AccountInfo;
  navigate(path: string): void;
  refreshAccount(): Promise<AccountInfo>;
}

/** A page: renders into `main`; a function it resolves to is called when the user leaves it. */
export type Page = (main: HTMLElement, ctx: PageContext, params: Record<string, string>) => Promise<unknown>;

const root = document.getElementById('app')!;
let account: AccountInfo | null = null;
let cleanup: (() => void) | undefined;

const NAV: Array<{ path: string; label: string; also?: string }> = [
  { path: '/onboarding', label: 'Get started' },
  { path: '/sandboxes', label: 'Sandboxes' },
  { path: '/snapshots', label: 'Snapshots' },
  { path: '/templates', label: 'Templates', also: '/builds' },
  { path: '/secrets', label: 'Secrets' },
  { path: '/keys', label: 'API keys' },
];

function navigate(path: string, replace = false): void {
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  void route();
}

function frame(acc: AccountInfo): HTMLElement {
  const main = h('main', { id: 'main', tabindex: -1 });
  const here = location.pathname;
  const nav = h(
    'nav',
    { 'aria-label': 'Main' },
    h(
      'ul',
      {},
      ...NAV.map((n) =>
        h(
          'li',
          {},
          h(
            'a',
            {
              href: n.path,
              'aria-current': here.startsWith(n.path) || (n.also && here.startsWith(n.also)) ? 'page' : null,
            },
            n.label,
          ),
        ),
      ),
    ),
  );
  const out = h(
    'button',
    {
      type: 'button',
      class: 'btn ghost small',
      onclick: async () => {
        await signOut().catch(() => {});
        forgetStoredNotebooks();
        account = null;
        navigate('/login');
      },
    },
    'Sign out',
  );
  const header = h(
    'header',
    { class: 'top' },
    h(
      'a',
      { class: 'brand', href: '/', 'aria-label': 'sandboxd home' },
      h('span', { class: 'logo', 'aria-hidden': 'true' }, '>_'),
      'sandboxd',
    ),
    nav,
    h('div', { class: 'who' }, h('span', { class: 'email', title: acc.email }, acc.email), out),
  );
  setChildren(root, header, main);
  return main;
}

const ROUTES: Array<[RegExp, Page]> = [
  [/^\/onboarding$/, renderOnboarding],
  [/^\/keys$/, renderKeys],
  [/^\/secrets$/, renderSecrets],
  [/^\/sandboxes(?:\/new)?$/, renderSandboxes],
  [/^\/sandboxes\/(?<id>sbx_[a-z0-9]+)$/, renderSandbox],
  [/^\/snapshots$/, renderSnapshots],
  [/^\/templates$/, renderTemplates],
  [/^\/builds\/new$/, renderBuildForm],
  [/^\/builds\/(?<id>bld_[A-Za-z0-9_-]+)$/, renderBuild],
];

async function home(): Promise<string> {
  const events = await listEvents().catch(() => []);
  const done = events.some((e) => e.event === 'onboarding.completed' || e.event === 'onboarding.skipped');
  return done ? '/sandboxes' : '/onboarding';
}

let generation = 0;

async function route(): Promise<void> {
  const gen = ++generation;
  if (typeof cleanup === 'function') cleanup();
  cleanup = undefined;
  const path = location.pathname.replace(/\/+$/, '') || '/';
  if (!account) {
    if (path !== '/login' && path !== '/signup') return navigate('/login', true);
    return renderLogin(root, path === '/signup' ? 'signup' : 'signin', (acc) => {
      account = acc;
      navigate('/', true);
    });
  }
  if (path === '/' || path === '/login' || path === '/signup') return navigate(await home(), true);
  const match = ROUTES.map(([re, page]) => ({ m: re.exec(path), page })).find((r) => r.m);
  const main = frame(account);
  if (!match) {
    setChildren(main, h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '/sandboxes' }, 'Back to sandboxes')));
    return;
  }
  const ctx: PageContext = {
    account,
    navigate: (p) => navigate(p),
    refreshAccount: async () => (account = ctx.account = await client.account.get()),
  };
  try {
    const result = await match.page(main, ctx, (match.m!.groups ?? {}) as Record<string, string>);
    const done = typeof result === 'function' ? (result as () => void) : undefined;
    // The user may have moved on while this page loaded: then it is cleaned up at once.
    if (gen !== generation) {
      done?.();
      return;
    }
    cleanup = done;
    // After a navigation the clicked link is gone: start keyboard and screen-reader users at the page.
    if (document.activeElement === document.body) main.focus({ preventScroll: true });
  } catch (e) {
    if (gen !== generation) return;
    if (e instanceof AuthenticationError) {
      account = null;
      return navigate('/login', true);
    }
    main.append(notice('error', errorText(e)));
  }
}

// Same-origin links are routed here instead of loading a page.
document.addEventListener('click', (ev) => {
  const a = (ev.target as Element).closest?.('a');
  if (
    !a ||
    ev.defaultPrevented ||
    ev.button !== 0 ||
    ev.metaKey ||
    ev.ctrlKey ||
    ev.shiftKey ||
    a.target ||
    a.hasAttribute('download')
  )
    return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith('/api/')) return;
  if (url.hash && url.pathname === location.pathname) return; // in-page links (the skip link)
  ev.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener('popstate', () => void route());

async function start(): Promise<void> {
  if (bootSignedIn) {
    try {
      account = await client.account.get();
    } catch (e) {
      if (!(e instanceof AuthenticationError)) {
        setChildren(root, h('main', { id: 'main' }, notice('error', `Cannot reach the server: ${errorText(e)}`)));
        return;
      }
    }
  }
  await route();
}

void start();
