/**
 * The same cell transform as js-transform.mjs's `transformCell` (same contract, same output
 * shape), on acorn's ESTree instead of TypeScript's AST. Debian's nodejs depends on node-acorn,
 * so it is always there; it loads in milliseconds and some MB where TypeScript takes hundreds
 * of ms and about 50 MB, so JavaScript kernels use it when they find it.
 */
import { HELPER, wrap } from './js-transform.mjs';

/** Calls `fn` on every ESTree node under `node` (children before their siblings' children). */
function walk(node, fn) {
  fn(node);
  for (const key of Object.keys(node)) {
    const v = node[key];
    if (Array.isArray(v)) {
      for (const c of v) if (c && typeof c.type === 'string') walk(c, fn);
    } else if (v && typeof v.type === 'string' && key !== 'loc') {
      walk(v, fn);
    }
  }
}

/** Transforms a JavaScript cell with acorn; see js-transform.mjs. */
export function transformCellAcorn(acorn, code) {
  let ast;
  try {
    ast = acorn.parse(code, {
      ecmaVersion: 'latest',
      sourceType: 'module',
      allowAwaitOutsideFunction: true,
      allowHashBang: true,
    });
  } catch (err) {
    if (err instanceof SyntaxError) throw new SyntaxError(err.message);
    throw err;
  }

  const dynamicImports = [];
  walk(ast, (n) => {
    if (n.type === 'ImportExpression') dynamicImports.push([n.start, n.start + 'import'.length]);
  });
  dynamicImports.sort((a, b) => a[0] - b[0]);
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
  const text = (node) => slice(node.start, node.end);

  const hoisted = [];
  const body = ast.body;
  let out = '';
  let at = 0;
  body.forEach((st, i) => {
    out += slice(at, st.start);
    at = st.end;
    out += statement(st, i === body.length - 1);
  });
  out += slice(at, code.length);
  return wrap(out, hoisted);

  function statement(st, last) {
    switch (st.type) {
      case 'ExpressionStatement':
        return last ? `return { value: (${text(st.expression)}\n) };` : text(st);
      case 'VariableDeclaration':
        return declarations(st);
      case 'FunctionDeclaration':
        if (st.id) hoisted.push(st.id.name);
        return text(st);
      case 'ClassDeclaration':
        return st.id ? `;${st.id.name} = ${text(st)};` : text(st);
      case 'ImportDeclaration':
        return importDeclaration(st);
      case 'ExportNamedDeclaration':
        return st.declaration ? statement(st.declaration, false) : '';
      case 'ExportAllDeclaration':
        return '';
      case 'ExportDefaultDeclaration': {
        const d = st.declaration;
        if ((d.type === 'FunctionDeclaration' || d.type === 'ClassDeclaration') && d.id) {
          return statement(d, false);
        }
        return last ? `return { value: (${text(d)}\n) };` : `;(${text(d)});`;
      }
      default:
        return text(st);
    }
  }

  function declarations(decl) {
    return decl.declarations
      .map((d) => {
        const target = text(d.id);
        if (d.init) return `;(${target} = ${text(d.init)});`;
        if (d.id.type !== 'Identifier') return '';
        const name = JSON.stringify(target);
        return decl.kind === 'var'
          ? `;if (!(${name} in globalThis)) globalThis[${name}] = undefined;`
          : `;(${target} = undefined);`;
      })
      .join(' ');
  }

  function importDeclaration(st) {
    const load = `await ${HELPER}.import(${text(st.source)})`;
    if (st.specifiers.length === 0) return `;${load};`;
    const props = [];
    let ns = null;
    for (const sp of st.specifiers) {
      if (sp.type === 'ImportDefaultSpecifier') props.push(`default: ${sp.local.name}`);
      else if (sp.type === 'ImportNamespaceSpecifier') ns = sp.local.name;
      else {
        const imported = sp.imported.type === 'Identifier' ? sp.imported.name : text(sp.imported);
        props.push(imported === sp.local.name ? imported : `${imported}: ${sp.local.name}`);
      }
    }
    if (ns) {
      const rest = props.length ? ` ;({ ${props.join(', ')} } = ${ns});` : '';
      return `;(${ns} = ${load});${rest}`;
    }
    return `;({ ${props.join(', ')} } = ${load});`;
  }
}
