/**
 * Markdown of an OpenAPI 3.x document: an index of the operations, then every operation
 * (method and path, summary, description, auth, parameters, request body fields, responses
 * with their bodies and headers) grouped by tag, then every component schema's fields.
 *
 * Takes the document as it is: whatever of tags, security, servers, descriptions and
 * `$ref`s it has is shown, nothing is required beyond `paths`. Deterministic: the same
 * document gives the same text. Anchors follow GitHub's heading slugs.
 */
import type { Slugger } from './slug.js';

type Json = Record<string, unknown>;
/** The parts of a schema this renderer reads. */
interface Schema {
  $ref?: string;
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  items?: Schema;
  properties?: Record<string, Schema>;
  patternProperties?: Record<string, Schema>;
  additionalProperties?: boolean | Schema;
  required?: string[];
  title?: string;
  description?: string;
  format?: string;
  pattern?: string;
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  maxProperties?: number;
}
interface Operation {
  method: string;
  path: string;
  op: Json;
}

const METHODS = ['get', 'put', 'post', 'patch', 'delete', 'head', 'options', 'trace'];

/** A table cell: one line, pipes escaped. */
function cell(text: string): string {
  return text.replace(/\r?\n+/g, ' ').replace(/\|/g, '\\|');
}

function table(head: string[], rows: string[][]): string[] {
  return [
    `| ${head.join(' | ')} |`,
    `| ${head.map(() => '---').join(' | ')} |`,
    ...rows.map((r) => `| ${r.map(cell).join(' | ')} |`),
  ];
}

/** `text` as a sentence, then the `facts` as one more: `Page size. 1 to 1000.` */
function sentences(text: string | undefined, facts: string[]): string {
  const first = text?.trim() ? `${text.trim()}${/[.!?:]$/.test(text.trim()) ? '' : '.'}` : '';
  const second = facts.length ? `${facts.join('; ')}.` : '';
  return [first, second.charAt(0).toUpperCase() + second.slice(1)].filter(Boolean).join(' ');
}

/** `1 to 10`, `at least 1`, `at most 10`, or '' without bounds. */
function range(min: number | undefined, max: number | undefined): string {
  if (min !== undefined && max !== undefined) return `${min} to ${max}`;
  if (min !== undefined) return `at least ${min}`;
  return max !== undefined ? `at most ${max}` : '';
}

const code = (v: unknown) => `\`${typeof v === 'string' ? v : JSON.stringify(v)}\``;

/** Renders `doc`; `slugger` must already hold the headings that come before this part. */
export function renderApiMarkdown(doc: Json, slugger: Slugger): string {
  const components = (doc.components ?? {}) as Record<string, Record<string, unknown>>;
  const schemas = (components.schemas ?? {}) as Record<string, Schema>;
  const deref = <T>(o: unknown): T => {
    let cur = o as { $ref?: string };
    for (let i = 0; i < 10 && cur && typeof cur.$ref === 'string'; i++) {
      const [, kind, name] = /^#\/components\/([^/]+)\/(.+)$/.exec(cur.$ref) ?? [];
      const next = kind ? components[kind]?.[decodeURIComponent(name)] : undefined;
      if (!next) break;
      cur = next as { $ref?: string };
    }
    return cur as T;
  };

  // Slugs are claimed in the order the headings appear, as GitHub does.
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries((doc.paths ?? {}) as Record<string, Json>))
    for (const method of METHODS) if (item[method]) ops.push({ method, path, op: item[method] as Json });
  const tagOrder = ((doc.tags ?? []) as Array<{ name: string; description?: string }>).map((t) => t.name);
  const tagOf = (o: Operation) => ((o.op.tags as string[] | undefined) ?? ['other'])[0];
  for (const o of ops) if (!tagOrder.includes(tagOf(o))) tagOrder.push(tagOf(o));
  const byTag = tagOrder
    .map((tag) => ({
      tag,
      description: ((doc.tags ?? []) as Array<{ name: string; description?: string }>).find((t) => t.name === tag)
        ?.description,
      ops: ops
        .filter((o) => tagOf(o) === tag)
        .sort((a, b) => a.path.localeCompare(b.path) || METHODS.indexOf(a.method) - METHODS.indexOf(b.method)),
    }))
    .filter((g) => g.ops.length);

  const out: string[] = [];
  const heading = (level: number, text: string) => {
    out.push(`${'#'.repeat(level)} ${text}`, '');
    return slugger.slug(text);
  };
  const opTitle = (o: Operation) => `${o.method.toUpperCase()} ${o.path}`;
  // Anchors of schemas and operations are known before the text that links to them.
  const preview = slugger.fork();
  preview.slug('Endpoints');
  const opAnchor = new Map<Operation, string>();
  for (const g of byTag) {
    preview.slug(`Routes: ${g.tag}`);
    for (const o of g.ops) opAnchor.set(o, preview.slug(opTitle(o)));
  }
  preview.slug('Schemas');
  const schemaNames = Object.keys(schemas).sort();
  const schemaAnchor = new Map(schemaNames.map((n) => [n, preview.slug(n)]));

  const refLink = (ref: string) => {
    const name = decodeURIComponent(ref.split('/').pop() ?? ref);
    const a = schemaAnchor.get(name);
    return a ? `[${name}](#${a})` : name;
  };
  const typeOf = (s: Schema | undefined): string => {
    if (!s || (typeof s === 'object' && Object.keys(s).length === 0)) return 'any';
    if (s.$ref) return refLink(s.$ref);
    if (s.const !== undefined) return code(s.const);
    if (s.enum) return s.enum.map(code).join(' | ');
    const alts = s.anyOf ?? s.oneOf;
    if (alts) return alts.map(typeOf).join(' or ');
    if (s.allOf) return s.allOf.map(typeOf).join(' and ');
    const types = [s.type ?? (s.properties ? 'object' : undefined)].flat().filter(Boolean) as string[];
    if (!types.length) return 'any';
    return types
      .map((t) => {
        if (t === 'array') return `array of ${typeOf(s.items)}`;
        if (t === 'object' && !s.properties) {
          const value = Object.values(s.patternProperties ?? {})[0];
          if (value) return `map of string to ${typeOf(value)}`;
          if (s.additionalProperties && typeof s.additionalProperties === 'object')
            return `map of string to ${typeOf(s.additionalProperties)}`;
          return 'object';
        }
        return s.format ? `${t} (${s.format})` : t;
      })
      .join(' or ');
  };
  /** The description, then the constraints: `Page size. 1 to 1000.` */
  const rules = (s: Schema): string => sentences(s.description, constraints(s));
  const constraints = (s: Schema): string[] => {
    const r: string[] = [];
    const [keyPattern, mapped] = Object.entries(s.patternProperties ?? {})[0] ?? [];
    if (keyPattern && keyPattern !== '^.*$') r.push(`keys match ${code(keyPattern)}`);
    if (mapped && !mapped.$ref && constraints(mapped).length) r.push(`values: ${constraints(mapped).join(', ')}`);
    const length = range(s.minLength, s.maxLength);
    if (length) r.push(`length ${length}`);
    const value = range(s.minimum, s.maximum);
    if (value) r.push(value);
    const items = range(s.minItems, s.maxItems);
    if (items) r.push(`${items} items`);
    if (s.maxProperties !== undefined) r.push(`at most ${s.maxProperties} entries`);
    if (s.pattern) r.push(`matches ${code(s.pattern)}`);
    if (s.default !== undefined) r.push(`default ${code(s.default)}`);
    return r;
  };
  /** Rows of an object's fields, nested inline objects as `a.b`; `$ref`s link instead. */
  const fieldRows = (s: Schema, prefix = '', depth = 0): string[][] => {
    const obj = deref<Schema>(s);
    const rows: string[][] = [];
    for (const part of obj.allOf ?? []) rows.push(...fieldRows(part, prefix, depth));
    for (const [name, raw] of Object.entries(obj.properties ?? {})) {
      const field = `${prefix}${name}`;
      rows.push([code(field), typeOf(raw), (obj.required ?? []).includes(name) ? 'yes' : 'no', rules(raw)]);
      if (!raw.$ref && raw.properties && depth < 4) rows.push(...fieldRows(raw, `${field}.`, depth + 1));
      if (!raw.$ref && raw.items?.properties && !raw.items.$ref && depth < 4)
        rows.push(...fieldRows(raw.items, `${field}[].`, depth + 1));
    }
    return rows;
  };
  /** A component schema: its description, then its fields, or its type and rules when it has no fields. */
  const schemaBody = (s: Schema): string[] => {
    const rows = fieldRows(s);
    if (!rows.length) return [[typeOf({ ...s, title: undefined }), rules(s)].filter(Boolean).join(': ')];
    return [
      ...(s.description ? [s.description.trim(), ''] : []),
      ...table(['field', 'type', 'required', 'rules'], rows),
    ];
  };
  const schemes = (components.securitySchemes ?? {}) as Record<string, Json>;
  const schemeText = (name: string) => {
    const sc = schemes[name];
    if (!sc) return name;
    if (sc.type === 'http' && String(sc.scheme).toLowerCase() === 'bearer') return '`Authorization: Bearer <key>`';
    if (sc.type === 'http') return `HTTP ${String(sc.scheme)}`;
    if (sc.type === 'apiKey')
      return `${code(sc.name)} ${sc.in === 'cookie' ? 'cookie' : sc.in === 'query' ? 'query parameter' : 'header'}`;
    return name;
  };
  const authOf = (o: Operation): string | null => {
    const sec = (o.op.security ?? doc.security) as Array<Record<string, string[]>> | undefined;
    if (!sec) return null;
    if (sec.length === 0 || sec.some((req) => Object.keys(req).length === 0)) return 'none';
    return sec.map((req) => Object.keys(req).map(schemeText).join(' and ')).join(', or ');
  };

  // The document's own words first.
  const info = (doc.info ?? {}) as Json;
  const servers = (doc.servers ?? []) as Array<{ url: string; description?: string }>;
  heading(2, 'Endpoints');
  out.push(
    `${[info.title ?? 'API', info.version ?? ''].map(String).join(' ').trim()}, OpenAPI ${String(doc.openapi ?? '')}.`,
    '',
  );
  if (info.description) out.push(String(info.description).trim(), '');
  for (const s of servers) out.push(`Server: ${code(s.url)}${s.description ? ` (${s.description})` : ''}.`, '');
  out.push(
    ...table(
      ['method', 'path', 'summary'],
      byTag.flatMap((g) =>
        g.ops.map((o) => [
          code(o.method.toUpperCase()),
          `[${code(o.path)}](#${opAnchor.get(o)})`,
          String(o.op.summary ?? ''),
        ]),
      ),
    ),
    '',
  );

  for (const g of byTag) {
    heading(3, `Routes: ${g.tag}`);
    if (g.description) out.push(g.description.trim(), '');
    for (const o of g.ops) {
      heading(4, opTitle(o));
      if (o.op.summary) out.push(sentences(String(o.op.summary), []), '');
      if (o.op.description) out.push(String(o.op.description).trim(), '');
      const facts: string[] = [];
      if (o.op.operationId) facts.push(`Operation id: ${code(o.op.operationId)}.`);
      const auth = authOf(o);
      if (auth) facts.push(`Auth: ${auth}.`);
      if (o.op.deprecated) facts.push('Deprecated.');
      if (facts.length) out.push(facts.join(' '), '');

      const params = ((o.op.parameters ?? []) as unknown[]).map((p) => deref<Json & { schema?: Schema }>(p));
      if (params.length) {
        out.push('Parameters:', '');
        out.push(
          ...table(
            ['name', 'in', 'type', 'required', 'rules'],
            params.map((p) => [
              code(p.name),
              String(p.in),
              typeOf(p.schema),
              p.required ? 'yes' : 'no',
              [p.description ? sentences(String(p.description), []) : '', p.schema ? rules(p.schema) : '']
                .filter(Boolean)
                .join(' '),
            ]),
          ),
          '',
        );
      }
      const body = o.op.requestBody ? deref<Json>(o.op.requestBody) : null;
      if (body) {
        for (const [type, media] of Object.entries((body.content ?? {}) as Record<string, { schema?: Schema }>)) {
          const schema = media.schema ?? {};
          out.push(`Request body (${code(type)}${body.required ? ', required' : ', optional'}): ${typeOf(schema)}`, '');
          if (fieldRows(schema).length)
            out.push(...table(['field', 'type', 'required', 'rules'], fieldRows(schema)), '');
        }
        if (body.description) out.push(String(body.description).trim(), '');
      }
      const responses = Object.entries((o.op.responses ?? {}) as Record<string, unknown>).sort(([a], [b]) =>
        a.localeCompare(b),
      );
      if (responses.length) {
        out.push('Responses:', '');
        out.push(
          ...table(
            ['status', 'meaning', 'body', 'headers'],
            responses.map(([status, raw]) => {
              const r = deref<Json>(raw);
              const content = Object.entries((r.content ?? {}) as Record<string, { schema?: Schema }>);
              return [
                code(status),
                String(r.description ?? ''),
                content
                  .map(
                    ([type, m]) =>
                      `${typeOf(m.schema)}${content.length > 1 || type !== 'application/json' ? ` (${code(type)})` : ''}`,
                  )
                  .join(', ') || 'none',
                Object.keys((r.headers ?? {}) as Json)
                  .map(code)
                  .join(', '),
              ];
            }),
          ),
          '',
        );
        // Bodies described in place (not by a schema of their own) are spelled out here.
        for (const [status, raw] of responses) {
          for (const [type, m] of Object.entries(
            (deref<Json>(raw).content ?? {}) as Record<string, { schema?: Schema }>,
          )) {
            if (!m.schema || m.schema.$ref || !fieldRows(m.schema).length) continue;
            out.push(
              `Body of ${code(status)} (${code(type)}):`,
              '',
              ...table(['field', 'type', 'required', 'rules'], fieldRows(m.schema)),
              '',
            );
          }
        }
      }
    }
  }

  heading(2, 'Schemas');
  out.push('Every schema the operations above name, with its fields.', '');
  for (const name of schemaNames) {
    heading(3, name);
    out.push(...schemaBody(schemas[name]), '');
  }
  return out.join('\n').replace(/\n{3,}/g, '\n\n');
}
