/**
 * Headless Chromium for the console tests: Debian's /usr/bin/chromium driven by
 * playwright-core, a fresh profile per run, every console error and page error recorded,
 * screenshots at desktop and phone widths, and the text of the visible xterm.js screen.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../..');
/** Where screenshots go (git-ignored). */
export const SHOTS = join(ROOT, 'artifacts/screenshots');
/** The laptop viewport the pages are shot at. */
export const DESKTOP = { width: 1280, height: 800 };
/** The narrow phone viewport the pages are shot at. */
export const PHONE = { width: 390, height: 844 };
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

/** A browser with one page; `errors` collects console errors and uncaught page errors. */
export interface Browser {
  context: BrowserContext;
  page: Page;
  errors: string[];
  /** Saves `<name>-desktop.png` and `<name>-phone.png` (full page), then restores the desktop size; `dark` adds `<name>-dark.png`. */
  shoot(name: string, opts?: { dark?: boolean }): Promise<void>;
  close(): Promise<void>;
}

/**
 * Launches Chromium on a fresh --user-data-dir (removed by close()). `ignoreHTTPSErrors`:
 * accept the test's self-signed certificate (a server on TLS).
 */
export async function launch(o: { ignoreHTTPSErrors?: boolean } = {}): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'sandboxd-chromium-'));
  mkdirSync(SHOTS, { recursive: true });
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: '/usr/bin/chromium',
      headless: true,
      args: FLAGS,
      viewport: DESKTOP,
      timeout: 60_000,
      ignoreHTTPSErrors: o.ignoreHTTPSErrors ?? false,
    });
  } catch (e) {
    rmSync(profile, { recursive: true, force: true });
    throw e;
  }
  context.setDefaultTimeout(30_000);
  // Keeps every WebSocket the page opens, so a test can cut them as a network drop would.
  await context.addInitScript(() => {
    const Native = window.WebSocket;
    const all: WebSocket[] = [];
    (window as unknown as { __sockets: WebSocket[] }).__sockets = all;
    window.WebSocket = class extends Native {
      constructor(url: string | URL, protocols?: string | string[]) {
        super(url, protocols);
        all.push(this);
      }
    };
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`${m.text()} (${m.location().url})`);
  });
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  return {
    context,
    page,
    errors,
    async shoot(name, opts = {}) {
      await page.screenshot({ path: join(SHOTS, `${name}-desktop.png`), fullPage: true });
      if (opts.dark) {
        await page.emulateMedia({ colorScheme: 'dark' });
        await page.screenshot({ path: join(SHOTS, `${name}-dark.png`), fullPage: true });
        await page.emulateMedia({ colorScheme: 'light' });
      }
      await page.setViewportSize(PHONE);
      await page.waitForTimeout(300); // let the terminal refit; only the picture depends on it
      await page.screenshot({ path: join(SHOTS, `${name}-phone.png`), fullPage: true });
      await page.setViewportSize(DESKTOP);
      await page.waitForTimeout(300);
    },
    async close() {
      await context.close().catch(() => {});
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** The lines of the visible terminal screen, spaces normalised and trailing blanks cut. */
export async function screenLines(page: Page): Promise<string[]> {
  return page.$$eval('.term-panel:not([hidden]) .xterm-rows > div', (rows) =>
    rows.map((r) => (r.textContent ?? '').replace(/\u00a0/g, ' ').trimEnd()),
  );
}

/** Waits (bounded) until a line of the visible terminal is exactly `line`. */
export async function waitForLine(page: Page, line: string, timeout = 30_000): Promise<void> {
  await page.waitForFunction(
    (want) =>
      [...document.querySelectorAll('.term-panel:not([hidden]) .xterm-rows > div')].some(
        (r) => (r.textContent ?? '').replace(/\u00a0/g, ' ').trim() === want,
      ),
    line,
    { timeout },
  );
}

/** Closes every open WebSocket of the page (as a dropped network would end them); returns how many sockets were opened so far. */
export async function dropSockets(page: Page): Promise<number> {
  return page.evaluate(() => {
    const all = (window as unknown as { __sockets: WebSocket[] }).__sockets;
    for (const ws of all) if (ws.readyState === WebSocket.OPEN) ws.close(4000, 'test: network drop');
    return all.length;
  });
}

/** How many WebSockets the page has opened, and how many of them are open now. */
export async function socketCount(page: Page): Promise<{ opened: number; open: number }> {
  return page.evaluate(() => {
    const all = (window as unknown as { __sockets: WebSocket[] }).__sockets;
    return { opened: all.length, open: all.filter((w) => w.readyState === WebSocket.OPEN).length };
  });
}

/** Types a command into the visible terminal and presses Enter. */
export async function typeCommand(page: Page, command: string): Promise<void> {
  await page.locator('.term-panel:not([hidden]) .term-screen').click();
  await page.keyboard.type(command);
  await page.keyboard.press('Enter');
}
