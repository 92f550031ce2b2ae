/**
 * Bundles the console with esbuild into `packages/console/dist/<fingerprint>/`, once per
 * change of its inputs: a later call with the same inputs only reads the files back (a few
 * ms), so the server can call this at start.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The console package's folder. */
export const CONSOLE_DIR = resolve(fileURLToPath(import.meta.url), '../..');
const REPO = resolve(CONSOLE_DIR, '../..');
const APP = join(CONSOLE_DIR, 'src/app');
const HELLO = join(REPO, 'examples/hello.mjs');
const HELLO_PY = join(REPO, 'examples/hello.py');

/** One built file, served under `/assets/<name>`. */
export interface ConsoleFile {
  name: string;
  contentType: string;
  body: Buffer;
}

/** The bundle: `index.html` (a template with `%NONCE%` and `%BOOT%`) and the hashed assets. */
export interface ConsoleAssets {
  indexHtml: string;
  files: Map<string, ConsoleFile>;
}

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.woff2': 'font/woff2',
};

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)],
  );
}

/** A hash of every input of the bundle: app sources, the SDK and protocol sources, the examples, the xterm version. */
function fingerprint(): string {
  const h = createHash('sha256');
  const inputs = [APP, join(REPO, 'packages/sdk/src'), join(REPO, 'packages/protocol/src')]
    .flatMap(walk)
    .filter((f) => !f.endsWith('.test.ts'));
  for (const f of [
    ...inputs,
    HELLO,
    HELLO_PY,
    join(REPO, 'node_modules/@xterm/xterm/package.json'),
    join(REPO, 'node_modules/@xterm/addon-fit/package.json'),
  ].sort()) {
    // Paths relative to the repository: a copy elsewhere (the release image's /opt/sandboxd)
    // finds the bundle built from the same inputs current.
    h.update(relative(REPO, f)).update('\0').update(readFileSync(f)).update('\0');
  }
  return h.digest('hex').slice(0, 20);
}

function typeOf(name: string): string {
  const ext = name.slice(name.lastIndexOf('.'));
  return TYPES[ext] ?? 'application/octet-stream';
}

function readBuilt(dir: string): ConsoleAssets {
  const files = new Map<string, ConsoleFile>();
  for (const f of readdirSync(join(dir, 'assets')))
    files.set(f, { name: f, contentType: typeOf(f), body: readFileSync(join(dir, 'assets', f)) });
  return { indexHtml: readFileSync(join(dir, 'index.html'), 'utf8'), files };
}

/**
 * The console bundle, built into `dist/<fingerprint>/` when no build of the current inputs
 * exists. Safe when several processes start at once: each builds into its own temporary
 * folder and renames it into place; whoever comes second uses the first one's build.
 */
export async function buildConsole(opts: { outDir?: string; force?: boolean } = {}): Promise<ConsoleAssets> {
  const root = opts.outDir ?? join(CONSOLE_DIR, 'dist');
  const stamp = fingerprint();
  const out = join(root, stamp);
  if (!opts.force && existsSync(join(out, 'STAMP'))) return readBuilt(out);
  const { build } = await import('esbuild');
  const tmp = join(root, `.tmp-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`);
  mkdirSync(join(tmp, 'assets'), { recursive: true });
  try {
    const result = await build({
      entryPoints: { app: join(APP, 'main.ts') },
      bundle: true,
      format: 'esm',
      platform: 'browser',
      target: ['es2022'],
      minify: true,
      legalComments: 'none',
      entryNames: '[name]-[hash]',
      assetNames: '[name]-[hash]',
      outdir: join(tmp, 'assets'),
      metafile: true,
      loader: { '.svg': 'file', '.woff2': 'file' },
      define: {
        __HELLO_MJS__: JSON.stringify(readFileSync(HELLO, 'utf8')),
        __HELLO_PY__: JSON.stringify(readFileSync(HELLO_PY, 'utf8')),
      },
      logLevel: 'silent',
    });
    const names = Object.keys(result.metafile.outputs).map((p) => basename(p));
    const js = names.find((n) => n.endsWith('.js'));
    const css = names.find((n) => n.endsWith('.css'));
    if (!js || !css) throw new Error(`console build produced no script or stylesheet: ${names.join(', ')}`);
    const html = readFileSync(join(APP, 'index.html'), 'utf8')
      .replaceAll('%APP_JS%', `/assets/${js}`)
      .replaceAll('%APP_CSS%', `/assets/${css}`);
    writeFileSync(join(tmp, 'index.html'), html);
    writeFileSync(join(tmp, 'assets', 'favicon.svg'), readFileSync(join(APP, 'favicon.svg')));
    writeFileSync(join(tmp, 'STAMP'), stamp);
    if (opts.force) rmSync(out, { recursive: true, force: true });
    try {
      renameSync(tmp, out);
    } catch (e) {
      // Another process put the same build in place first: use it.
      if (!existsSync(join(out, 'STAMP'))) throw e;
    }
    // Builds of older sources are of no use any more.
    for (const d of readdirSync(root))
      if (d !== stamp && !d.startsWith('.tmp-')) rmSync(join(root, d), { recursive: true, force: true });
    return readBuilt(out);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}
