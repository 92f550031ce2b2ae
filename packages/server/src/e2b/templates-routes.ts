import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { DEFAULT_TEMPLATE_TAG, SandboxdError } from '@sandboxd/protocol';
import type { FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { AccountRecord } from '../store/store.js';
import type { BuildRecord, BuildsApi, TemplateRecord } from '../builds/types.js';
import { type HttpDeps, principalOf } from '../http/deps.js';
import { acceptRawBodies } from '../http/routes/raw-body.js';
import { PublicHosts } from '../proxy/host.js';
import { planOf } from '../services/context.js';
import {
  e2bLogEntryOf,
  e2bReasonOf,
  e2bStatusOf,
  e2bTagOf,
  type E2bLogEntry,
  normalizeTag,
  parseTemplateName,
  requestedNameAndTags,
  TemplateBuildStartSchema,
  TemplateCompiler,
  TemplateRequestSchema,
  templateImage,
  UPLOAD_HASH,
} from './templates.js';
import { ENVD_VERSION } from './version.js';

/*
 * E2B's template API (what npm `e2b`'s `Template` calls) over sandboxd's builds service:
 * request a build, upload a COPY's files, start it with its steps, poll its status and
 * logs, and names, tags and deletes. Registered by e2b/control.ts under `/e2b`.
 */

/** Every E2B path: hidden from sandboxd's own OpenAPI document. */
const hide = { hide: true } as const;

/** How long an upload URL is good for. */
export const UPLOAD_URL_TTL_S = 3600;

/** Most log entries one status call returns (E2B's `limit`, default and maximum). */
const STATUS_PAGE = 100;

/** How long an `assignTags` waits for its build (it has no steps: no sandbox runs). */
const TAG_BUILD_WAIT_MS = 120_000;

const MiB = 1024 * 1024;

const TemplateParams = Type.Object({ templateID: Type.String({ minLength: 1, maxLength: 300 }) });
const BuildParams = Type.Object({
  templateID: Type.String({ minLength: 1, maxLength: 300 }),
  buildID: Type.String({ minLength: 1, maxLength: 100 }),
});
const FileParams = Type.Object({
  templateID: Type.String({ minLength: 1, maxLength: 300 }),
  hash: Type.String({ minLength: 1, maxLength: 256 }),
});
const StatusQuery = Type.Object(
  {
    logsOffset: Type.Optional(Type.Integer({ minimum: 0 })),
    limit: Type.Optional(Type.Integer({ minimum: 0, maximum: STATUS_PAGE })),
    level: Type.Optional(Type.Enum(['debug', 'info', 'warn', 'error'])),
  },
  { additionalProperties: false },
);
const UploadQuery = Type.Object(
  {
    account: Type.String({ minLength: 1, maxLength: 100 }),
    expires: Type.Integer({ minimum: 0 }),
    signature: Type.String({ minLength: 1, maxLength: 200 }),
  },
  { additionalProperties: false },
);
const AssignTagsBody = Type.Object(
  {
    target: Type.String({ minLength: 1, maxLength: 300 }),
    tags: Type.Array(Type.String({ maxLength: 128 }), { minItems: 1, maxItems: 64 }),
  },
  { additionalProperties: true },
);
const RemoveTagsBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 300 }),
    tags: Type.Array(Type.String({ maxLength: 128 }), { minItems: 1, maxItems: 64 }),
  },
  { additionalProperties: true },
);

const notFound = (what: string, details?: Record<string, unknown>) =>
  new SandboxdError('not_found', `${what} not found`, details);
const isKind = (e: unknown, ...kinds: string[]): e is SandboxdError =>
  e instanceof SandboxdError && kinds.includes(e.kind);

export const e2bTemplateRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  // Read at each call: the builds service is the composition root's (and a test's) to give.
  const builds = (): BuildsApi => d.services.builds;
  const compiler = new TemplateCompiler(d.config.e2bTemplates);
  const hosts = new PublicHosts(d.config.publicHost);
  const accountOf = (req: FastifyRequest): AccountRecord => principalOf(req).account;

  /** The account's build `buildID` of template `templateID`; `not_found` for anything else. */
  const buildOf = async (accountId: string, templateID: string, buildID: string): Promise<BuildRecord> => {
    const { name } = parseTemplateName(templateID, 'path', '/templateID');
    let b: BuildRecord;
    try {
      b = await builds().get(accountId, buildID);
    } catch (e) {
      if (isKind(e, 'not_found')) throw notFound(`Build ${buildID} of template ${name}`);
      throw e;
    }
    if (b.name !== name) throw notFound(`Build ${buildID} of template ${name}`);
    return b;
  };

  /** The account's ready templates named `name` (every tag); `not_found` when none. */
  const tagsOf = async (accountId: string, name: string): Promise<TemplateRecord[]> => {
    const all = (await builds().listTemplates(accountId, { name })).filter((t) => t.name === name);
    if (all.length === 0) throw new SandboxdError('not_found', `Template ${name} not found`, { templateID: name });
    return all;
  };

  /** Where this client reaches the control API: `api.<publicHost>` at its root, else under `/e2b`. */
  const apiBase = (req: FastifyRequest): string => {
    const proto = d.config.tls ? 'https' : 'http';
    const host = req.headers.host ?? 'localhost';
    return hosts.names(req.raw, 'api') ? `${proto}://${host}` : `${proto}://${host}/e2b`;
  };

  // --- request a build ----------------------------------------------------------------------

  app.post('/v3/templates', { schema: { ...hide, body: TemplateRequestSchema } }, async (req, reply) => {
    const account = accountOf(req);
    const { name, tags } = requestedNameAndTags(req.body, d.config.e2bTemplates);
    const limits = planOf(d.config, account.plan).limits;
    const cpus = Math.max(1, Math.ceil(limits.cpus));
    const memoryMB = Math.floor(limits.memoryBytes / MiB);
    if (req.body.cpuCount !== undefined && req.body.cpuCount > cpus)
      throw new SandboxdError('validation', `cpuCount ${req.body.cpuCount} is more than the plan's ${cpus}`, [
        { in: 'body', path: '/cpuCount', message: `at most ${cpus} (sandboxes get the plan's sizes)` },
      ]);
    if (req.body.memoryMB !== undefined && req.body.memoryMB > memoryMB)
      throw new SandboxdError('validation', `memoryMB ${req.body.memoryMB} is more than the plan's ${memoryMB}`, [
        { in: 'body', path: '/memoryMB', message: `at most ${memoryMB} (sandboxes get the plan's sizes)` },
      ]);
    const allowDomains = allowDomainsOf(req);
    const b = await builds().reserve(account, {
      name,
      tag: tags[0],
      extraTags: tags.slice(1),
      source: 'e2b',
      ...(allowDomains ? { allowDomains } : {}),
    });
    return reply.code(202).send({
      templateID: name,
      buildID: b.id,
      public: false,
      names: [name],
      aliases: [name],
      tags,
    });
  });

  // --- files of COPY steps ------------------------------------------------------------------

  app.get('/templates/:templateID/files/:hash', { schema: { ...hide, params: FileParams } }, async (req, reply) => {
    const account = accountOf(req);
    parseTemplateName(req.params.templateID, 'path', '/templateID');
    const { hash } = req.params;
    if (!UPLOAD_HASH.test(hash))
      throw new SandboxdError('validation', `'${hash}' is not a files hash`, [
        { in: 'path', path: '/hash', message: 'letters and digits, 16 to 128' },
      ]);
    const present = await builds().hasUpload(account.id, hash);
    const expires = Math.floor(Date.now() / 1000) + UPLOAD_URL_TTL_S;
    const signature = await d.accessTokens.uploadSignature(account.id, hash, expires);
    const q = new URLSearchParams({ account: account.id, expires: String(expires), signature });
    return reply.code(201).send({ present, url: `${apiBase(req)}/templates/uploads/${hash}?${q}` });
  });

  // The upload itself: the SDK PUTs the tar (gzip or not) without its key; the URL's
  // signature is the authority (that account, that hash, until it expires).
  await app.register(async (raw) => {
    acceptRawBodies(raw);
    raw.put(
      '/templates/uploads/:hash',
      {
        schema: {
          ...hide,
          params: Type.Object({ hash: Type.String({ minLength: 1, maxLength: 256 }) }),
          querystring: UploadQuery,
        },
        config: { auth: 'none' },
      },
      async (req, reply) => {
        const { hash } = req.params as { hash: string };
        const q = req.query as { account: string; expires: number; signature: string };
        const refused = new SandboxdError('unauthorized', 'This upload URL is not valid (a bad signature) or expired');
        if (!UPLOAD_HASH.test(hash) || q.expires < Date.now() / 1000) throw refused;
        if (!(await d.accessTokens.verifyUpload(q.account, hash, q.expires, q.signature))) throw refused;
        try {
          await d.services.accounts.get(q.account);
        } catch (e) {
          if (isKind(e, 'not_found')) throw refused;
          throw e;
        }
        await builds().putUpload(q.account, hash, req.raw);
        return reply.code(200).send({});
      },
    );
  });

  // --- start a build ------------------------------------------------------------------------

  app.post(
    '/v2/templates/:templateID/builds/:buildID',
    { schema: { ...hide, params: BuildParams, body: TemplateBuildStartSchema } },
    async (req, reply) => {
      const account = accountOf(req);
      const b = await buildOf(account.id, req.params.templateID, req.params.buildID);
      const compiled = compiler.compile(req.body);
      // Everything the steps need is there before anything runs.
      for (const [i, s] of (req.body.steps ?? []).entries()) {
        const hash = s.filesHash ?? '';
        if (s.type.trim().toUpperCase() === 'COPY' && !(await builds().hasUpload(account.id, hash)))
          throw new SandboxdError(
            'validation',
            `step ${i + 1} (COPY ${s.args?.[0] ?? ''}): its files (hash ${hash}) were not uploaded`,
            [
              {
                in: 'body',
                path: `/steps/${i}/filesHash`,
                message: 'upload the files first (GET /templates/{id}/files/{hash})',
              },
            ],
          );
      }
      if (compiled.baseTemplate) {
        const { name, tag } = compiled.baseTemplate;
        try {
          await builds().getTemplate(account.id, name, tag);
        } catch (e) {
          if (isKind(e, 'not_found'))
            throw new SandboxdError('template_not_found', `Template ${name}:${tag} (fromTemplate) not found`, {
              templateID: `${name}:${tag}`,
            });
          throw e;
        }
      }
      await builds().startReserved(account, b.id, compiled.plan, { noCache: compiled.noCache });
      return reply.code(202).send();
    },
  );

  // --- status and logs ----------------------------------------------------------------------

  app.get(
    '/templates/:templateID/builds/:buildID/status',
    { schema: { ...hide, params: BuildParams, querystring: StatusQuery } },
    async (req) => {
      const account = accountOf(req);
      // The state first: once it is final, every line of the log is there.
      const b = await buildOf(account.id, req.params.templateID, req.params.buildID);
      const limit = req.query.limit ?? STATUS_PAGE;
      const entries: E2bLogEntry[] = [];
      if (limit > 0 && req.query.level !== 'warn' && req.query.level !== 'error') {
        const it = builds()
          .logs(account.id, b.id, { offset: req.query.logsOffset ?? 0 })
          [Symbol.asyncIterator]();
        try {
          while (entries.length < limit) {
            const r = await it.next();
            if (r.done) break;
            if (r.value.type === 'log') entries.push(e2bLogEntryOf(r.value));
          }
        } finally {
          await it.return?.();
        }
      }
      const reason = e2bReasonOf(b);
      return {
        templateID: b.name,
        buildID: b.id,
        status: e2bStatusOf(b),
        logEntries: entries,
        logs: entries.map((e) => `[${e.timestamp}] ${e.message}`),
        ...(reason ? { reason } : {}),
      };
    },
  );

  // --- names, tags, lists, deletes ----------------------------------------------------------

  /** `Template.exists(name)`: a name (any tag) or `name:tag` the account has ready, or a server template. */
  app.get(
    '/templates/aliases/:alias',
    { schema: { ...hide, params: Type.Object({ alias: Type.String({ minLength: 1, maxLength: 300 }) }) } },
    async (req) => {
      const account = accountOf(req);
      const alias = req.params.alias;
      if (Object.hasOwn(d.config.e2bTemplates, alias)) return { templateID: alias, public: true };
      const { name, tag } = parseTemplateName(alias, 'path', '/alias');
      if (tag !== undefined) {
        try {
          await builds().getTemplate(account.id, name, tag);
        } catch (e) {
          if (isKind(e, 'not_found'))
            throw new SandboxdError('not_found', `tag '${tag}' does not exist for template '${name}'`);
          throw e;
        }
      } else await tagsOf(account.id, name);
      return { templateID: name, public: false };
    },
  );

  app.get('/templates/:templateID/tags', { schema: { ...hide, params: TemplateParams } }, async (req) => {
    const { name } = parseTemplateName(req.params.templateID, 'path', '/templateID');
    return (await tagsOf(accountOf(req).id, name)).map(e2bTagOf);
  });

  /**
   * `Template.assignTags('name:tag', tags)`: the target's image under more tags. Made by a
   * build without steps from the target (no sandbox runs), waited for, so the tags exist
   * when this answers.
   */
  app.post('/templates/tags', { schema: { ...hide, body: AssignTagsBody } }, async (req, reply) => {
    const account = accountOf(req);
    const { name, tag } = parseTemplateName(req.body.target, 'body', '/target');
    const from = tag ?? DEFAULT_TEMPLATE_TAG;
    const tags: string[] = [];
    req.body.tags.forEach((t, i) => {
      const n = normalizeTag(t, 'body', `/tags/${i}`);
      if (!tags.includes(n)) tags.push(n);
    });
    let target: TemplateRecord;
    try {
      target = await builds().getTemplate(account.id, name, from);
    } catch (e) {
      if (isKind(e, 'not_found')) throw notFound(`Template ${name}:${from}`, { target: req.body.target });
      throw e;
    }
    const wanted = tags.filter((t) => t !== from);
    if (wanted.length > 0) {
      const b = await builds().start(
        account,
        { stages: [{ line: 1, base: { kind: 'image', ref: templateImage(name, from) }, steps: [] }], target: 0 },
        { name, tag: wanted[0], extraTags: wanted.slice(1), source: 'e2b' },
      );
      const done = await finished(builds(), account.id, b.id, TAG_BUILD_WAIT_MS);
      if (done.state !== 'ready')
        throw new SandboxdError(
          done.state === 'error' || done.state === 'cancelled' ? 'internal' : 'request_timeout',
          `Tagging ${name}:${from} as ${wanted.join(', ')} did not finish: build ${b.id} is ${done.state}${done.error ? ` (${done.error.message})` : ''}`,
        );
    }
    return reply.code(201).send({ tags, buildID: target.buildId });
  });

  app.delete('/templates/tags', { schema: { ...hide, body: RemoveTagsBody } }, async (req, reply) => {
    const account = accountOf(req);
    const { name } = parseTemplateName(req.body.name, 'body', '/name');
    const tags = req.body.tags.map((t, i) => normalizeTag(t, 'body', `/tags/${i}`));
    const have = new Set((await tagsOf(account.id, name)).map((t) => t.tag));
    const missing = tags.filter((t) => !have.has(t));
    if (missing.length) throw notFound(`Tag ${missing.join(', ')} of template ${name}`, { tags: missing });
    for (const t of new Set(tags)) await builds().deleteTemplate(account.id, name, t);
    return reply.code(204).send();
  });

  /** Deletes a template (every tag), or one tag with `name:tag`; sandboxes made from it keep their files. */
  app.delete('/templates/:templateID', { schema: { ...hide, params: TemplateParams } }, async (req, reply) => {
    const account = accountOf(req);
    const { name, tag } = parseTemplateName(req.params.templateID, 'path', '/templateID');
    try {
      await builds().deleteTemplate(account.id, name, tag);
    } catch (e) {
      if (isKind(e, 'not_found')) throw notFound(`Template ${req.params.templateID}`);
      throw e;
    }
    return reply.code(204).send();
  });

  /** E2B's `TemplateWithBuilds`: the template's builds, newest first. */
  app.get('/templates/:templateID', { schema: { ...hide, params: TemplateParams } }, async (req) => {
    const account = accountOf(req);
    const { name } = parseTemplateName(req.params.templateID, 'path', '/templateID');
    const [list, tags] = await Promise.all([
      builds().list(account.id, { name }),
      builds().listTemplates(account.id, { name }),
    ]);
    const own = list.filter((b) => b.name === name);
    if (own.length === 0 && tags.length === 0) throw notFound(`Template ${name}`);
    const limits = limitsOf(account);
    const times = [...own.map((b) => b.createdAt), ...tags.map((t) => t.createdAt)];
    return {
      templateID: name,
      public: false,
      aliases: [name],
      names: [name],
      createdAt: new Date(Math.min(...times)).toISOString(),
      updatedAt: new Date(Math.max(...times)).toISOString(),
      lastSpawnedAt: null,
      spawnCount: 0,
      builds: own.map((b) => ({
        buildID: b.id,
        status: e2bStatusOf(b),
        createdAt: new Date(b.createdAt).toISOString(),
        updatedAt: new Date(b.finishedAt ?? b.startedAt ?? b.createdAt).toISOString(),
        ...(b.finishedAt !== undefined ? { finishedAt: new Date(b.finishedAt).toISOString() } : {}),
        ...limits,
        envdVersion: ENVD_VERSION,
      })),
    };
  });

  const limitsOf = (account: AccountRecord) => {
    const l = planOf(d.config, account.plan).limits;
    return {
      cpuCount: Math.max(1, Math.ceil(l.cpus)),
      memoryMB: Math.floor(l.memoryBytes / MiB),
      diskSizeMB: Math.floor(l.rootDiskBytes / MiB),
    };
  };

  /** E2B's template list: one entry per name (its newest tag's build). */
  for (const url of ['/templates', '/v2/templates'])
    app.get(
      url,
      {
        schema: {
          ...hide,
          querystring: Type.Object({ teamID: Type.Optional(Type.String()) }, { additionalProperties: true }),
        },
      },
      async (req) => {
        const account = accountOf(req);
        const byName = new Map<string, TemplateRecord[]>();
        for (const t of await builds().listTemplates(account.id))
          byName.set(t.name, [...(byName.get(t.name) ?? []), t]);
        const limits = limitsOf(account);
        return [...byName.entries()].map(([name, tags]) => {
          const newest = tags.reduce((a, b) => (b.createdAt > a.createdAt ? b : a));
          const oldest = tags.reduce((a, b) => (b.createdAt < a.createdAt ? b : a));
          return {
            templateID: name,
            buildID: newest.buildId,
            ...limits,
            public: false,
            aliases: [name],
            names: [name],
            createdAt: new Date(oldest.createdAt).toISOString(),
            updatedAt: new Date(newest.createdAt).toISOString(),
            createdBy: null,
            lastSpawnedAt: null,
            spawnCount: 0,
            buildCount: new Set(tags.map((t) => t.buildId)).size,
            envdVersion: ENVD_VERSION,
            buildStatus: 'ready',
          };
        });
      },
    );
};

/**
 * Domains the RUN steps of an E2B build may reach: E2B's SDK has no such option, but sends
 * any `headers` of its connection options, so `Template.build(t, name, {headers:
 * {[ALLOW_DOMAINS_HEADER]: 'deb.debian.org,pypi.org'}})` names them (comma-separated, as
 * sandboxd's `allowDomains`; checked against the plan by the builds service). None: no network.
 */
export const ALLOW_DOMAINS_HEADER = 'x-sandboxd-allow-domains';

function allowDomainsOf(req: FastifyRequest): string[] | undefined {
  const raw = req.headers[ALLOW_DOMAINS_HEADER];
  const text = Array.isArray(raw) ? raw.join(',') : raw;
  if (text === undefined) return undefined;
  if (text.length > 8192)
    throw new SandboxdError('validation', `${ALLOW_DOMAINS_HEADER} is longer than 8192 characters`, [
      { in: 'header', path: ALLOW_DOMAINS_HEADER, message: 'at most 8192 characters' },
    ]);
  const list = text
    .split(',')
    .map((d) => d.trim())
    .filter(Boolean);
  return list.length ? list : undefined;
}

/** The build once final (or as it is after `ms`), following its log to its `end` line. */
async function finished(builds: BuildsApi, accountId: string, buildId: string, ms: number): Promise<BuildRecord> {
  const signal = AbortSignal.timeout(ms);
  try {
    for await (const e of builds.logs(accountId, buildId, { follow: true, signal })) if (e.type === 'end') break;
  } catch (e) {
    if (!signal.aborted) throw e;
  }
  return builds.get(accountId, buildId);
}
