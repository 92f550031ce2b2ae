/**
 * The steps of the SDK build (see dist.ts for the package they make): bundle, declarations,
 * expanded wire types, a check that nothing reaches outside the package, manifest and readme.
 */
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { build } from 'esbuild';
import ts from 'typescript';

/** Writes the package into `out` (emptied first) from the sources in `src`; returns the bundle's size in bytes. */
export async function buildSdkInto(out: string, src: string): Promise<number> {
  const root = resolve(src, '..');
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
  const fail = (msg: string): never => {
    throw new Error(`sdk build: ${msg}`);
  };
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });

  // 1. The bundle. Protocol modules are pure data: let esbuild drop what the SDK does not use.
  await build({
    entryPoints: [join(src, 'index.ts')],
    outfile: join(out, 'index.js'),
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
  const js = readFileSync(join(out, 'index.js'), 'utf8');
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
  const program = ts.createProgram([join(src, 'index.ts')], options);
  const diags = ts.getPreEmitDiagnostics(program);
  if (diags.length) fail(ts.formatDiagnosticsWithColorAndContext(diags, ts.createCompilerHost(options)));
  program.emit(undefined, (file, text) => {
    const rel = relative(src, file);
    if (rel.startsWith('..') || !rel.endsWith('.d.ts')) return;
    mkdirSync(dirname(join(out, rel)), { recursive: true });
    writeFileSync(join(out, rel), text);
  });

  // 3. types.d.ts with every alias expanded (they point into @sandboxd/protocol and typebox).
  const checker = program.getTypeChecker();
  const typesFile = program.getSourceFile(join(src, 'types.ts')) ?? fail('src/types.ts is missing');
  const flags =
    ts.TypeFormatFlags.NoTruncation |
    ts.TypeFormatFlags.InTypeAlias |
    ts.TypeFormatFlags.UseSingleQuotesForStringLiteralType;
  const lines: string[] = ['/** Wire types of sandboxd, expanded from the protocol schemas when the SDK was built. */'];
  for (const st of typesFile.statements) {
    if (!ts.isTypeAliasDeclaration(st)) continue;
    const doc = ts
      .getJSDocCommentsAndTags(st)
      .map((d) => d.getText(typesFile))
      .join('\n');
    if (doc) lines.push(doc);
    lines.push(`export type ${st.name.text} = ${checker.typeToString(checker.getTypeAtLocation(st.name), st, flags)};`);
  }
  writeFileSync(join(out, 'types.d.ts'), `${lines.join('\n')}\n`);

  // 4. No declaration may reach outside the package.
  for (const f of readdirSync(out, { recursive: true }) as string[]) {
    if (!f.endsWith('.d.ts')) continue;
    const text = readFileSync(join(out, f), 'utf8')
      .replace(/\/\*[\s\S]*?\*\//g, '')
      .replace(/\/\/.*$/gm, '');
    for (const m of text.matchAll(/(?:from|import\()\s*['"]([^'"]+)['"]/g)) {
      if (!m[1].startsWith('.')) fail(`${f} imports "${m[1]}", which the package does not ship`);
    }
  }

  // 5. The package manifest and readme. `files` keeps the build stamp (and anything else) out of `npm pack`.
  const manifest = {
    name: '@sandboxd/sdk',
    version: pkg.version,
    description: 'TypeScript client of sandboxd: sandboxes, commands, terminals, volumes, keys',
    type: 'module',
    main: './index.js',
    types: './index.d.ts',
    exports: { '.': { types: './index.d.ts', default: './index.js' } },
    files: ['*.js', '*.js.map', '*.d.ts'],
    sideEffects: false,
    engines: { node: '>=20' },
    peerDependencies: { ws: '>=8' },
    peerDependenciesMeta: { ws: { optional: true } },
    license: 'MIT',
  };
  writeFileSync(join(out, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  cpSync(join(root, 'README.md'), join(out, 'README.md'));
  return js.length;
}
