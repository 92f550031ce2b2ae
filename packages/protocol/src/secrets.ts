import { Type, type Static } from 'typebox';
import { DateTime } from './common.js';

/**
 * Secrets that never enter a sandbox: an account's named values, encrypted at rest, that the
 * egress proxy puts into requests to the domains a sandbox's injection rules name. The
 * sandbox only ever holds a placeholder. See docs/secrets.md.
 */

/**
 * A secret's name: a letter or `_`, then letters, digits, `_` or `-`; 1..64, case-sensitive.
 * The sandbox's environment variable holding the placeholder is the name with `-` as `_`.
 */
export const SECRET_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_-]{0,63}$';
/** Longest value in bytes. */
export const MAX_SECRET_VALUE_BYTES = 8192;
/** Most secrets an account holds. */
export const MAX_SECRETS_PER_ACCOUNT = 500;
/** Most injection rules on one sandbox. */
export const MAX_SECRET_RULES = 16;
/** Most domains one rule names. */
export const MAX_SECRET_RULE_DOMAINS = 16;
/** The token of a rule's `format` that stands for the value. */
export const SECRET_VALUE_TOKEN = '{value}';
/**
 * Request headers a rule may not set (the proxy owns framing, routing and hop-by-hop
 * headers), compared lowercase.
 */
export const FORBIDDEN_SECRET_HEADERS = [
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'expect',
] as const;
/** An HTTP header name (RFC 9110 token), 1..128. */
export const SECRET_HEADER_PATTERN = "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$";

/** What a placeholder looks like: `sbx-secret-` and 24 hex digits (made by the server). */
export const SECRET_PLACEHOLDER_PATTERN = '^sbx-secret-[0-9a-f]{24}$';

/**
 * The variables a sandbox with rules gets for the egress CA (docs/secrets.md, Trust in the
 * sandbox): these point at the system bundle holding it, {@link SECRET_TRUST_CA_ENV} at the CA
 * alone. No secret may be named like one (its placeholder would take the variable's place).
 */
export const SECRET_TRUST_BUNDLE_ENV = ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE'] as const;
export const SECRET_TRUST_CA_ENV = 'NODE_EXTRA_CA_CERTS';

/** The environment variable a sandbox gets for secret `name`. */
export function secretEnvName(name: string): string {
  return name.replace(/-/g, '_');
}

/**
 * Why `value` cannot be a secret's value, or null: 1..{@link MAX_SECRET_VALUE_BYTES} bytes of
 * printable ASCII (0x20-0x7E; it goes into HTTP request heads, where anything else would
 * split or break them).
 */
export function secretValueProblem(value: string): string | null {
  if (value.length === 0) return 'a value is at least 1 character';
  if (/[^\x20-\x7e]/.test(value))
    return 'a value is printable ASCII only (no control characters, newlines or non-ASCII): it goes into HTTP request heads';
  // ASCII: one byte a character.
  if (value.length > MAX_SECRET_VALUE_BYTES) return `a value is at most ${MAX_SECRET_VALUE_BYTES} bytes`;
  return null;
}

/** A secret as the API shows it: never its value. */
export const SecretSchema = Type.Object(
  {
    name: Type.String({ pattern: SECRET_NAME_PATTERN }),
    description: Type.String({ maxLength: 1024 }),
    /** 1 at creation, +1 at each change of the value. */
    version: Type.Integer({ minimum: 1 }),
    createdAt: DateTime,
    updatedAt: DateTime,
  },
  { title: 'Secret', additionalProperties: false },
);
export type Secret = Static<typeof SecretSchema>;

/** `POST /api/v1/secrets`. */
export const SecretCreateSchema = Type.Object(
  {
    name: Type.String({ pattern: SECRET_NAME_PATTERN }),
    value: Type.String({
      minLength: 1,
      maxLength: MAX_SECRET_VALUE_BYTES,
      description: 'Printable ASCII. Write-only: no answer ever carries it.',
    }),
    description: Type.Optional(Type.String({ maxLength: 1024 })),
  },
  { title: 'SecretCreate', additionalProperties: false },
);
export type SecretCreate = Static<typeof SecretCreateSchema>;

/**
 * `PUT /api/v1/secrets/{name}`: creates the secret (201) or changes it (200); a new `value`
 * reaches the proxies of every sandbox whose rules name it before the answer.
 */
export const SecretPutSchema = Type.Object(
  {
    value: Type.Optional(
      Type.String({ minLength: 1, maxLength: MAX_SECRET_VALUE_BYTES, description: 'Required to create.' }),
    ),
    description: Type.Optional(Type.String({ maxLength: 1024 })),
  },
  { title: 'SecretPut', additionalProperties: false },
);
export type SecretPut = Static<typeof SecretPutSchema>;

export const SecretReplySchema = Type.Object(
  { secret: SecretSchema },
  { title: 'SecretReply', additionalProperties: false },
);
export const SecretListSchema = Type.Object(
  { secrets: Type.Array(SecretSchema) },
  { title: 'SecretList', additionalProperties: false },
);

/**
 * One injection rule of a sandbox: requests through sandboxd's egress proxy to one of
 * `domains` get the secret's value. With `header`, that header is set to `format` with
 * `{value}` replaced (replacing any the sandbox sent), and nothing else; without, the
 * placeholder is replaced by the value wherever it appears in the request head (request
 * target and header values). Requests to any other destination carry the placeholder untouched.
 */
export const SecretRuleSchema = Type.Object(
  {
    secret: Type.String({ pattern: SECRET_NAME_PATTERN }),
    domains: Type.Array(Type.String({ minLength: 1, maxLength: 256 }), {
      minItems: 1,
      maxItems: MAX_SECRET_RULE_DOMAINS,
      description:
        'Names as egress rules write them (`api.openai.com`, or `*.example.com` for every name under it); each must be allowed by the egress.',
    }),
    header: Type.Optional(Type.String({ pattern: SECRET_HEADER_PATTERN })),
    format: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 1024,
        description: 'What the header is set to; `{value}` stands for the value. Default `{value}`.',
      }),
    ),
    placeholder: Type.Optional(
      Type.String({
        description:
          'Set by the server (ignored on input): what the sandbox holds instead of the value, in the environment variable named after the secret.',
      }),
    ),
  },
  { title: 'SecretRule', additionalProperties: false },
);
export type SecretRule = Static<typeof SecretRuleSchema>;

export const SecretRulesSchema = Type.Array(SecretRuleSchema, { maxItems: MAX_SECRET_RULES });

/** One injection the proxy made (or tried): the audit trail of an account's secrets. */
export const SecretInjectionSchema = Type.Object(
  {
    id: Type.String(),
    sandboxId: Type.String(),
    secret: Type.String(),
    /** The name the request went to (its Host / SNI), and the port. */
    destination: Type.String(),
    method: Type.String(),
    /** The upstream's status code, or null when no answer came (see `error`). */
    status: Type.Union([Type.Integer(), Type.Null()]),
    error: Type.Optional(Type.String()),
    at: DateTime,
  },
  { title: 'SecretInjection', additionalProperties: false },
);
export type SecretInjection = Static<typeof SecretInjectionSchema>;

/** `GET /api/v1/secrets/injections?sandboxId=&secret=&limit=&before=`: newest first. */
export const SecretInjectionListSchema = Type.Object(
  {
    injections: Type.Array(SecretInjectionSchema),
    /** Pass as `before` for the next (older) page; absent on the last. */
    next: Type.Optional(Type.String()),
  },
  { title: 'SecretInjectionList', additionalProperties: false },
);
