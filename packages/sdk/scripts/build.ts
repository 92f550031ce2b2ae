/**
 * Builds `packages/sdk/dist/`: a self-contained npm package of the SDK for projects outside
 * this repo (`npm install ./packages/sdk/dist`, or `npm pack` it).
 *   node --import tsx packages/sdk/scripts/build.ts
 *
 * - index.js: one ES module for Node 20+ and browsers (esbuild; the protocol's error table
 *   is bundled, the schemas are not; `ws` stays a dynamic import on the Node path only).
 * - *.d.ts: declarations, with the protocol-derived types of types.ts expanded into plain
 *   object types, so the package needs neither `@sandboxd/protocol` nor `typebox`.
 * Fails when the bundle imports a `node:` module or a declaration imports another package.
 */
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import ts from 'typescript';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SRC = join(ROOT, 'src');
const DIST = join(ROOT, 'dist');
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };

function fail(msg: string): never {
  process.stderr.write(`sdk build: ${msg}\n`);
  process.exit(1);
}

rmSync(DIST, { recursive: true, force: true });
mkdirSync(DIST, { recursive: true });

// 1. The bundle. Protocol modules are pure data: let esbuild drop what the SDK does not use.
await build({
  entryPoints: [join(SRC, 'index.ts')],
  outfile: join(DIST, 'index.js'),
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  target: 'es2022',
  sourcemap: true,
  logLevel: 'warning',
  plugins: [
    {
      name: 'pure-protocol',
      setup(b) {
        b.onResolve({ filter: /^@sandboxd\/protocol/ }, () => ({ sideEffects: false }));
      },
    },
  ],
});
const js = readFileSync(join(DIST, 'index.js'), 'utf8');
if (/from\s*["']node:|import\(["']node:/.test(js)) fail('the bundle imports a node: module; browsers cannot load it');

// 2. Declarations of src/, emitted by the compiler.
const options: ts.CompilerOptions = {
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  lib: ['lib.es2022.d.ts', 'lib.dom.d.ts', 'lib.dom.iterable.d.ts'],
  types: [],
  strict: true,
  skipLibCheck: true,
  declaration: true,
  emitDeclarationOnly: true,
};
const program = ts.createProgram([join(SRC, 'index.ts')], options);
const diags = ts.getPreEmitDiagnostics(program);
if (diags.length) fail(ts.formatDiagnosticsWithColorAndContext(diags, ts.createCompilerHost(options)));
program.emit(undefined, (file, text) => {
  const rel = relative(SRC, file);
  if (rel.startsWith('..') || !rel.endsWith('.d.ts')) return;
  mkdirSync(dirname(join(DIST, rel)), { recursive: true });
  writeFileSync(join(DIST, rel), text);
});

// 3. types.d.ts with every alias expanded (they point into @sandboxd/protocol and typebox).
const checker = program.getTypeChecker();
const typesFile = program.getSourceFile(join(SRC, 'types.ts')) ?? fail('src/types.ts is missing');
const flags =
  ts.TypeFormatFlags.NoTruncation |
  ts.TypeFormatFlags.InTypeAlias |
  ts.TypeFormatFlags.UseSingleQuotesForStringLiteralType;
const out: string[] = ['/** Wire types of sandboxd, expanded from the protocol schemas when the SDK was built. */'];
for (const st of typesFile.statements) {
  if (!ts.isTypeAliasDeclaration(st)) continue;
  const doc = ts
    .getJSDocCommentsAndTags(st)
    .map((d) => d.getText(typesFile))
    .join('\n');
  if (doc) out.push(doc);
  out.push(`export type ${st.name.text} = ${checker.typeToString(checker.getTypeAtLocation(st.name), st, flags)};`);
}
writeFileSync(join(DIST, 'types.d.ts'), `${out.join('\n')}\n`);

// 4. No declaration may reach outside the package.
for (const f of readdirSync(DIST, { recursive: true }) as string[]) {
  if (!f.endsWith('.d.ts')) continue;
  const text = readFileSync(join(DIST, f), 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/\/\/.*$/gm, '');
  for (const m of text.matchAll(/(?:from|import\()\s*['"]([^'"]+)['"]/g)) {
    if (!m[1].startsWith('.')) fail(`${f} imports "${m[1]}", which the package does not ship`);
  }
}

// 5. The package manifest and readme.
const manifest = {
  name: '@sandboxd/sdk',
  version: pkg.version,
  description: 'TypeScript client of sandboxd: sandboxes, commands, terminals, volumes, keys',
  type: 'module',
  main: './index.js',
  types: './index.d.ts',
  exports: { '.': { types: './index.d.ts', default: './index.js' } },
  sideEffects: false,
  engines: { node: '>=20' },
  peerDependencies: { ws: '>=8' },
  peerDependenciesMeta: { ws: { optional: true } },
  license: 'MIT',
};
writeFileSync(join(DIST, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
cpSync(join(ROOT, 'README.md'), join(DIST, 'README.md'));
process.stdout.write(
  `sdk build: wrote ${relative(process.cwd(), DIST) || DIST} (index.js ${(js.length / 1024).toFixed(1)} KiB)\n`,
);
