/**
 * docs/api-reference.md against spec/openapi.json: every operation, parameter, request body
 * field and response status is there, every anchor link resolves; and the generator keeps
 * the hand-written part, follows `$ref`s and shows what the document says about auth.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { renderApiMarkdown } from '../../scripts/api-docs/markdown.js';
import { apiReference, MARKER } from '../../scripts/api-docs/reference.js';
import { Slugger } from '../../scripts/api-docs/slug.js';

const ROOT = resolve(import.meta.dirname, '../..');
const spec = JSON.parse(readFileSync(join(ROOT, 'spec/openapi.json'), 'utf8'));
const doc = readFileSync(join(ROOT, 'docs/api-reference.md'), 'utf8');

/** The text of the `#### METHOD path` section of `md`. */
function section(md: string, title: string): string {
  const start = md.indexOf(`\n#### ${title}\n`);
  assert.ok(start >= 0, `no section ${title}`);
  const end = md.slice(start + 1).search(/\n#{2,4} /);
  return end < 0 ? md.slice(start) : md.slice(start, start + 1 + end);
}

/** Every `](#anchor)` of `md` that no heading of `md` makes. */
function brokenLinks(md: string): string[] {
  const slugger = new Slugger();
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of md.split('\n')) {
    if (/^```/.test(line)) fenced = !fenced;
    const m = !fenced && /^#{1,6}\s+(.*)$/.exec(line);
    if (m) anchors.add(slugger.slug(m[1]));
  }
  return [...md.matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1]).filter((a) => !anchors.has(a));
}

describe('API reference', () => {
  it('is generated from the current spec/openapi.json (gen-api-docs --check)', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/gen-api-docs.ts', '--check'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(r.status, 0, r.stderr);
  });

  it('shows every operation with its parameters, body fields and statuses; every link resolves', () => {
    let n = 0;
    for (const [path, item] of Object.entries(spec.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(item)) {
        const text = section(doc, `${method.toUpperCase()} ${path}`);
        for (const p of op.parameters ?? []) assert.match(text, new RegExp(`\\| \`${p.name}\` +\\| ${p.in} +\\|`));
        const ref = op.requestBody?.content?.['application/json']?.schema?.$ref as string | undefined;
        const body = ref ? spec.components.schemas[ref.split('/').pop()!] : undefined;
        for (const field of Object.keys(body?.properties ?? {}))
          assert.match(text, new RegExp(`\\| \`${field}\` +\\|`));
        for (const status of Object.keys(op.responses)) assert.match(text, new RegExp(`\\| \`${status}\` +\\|`));
        n++;
      }
    }
    assert.ok(n > 30, `${n} operations`);
    for (const name of Object.keys(spec.components.schemas)) assert.match(doc, new RegExp(`\\n### ${name}\\n`));
    assert.deepEqual(brokenLinks(doc), []);
  });

  it('keeps the hand-written part as it is and needs the marker', () => {
    const hand = '# Title\n\n## Sandboxes\n\nRules.\n';
    const out = apiReference(`${hand}\n${MARKER}\nold generated text\n`, { paths: {} });
    assert.ok(out.startsWith(`${hand}\n${MARKER}\n`));
    assert.doesNotMatch(out, /old generated text/);
    assert.throws(() => apiReference(hand, { paths: {} }), /no marker line/);
  });

  it('follows $refs of parameters, bodies and responses, and shows auth, tags and servers as the document has them', () => {
    const md = renderApiMarkdown(
      {
        openapi: '3.1.0',
        info: { title: 'T', version: '2' },
        servers: [{ url: '/' }],
        security: [{ key: [] }],
        tags: [{ name: 'things', description: 'All the things.' }],
        paths: {
          '/things/{id}': {
            put: {
              tags: ['things'],
              summary: 'Replace a thing',
              parameters: [{ $ref: '#/components/parameters/Id' }],
              requestBody: { $ref: '#/components/requestBodies/Thing' },
              responses: { '200': { $ref: '#/components/responses/Ok' } },
            },
          },
          '/health': { get: { security: [], responses: { '200': { description: 'Fine' } } } },
        },
        components: {
          securitySchemes: { key: { type: 'apiKey', in: 'header', name: 'X-Key' } },
          parameters: { Id: { name: 'id', in: 'path', required: true, schema: { type: 'string', maxLength: 9 } } },
          requestBodies: {
            Thing: {
              required: true,
              content: { 'application/json': { schema: { $ref: '#/components/schemas/Thing' } } },
            },
          },
          responses: {
            Ok: {
              description: 'Replaced',
              headers: { ETag: { schema: { type: 'string' } } },
              content: { 'application/json': { schema: { $ref: '#/components/schemas/Thing' } } },
            },
          },
          schemas: {
            Thing: {
              type: 'object',
              required: ['size'],
              properties: {
                size: { type: 'integer', minimum: 1 },
                tags: { type: 'array', items: { enum: ['a', 'b'] } },
              },
            },
          },
        },
      },
      new Slugger(),
    );
    const put = section(md, 'PUT /things/{id}');
    assert.match(put, /Auth: `X-Key` header\./);
    assert.match(put, /\| `id` \| path \| string \| yes \| Length at most 9\. \|/);
    assert.match(put, /Request body \(`application\/json`, required\): \[Thing\]\(#thing\)/);
    assert.match(put, /\| `size` \| integer \| yes \| At least 1\. \|/);
    assert.match(put, /\| `tags` \| array of `a` \\\| `b` \| no \|/);
    assert.match(put, /\| `200` \| Replaced \| \[Thing\]\(#thing\) \| `ETag` \|/);
    assert.match(section(md, 'GET /health'), /Auth: none\./);
    assert.match(md, /### Routes: things\n\nAll the things\./);
    assert.match(md, /Server: `\/`/);
    assert.deepEqual(brokenLinks(md), []);
  });
});
