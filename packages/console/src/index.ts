/**
 * `@sandboxd/console`: the browser console. The browser code lives in `src/app/` and talks
 * to the server only through `@sandboxd/sdk`; this entry is the Node side that bundles it.
 */
export { buildConsole, CONSOLE_DIR, type ConsoleAssets, type ConsoleFile } from './build.js';
