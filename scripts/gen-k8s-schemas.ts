/**
 * Writes deploy/kubernetes/schemas/*.json: strict JSON Schemas (draft-07) of the Kubernetes
 * kinds that deploy/kubernetes renders, for the offline check in test/deploy/kubernetes.test.ts.
 *   node --import tsx scripts/gen-k8s-schemas.ts          # write
 *   node --import tsx scripts/gen-k8s-schemas.ts --check  # exit 1 when the committed files drift
 *
 * Source: the models of @kubernetes/client-node (the exact version in package-lock.json),
 * which OpenAPI Generator made from the Kubernetes OpenAPI spec (1.4.0: spec v1.34.0). Each
 * model lists its fields with their types and formats (`attributeTypeMap`), and its .d.ts
 * marks the spec's required fields (no `?`). That is every fact the check needs (field
 * names, types, integer formats, required fields), and it is on this machine: no network,
 * no cluster. Every object gets `additionalProperties: false`, so a misspelt or misplaced
 * field fails like `kubectl apply --validate=strict` would. Not carried over: enums (the
 * spec has none of the fields checked here as enums), patterns, and x-kubernetes-*
 * extensions (list-map keys, int-or-string beyond what is noted below).
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';

type Schema = Record<string, unknown>;
type Attr = { name: string; baseName: string; type: string; format: string };
type Model = { attributeTypeMap?: Attr[] };

/** The kinds the manifests use: apiVersion, kind, model name, file name. */
export const KINDS = [
  ['v1', 'Namespace', 'V1Namespace'],
  ['v1', 'ServiceAccount', 'V1ServiceAccount'],
  ['v1', 'Secret', 'V1Secret'],
  ['v1', 'ConfigMap', 'V1ConfigMap'],
  ['v1', 'Service', 'V1Service'],
  ['apps/v1', 'Deployment', 'V1Deployment'],
  ['apps/v1', 'DaemonSet', 'V1DaemonSet'],
  ['networking.k8s.io/v1', 'Ingress', 'V1Ingress'],
  ['rbac.authorization.k8s.io/v1', 'Role', 'V1Role'],
  ['rbac.authorization.k8s.io/v1', 'RoleBinding', 'V1RoleBinding'],
] as const;

/** Fields the spec types as resource.Quantity (int-or-string) that the models type as string. */
const QUANTITY_MAPS = new Set(['V1ResourceRequirements.limits', 'V1ResourceRequirements.requests']);
const QUANTITIES = new Set(['V1EmptyDirVolumeSource.sizeLimit']);

export function schemaFileName(apiVersion: string, kind: string): string {
  return `${apiVersion.replace(/[./]/g, '-')}-${kind.toLowerCase()}.json`;
}

const require = createRequire(import.meta.url);
const modelsDir = join(dirname(require.resolve('@kubernetes/client-node')), 'gen', 'models');
const version = (
  JSON.parse(readFileSync(join(modelsDir, '..', '..', '..', 'package.json'), 'utf8')) as { version: string }
).version;
const specVersion = /OpenAPI spec version: (\S+)/.exec(readFileSync(join(modelsDir, 'V1Pod.d.ts'), 'utf8'))?.[1];

/** The model's required fields: its .d.ts declares them without `?`. */
function requiredOf(model: string): string[] {
  const dts = readFileSync(join(modelsDir, `${model}.d.ts`), 'utf8');
  return [...dts.matchAll(/^ {4}'([^']+)'(\?)?:/gm)].filter((m) => !m[2]).map((m) => m[1]);
}

function typeSchema(type: string, format: string, refs: Set<string>): Schema {
  const arr = /^Array<(.+)>$/.exec(type);
  if (arr) return { type: 'array', items: typeSchema(arr[1], '', refs) };
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) return { type: 'object', additionalProperties: typeSchema(map[1], '', refs) };
  switch (type) {
    case 'string':
      return { type: 'string' };
    case 'Date':
      return { type: 'string' };
    case 'boolean':
      return { type: 'boolean' };
    case 'number':
      return format === 'int32' || format === 'int64' ? { type: 'integer' } : { type: 'number' };
    case 'IntOrString':
      return { type: ['integer', 'string'] };
    case 'any':
    case 'object':
      return {};
  }
  if (!/^[A-Z][A-Za-z]*V\d\w*$|^V\d\w*$/.test(type)) throw new Error(`unknown model type ${type}`);
  refs.add(type);
  return { $ref: `#/definitions/${type}` };
}

function modelSchema(name: string, refs: Set<string>): Schema {
  const model = (k8s as unknown as Record<string, Model>)[name];
  if (!model?.attributeTypeMap) throw new Error(`@kubernetes/client-node has no model ${name}`);
  const properties: Record<string, Schema> = {};
  for (const a of model.attributeTypeMap) {
    const key = `${name}.${a.baseName}`;
    if (QUANTITY_MAPS.has(key)) properties[a.baseName] = { type: 'object', additionalProperties: QUANTITY };
    else if (QUANTITIES.has(key)) properties[a.baseName] = QUANTITY;
    else properties[a.baseName] = typeSchema(a.type, a.format, refs);
  }
  const byName = new Map(model.attributeTypeMap.map((a) => [a.name, a.baseName]));
  const required = requiredOf(name).map((n) => byName.get(n) ?? n);
  return { type: 'object', properties, ...(required.length ? { required } : {}), additionalProperties: false };
}
const QUANTITY: Schema = { type: ['string', 'number'] };

/** A self-contained schema for one kind: the model and every model it reaches. */
export function kindSchema(apiVersion: string, kind: string, model: string): Schema {
  const definitions: Record<string, Schema> = {};
  const todo = new Set([model]);
  while (todo.size) {
    const [next] = todo;
    todo.delete(next);
    if (definitions[next]) continue;
    const refs = new Set<string>();
    definitions[next] = modelSchema(next, refs);
    for (const r of refs) if (!definitions[r]) todo.add(r);
  }
  const sorted = Object.fromEntries(Object.entries(definitions).sort(([a], [b]) => a.localeCompare(b)));
  return {
    $schema: 'http://json-schema.org/draft-07/schema#',
    $comment: `${apiVersion} ${kind}, generated by scripts/gen-k8s-schemas.ts from @kubernetes/client-node ${version} (Kubernetes OpenAPI spec ${specVersion}); do not edit`,
    allOf: [
      { $ref: `#/definitions/${model}` },
      {
        type: 'object',
        properties: { apiVersion: { const: apiVersion }, kind: { const: kind } },
        required: ['apiVersion', 'kind', 'metadata'],
      },
    ],
    definitions: sorted,
  };
}

const outDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'deploy', 'kubernetes', 'schemas');

function main(): void {
  const files = new Map<string, string>();
  for (const [apiVersion, kind, model] of KINDS) {
    files.set(schemaFileName(apiVersion, kind), `${JSON.stringify(kindSchema(apiVersion, kind, model), null, 2)}\n`);
  }
  if (process.argv.includes('--check')) {
    const stale: string[] = [];
    const present = new Set(readdirSync(outDir).filter((f) => f.endsWith('.json')));
    for (const [file, text] of files) {
      let current = '';
      try {
        current = readFileSync(join(outDir, file), 'utf8');
      } catch {
        /* missing counts as drift */
      }
      if (current !== text) stale.push(file);
      present.delete(file);
    }
    stale.push(...[...present].map((f) => `${f} (not generated)`));
    if (stale.length) {
      process.stderr.write(
        `deploy/kubernetes/schemas out of date: ${stale.join(', ')}; run: node --import tsx scripts/gen-k8s-schemas.ts\n`,
      );
      process.exit(1);
    }
    process.stdout.write('deploy/kubernetes/schemas are up to date\n');
    return;
  }
  for (const [file, text] of files) writeFileSync(join(outDir, file), text);
  process.stdout.write(`wrote ${files.size} schemas to ${outDir}\n`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
