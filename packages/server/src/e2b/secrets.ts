import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  type Egress,
  SandboxdError,
  type Secret,
  SECRET_NAME_PATTERN,
  SECRET_VALUE_TOKEN,
  type SecretRule,
} from '@sandboxd/protocol';
import type { FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { type HttpDeps, principalOf } from '../http/deps.js';

/*
 * E2B's secrets (`/secrets` of its control API, `Secret.create/list/update/destroy` of its SDK)
 * and its network transform rules (`network.rules`, whose header values hold
 * `${e2b.secrets.NAME}`), mapped onto the account's secrets and a sandbox's injection rules
 * (`network.secrets`). See docs/e2b.md#secrets.
 */

/** The prefix E2B reserves for secret identifiers. */
export const SECRET_ID_PREFIX = 'sec_';
/** Longest description the account's secrets keep (protocol SecretSchema). */
const MAX_DESCRIPTION = 1024;
const NAME_RE = new RegExp(SECRET_NAME_PATTERN);

/** A secret's E2B id: stable, derived from its name (`sec_` + the name's bytes in hex). */
export function secretIdOf(name: string): string {
  return `${SECRET_ID_PREFIX}${Buffer.from(name, 'utf8').toString('hex')}`;
}

/**
 * The names `idOrName` may stand for, most likely first: the name of a `sec_` id; else E2B's
 * canonical lower-cased name, then the name as given (a secret made through sandboxd's own
 * API may have capitals).
 */
export function namesOf(idOrName: string): string[] {
  if (idOrName.startsWith(SECRET_ID_PREFIX)) {
    const hex = idOrName.slice(SECRET_ID_PREFIX.length);
    if (/^(?:[0-9a-f]{2})+$/.test(hex)) {
      const name = Buffer.from(hex, 'hex').toString('utf8');
      if (NAME_RE.test(name)) return [name];
    }
  }
  const lower = idOrName.toLowerCase();
  return lower === idOrName ? [idOrName] : [lower, idOrName];
}

/**
 * E2B's `metadata` as kept in the secret's description: JSON of the map ('' when empty).
 * Throws `validation` when it does not fit the description's 1024 characters.
 */
export function descriptionOf(metadata: Record<string, string> | undefined): string {
  if (metadata === undefined || Object.keys(metadata).length === 0) return '';
  const text = JSON.stringify(metadata);
  if (text.length > MAX_DESCRIPTION) {
    const message = `metadata is kept as JSON in the secret's description, at most ${MAX_DESCRIPTION} characters: this is ${text.length}`;
    throw new SandboxdError('validation', message, [{ in: 'body', path: '/metadata', message }]);
  }
  return text;
}

/**
 * A description back as E2B's metadata: the map it holds as JSON; another description (a
 * secret made through sandboxd's own API) as `{description}`; none as `{}`.
 */
export function metadataOf(description: string): Record<string, string> {
  if (description === '') return {};
  if (description.startsWith('{')) {
    try {
      const m = JSON.parse(description) as unknown;
      if (
        m !== null &&
        typeof m === 'object' &&
        !Array.isArray(m) &&
        Object.values(m).every((v) => typeof v === 'string')
      )
        return m as Record<string, string>;
    } catch {
      // not JSON: a plain description
    }
  }
  return { description };
}

/** E2B's `Secret`. */
export function e2bSecretOf(s: Secret) {
  return {
    secretID: secretIdOf(s.name),
    name: s.name,
    currentVersion: s.version,
    metadata: metadataOf(s.description),
    createdAt: s.createdAt,
    updatedAt: s.updatedAt,
  };
}

// --- network.rules <-> network.secrets --------------------------------------------------------

const REF = /\$\{e2b\.secrets\.([^{}]*)\}/g;
/** How a reference is written, for messages. */
const REF_TEXT = '$' + '{e2b.secrets.NAME}';

/** E2B's transform rules as the door takes them: domain -> [{transform: {headers}}]. */
export type E2bRules = Record<string, Array<{ transform?: { headers?: Record<string, string> } }>>;

const bad = (path: string, message: string): never => {
  throw new SandboxdError('validation', `${path}: ${message}`, [{ in: 'body', path, message }]);
};

/**
 * sandboxd's injection rules for E2B's `rules` (at `base`, e.g. `/network/rules`): one rule per
 * header whose value holds one `${e2b.secrets.NAME}` (the header set to the value with the
 * reference as `{value}`), rules that differ only in domain merged. A header value with no
 * reference (a fixed header: sandboxd injects secrets only) or more than one, or a malformed
 * rule, is a `validation` error naming it. `resolve` maps a referenced name to the secret's.
 */
export function secretRulesOf(
  rules: unknown,
  resolve: (name: string) => string,
  base = '/network/rules',
): SecretRule[] {
  if (rules === undefined || rules === null) return [];
  if (typeof rules !== 'object' || Array.isArray(rules))
    bad(base, 'is an object of domain -> [{transform: {headers}}]');
  const merged = new Map<string, SecretRule>();
  for (const [rawDomain, list] of Object.entries(rules as Record<string, unknown>)) {
    const domain = rawDomain.toLowerCase();
    const at = `${base}/${rawDomain}`;
    if (!Array.isArray(list)) bad(at, 'is a list of rules');
    (list as unknown[]).forEach((rule, i) => {
      const ri = `${at}/${i}`;
      if (rule === null || typeof rule !== 'object' || Array.isArray(rule)) bad(ri, 'is an object {transform}');
      const { transform, ...rest } = rule as { transform?: unknown };
      const extra = Object.keys(rest)[0];
      if (extra !== undefined) bad(`${ri}/${extra}`, 'is not a rule field sandboxd knows (transform only)');
      if (transform === undefined || transform === null) return;
      if (typeof transform !== 'object' || Array.isArray(transform)) bad(`${ri}/transform`, 'is an object {headers}');
      const { headers, ...more } = transform as { headers?: unknown };
      const extraT = Object.keys(more)[0];
      if (extraT !== undefined) bad(`${ri}/transform/${extraT}`, 'is not a transform sandboxd does (headers only)');
      if (headers === undefined || headers === null) return;
      if (typeof headers !== 'object' || Array.isArray(headers))
        bad(`${ri}/transform/headers`, 'is an object of header -> value');
      for (const [header, value] of Object.entries(headers as Record<string, unknown>)) {
        const hp = `${ri}/transform/headers/${header}`;
        if (typeof value !== 'string') bad(hp, 'is a string');
        const refs = [...(value as string).matchAll(REF)];
        if (refs.length === 0)
          bad(
            hp,
            `holds no ${REF_TEXT} reference: sandboxd injects secrets only, not fixed headers (Secret.fill(NAME) makes the reference)`,
          );
        if (refs.length > 1) bad(hp, `holds more than one ${REF_TEXT} reference: sandboxd injects one secret a header`);
        const format = (value as string).replace(REF, SECRET_VALUE_TOKEN);
        if (format.split(SECRET_VALUE_TOKEN).length > 2)
          bad(
            hp,
            `holds the text ${SECRET_VALUE_TOKEN} besides the reference, which sandboxd would take for the value`,
          );
        const secret = resolve(refs[0][1]);
        const key = JSON.stringify([secret, header.toLowerCase(), format]);
        const seen = merged.get(key);
        if (seen) {
          if (!seen.domains.includes(domain)) seen.domains.push(domain);
        } else merged.set(key, { secret, domains: [domain], header, format });
      }
    });
  }
  return [...merged.values()];
}

/** The names `${e2b.secrets.NAME}` references in `rules` hold (any shape; for resolving). */
export function referencedNames(rules: unknown): string[] {
  const out = new Set<string>();
  for (const m of JSON.stringify(rules ?? null).matchAll(REF)) out.add(m[1]);
  return [...out];
}

/**
 * E2B's `network.rules` of a sandbox's injection rules: for each domain of each rule with a
 * header, that header set to the format with `${e2b.secrets.NAME}` for `{value}` (rules
 * without a header, which only replace the placeholder, have no E2B form and are left out).
 */
export function e2bRulesOf(secrets: SecretRule[] | undefined): E2bRules | undefined {
  const out: Record<string, Record<string, string>> = {};
  for (const r of secrets ?? []) {
    if (r.header === undefined) continue;
    const value = (r.format ?? SECRET_VALUE_TOKEN).split(SECRET_VALUE_TOKEN).join(`\${e2b.secrets.${r.secret}}`);
    for (const d of r.domains) {
      out[d] ??= {};
      out[d][r.header] = value;
    }
  }
  const domains = Object.keys(out);
  if (domains.length === 0) return undefined;
  return Object.fromEntries(domains.map((d) => [d, [{ transform: { headers: out[d] } }]]));
}

const ALL_TRAFFIC = '0.0.0.0/0';

/** E2B's `allowOut`/`denyOut` of sandboxd's egress. */
export function e2bEgressOf(e: Egress | undefined): { allowOut?: string[]; denyOut?: string[] } {
  if (e === undefined || e === 'none') return { denyOut: [ALL_TRAFFIC] };
  if (e === 'internet') return {};
  return { allowOut: [...e.allow], denyOut: [ALL_TRAFFIC] };
}

// --- routes -------------------------------------------------------------------------------

const Metadata = Type.Record(Type.String({ maxLength: 128 }), Type.String({ maxLength: 1024 }), {
  maxProperties: 32,
});
const NewSecretBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 256 }),
    value: Type.String({ maxLength: 65_536 }),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false },
);
const SecretUpdateBody = Type.Object(
  { value: Type.String({ maxLength: 65_536 }), metadata: Type.Optional(Metadata) },
  { additionalProperties: false },
);
const SecretParams = Type.Object({ secretID: Type.String({ minLength: 1, maxLength: 300 }) });
const ListQuery = Type.Object(
  { limit: Type.Optional(Type.String()), nextToken: Type.Optional(Type.String({ maxLength: 1000 })) },
  { additionalProperties: false },
);

/** E2B's default and largest page of secrets. */
const PAGE = { default: 100, max: 1000 } as const;

const hide = { hide: true } as const;

/**
 * `/secrets` of E2B's control API over the account's secrets (registered under `/e2b` by the
 * control routes). Names are lower-cased as E2B does; `secretID` is {@link secretIdOf};
 * metadata lives in the description ({@link descriptionOf}).
 */
export const e2bSecretRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { secrets } = d.services;
  const accountIdOf = (req: FastifyRequest) => principalOf(req).account.id;

  /** The secret `idOrName` names (see {@link namesOf}); E2B's 404 when none. */
  const find = async (accountId: string, idOrName: string): Promise<Secret> => {
    for (const name of namesOf(idOrName)) {
      if (!NAME_RE.test(name)) continue;
      try {
        return await secrets.get(accountId, name);
      } catch (e) {
        if (!(e instanceof SandboxdError && e.kind === 'not_found')) throw e;
      }
    }
    throw new SandboxdError('not_found', `Secret ${idOrName} not found`);
  };

  app.get('/secrets', { schema: { ...hide, querystring: ListQuery } }, async (req, reply) => {
    const q = req.query;
    const limit = q.limit === undefined ? PAGE.default : Number(q.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > PAGE.max) {
      const message = `limit must be a whole number from 1 to ${PAGE.max}`;
      throw new SandboxdError('validation', `${message}`, [{ in: 'query', path: '/limit', message }]);
    }
    let after: string | undefined;
    if (q.nextToken !== undefined && q.nextToken !== '') {
      after = Buffer.from(q.nextToken, 'base64url').toString('utf8');
      if (!NAME_RE.test(after)) {
        const message = 'nextToken is not one this server gave';
        throw new SandboxdError('validation', message, [{ in: 'query', path: '/nextToken', message }]);
      }
    }
    const all = (await secrets.list(accountIdOf(req))).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const rest = after === undefined ? all : all.filter((s) => s.name > (after as string));
    const page = rest.slice(0, limit);
    if (rest.length > limit)
      reply.header('x-next-token', Buffer.from(page[page.length - 1].name).toString('base64url'));
    return page.map(e2bSecretOf);
  });

  app.post('/secrets', { schema: { ...hide, body: NewSecretBody } }, async (req, reply) => {
    const b = req.body;
    const name = b.name.toLowerCase();
    if (name.startsWith(SECRET_ID_PREFIX)) {
      const message = `a name may not start with "${SECRET_ID_PREFIX}": E2B reserves it for secret identifiers`;
      throw new SandboxdError('validation', `/name: ${message}`, [{ in: 'body', path: '/name', message }]);
    }
    if (!NAME_RE.test(name)) {
      const message = "a sandboxd secret's name is a letter or _, then letters, digits, _ or - (at most 64 characters)";
      throw new SandboxdError('validation', `/name: ${message}`, [{ in: 'body', path: '/name', message }]);
    }
    const description = descriptionOf(b.metadata);
    const s = await secrets.create(accountIdOf(req), { name, value: b.value, ...(description ? { description } : {}) });
    return reply.code(201).send(e2bSecretOf(s));
  });

  app.get('/secrets/:secretID', { schema: { ...hide, params: SecretParams } }, async (req) =>
    e2bSecretOf(await find(accountIdOf(req), req.params.secretID)),
  );

  app.post('/secrets/:secretID', { schema: { ...hide, params: SecretParams, body: SecretUpdateBody } }, async (req) => {
    const accountId = accountIdOf(req);
    const s = await find(accountId, req.params.secretID);
    const b = req.body;
    const r = await secrets.put(accountId, s.name, {
      value: b.value,
      ...(b.metadata !== undefined ? { description: descriptionOf(b.metadata) } : {}),
    });
    return e2bSecretOf(r.secret);
  });

  app.delete('/secrets/:secretID', { schema: { ...hide, params: SecretParams } }, async (req, reply) => {
    const accountId = accountIdOf(req);
    const s = await find(accountId, req.params.secretID);
    await secrets.delete(accountId, s.name);
    return reply.code(204).send();
  });
};
