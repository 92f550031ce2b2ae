/**
 * Turns one notebook cell of JavaScript (or TypeScript, transpiled first) into the source of an
 * async function that runs it in the kernel's persistent global scope.
 *
 * Contract of the returned source (`{ source, prefixLength }`): `source` is a script that
 * evaluates to an `async function`; calling it runs the cell and resolves to `{ value }` when the
 * cell's last top-level statement is an expression (its value), otherwise to `undefined`.
 * Top-level `const`/`let`/`var`/`class` declarations become assignments to globals and function
 * declarations are copied to globals, so the next cell sees them and may declare them again.
 * Static `import` declarations become `await <helper>.import(spec)` with the bindings assigned to
 * globals; dynamic `import(x)` calls anywhere become `<helper>.import(x)` (scripts compiled by `vm`
 * have no dynamic import of their own). `export` modifiers are dropped. Line numbers of the cell
 * are kept (the wrapper is on the first line), so stack traces point at the cell's lines.
 * A syntax error throws a `SyntaxError` whose message carries `(line:column)`.
 */

/** Name of the global object the kernel installs its helpers under (import, display...). */
export const HELPER = '__sandboxd_kernel';

/**
 * Transpiles TypeScript to JavaScript with `ts.transpileModule` (ESNext module and ES2022
 * target: top-level await and imports are kept as written; types are erased, not checked, as
 * Deno's Jupyter kernel that E2B uses for TypeScript does). Imports are kept even when the
 * cell does not use them (a later cell may).
 */
export function transpileTypeScript(ts, code) {
  const compilerOptions = {
    module: ts.ModuleKind.ESNext,
    target: ts.ScriptTarget.ES2022,
    sourceMap: false,
    removeComments: false,
  };
  const [major] = String(ts.version).split('.').map(Number);
  if (major >= 5) compilerOptions.verbatimModuleSyntax = true;
  else {
    compilerOptions.preserveValueImports = true;
    compilerOptions.importsNotUsedAsValues = ts.ImportsNotUsedAsValues?.Preserve ?? 1;
  }
  const out = ts.transpileModule(code, {
    compilerOptions,
    fileName: 'cell.ts',
    reportDiagnostics: true,
  });
  const syntax = (out.diagnostics ?? []).find((d) => d.file && d.category === ts.DiagnosticCategory.Error);
  if (syntax) throw diagnosticError(ts, syntax);
  return out.outputText;
}

function diagnosticError(ts, d) {
  const text = ts.flattenDiagnosticMessageText(d.messageText, '\n');
  if (!d.file || d.start === undefined) return new SyntaxError(text);
  const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
  const err = new SyntaxError(`${text} (${line + 1}:${character + 1})`);
  return err;
}

/** Transforms a JavaScript cell; see the module comment. */
export function transformCell(ts, code) {
  const K = ts.SyntaxKind;
  const sf = ts.createSourceFile('cell.mjs', code, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
  const diags = sf.parseDiagnostics ?? [];
  if (diags.length > 0) throw diagnosticError(ts, { ...diags[0], file: sf });

  // Positions of `import` keywords of dynamic import calls, rewritten wherever they appear.
  const dynamicImports = [];
  const visit = (node) => {
    if (node.kind === K.CallExpression && node.expression.kind === K.ImportKeyword) {
      dynamicImports.push([node.expression.getStart(sf), node.expression.end]);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  /** Source text of [start, end) with the dynamic imports inside it rewritten. */
  const slice = (start, end) => {
    let out = '';
    let at = start;
    for (const [s, e] of dynamicImports) {
      if (s < start || e > end) continue;
      out += `${code.slice(at, s)}${HELPER}.import`;
      at = e;
    }
    return out + code.slice(at, end);
  };
  const text = (node) => slice(node.getStart(sf), node.end);

  const hoisted = [];
  const statements = sf.statements;
  let out = '';
  let at = 0;
  statements.forEach((st, i) => {
    const start = st.getStart(sf);
    out += slice(at, start);
    at = st.end;
    const last = i === statements.length - 1;
    out += statement(st, last);
  });
  out += slice(at, code.length);

  /** The statement's text without its `export` / `export default` modifiers. */
  function withoutExport(st) {
    const mods = (ts.getModifiers?.(st) ?? st.modifiers ?? []).filter(
      (m) => m.kind === K.ExportKeyword || m.kind === K.DefaultKeyword,
    );
    if (mods.length === 0) return text(st);
    const end = mods[mods.length - 1].end;
    return slice(end, st.end).replace(/^\s+/, '');
  }

  function statement(st, last) {
    switch (st.kind) {
      case K.ExpressionStatement:
        if (last) {
          const expr = text(st.expression);
          return `return { value: (${expr}\n) };`;
        }
        return text(st);
      case K.VariableStatement:
        return declarations(st.declarationList);
      case K.FunctionDeclaration:
        if (st.name) hoisted.push(st.name.text);
        return withoutExport(st);
      case K.ClassDeclaration:
        if (!st.name) return withoutExport(st);
        return `;${st.name.text} = ${withoutExport(st)};`;
      case K.ImportDeclaration:
        return importDeclaration(st);
      case K.ExportDeclaration:
        return '';
      case K.ExportAssignment:
        return last ? `return { value: (${text(st.expression)}\n) };` : `;(${text(st.expression)});`;
      default:
        return text(st);
    }
  }

  function declarations(list) {
    const isVar = (list.flags & (ts.NodeFlags.Let | ts.NodeFlags.Const)) === 0;
    const parts = list.declarations.map((d) => {
      const target = text(d.name);
      if (d.initializer) return `;(${target} = ${text(d.initializer)});`;
      if (d.name.kind !== K.Identifier) return '';
      // `var x;` keeps a value x already has; `let x;` starts it anew as undefined.
      return isVar
        ? `;if (!(${JSON.stringify(target)} in globalThis)) globalThis[${JSON.stringify(target)}] = undefined;`
        : `;(${target} = undefined);`;
    });
    return parts.join(' ');
  }

  function importDeclaration(st) {
    const spec = text(st.moduleSpecifier);
    const load = `await ${HELPER}.import(${spec})`;
    const clause = st.importClause;
    if (!clause) return `;${load};`;
    if (clause.isTypeOnly) return '';
    const props = [];
    if (clause.name) props.push(`default: ${clause.name.text}`);
    const nb = clause.namedBindings;
    if (nb && nb.kind === K.NamespaceImport) {
      const ns = nb.name.text;
      if (props.length === 0) return `;(${ns} = ${load});`;
      return `;(${ns} = ${load}); ;({ ${props.join(', ')} } = ${ns});`;
    }
    if (nb && nb.kind === K.NamedImports) {
      for (const el of nb.elements) {
        if (el.isTypeOnly) continue;
        const local = el.name.text;
        const imported = el.propertyName ? text(el.propertyName) : local;
        props.push(imported === local ? local : `${imported}: ${local}`);
      }
    }
    if (props.length === 0) return `;${load};`;
    return `;({ ${props.join(', ')} } = ${load});`;
  }

  return wrap(out, hoisted);
}

/** The cell's transformed body in the async wrapper; function declarations copied to globals. */
export function wrap(body, hoisted) {
  const prefix = `(async function () { ${hoisted.map((n) => `globalThis.${n} = ${n}; `).join('')}`;
  return { source: `${prefix}${stripUseStrict(body)}\n})`, prefixLength: prefix.length };
}

/**
 * Drops a leading "use strict" directive: cells run sloppy so that assignments to names the
 * cell declared create globals (strict code inside functions is unaffected).
 */
function stripUseStrict(src) {
  return src.replace(/^(\s*)(['"])use strict\2;?/, '$1');
}
