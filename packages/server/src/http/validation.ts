import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify';
import type { TSchema } from 'typebox';
import { Compile } from 'typebox/compile';

type Validator = ReturnType<typeof Compile>;
const NO_BODY = {
  keyword: 'body',
  instancePath: '',
  message: 'is required',
} as unknown as FastifySchemaValidationError;
const cache = new WeakMap<object, Validator>();

/**
 * Validates with TypeBox's compiler. Bodies are taken as sent (no coercion; unknown
 * fields fail through `additionalProperties: false`). Query and path strings are
 * converted strictly: only `^-?\d+$` becomes an integer, only `true`/`false` a boolean.
 */
export const validatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema, httpPart }) => {
  let check = cache.get(schema);
  if (!check) {
    check = Compile(schema);
    cache.set(schema, check);
  }
  const c = check;
  return (value: unknown) => {
    // No body at all, an empty one sent as JSON (fastify hands it over as null), or `null`.
    if (httpPart === 'body' && (value === undefined || value === null)) return { error: [NO_BODY] };
    const v = httpPart === 'body' ? value : convertStrings(schema as Record<string, unknown>, value);
    if (c.Check(v)) return { value: v };
    return { error: c.Errors(v) as unknown as FastifySchemaValidationError[] };
  };
};

function convertStrings(schema: Record<string, unknown>, value: unknown): unknown {
  const props = schema.properties as Record<string, { type?: string }> | undefined;
  if (!props || typeof value !== 'object' || value === null) return value;
  const out: Record<string, unknown> = { ...(value as Record<string, unknown>) };
  for (const [k, s] of Object.entries(props)) {
    const x = out[k];
    if (typeof x !== 'string') continue;
    if (s.type === 'integer' && /^-?\d{1,15}$/.test(x)) out[k] = Number(x);
    else if (s.type === 'boolean' && (x === 'true' || x === 'false')) out[k] = x === 'true';
  }
  return out;
}
